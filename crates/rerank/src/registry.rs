//! Tenant-scoped component registry, and the pipeline's rerank stage.
//!
//! What it keeps, per tenant, in a [`ComponentStorage`](sluice_contract::stages::ComponentStorage):
//! `<tenant>/<version>.wasm` (the upload), `<tenant>/<version>.<engine>.cwasm` (its compiled
//! artefact for this engine configuration), the versions in upload order, and the active
//! version. A version is the SHA-256 of the
//! uploaded bytes. [`Disk`] keeps them under a folder (`sluice serve`); the Lambda functions
//! keep them in S3 and DynamoDB (`sluice-aws`), so that what the registry function compiles
//! the answer function loads. Compiled components are kept in memory per tenant (at most
//! [`sluice_contract::REMEMBERED_TENANTS`]), and the active version is read again once it is older
//! than the refresh interval (another process may have activated one) — in the background,
//! with the version known so far serving until a changed one is fetched and compiled, so that
//! no request waits on the storage for a tenant it has seen; an artefact from another engine
//! is recompiled from the upload.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::config::RerankConfig;
use serde_json::json;
use sha2::{Digest, Sha256};
use sluice_contract::Tenant;
use sluice_contract::cancel::Cancel;
use sluice_contract::metadata::{MetaValue as Value, Metadata};
use sluice_contract::stages::{
    ActiveComponent, CallCosts, ComponentError, ComponentFailure, ComponentStorage as Storage,
    ComponentVersion, Components, Embedder, RerankCall, RerankInput, Reranker,
};

use crate::{
    Call, Candidate, ComponentLimits, ContextEntry, Date, HostServices, MetaField, MetaValue,
    Prepared, Sandbox, UploadError,
};

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

/// The host of a process that validates uploads but runs no model (the registry function):
/// `count-tokens` counts with the model's tokenizer, and `embed` answers made-up unit vectors,
/// as the smoke run already does for its own texts. A smoke run checks that a component runs
/// within its limits and returns a valid order, not how well it ranks; the vectors a
/// component gets when it reranks answers come from the model ([`ModelHost`]).
pub struct UploadHost(pub Box<dyn Fn(&str) -> usize + Send + Sync>);

