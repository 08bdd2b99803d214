//! Tenant-scoped component registry, and the pipeline's rerank stage.
//!
//! What it keeps, per tenant, in a [`ComponentStorage`](sluice_contract::components::ComponentStorage):
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
//! is recompiled from the upload.//!
//! - this file: [`Registry`] — what each process knows of each tenant's active component, the
//!   pipeline's rerank stage and the component routes;
//! - `disk`: [`Disk`], the storage of `sluice serve`;
//! - `manage`: the component routes' operations (upload, activate, list, deactivate, logs,
//!   delete);
//! - `record`: each version's calls, costs, failures and log, as the registry keeps and
//!   stores them;
//! - `candidates`: retrieved chunks and the request's context as a component is given them.

mod candidates;
mod disk;
mod manage;
mod record;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::config::RerankConfig;
use sluice_contract::Tenant;
use sluice_contract::components::{ComponentCall, ComponentError, ComponentStorage as Storage};
use sluice_contract::stages::{
    ActiveComponent, ActivePrompt, Assembled, ChatMessage, Hit, PromptCall, PromptInput,
    RerankCall, RerankFailure, RerankInput, Reranker,
};

use crate::{Call, CallCost, ComponentLimits, HostServices, Prepared, Sandbox};

pub(crate) use candidates::truncate;
pub use candidates::{candidates, context_entries};
pub use disk::Disk;
use disk::storage;
use record::{CallWriter, VersionStats};

/// A tenant's active component, compiled, as the pipeline runs it.
struct Active {
    version: String,
    prepared: Prepared,
    sandbox: Arc<Sandbox>,
    /// Its version's record in this process, kept by the registry across activations.
    stats: Arc<VersionStats>,
    /// Where its calls go to be stored (see [`CallWriter`]), with its tenant.
    calls: CallWriter,
    tenant: Tenant,
}

impl Active {
    fn new(
        (tenant, version): (&Tenant, &str),
        prepared: Prepared,
        sandbox: Arc<Sandbox>,
        stats: Arc<VersionStats>,
        calls: CallWriter,
    ) -> Arc<Self> {
        Arc::new(Self {
            version: version.to_string(),
            prepared,
            sandbox,
            stats,
            calls,
            tenant: tenant.clone(),
        })
    }

    /// Records a call over `hits`: its cost, and — when it logged a line or failed — the
    /// call, in this process and (off the request path) in the storage, marked restricted
    /// when one of `hits` has an access list. `input` is asked for only when the call failed.
    fn record(
        &self,
        cost: &mut CallCost,
        (failure, hits): (Option<&RerankFailure>, &[Hit]),
        request_id: &str,
        input: impl FnOnce() -> sluice_contract::components::CallInput,
    ) {
        let restricted = (hits.iter()).any(|h| {
            (h.document.metadata)
                .get(sluice_contract::access::ACCESS_KEY)
                .is_some()
        });
        let lines = std::mem::take(&mut cost.logs);
        let call = |at_ms| {
            (!lines.is_empty() || failure.is_some()).then(|| ComponentCall {
                at_ms,
                request_id: (!request_id.is_empty()).then(|| request_id.to_string()),
                lines,
                failure: failure.cloned(),
                input: failure.map(|_| input()),
                restricted,
            })
        };
        if let Some(call) = self.stats.record(cost.fuel, cost.wall, call) {
            self.calls.send(&self.tenant, &self.version, call);
        }
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
    calls: CallWriter,
    /// Compiles under way at once, at most one a core.
    compiles: Slots,
}

/// Places for compiles: a compile cannot be stopped once Cranelift runs, so uploads beyond
/// one a core wait here for a place instead, and one whose client leaves while it waits never
/// compiles.
struct Slots {
    free: Mutex<usize>,
    freed: std::sync::Condvar,
}

/// How often a waiting upload looks whether its client is still there.
const SLOT_CHECK: Duration = Duration::from_millis(50);

impl Slots {
    fn new(places: usize) -> Self {
        Self {
            free: Mutex::new(places.max(1)),
            freed: std::sync::Condvar::new(),
        }
    }

