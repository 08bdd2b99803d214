//! The local counterparts of the DynamoDB backends: what `sluice serve` keeps on one machine,
//! each implementing the same contract trait as its cloud twin, so that the engine and the
//! wire never know which they have.
//!
//! | What | Here (`sluice serve`) | On Lambda |
//! |---|---|---|
//! | API keys ([`KeyStore`](sluice_contract::auth::KeyStore)) | [`FileKeys`]: `SLUICE_API_KEYS_FILE` | `sluice-aws` `keys`: `SLUICE_API_KEYS_TABLE` |
//! | Usage ([`UsageStore`](sluice_contract::usage::UsageStore)) | [`LocalUsage`]: `SLUICE_DATA_DIR/usage.json` | `sluice-aws` `usage`: `SLUICE_USAGE_TABLE` |
//! | Tenants' settings ([`SettingsStore`](sluice_contract::tenant_settings::SettingsStore)) | [`FileSettings`]: `SLUICE_SETTINGS_FILE` | `sluice-aws` `settings`: `SLUICE_SETTINGS_TABLE` |
//! | Tenants' evaluation sets and runs ([`Records`](sluice_contract::evals::Records)) | [`FileRecords`]: `SLUICE_RECORDS_DIR` | `sluice-aws` `records`: `SLUICE_RECORDS_TABLE` |
//! | The answer cache ([`CacheStore`](sluice_contract::cache::CacheStore)) | [`MemoryCache`]: `SLUICE_CACHE=memory` | `sluice-cache-dynamodb`: `SLUICE_CACHE=dynamodb` |
//!
//! `sluice-app` chooses one of each from the configuration. The files are replaced whole on
//! every write ([`replace_file`]): a reader, or a crash, never sees half a file.
#![warn(missing_docs)]

mod cache;
mod keys;
mod records;
mod settings;
mod usage;

pub use cache::MemoryCache;
pub use keys::{FileKeys, append_to_file};
pub use records::FileRecords;
pub use settings::FileSettings;
pub use usage::LocalUsage;

use std::sync::{Mutex, MutexGuard};

/// Replaces the file at `path` with `text` whole (its folder made if missing): written beside
/// it, then renamed over it, so that a reader never sees half a file.
pub fn replace_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let part = path.with_extension("part");
    std::fs::write(&part, text)?;
    std::fs::rename(&part, path)
}

/// The lock, whether or not a thread panicked holding it (what it guards is replaced whole,
/// never left half-written).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
