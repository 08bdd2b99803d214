//! Test doubles for every stage of the pipeline, so that the contract — the stream's events
//! and their fields, every degraded reason, every error code, auth, quotas, the OpenAI shapes,
//! cache replay — is tested in milliseconds, in-process, with nothing real behind it:
//!
//! - [`HashEmbedder`]: deterministic vectors from the words of a text (texts sharing words are
//!   close), one token per word;
//! - [`ScriptedLlm`]: streams what it is told — tokens, a refusal, a break, a stall — and
//!   records every call (the prompt, `max_tokens`, the trace context);
//! - [`MemoryStore`]: a hybrid store in memory (cosine and word overlap, fused as the real
//!   stores fuse), and [`Troubled`] around any store to make it slow or failing;
//! - [`ScriptedReranker`]: a tenant component that reverses the order, fails, or is slow to
//!   be found;
//! - [`MemoryKeys`], [`BrokenKeys`], [`BrokenCache`], [`SlowComponents`], [`BrokenUsage`];
//! - [`MemoryBatches`]: a sync queue whose batches the test reads as Lambda's poller would;
//! - [`filters`]: the metadata-filter cases every store is checked with;
//! - [`users`]: end users' tokens signed with test keys, and an identity that verifies them;
//! - [`services`]: what an end-to-end test needs (the test LLM, the AWS emulator, the model…),
//!   and [`needs!`], which skips it, saying what to install, when they are absent outside `CI`.
//!
//! The real adapters are tested against the real dependencies in their own crates; a test of
//! the contract that passes here and fails there is a bug in an adapter.
//!
//! A crate of its own, used only as a dev-dependency: no build of a binary (the demo's
//! included) compiles it, and it changes no feature of `sluice-core`, so the tests and the
//! demo share one build of the tree.
#![warn(missing_docs)]

mod embed;
pub mod files;
pub mod filters;
mod llm;
mod queue;
mod rerank;
pub mod services;
mod settings;
pub mod site;
mod store;
pub mod store_suite;
pub mod users;

pub use embed::{HashEmbedder, Hooked};
pub use llm::{LlmCall, Reply, ScriptedLlm};
pub use queue::MemoryBatches;
pub use rerank::{PromptVerdict, SCRIPTED_FUEL_PER_HIT, ScriptedReranker, Verdict};
pub use settings::{MemoryRecords, MemorySettings, records_keep_each_tenants_shelves_apart};
pub use store::{MemoryStore, Troubled};

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sluice_contract::Tenant;
use sluice_contract::auth::{AuthError, KeyStore, Permission, Principal, digest, new_key};
use sluice_contract::cache::{CacheEntry, CacheStore, Scope};
use sluice_contract::components::{ComponentError, ComponentStorage, StoredVersion};
use sluice_contract::error::CacheError;
use sluice_contract::filter::Filter;
use sluice_contract::usage::{Date, Row, Unwritten, UsageError, UsageStore};

/// The scope of a cached answer made under `corpus_version` by the test LLM (`llm`) with the
/// test embedding model (`minilm`), for 5 sources, nothing else shaping it.
pub fn scope(corpus_version: u64) -> Scope {
    Scope {
        corpus_version,
        llm_model: "llm".into(),
        embed_model: "minilm".into(),
        prompt_version: 1,
        k: 5,
        rerank: None,
        variant: None,
        binding: None,
        access: None,
    }
}

