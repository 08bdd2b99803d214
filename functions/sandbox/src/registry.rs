//! Tenant-scoped component registry, and the pipeline's rerank stage.
//!
//! What it keeps, per tenant, in a [`ComponentStorage`](sluice_core::stages::ComponentStorage):
//! `<tenant>/<version>.wasm` (the upload), `<tenant>/<version>.<engine>.cwasm` (its compiled
//! artefact for this engine configuration), the versions in upload order, and the active
//! version. A version is the SHA-256 of the
//! uploaded bytes. [`Disk`] keeps them under a folder (`sluice serve`); the Lambda functions
//! keep them in S3 and DynamoDB (`sluice-aws`), so that what the registry function compiles
//! the answer function loads. Compiled components are cached in memory per tenant, and the
//! active version is read again once it is older than the refresh interval (another process
//! may have activated one); an artefact from another engine is recompiled from the upload.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest, Sha256};
use sluice_core::Config;
use sluice_core::stages::{
    ComponentError, ComponentStorage as Storage, ComponentVersion, Components, Embedder, Hit,
    Reranker,
};

use crate::{Candidate, HostServices, Limits, Prepared, Sandbox, UploadError};

/// The host's embedding model, lent to components through `host.embed`.
pub struct ModelHost(pub Arc<dyn Embedder>);

impl HostServices for ModelHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.0.embed(texts).map_err(|e| e.to_string())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        self.0.count_tokens(text) as u32
    }
}

fn storage(e: impl std::fmt::Display) -> ComponentError {
    ComponentError::Storage(e.to_string())
}

/// Components in a folder: `<tenant>/<file>` as files, plus `<tenant>/versions.json` (upload
/// order and sizes) and `<tenant>/active`.
pub struct Disk {
    dir: PathBuf,
}

impl Disk {
    /// Storage in `dir` (created when missing).
    pub fn open(dir: &Path) -> Result<Self, ComponentError> {
        std::fs::create_dir_all(dir).map_err(storage)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }
}

impl Storage for Disk {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ComponentError> {
        match std::fs::read(self.dir.join(key)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(storage(e)),
        }
    }

    /// Writes by rename, so a crash never leaves half a file.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), ComponentError> {
        let path = self.dir.join(key);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(storage)?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(storage)
    }

    fn versions(&self, tenant: &str) -> Result<Vec<(String, usize)>, ComponentError> {
        let Some(bytes) = self.get(&format!("{tenant}/versions.json"))? else {
            return Ok(vec![]);
        };
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&bytes).map_err(storage)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some((
                    r["version"].as_str()?.to_string(),
                    r["size"].as_u64()? as usize,
                ))
            })
            .collect())
    }

    fn add_version(&self, tenant: &str, version: &str, size: usize) -> Result<(), ComponentError> {
        let mut versions = self.versions(tenant)?;
        if versions.iter().any(|(v, _)| v == version) {
            return Ok(());
        }
        versions.push((version.to_string(), size));
        let rows: Vec<_> = versions
            .iter()
            .map(|(v, n)| json!({"version": v, "size": n}))
            .collect();
        let bytes = serde_json::to_vec_pretty(&rows).map_err(storage)?;
        self.put(&format!("{tenant}/versions.json"), &bytes)
    }

    fn active(&self, tenant: &str) -> Result<Option<String>, ComponentError> {
        Ok(self
            .get(&format!("{tenant}/active"))?
            .map(|v| String::from_utf8_lossy(&v).trim().to_string()))
    }

    fn set_active(&self, tenant: &str, version: Option<&str>) -> Result<(), ComponentError> {
        let key = format!("{tenant}/active");
        match version {
            Some(v) => self.put(&key, v.as_bytes()),
            None => match std::fs::remove_file(self.dir.join(key)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(storage(e)),
            },
        }
    }
}

/// What a process knows of a tenant's active component, and since when.
struct Known {
    /// The active version, compiled; `None`: the built-in default.
    entry: Option<(String, Prepared)>,
    checked: Instant,
}

