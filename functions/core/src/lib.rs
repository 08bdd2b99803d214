//! Sluice core: the pipeline and its rules, stage by stage, with no web framework, cloud or
//! engine in it.
//!
//! - [`pipeline`]: the answer path — the scope reads, [`cache`] lookup, embedding, retrieval
//!   and rerank under one deadline, [`prompt`], generation — as a stream of [`sse`] events that
//!   always ends with exactly one `done` or `error`; complete answers are written to the cache
//!   after `done`.
//! - [`ingest`]: the document path — parse, [`chunk`], embed, replace in the store — which
//!   needs no LLM.
//! - [`stages`]: the traits each stage's adapter implements, and the values between them;
//!   [`metadata`] and [`filter`]: what a document says about itself, and which documents an
//!   answer may use; [`codes`]: every code a client can see; [`auth`]: API keys and what they allow;
//!   [`breaker`]: the circuit breaker of remote stores; [`trace`]: W3C trace context;
//!   [`config`]: the environment, read and checked once, in one section per owner;
//!   [`tenant`]: the tenant name, checked where it comes in; [`usage`]: what each tenant and
//!   key used, and the monthly token budgets.
//!
//! The heavy work lives in adapter crates that implement the traits in [`stages`]:
//! `sluice-embed` (tract + tokenizers), `sluice-retrieve` (Qdrant Edge, Qdrant, Pinecone),
//! `sluice-llm` (OpenAI-compatible streaming), `sluice-cache` (DynamoDB), `sluice-sandbox`
//! (wasmtime). The wire — routes, auth, quotas, the OpenAI surface, SSE framing, metrics — is
//! `sluice-http`.
#![warn(missing_docs)]

pub mod auth;
pub mod breaker;
pub mod cache;
pub mod chunk;
pub mod codes;
pub mod config;
pub mod error;
pub mod filter;
pub mod fusion;
pub mod ingest;
pub mod metadata;
pub mod pipeline;
pub mod prompt;
pub mod sse;
pub mod stages;
pub mod tenant;
pub mod trace;
pub mod usage;

pub use config::Config;
pub use tenant::Tenant;

/// Most tenants (or API keys) any per-tenant memory of a process holds — the quota table, the
/// rerank registry's components, a remote store's corpus versions, the key look-ups — before
/// it forgets the ones least worth keeping: names come from outside, so nothing keyed by them
/// may grow without bound.
pub const REMEMBERED_TENANTS: usize = 10_000;
pub use ingest::Ingest;

/// Hex SHA-256 of `bytes`: cache keys, filter digests, key digests.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
pub use pipeline::Pipeline;

/// Replaces the file at `path` with `text` whole (its folder made if missing): written beside
/// it, then renamed over it, so that a reader never sees half a file (the key file, the usage
/// file).
pub fn replace_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let part = path.with_extension("part");
    std::fs::write(&part, text)?;
    std::fs::rename(&part, path)
}