/// `name` as a tenant; panics when it is not a valid one (test data is).
pub fn tenant(name: &str) -> Tenant {
    Tenant::new(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A document `id`, titled and sourced `id`, without metadata.
pub fn document(id: &str) -> sluice_contract::stages::DocumentInfo {
    sluice_contract::stages::DocumentInfo {
        format: None,
        digest: None,
        id: id.into(),
        title: id.into(),
        source: id.into(),
        metadata: Default::default(),
        origin: None,
    }
}

/// A retrieved chunk of a document `id` (its title and source too), with `score` and no
/// vector or metadata: a candidate for a rerank call.
pub fn hit(id: &str, score: f32) -> sluice_contract::stages::Hit {
    sluice_contract::stages::Hit {
        place: Default::default(),
        document: document(id),
        chunk: 0,
        text: format!("text of {id}"),
        tokens: 4,
        vector: vec![],
        score,
    }
}

/// Checks the framing every answer stream has, given its events (name, data) in order: `meta`
/// first, then tokens numbered from 0, then exactly one `done` or `error`, last.
pub fn assert_well_formed(events: &[(&str, &serde_json::Value)]) {
    let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
    assert_eq!(names.first(), Some(&"meta"), "{names:?}");
    assert!(
        matches!(names.last(), Some(&"done") | Some(&"error")),
        "{names:?}"
    );
    assert!(
        names[1..names.len() - 1].iter().all(|n| *n == "token"),
        "{names:?}"
    );
    let tokens = events.iter().filter(|(n, _)| *n == "token");
    for (i, (_, data)) in tokens.enumerate() {
        assert_eq!(data["index"], i as u64, "token indices count from 0");
    }
}

/// Every `/v1` route, each with a body it accepts (the upload's bytes are a placeholder, which
/// a registry would refuse as a component): method, path, body.
pub const V1_ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/v1/answer", r#"{"query":"x"}"#),
    (
        "POST",
        "/v1/documents",
        r#"{"documents":[{"id":"a","text":"x"}]}"#,
    ),
    ("GET", "/v1/documents", ""),
    ("DELETE", "/v1/documents", r#"{"all":true,"confirm":true}"#),
    ("GET", "/v1/documents/a", ""),
    ("DELETE", "/v1/documents/a", ""),
    ("PUT", "/v1/components/rerank", "(component)"),
    (
        "POST",
        "/v1/components/rerank/activate",
        r#"{"version":"v"}"#,
    ),
    ("GET", "/v1/components/rerank", ""),
    ("DELETE", "/v1/components/rerank", ""),
    ("DELETE", "/v1/cache", ""),
    ("GET", "/v1/usage", ""),
    (
        "POST",
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
    ),
    ("GET", "/v1/models", ""),
];

/// API keys in memory: [`MemoryKeys::add`] makes a key for a tenant and returns it.
#[derive(Default)]
pub struct MemoryKeys {
    by_hash: Mutex<HashMap<String, Principal>>,
}

impl MemoryKeys {
    /// A new key for `tenant` with `permissions`; the key itself (only its digest is kept).
    pub fn add(&self, tenant: &str, permissions: &[Permission]) -> String {
        self.add_filtered(tenant, permissions, None)
    }

    /// A new key for `tenant` with `permissions`, bound to a mandatory `filter`.
    pub fn add_filtered(
        &self,
        tenant: &str,
        permissions: &[Permission],
        filter: Option<Filter>,
    ) -> String {
        self.add_principal(Principal {
            filter,
            ..Principal::new(self::tenant(tenant), permissions.to_vec())
        })
    }

    /// A new key standing for `principal` (a filter, a token budget); the key itself.
    pub fn add_principal(&self, principal: Principal) -> String {
        let key = new_key();
        self.by_hash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest(&key), principal);
        key
    }
}

#[async_trait]
impl KeyStore for MemoryKeys {
    async fn find(&self, hash: &str) -> Result<Option<Principal>, AuthError> {
        Ok(self
            .by_hash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(hash)
            .cloned())
    }
}

/// API keys that cannot be checked (the key table unreachable).
pub struct BrokenKeys;

#[async_trait]
impl KeyStore for BrokenKeys {
    async fn find(&self, _: &str) -> Result<Option<Principal>, AuthError> {
        Err(AuthError::Unavailable(
            "injected: key table unreachable".into(),
        ))
    }
}

/// A usage store that fails every call, or (with `hang`) never answers: the usage table
/// unreachable.
pub struct BrokenUsage {
    /// Calls wait for ever instead of failing (the meter's timeout must end them).
    pub hang: bool,
}

#[async_trait]
impl UsageStore for BrokenUsage {
    async fn add(&self, rows: &[Row]) -> Result<(), Unwritten> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        Err(Unwritten {
            rows: rows.to_vec(),
            error: UsageError::Unavailable("injected: usage table unreachable".into()),
        })
    }
    async fn read(&self, _: &Tenant, _: Date, _: Date) -> Result<Vec<Row>, UsageError> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        Err(UsageError::Unavailable(
            "injected: usage table unreachable".into(),
        ))
    }
}

/// A cache backend that fails every call (DynamoDB throttling or unreachable).
pub struct BrokenCache;

#[async_trait]
impl CacheStore for BrokenCache {
    fn backend(&self) -> &'static str {
        "broken"
    }
    fn in_process(&self) -> bool {
        false
    }
    async fn get(&self, _: &Tenant, _: &str) -> Result<Option<CacheEntry>, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn candidates(&self, _: &Tenant, _: &[u32]) -> Result<Vec<CacheEntry>, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn put(&self, _: &CacheEntry) -> Result<(), CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn clear(&self, _: &Tenant, _: Option<&str>) -> Result<usize, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn forget(&self, _: &Tenant, _: &str) -> Result<usize, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
}

