//! [`LocalUsage`]: usage in the data folder's JSON file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_contract::usage::*;

use sluice_contract::Tenant;

use crate::lock;

/// Usage kept by `sluice serve`: in memory, and in a JSON file (`SLUICE_DATA_DIR/usage.json`)
/// replaced whole on every write (written beside it, then renamed), so a crash leaves the old
/// or the new one, never half.
pub struct LocalUsage {
    path: Option<PathBuf>,
    rows: Mutex<BTreeMap<UsageKey, Counts>>,
    /// One write at a time, so that the file's versions land in the order they were made.
    writing: tokio::sync::Mutex<()>,
}

#[derive(Serialize, Deserialize)]
struct FileRow {
    tenant: Tenant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    day: String,
    #[serde(flatten)]
    counts: Counts,
}

#[derive(Default, Serialize, Deserialize)]
struct UsageFile {
    rows: Vec<FileRow>,
}

impl LocalUsage {
    /// Usage in memory only (tests).
    pub fn in_memory() -> Self {
        Self {
            path: None,
            rows: Mutex::new(BTreeMap::new()),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// Usage in the file at `path`, read now when it exists.
    pub fn open(path: &Path) -> Result<Self, UsageError> {
        let fail = |message: String| UsageError::File {
            path: path.to_path_buf(),
            message,
        };
        let mut rows = BTreeMap::new();
        if path.exists() {
            let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
            let file: UsageFile = serde_json::from_str(&text)
                .map_err(|e| fail(format!("expected {{\"rows\": [...]}} ({e})")))?;
            for row in file.rows {
                let day = parse_day(&row.day)
                    .ok_or_else(|| fail(format!("{:?} is not a day (YYYY-MM-DD)", row.day)))?;
                let key = UsageKey {
                    tenant: row.tenant,
                    key: row.key,
                    day,
                };
                rows.entry(key)
                    .or_insert_with(Counts::default)
                    .add(&row.counts);
            }
        }
        Ok(Self {
            path: Some(path.to_path_buf()),
            rows: Mutex::new(rows),
            writing: tokio::sync::Mutex::new(()),
        })
    }
}

/// Writes `rows` as the usage file at `path`.
fn save(path: &Path, rows: &BTreeMap<UsageKey, Counts>) -> Result<(), UsageError> {
    let fail = |message: String| UsageError::File {
        path: path.to_path_buf(),
        message,
    };
    let file = UsageFile {
        rows: rows
            .iter()
            .map(|(k, counts)| FileRow {
                tenant: k.tenant.clone(),
                key: k.key.clone(),
                day: day_string(k.day),
                counts: *counts,
            })
            .collect(),
    };
    let text = serde_json::to_string(&file).map_err(|e| fail(e.to_string()))?;
    crate::replace_file(path, &(text + "\n")).map_err(|e| fail(e.to_string()))
}

#[async_trait]
impl UsageStore for LocalUsage {
    async fn add(&self, batch: &[Row]) -> Result<(), Unwritten> {
        let _writing = self.writing.lock().await;
        let (before, after) = {
            let mut rows = lock(&self.rows);
            let before = rows.clone();
            for (key, counts) in batch {
                rows.entry(key.clone()).or_default().add(counts);
            }
            (before, rows.clone())
        };
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        // Serialising and writing the whole file takes milliseconds (31 ms at 15,000 rows,
        // `make bench`): on the blocking pool, not on a worker that relays tokens.
        let saved = tokio::task::spawn_blocking(move || save(&path, &after))
            .await
            .unwrap_or_else(|e| {
                Err(UsageError::Unavailable(format!(
                    "the usage write task failed: {e}"
                )))
            });
        // All or nothing: a file that cannot be written leaves memory as it was (no other
        // write ran meanwhile), and the meter keeps the batch.
        saved.map_err(|error| {
            *lock(&self.rows) = before;
            Unwritten {
                rows: batch.to_vec(),
                error,
            }
        })
    }

    async fn read(&self, tenant: &Tenant, from: Date, to: Date) -> Result<Vec<Row>, UsageError> {
        Ok(lock(&self.rows)
            .iter()
            .filter(|(k, _)| &k.tenant == tenant && (from..=to).contains(&k.day))
            .map(|(k, c)| (k.clone(), *c))
            .collect())
    }
}