    /// A place, held until the guard is dropped; `None` once `cancel` says the request is gone.
    fn take(&self, cancel: &sluice_contract::cancel::Cancel) -> Option<SlotGuard<'_>> {
        let mut free = lock(&self.free);
        loop {
            if cancel.check().is_err() {
                return None;
            }
            if *free > 0 {
                *free -= 1;
                return Some(SlotGuard(self));
            }
            free = (self.freed.wait_timeout(free, SLOT_CHECK))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// A held place of [`Slots`], given back when dropped.
struct SlotGuard<'a>(&'a Slots);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.0.free) += 1;
        self.0.freed.notify_one();
    }
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
                calls: CallWriter::start(Arc::clone(&storage)),
                storage,
                compiles: Slots::new(std::thread::available_parallelism().map_or(1, |n| n.get())),
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
            let calls = self.calls.clone();
            let sandbox = Arc::clone(&self.sandbox);
            Active::new((tenant, version), prepared, sandbox, stats, calls)
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
        // Tenants not asked for lately go first (they are loaded again when they come back);
        // if that is not enough, the half asked for longest ago.
        let idle = |k: &Known| now.duration_since(k.used) >= IDLE;
        sluice_contract::make_room(&mut known, tenant, idle, |k| k.used);
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
        let (order, mut cost) = self.sandbox.rerank_costed(&self.prepared, &call, known);
        let order = order.map_err(|e| e.failure());
        let kept = || candidates::call_input(input.query, input.context, input.hits);
        let ended = (order.as_ref().err(), input.hits);
        self.record(&mut cost, ended, input.request_id, kept);
        RerankCall {
            order,
            fuel: cost.fuel,
            wall: cost.wall,
        }
    }
}

impl ActivePrompt for Active {
    fn version(&self) -> &str {
        &self.version
    }

    fn assemble(&self, input: &PromptInput<'_>) -> PromptCall {
        let given = candidates::prompt_input(input, self.sandbox.limits().max_text_bytes);
        let (assembled, mut cost) = self.sandbox.assemble_costed(&self.prepared, &given);
        let assembled = assembled.map_err(|e| e.failure());
        let kept = || candidates::call_input(input.question, input.context, input.sources);
        let ended = (assembled.as_ref().err(), input.sources);
        self.record(&mut cost, ended, input.request_id, kept);
        PromptCall {
            assembled: assembled.map(|(messages, tokens)| Assembled {
                messages: (messages.into_iter())
                    .map(|m| ChatMessage::new(&m.role, m.content))
                    .collect(),
                tokens,
            }),
            fuel: cost.fuel,
            wall: cost.wall,
        }
    }
}

impl Registry {
    /// The tenant's active component of either kind (`tenant`, or its
    /// [`Tenant::prompt_components`] name), read as [`Reranker::active`] says.
    async fn known_or_read(
        &self,
        tenant: &Tenant,
        by: tokio::time::Instant,
    ) -> Result<Option<Arc<Active>>, String> {
        let inner = &self.inner;
        let known = {
            let mut known = lock(&inner.known);
            known.get_mut(tenant).map(|k| {
                k.used = Instant::now();
                (k.active.clone(), k.checked.elapsed() >= inner.refresh)
            })
        };
        Ok(match known {
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
        })
    }
}

#[async_trait::async_trait]
impl Reranker for Registry {
    async fn active(
        &self,
        tenant: &Tenant,
        by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActiveComponent>>, String> {
        let active = self.known_or_read(tenant, by).await?;
        Ok(active.map(|a| a as Arc<dyn ActiveComponent>))
    }

    async fn active_prompt(
        &self,
        tenant: &Tenant,
        by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActivePrompt>>, String> {
        let active = self.known_or_read(&tenant.prompt_components(), by).await?;
        Ok(active.map(|a| a as Arc<dyn ActivePrompt>))
    }

    async fn version(
        &self,
        tenant: &Tenant,
        version: &str,
    ) -> Result<Arc<dyn ActiveComponent>, String> {
        Ok(self.loaded(tenant, version).await? as Arc<dyn ActiveComponent>)
    }

    async fn prompt_version(
        &self,
        tenant: &Tenant,
        version: &str,
    ) -> Result<Arc<dyn ActivePrompt>, String> {
        let stored = self.loaded(&tenant.prompt_components(), version).await?;
        Ok(stored as Arc<dyn ActivePrompt>)
    }
}

impl Registry {
    /// A stored version of the tenant's (active or not), loaded on the blocking pool: its
    /// artefact, or a compile.
    async fn loaded(&self, tenant: &Tenant, version: &str) -> Result<Arc<Active>, String> {
        if !is_version(version) {
            return Err(format!("{version:?} is not a component version"));
        }
        let (inner, tenant, version) =
            (Arc::clone(&self.inner), tenant.clone(), version.to_string());
        tokio::task::spawn_blocking(move || inner.load(&tenant, &version))
            .await
            .map_err(|e| format!("the load task failed: {e}"))?
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