/// Components of every tenant, in one storage.
pub struct Registry {
    sandbox: Sandbox,
    storage: Arc<dyn Storage>,
    /// How long [`Known`] is trusted before the storage is asked again.
    refresh: Duration,
    active: RwLock<HashMap<String, Known>>,
}

fn is_version(v: &str) -> bool {
    v.len() == 64
        && v.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The sandbox limits `SLUICE_RERANK_*` set.
fn limits(config: &Config) -> Limits {
    Limits {
        memory_bytes: config.rerank_memory_mb << 20,
        fuel: config.rerank_fuel,
        deadline: config.rerank_deadline,
        max_candidates: config.rerank_max_candidates,
        max_text_bytes: config.rerank_max_text_bytes,
        ..Limits::default()
    }
}

impl Registry {
    /// The registry of a server: a sandbox with the `SLUICE_RERANK_*` limits, the host model
    /// lent to components, `storage`, and `SLUICE_COMPONENT_REFRESH_MS`.
    pub fn from_config(
        config: &Config,
        embedder: Arc<dyn Embedder>,
        storage: Arc<dyn Storage>,
    ) -> Result<Self, ComponentError> {
        let sandbox = Sandbox::new(limits(config), Arc::new(ModelHost(embedder)))
            .map_err(|e| ComponentError::Storage(format!("starting the rerank sandbox: {e:#}")))?;
        Ok(Self::new(sandbox, storage, config.component_refresh))
    }

    /// A registry over `storage` that reads a tenant's active version again after `refresh`.
    pub fn new(sandbox: Sandbox, storage: Arc<dyn Storage>, refresh: Duration) -> Self {
        Self {
            sandbox,
            storage,
            refresh,
            active: RwLock::new(HashMap::new()),
        }
    }

    /// The sandbox the components run in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    fn artefact_key(&self, tenant: &str, version: &str) -> String {
        format!(
            "{tenant}/{version}.{}.cwasm",
            self.sandbox.engine_fingerprint()
        )
    }

    /// Loads a stored version: its artefact when it matches this engine, else a recompile
    /// (whose artefact is then stored for the next process).
    fn load(&self, tenant: &str, version: &str) -> Result<Prepared, ComponentError> {
        let artefact = self.artefact_key(tenant, version);
        if let Some(bytes) = self.storage.get(&artefact)?
            && let Ok(prepared) = self.sandbox.load(&bytes)
        {
            return Ok(prepared);
        }
        let wasm = self
            .storage
            .get(&format!("{tenant}/{version}.wasm"))?
            .ok_or_else(|| storage(format!("{tenant}/{version}.wasm is missing")))?;
        let prepared = self
            .sandbox
            .compile(&wasm)
            .map_err(|e| ComponentError::Invalid(e.to_string()))?;
        self.storage.put(&artefact, &prepared.artifact)?;
        Ok(prepared)
    }

    /// The tenant's active version and component, compiled: from memory while it is fresh,
    /// else from the storage (recompiling nothing when the version has not changed).
    fn active(&self, tenant: &str) -> Result<Option<(String, Prepared)>, ComponentError> {
        let known = self
            .active
            .read()
            .map_err(storage)?
            .get(tenant)
            .map(|k| (k.entry.clone(), k.checked.elapsed() < self.refresh));
        // What this process knew, if anything: fresh → answer; stale → reused below when
        // the version has not changed.
        let previous = match known {
            Some((entry, true)) => return Ok(entry),
            Some((entry, false)) => entry,
            None => None,
        };
        let entry = match (self.storage.active(tenant)?, previous) {
            (Some(v), Some((known, prepared))) if v == known => Some((v, prepared)),
            (Some(v), _) => Some((v.clone(), self.load(tenant, &v)?)),
            (None, _) => None,
        };
        self.remember(tenant, entry.clone())?;
        Ok(entry)
    }

    fn remember(
        &self,
        tenant: &str,
        entry: Option<(String, Prepared)>,
    ) -> Result<(), ComponentError> {
        self.active.write().map_err(storage)?.insert(
            tenant.to_string(),
            Known {
                entry,
                checked: Instant::now(),
            },
        );
        Ok(())
    }
}

