//! What passes between Sluice's stages, and nothing else: an adapter author reads this crate
//! to know the whole contract.
//!
//! - [`stages`]: the traits each stage's adapter implements (`Embedder`, `Store`, `Llm`,
//!   `Reranker`, `ComponentStorage`) and the values passed between them;
//! - [`error`]: each stage's error type;
//! - [`codes`]: every error code and degraded reason a client can see, with its status;
//! - [`document`]: documents as clients send them, and what ingesting or deleting reports;
//! - [`tenant`]: the tenant name, checked where it comes in;
//! - [`metadata`] and [`filter`]: what a document says about itself, and which documents an
//!   answer may use;
//! - [`fusion`]: how the dense and BM25 halves of a search are fused, per tenant;
//! - [`cancel`]: how CPU work on other threads stops when its request ends;
//! - [`settings`]: how each owner of a configuration section reads and checks its variables;
//! - [`access`]: end users, their principals, and the documents they may see;
//! - [`evals`]: a tenant's evaluation sets, and the records store they and their runs are
//!   kept in;
//! - [`cache`], [`auth`] and [`usage`]: the storage boundaries of the answer cache, the API
//!   keys and usage — what a backend keeps and answers (the rules over them are the engine's).
//!
//! The pipeline that calls the stages, and its rules (cache, prompt, ingest, usage, auth),
//! are `sluice-core`'s; the adapters depend on this crate alone for what they implement, so
//! that a change in the engine does not reach them.
#![warn(missing_docs)]

pub mod access;
pub mod auth;
pub mod cache;
pub mod cancel;
pub mod codes;
pub mod components;
pub mod document;
pub mod error;
pub mod evals;
pub mod filter;
pub mod fusion;
pub mod grounding;
pub mod metadata;
pub mod net;
pub mod random;
pub mod search;
pub mod settings;
pub mod sources;
pub mod sse;
pub mod stages;
pub mod tenant;
pub mod tenant_settings;
pub mod usage;

pub use tenant::Tenant;

/// Most tenants (or API keys) any per-tenant memory of a process holds — the quota table, the
/// rerank registry's components, a remote store's corpus versions, the key look-ups — before
/// it forgets the ones least worth keeping: names come from outside, so nothing keyed by them
/// may grow without bound.
pub const REMEMBERED_TENANTS: usize = 10_000;

/// Makes room in a per-tenant memory before `tenant` is added, so that it never holds more
/// than [`REMEMBERED_TENANTS`]: when it is full (and `tenant` is not in it), the entries
/// `stale` says are of no more use go first, then the half `touched` longest ago.
pub fn make_room<V, T: Ord + Copy>(
    memory: &mut std::collections::HashMap<Tenant, V>,
    tenant: &Tenant,
    stale: impl Fn(&V) -> bool,
    touched: impl Fn(&V) -> T,
) {
    if memory.len() < REMEMBERED_TENANTS || memory.contains_key(tenant) {
        return;
    }
    memory.retain(|_, v| !stale(v));
    if memory.len() >= REMEMBERED_TENANTS {
        let mut times: Vec<T> = memory.values().map(&touched).collect();
        times.sort_unstable();
        let cut = times[times.len() / 2];
        memory.retain(|_, v| touched(v) > cut);
    }
}

/// Hex SHA-256 of `bytes`: cache keys, filter digests, key digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `text` percent-encoded for a path segment or a query value: every byte outside the
/// unreserved set escaped, `/` too (a document id as the path's tail — an id such as a file's
/// absolute path begins with one, which a path would lose — or a `filter` or `cursor` value).
pub fn escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