impl HostServices for UploadHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        use std::hash::{Hash, Hasher};
        Ok(texts
            .iter()
            .map(|t| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                t.hash(&mut h);
                let one = (h.finish() % crate::SMOKE_DIM as u64) as usize;
                (0..crate::SMOKE_DIM)
                    .map(|d| if d == one { 1.0 } else { 0.0 })
                    .collect()
            })
            .collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        (self.0)(text) as u32
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

    fn versions(&self, tenant: &Tenant) -> Result<Vec<(String, usize)>, ComponentError> {
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

    fn add_version(
        &self,
        tenant: &Tenant,
        version: &str,
        size: usize,
    ) -> Result<(), ComponentError> {
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

    fn active(&self, tenant: &Tenant) -> Result<Option<String>, ComponentError> {
        Ok(self
            .get(&format!("{tenant}/active"))?
            .map(|v| String::from_utf8_lossy(&v).trim().to_string()))
    }

    fn set_active(&self, tenant: &Tenant, version: Option<&str>) -> Result<(), ComponentError> {
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

/// A tenant's active component, compiled, as the pipeline runs it.
struct Active {
    version: String,
    prepared: Prepared,
    sandbox: Arc<Sandbox>,
    /// Its version's record in this process, kept by the registry across activations.
    stats: Arc<VersionStats>,
    /// Where its failures go to be stored (see [`FailureWriter`]), with its tenant.
    failures: FailureWriter,
    tenant: Tenant,
}

impl Active {
    fn new(
        (tenant, version): (&Tenant, &str),
        prepared: Prepared,
        sandbox: Arc<Sandbox>,
        stats: Arc<VersionStats>,
        failures: FailureWriter,
    ) -> Arc<Self> {
        Arc::new(Self {
            version: version.to_string(),
            prepared,
            sandbox,
            stats,
            failures,
            tenant: tenant.clone(),
        })
    }
}

/// The key of a version's stored failures: its last [`ComponentVersion::MAX_FAILURES`], newest
/// first, as JSON, beside its upload — so the process that lists versions (on Lambda, the
/// registry function) shows what the processes that run them (the answer function) saw.
fn failures_key(tenant: &Tenant, version: &str) -> String {
    format!("{tenant}/{version}.failures.json")
}

/// Stores failures off the request path: one thread per registry takes them from a bounded
/// queue and adds each to its version's record (read, prepend, cut, write). A full queue
/// drops the failure (a storm of them needs no more than the last ten); two processes adding
/// at once may lose one of the two — the record is advice for the tenant, not an audit log.
#[derive(Clone)]
struct FailureWriter(std::sync::mpsc::SyncSender<(Tenant, String, ComponentFailure)>);

impl FailureWriter {
    const QUEUE: usize = 64;

    fn start(storage: Arc<dyn Storage>) -> Self {
        let (send, receive) =
            std::sync::mpsc::sync_channel::<(Tenant, String, ComponentFailure)>(Self::QUEUE);
        let spawned = std::thread::Builder::new()
            .name("component-failures".into())
            .spawn(move || {
                // Ends when the registry (every sender) is gone.
                while let Ok((tenant, version, failure)) = receive.recv() {
                    if let Err(e) = store_failure(storage.as_ref(), &tenant, &version, failure) {
                        tracing::warn!(%tenant, %version, error = %e, "storing a component failure failed");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread to store component failures: they stay in this process");
        }
        Self(send)
    }

    fn send(&self, tenant: &Tenant, version: &str, failure: ComponentFailure) {
        let _ = (self.0).try_send((tenant.clone(), version.to_string(), failure));
    }
}

/// Adds `failure` to the version's stored record.
fn store_failure(
    storage: &dyn Storage,
    tenant: &Tenant,
    version: &str,
    failure: ComponentFailure,
) -> Result<(), ComponentError> {
    let key = failures_key(tenant, version);
    let mut record = stored_failures(storage, tenant, version)?;
    record.insert(0, failure);
    record.truncate(ComponentVersion::MAX_FAILURES);
    let bytes = serde_json::to_vec(&record).map_err(|e| ComponentError::Storage(e.to_string()))?;
    storage.put(&key, &bytes)
}

/// A version's stored failures, newest first (none when there is no record; a record that
/// does not parse counts as none, and is replaced by the next failure).
fn stored_failures(
    storage: &dyn Storage,
    tenant: &Tenant,
    version: &str,
) -> Result<Vec<ComponentFailure>, ComponentError> {
    Ok(storage
        .get(&failures_key(tenant, version))?
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default())
}

/// What this process saw of a version's calls: kept per tenant and version, not per load, so
/// that a version activated again (a rollback) keeps its record, and a version no longer
/// active still shows what it did.
#[derive(Default)]
struct VersionStats {
    /// `(fuel, wall µs)` of its last [`CallCosts::WINDOW`] calls.
    recent: Mutex<VecDeque<(u64, u64)>>,
    /// Its last failed calls, newest last.
    failures: Mutex<VecDeque<ComponentFailure>>,
}

impl VersionStats {
    /// Records a call; a failure is returned stamped, for the stored record as well.
    fn record(
        &self,
        fuel: u64,
        wall: Duration,
        failed: Option<&sluice_contract::stages::RerankFailure>,
    ) -> Option<ComponentFailure> {
        let mut recent = lock(&self.recent);
        if recent.len() == CallCosts::WINDOW {
            recent.pop_front();
        }
        recent.push_back((fuel, wall.as_micros() as u64));
        drop(recent);
        if let Some(failure) = failed {
            let at_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let stamped = ComponentFailure {
                at_ms,
                failure: failure.clone(),
            };
            let mut failures = lock(&self.failures);
            if failures.len() == ComponentVersion::MAX_FAILURES {
                failures.pop_front();
            }
            failures.push_back(stamped.clone());
            return Some(stamped);
        }
        None
    }

    fn costs(&self) -> Option<CallCosts> {
        CallCosts::of(lock(&self.recent).iter().copied())
    }

    /// Newest first.
    fn failures(&self) -> Vec<ComponentFailure> {
        lock(&self.failures).iter().rev().cloned().collect()
    }
}

/// What a process knows of a tenant's active component (`None`: the built-in default), since
/// when, and when it was last asked for.
struct Known {
    active: Option<Arc<Active>>,
    checked: Instant,
    used: Instant,
}

/// A read of a tenant's active component from the storage (a first load, or a check of what
/// is known), shared by the requests that ask while it runs.
type Load = Shared<BoxFuture<'static, Result<Option<Arc<Active>>, String>>>;

/// Components of every tenant, in one storage.
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    sandbox: Arc<Sandbox>,
    storage: Arc<dyn Storage>,
    /// How long [`Known`] is trusted before the storage is asked again.
    refresh: Duration,
    known: Mutex<HashMap<Tenant, Known>>,
    loading: Mutex<HashMap<Tenant, Load>>,
    /// Each version's record, by tenant and version (versions are few per tenant: what it
    /// uploaded).
    stats: Mutex<HashMap<(Tenant, String), Arc<VersionStats>>>,
    failures: FailureWriter,
}

fn is_version(v: &str) -> bool {
    v.len() == 64
        && v.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The sandbox limits `SLUICE_RERANK_*` set.
pub fn limits(config: &RerankConfig) -> ComponentLimits {
    ComponentLimits {
        memory_bytes: config.memory_mb << 20,
        fuel: config.fuel,
        deadline: config.deadline,
        max_candidates: config.max_candidates,
        max_text_bytes: config.max_text_bytes,
        // Room for every candidate's text passed back to `embed` once, whatever the operator
        // set those limits to; a guest cannot pass more than its memory holds in one call.
        max_host_copy_bytes: (config.max_candidates * (config.max_text_bytes + 8))
            .min(config.memory_mb << 20)
            .max(ComponentLimits::default().max_host_copy_bytes),
        complexity: crate::Complexity {
            max_work: config.max_compile_work,
            ..crate::Complexity::default()
        },
        ..ComponentLimits::default()
    }
}

/// A lock whose holder cannot leave it half-changed (plain inserts and removes): a panic
/// elsewhere does not poison the registry.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// The registry of a server: a sandbox with the `SLUICE_RERANK_*` limits, what the host
    /// lends components (the model: [`ModelHost`]; in a process that only takes uploads:
    /// [`UploadHost`]), `storage`, and `SLUICE_COMPONENT_REFRESH_MS`.
    pub fn from_config(
        config: &RerankConfig,
        host: Arc<dyn HostServices>,
        storage: Arc<dyn Storage>,
    ) -> Result<Self, ComponentError> {
        let sandbox = Sandbox::new(limits(config), host)
            .map_err(|e| ComponentError::Storage(format!("starting the rerank sandbox: {e:#}")))?;
        Ok(Self::new(sandbox, storage, config.refresh))
    }

    /// A registry over `storage` that checks a tenant's active version again after `refresh`.
    pub fn new(sandbox: Sandbox, storage: Arc<dyn Storage>, refresh: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                sandbox: Arc::new(sandbox),
                refresh,
                known: Mutex::new(HashMap::new()),
                loading: Mutex::new(HashMap::new()),
                stats: Mutex::new(HashMap::new()),
                failures: FailureWriter::start(Arc::clone(&storage)),
                storage,
            }),
        }
    }

    /// The sandbox the components run in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.inner.sandbox
    }
}

impl Inner {
    fn artefact_key(&self, tenant: &Tenant, version: &str) -> String {
        format!(
            "{tenant}/{version}.{}.cwasm",
            self.sandbox.engine_fingerprint()
        )
    }

    /// Loads a stored version: its artefact when it matches this engine, else a recompile
    /// (whose artefact is then stored for the next process).
    fn load(&self, tenant: &Tenant, version: &str) -> Result<Arc<Active>, ComponentError> {
        let artefact = self.artefact_key(tenant, version);
        let stats = Arc::clone(
            lock(&self.stats)
                .entry((tenant.clone(), version.to_string()))
                .or_default(),
        );
        let active = |prepared| {
            let failures = self.failures.clone();
            let sandbox = Arc::clone(&self.sandbox);
            Active::new((tenant, version), prepared, sandbox, stats, failures)
        };
        if let Some(bytes) = self.storage.get(&artefact)?
            && let Ok(prepared) = self.sandbox.load(&bytes)
        {
            return Ok(active(prepared));
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
        Ok(active(prepared))
    }

    /// Reads the tenant's active version from the storage and loads it, unless it is the one
    /// already known (`known`). Blocking: storage calls and compilation.
    fn read(
        &self,
        tenant: &Tenant,
        known: Option<&Arc<Active>>,
    ) -> Result<Option<Arc<Active>>, ComponentError> {
        Ok(match (self.storage.active(tenant)?, known) {
            (Some(v), Some(known)) if v == known.version => Some(Arc::clone(known)),
            (Some(v), _) => Some(self.load(tenant, &v)?),
            (None, _) => None,
        })
    }

    /// Records what the tenant's active component is, as of now.
    fn remember(&self, tenant: &Tenant, active: Option<Arc<Active>>) {
        let now = Instant::now();
        let mut known = lock(&self.known);
        if known.len() >= sluice_contract::REMEMBERED_TENANTS && !known.contains_key(tenant) {
            // Tenants not asked for lately go first (they are loaded again when they come
            // back); if that is not enough, the half asked for longest ago.
            known.retain(|_, k| now.duration_since(k.used) < IDLE);
            if known.len() >= sluice_contract::REMEMBERED_TENANTS {
                let mut used: Vec<Instant> = known.values().map(|k| k.used).collect();
                used.sort_unstable();
                let cut = used[used.len() / 2];
                known.retain(|_, k| k.used > cut);
            }
        }
        known.insert(
            tenant.clone(),
            Known {
                active,
                checked: now,
                used: now,
            },
        );
    }

    /// Reads the tenant's active component from the storage, in the background: a first load
    /// (`known` is `None` and nothing was known), or a check of the version known so far (a
    /// changed one is fetched and compiled here). One read per tenant at a time, joined by
    /// every request that asks while it runs; it finishes even when nobody waits any more.
    /// A failed check keeps what was known, to be checked again after the refresh interval.
    fn read_in_background(
        self: &Arc<Self>,
        tenant: &Tenant,
        known: Option<Option<Arc<Active>>>,
    ) -> Load {
        let mut loading = lock(&self.loading);
        if let Some(load) = loading.get(tenant) {
            return load.clone();
        }
        let (inner, name) = (Arc::clone(self), tenant.clone());
        let task = tokio::task::spawn_blocking(move || {
            let current = known.as_ref().and_then(Option::as_ref);
            let read = inner.read(&name, current);
            match (&read, known) {
                (Ok(active), _) => inner.remember(&name, active.clone()),
                (Err(e), Some(still)) => {
                    tracing::warn!(tenant = %name, error = %e, "checking the active rerank component failed; the known one goes on serving");
                    inner.remember(&name, still);
                }
                (Err(_), None) => {}
            }
            lock(&inner.loading).remove(&name);
            read.map_err(|e| e.to_string())
        });
        let load = task
            .map(|joined| joined.unwrap_or_else(|e| Err(format!("the load task failed: {e}"))))
            .boxed()
            .shared();
        loading.insert(tenant.clone(), load.clone());
        load
    }
}

/// Past this long unasked, a tenant's component is the first to be forgotten when the
/// registry's memory is full.
const IDLE: Duration = Duration::from_secs(600);

impl ActiveComponent for Active {
    fn version(&self) -> &str {
        &self.version
    }

    fn rerank(&self, input: &RerankInput<'_>) -> RerankCall {
        let candidates = candidates(input.hits, self.sandbox.limits().max_text_bytes);
        let context = context_entries(input.context);
        let mut known: HashMap<String, Vec<f32>> = candidates
            .iter()
            .zip(input.hits)
            .filter(|(_, h)| !h.vector.is_empty())
            .map(|(c, h)| (c.text.clone(), h.vector.clone()))
            .collect();
        if !input.query_vector.is_empty() {
            known.insert(input.query.to_string(), input.query_vector.to_vec());
        }
        let call = Call {
            query: input.query,
            context: &context,
            candidates: &candidates,
        };
        let (order, cost) = self.sandbox.rerank_costed(&self.prepared, &call, known);
        let order = order.map_err(|e| e.failure());
        if let Some(failure) = (self.stats).record(cost.fuel, cost.wall, order.as_ref().err()) {
            self.failures.send(&self.tenant, &self.version, failure);
        }
        RerankCall {
            order,
            fuel: cost.fuel,
            wall: cost.wall,
        }
    }
}

/// Retrieved chunks as a component is given them: each text cut at `max_text_bytes`, the
/// document's metadata sorted by key.
pub fn candidates(hits: &[sluice_contract::stages::Hit], max_text_bytes: usize) -> Vec<Candidate> {
    (hits.iter())
        .map(|h| Candidate {
            id: h.document.id.clone(),
            title: h.document.title.clone(),
            text: truncate(&h.text, max_text_bytes).to_string(),
            score: h.score,
            chunk: u32::try_from(h.chunk).unwrap_or(u32::MAX),
            metadata: metadata(&h.document.metadata),
        })
        .collect()
}

/// A request's `rerank_context` as a component is given it.
pub fn context_entries(context: &sluice_contract::stages::RerankContext) -> Vec<ContextEntry> {
    (context.iter())
        .map(|(key, value)| ContextEntry {
            key: key.to_string(),
            value: value.to_string(),
        })
        .collect()
}

/// A document's metadata as a 0.2 component reads it, sorted by key.
fn metadata(metadata: &Metadata) -> Vec<MetaField> {
    metadata
        .iter()
        .map(|(key, value)| MetaField {
            key: key.to_string(),
            value: match value {
                Value::Text(t) => MetaValue::Text(t.clone()),
                Value::Number(n) => MetaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
                Value::Bool(b) => MetaValue::Boolean(*b),
                Value::Date { text, seconds } => MetaValue::Date(Date {
                    text: text.clone(),
                    seconds: *seconds,
                }),
                Value::List(items) => MetaValue::Strings(items.clone()),
            },
        })
        .collect()
}

#[async_trait::async_trait]
impl Reranker for Registry {
    async fn active(
        &self,
        tenant: &Tenant,
        by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActiveComponent>>, String> {
        let inner = &self.inner;
        let known = {
            let mut known = lock(&inner.known);
            known.get_mut(tenant).map(|k| {
                k.used = Instant::now();
                (k.active.clone(), k.checked.elapsed() >= inner.refresh)
            })
        };
        let active = match known {
            Some((active, false)) => active,
            // Due for a check: waited for until `by`, else the version known so far serves.
            Some((active, true)) => {
                let check = inner.read_in_background(tenant, Some(active.clone()));
                match tokio::time::timeout_at(by, check).await {
                    Ok(Ok(checked)) => checked,
                    _ => active,
                }
            }
            None => inner.read_in_background(tenant, None).await?,
        };
        Ok(active.map(|a| a as Arc<dyn ActiveComponent>))
    }
}

impl Components for Registry {
    fn upload(
        &self,
        tenant: &Tenant,
        bytes: &[u8],
        cancel: &Cancel,
    ) -> Result<ComponentVersion, ComponentError> {
        let prepared = self.inner.sandbox.compile(bytes).map_err(|e| match e {
            UploadError::TooLarge { .. } => ComponentError::TooLarge(e.to_string()),
            UploadError::TooComplex(_) => ComponentError::TooComplex(e.to_string()),
            other => ComponentError::Invalid(other.to_string()),
        })?;
        // The compile cannot be stopped, but what it made is kept only for a request that is
        // still there.
        if cancel.is_cancelled() {
            return Err(ComponentError::Abandoned);
        }
        let version = format!("{:x}", Sha256::digest(bytes));
        self.inner
            .storage
            .put(&format!("{tenant}/{version}.wasm"), bytes)?;
        self.inner.storage.put(
            &self.inner.artefact_key(tenant, &version),
            &prepared.artifact,
        )?;
        // Recorded last: a listed version always has its bytes stored.
        self.inner
            .storage
            .add_version(tenant, &version, bytes.len())?;
        let active = self.inner.storage.active(tenant)?.as_deref() == Some(version.as_str());
        Ok(ComponentVersion {
            version,
            size: bytes.len(),
            active,
            cost: None,
            failures: Vec::new(),
        })
    }

    fn activate(&self, tenant: &Tenant, version: &str) -> Result<ComponentVersion, ComponentError> {
        let unknown = || {
            ComponentError::NotFound(format!(
                "tenant {tenant:?} has no component version {version:?}"
            ))
        };
        if !is_version(version) {
            return Err(unknown());
        }
        let size = self
            .inner
            .storage
            .versions(tenant)?
            .into_iter()
            .find(|(v, _)| v == version)
            .ok_or_else(unknown)?
            .1;
        let active = self.inner.load(tenant, version)?;
        self.inner.storage.set_active(tenant, Some(version))?;
        self.inner.remember(tenant, Some(active));
        Ok(ComponentVersion {
            version: version.to_string(),
            size,
            active: true,
            cost: None,
            failures: Vec::new(),
        })
    }

    fn list(&self, tenant: &Tenant) -> Result<Vec<ComponentVersion>, ComponentError> {
        let active = self.inner.storage.active(tenant)?;
        // What this process saw of each version it has run for the tenant.
        let stats = lock(&self.inner.stats);
        Ok(self
            .inner
            .storage
            .versions(tenant)?
            .into_iter()
            .map(|(version, size)| {
                let seen = stats.get(&(tenant.clone(), version.clone()));
                // What every process stored; this process's own when the record cannot be read.
                let failures = stored_failures(self.inner.storage.as_ref(), tenant, &version)
                    .unwrap_or_else(|_| seen.map(|s| s.failures()).unwrap_or_default());
                ComponentVersion {
                    active: active.as_deref() == Some(version.as_str()),
                    cost: seen.and_then(|s| s.costs()),
                    failures,
                    version,
                    size,
                }
            })
            .collect())
    }

    fn deactivate(&self, tenant: &Tenant) -> Result<(), ComponentError> {
        self.inner.storage.set_active(tenant, None)?;
        self.inner.remember(tenant, None);
        Ok(())
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHost;
    impl crate::HostServices for NoHost {
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
            Ok(texts.iter().map(|_| vec![0.0]).collect())
        }
        fn count_tokens(&self, _: &str) -> u32 {
            0
        }
    }

    /// A candidate's text reaches a component cut to `max_text_bytes`, on a character
    /// boundary; a shorter one whole.
    #[test]
    fn candidate_texts_are_cut_to_the_limit() {
        let limit = ComponentLimits::default().max_text_bytes;
        assert_eq!(limit, 8 << 10);
        let mut long = sluice_testkit::hit("long", 1.0);
        long.text = "é".repeat(limit) + "x";
        let mut odd = sluice_testkit::hit("odd", 0.5);
        odd.text = format!("x{}", "é".repeat(limit));
        let short = sluice_testkit::hit("short", 0.1);
        let given = candidates(&[long, odd, short.clone()], limit);
        assert_eq!(given[0].text.len(), limit);
        assert_eq!(given[1].text.len(), limit - 1, "not inside a character");
        assert_eq!(given[2].text, short.text);
    }

    #[test]
    fn what_the_registry_remembers_stays_bounded_whatever_tenants_ask() {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::new(ComponentLimits::default(), Arc::new(NoHost)).unwrap();
        let registry = Registry::new(
            sandbox,
            Arc::new(Disk::open(dir.path()).unwrap()),
            Duration::from_secs(5),
        );
        let max = sluice_contract::REMEMBERED_TENANTS;
        for i in 0..max * 2 + 3 {
            registry
                .inner
                .remember(&sluice_testkit::tenant(&format!("t{i}")), None);
        }
        let known = lock(&registry.inner.known);
        assert!(known.len() <= max, "{}", known.len());
        assert!(
            known.contains_key(format!("t{}", max * 2 + 2).as_str()),
            "the newest is kept"
        );
    }
}