impl Components for Registry {
    fn upload(&self, tenant: &str, bytes: &[u8]) -> Result<ComponentVersion, ComponentError> {
        let prepared = self.sandbox.compile(bytes).map_err(|e| match e {
            UploadError::TooLarge { .. } => ComponentError::TooLarge(e.to_string()),
            other => ComponentError::Invalid(other.to_string()),
        })?;
        let version = format!("{:x}", Sha256::digest(bytes));
        self.storage
            .put(&format!("{tenant}/{version}.wasm"), bytes)?;
        self.storage
            .put(&self.artefact_key(tenant, &version), &prepared.artifact)?;
        // Recorded last: a listed version always has its bytes stored.
        self.storage.add_version(tenant, &version, bytes.len())?;
        let active = self.storage.active(tenant)?.as_deref() == Some(version.as_str());
        Ok(ComponentVersion {
            version,
            size: bytes.len(),
            active,
        })
    }

    fn activate(&self, tenant: &str, version: &str) -> Result<ComponentVersion, ComponentError> {
        let unknown = || {
            ComponentError::NotFound(format!(
                "tenant {tenant:?} has no component version {version:?}"
            ))
        };
        if !is_version(version) {
            return Err(unknown());
        }
        let size = self
            .storage
            .versions(tenant)?
            .into_iter()
            .find(|(v, _)| v == version)
            .ok_or_else(unknown)?
            .1;
        let prepared = self.load(tenant, version)?;
        self.storage.set_active(tenant, Some(version))?;
        self.remember(tenant, Some((version.to_string(), prepared)))?;
        Ok(ComponentVersion {
            version: version.to_string(),
            size,
            active: true,
        })
    }

    fn list(&self, tenant: &str) -> Result<Vec<ComponentVersion>, ComponentError> {
        let active = self.storage.active(tenant)?;
        Ok(self
            .storage
            .versions(tenant)?
            .into_iter()
            .map(|(version, size)| ComponentVersion {
                active: active.as_deref() == Some(version.as_str()),
                version,
                size,
            })
            .collect())
    }

    fn deactivate(&self, tenant: &str) -> Result<(), ComponentError> {
        self.storage.set_active(tenant, None)?;
        self.remember(tenant, None)
    }
}

impl Reranker for Registry {
    fn active_component(&self, tenant: &str) -> Result<Option<String>, String> {
        self.active(tenant)
            .map(|entry| entry.map(|(version, _)| version))
            .map_err(|e| format!("{e:?}"))
    }

    fn rerank(
        &self,
        tenant: &str,
        query: &str,
        query_vector: &[f32],
        hits: &[Hit],
    ) -> Result<Option<Vec<usize>>, String> {
        let Some((_, prepared)) = self.active(tenant).map_err(|e| format!("{e:?}"))? else {
            return Ok(None);
        };
        let max = self.sandbox.limits().max_text_bytes;
        let candidates: Vec<Candidate> = hits
            .iter()
            .map(|h| Candidate {
                id: h.document.id.clone(),
                title: h.document.title.clone(),
                text: truncate(&h.text, max).to_string(),
                score: h.score,
            })
            .collect();
        let mut known: HashMap<String, Vec<f32>> = candidates
            .iter()
            .zip(hits)
            .filter(|(_, h)| !h.vector.is_empty())
            .map(|(c, h)| (c.text.clone(), h.vector.clone()))
            .collect();
        if !query_vector.is_empty() {
            known.insert(query.to_string(), query_vector.to_vec());
        }
        self.sandbox
            .rerank_with(&prepared, query, &candidates, known)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
