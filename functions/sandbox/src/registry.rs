//! Tenant-scoped component registry on local disk, and the pipeline's rerank stage.
//!
//! Layout under the registry folder, one folder per tenant:
//! `<version>.wasm` (the upload), `<version>.<engine>.cwasm` (its compiled artefact for this
//! engine configuration), `versions.json` (upload order and sizes) and `active` (the active
//! version). A version is the SHA-256 of the uploaded bytes. Compiled components are cached in
//! memory per tenant; an artefact from another engine is recompiled from the upload.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::json;
use sha2::{Digest, Sha256};
use sluice_core::Config;
use sluice_core::stages::{ComponentError, ComponentVersion, Components, Embedder, Hit, Reranker};

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

/// Components of every tenant, stored under one folder.
pub struct Registry {
    sandbox: Sandbox,
    dir: PathBuf,
    /// Active compiled component per tenant (`None`: the tenant has none), filled on first use.
    active: RwLock<HashMap<String, Option<(String, Prepared)>>>,
}

fn storage(e: impl std::fmt::Display) -> ComponentError {
    ComponentError::Storage(e.to_string())
}

/// Writes by rename, so a crash never leaves half a file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ComponentError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(storage)
}

fn is_version(v: &str) -> bool {
    v.len() == 64
        && v.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl Registry {
    /// The registry of a server: a sandbox with the `SLUICE_RERANK_*` limits, the host model
    /// lent to components, and storage in `SLUICE_DATA_DIR/components`.
    pub fn from_config(
        config: &Config,
        embedder: Arc<dyn Embedder>,
    ) -> Result<Self, ComponentError> {
        let limits = Limits {
            memory_bytes: config.rerank_memory_mb << 20,
            fuel: config.rerank_fuel,
            deadline: config.rerank_deadline,
            max_candidates: config.rerank_max_candidates,
            max_text_bytes: config.rerank_max_text_bytes,
            ..Limits::default()
        };
        let sandbox = Sandbox::new(limits, Arc::new(ModelHost(embedder)))
            .map_err(|e| ComponentError::Storage(format!("starting the rerank sandbox: {e:#}")))?;
        Self::open(sandbox, &config.data_dir.join("components"))
    }

    /// A registry in `dir` (created when missing).
    pub fn open(sandbox: Sandbox, dir: &Path) -> Result<Self, ComponentError> {
        std::fs::create_dir_all(dir).map_err(storage)?;
        Ok(Self {
            sandbox,
            dir: dir.to_path_buf(),
            active: RwLock::new(HashMap::new()),
        })
    }

    /// The sandbox the components run in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    fn tenant_dir(&self, tenant: &str) -> PathBuf {
        self.dir.join(tenant)
    }

    fn versions(&self, tenant: &str) -> Result<Vec<(String, usize)>, ComponentError> {
        match std::fs::read(self.tenant_dir(tenant).join("versions.json")) {
            Ok(bytes) => {
                let rows: Vec<serde_json::Value> =
                    serde_json::from_slice(&bytes).map_err(storage)?;
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
            Err(e) => Err(storage(e)),
        }
    }

    fn active_version(&self, tenant: &str) -> Result<Option<String>, ComponentError> {
        match std::fs::read_to_string(self.tenant_dir(tenant).join("active")) {
            Ok(v) => Ok(Some(v.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(storage(e)),
        }
    }

    /// Loads a stored version: its artefact when it matches this engine, else a recompile.
    fn load(&self, tenant: &str, version: &str) -> Result<Prepared, ComponentError> {
        let dir = self.tenant_dir(tenant);
        let artefact = dir.join(format!(
            "{version}.{}.cwasm",
            self.sandbox.engine_fingerprint()
        ));
        if let Ok(bytes) = std::fs::read(&artefact)
            && let Ok(prepared) = self.sandbox.load(&bytes)
        {
            return Ok(prepared);
        }
        let wasm = std::fs::read(dir.join(format!("{version}.wasm"))).map_err(storage)?;
        let prepared = self
            .sandbox
            .compile(&wasm)
            .map_err(|e| ComponentError::Invalid(e.to_string()))?;
        write_atomic(&artefact, &prepared.artifact)?;
        Ok(prepared)
    }

    /// The tenant's active version and component, compiled, from the cache or from disk.
    fn active(&self, tenant: &str) -> Result<Option<(String, Prepared)>, ComponentError> {
        if let Some(entry) = self.active.read().map_err(storage)?.get(tenant) {
            return Ok(entry.clone());
        }
        let entry = match self.active_version(tenant)? {
            Some(v) => Some((v.clone(), self.load(tenant, &v)?)),
            None => None,
        };
        self.active
            .write()
            .map_err(storage)?
            .insert(tenant.to_string(), entry.clone());
        Ok(entry)
    }
}

impl Components for Registry {
    fn upload(&self, tenant: &str, bytes: &[u8]) -> Result<ComponentVersion, ComponentError> {
        let prepared = self.sandbox.compile(bytes).map_err(|e| match e {
            UploadError::TooLarge { .. } => ComponentError::TooLarge(e.to_string()),
            other => ComponentError::Invalid(other.to_string()),
        })?;
        let version = format!("{:x}", Sha256::digest(bytes));
        let dir = self.tenant_dir(tenant);
        std::fs::create_dir_all(&dir).map_err(storage)?;
        write_atomic(&dir.join(format!("{version}.wasm")), bytes)?;
        let artefact = dir.join(format!(
            "{version}.{}.cwasm",
            self.sandbox.engine_fingerprint()
        ));
        write_atomic(&artefact, &prepared.artifact)?;
        let mut versions = self.versions(tenant)?;
        if !versions.iter().any(|(v, _)| *v == version) {
            versions.push((version.clone(), bytes.len()));
            let rows: Vec<_> = versions
                .iter()
                .map(|(v, n)| json!({"version": v, "size": n}))
                .collect();
            write_atomic(
                &dir.join("versions.json"),
                &serde_json::to_vec_pretty(&rows).map_err(storage)?,
            )?;
        }
        let active = self.active_version(tenant)?.as_deref() == Some(version.as_str());
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
            .versions(tenant)?
            .into_iter()
            .find(|(v, _)| v == version)
            .ok_or_else(unknown)?
            .1;
        let prepared = self.load(tenant, version)?;
        write_atomic(&self.tenant_dir(tenant).join("active"), version.as_bytes())?;
        self.active
            .write()
            .map_err(storage)?
            .insert(tenant.to_string(), Some((version.to_string(), prepared)));
        Ok(ComponentVersion {
            version: version.to_string(),
            size,
            active: true,
        })
    }

    fn list(&self, tenant: &str) -> Result<Vec<ComponentVersion>, ComponentError> {
        let active = self.active_version(tenant)?;
        Ok(self
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
        match std::fs::remove_file(self.tenant_dir(tenant).join("active")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(storage(e)),
        }
        self.active
            .write()
            .map_err(storage)?
            .insert(tenant.to_string(), None);
        Ok(())
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