/// Component storage that is slow or failing as set, and may be set again while in use: reads
/// of the active pointer take `pointer_ms`, reads of bytes (an upload or its compiled artefact)
/// `fetch_ms`, and with `failing` both fail after their wait. Writes go to `inner` untouched.
pub struct SlowComponents {
    /// The real storage.
    pub inner: std::sync::Arc<dyn ComponentStorage>,
    /// Milliseconds added before every read of a tenant's active pointer.
    pub pointer_ms: AtomicU64,
    /// Milliseconds added before every read of stored bytes.
    pub fetch_ms: AtomicU64,
    /// Every read fails (after its wait).
    pub failing: AtomicBool,
}

impl SlowComponents {
    /// `inner`, neither slow nor failing until fields are set.
    pub fn around(inner: std::sync::Arc<dyn ComponentStorage>) -> Self {
        Self {
            inner,
            pointer_ms: AtomicU64::new(0),
            fetch_ms: AtomicU64::new(0),
            failing: AtomicBool::new(false),
        }
    }

    fn wait(&self, ms: &AtomicU64) -> Result<(), ComponentError> {
        std::thread::sleep(Duration::from_millis(ms.load(Ordering::SeqCst)));
        if self.failing.load(Ordering::SeqCst) {
            return Err(ComponentError::Storage(
                "injected: storage unreachable".into(),
            ));
        }
        Ok(())
    }
}

impl ComponentStorage for SlowComponents {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ComponentError> {
        self.wait(&self.fetch_ms)?;
        self.inner.get(key)
    }
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), ComponentError> {
        self.inner.put(key, bytes)
    }
    fn remove(&self, key: &str) -> Result<(), ComponentError> {
        self.inner.remove(key)
    }
    fn versions(&self, tenant: &Tenant) -> Result<Vec<StoredVersion>, ComponentError> {
        self.inner.versions(tenant)
    }
    fn add_version(&self, tenant: &Tenant, version: &StoredVersion) -> Result<(), ComponentError> {
        self.inner.add_version(tenant, version)
    }
    fn remove_version(&self, tenant: &Tenant, version: &str) -> Result<(), ComponentError> {
        self.inner.remove_version(tenant, version)
    }
    fn active(&self, tenant: &Tenant) -> Result<Option<String>, ComponentError> {
        self.wait(&self.pointer_ms)?;
        self.inner.active(tenant)
    }
    fn set_active(&self, tenant: &Tenant, version: Option<&str>) -> Result<(), ComponentError> {
        self.inner.set_active(tenant, version)
    }
}

/// What every cache backend must do when a user votes an answer down
/// ([`CacheStore::forget`]): the entries holding that answer go, under whatever key and
/// scope; another answer's entry and another tenant's entry of the same answer stay.
pub async fn forgets_an_answer_wherever_it_is_held(store: &dyn CacheStore) {
    use sluice_contract::cache::CachedAnswer;
    let answer = |text: &str| CachedAnswer {
        tokens: vec![text.to_string(), " [1].".into()],
        ..CachedAnswer::one_token("")
    };
    let entry = |who: &str, key: &str, text: &str, binding: Option<&str>| CacheEntry {
        tenant: tenant(who),
        key: key.into(),
        query: key.into(),
        vector: vec![1.0, 0.0, 0.0, 0.0],
        buckets: vec![1; sluice_contract::cache::BANDS],
        scope: Scope {
            binding: binding.map(str::to_string),
            ..scope(1)
        },
        expires_at: u64::MAX / 2,
        answer: answer(text),
    };
    let wrong = answer("Five days");
    let held = [
        entry("acme", "k1", "Five days", None),
        entry("acme", "k2", "Five days", Some("team-a")),
        entry("acme", "k3", "Ten days", None),
        entry("globex", "k1", "Five days", None),
    ];
    for e in &held {
        store.put(e).await.expect("put");
    }
    let forgotten = store.forget(&tenant("acme"), &wrong.digest()).await;
    assert_eq!(
        forgotten.expect("forget"),
        2,
        "both of acme's entries holding it"
    );
    for (who, key, kept) in [
        ("acme", "k1", false),
        ("acme", "k2", false),
        ("acme", "k3", true),
        ("globex", "k1", true),
    ] {
        let found = store.get(&tenant(who), key).await.expect("get");
        assert_eq!(found.is_some(), kept, "{who}/{key}");
    }
    assert_eq!(
        store
            .forget(&tenant("acme"), &wrong.digest())
            .await
            .expect("forget"),
        0
    );
}
