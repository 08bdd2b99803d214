//! Sluice core: the pipeline and its rules, stage by stage, with no web framework, cloud or
//! engine in it.
//!
//! - [`pipeline`]: the answer path — the scope reads, [`cache`] lookup, embedding, retrieval
//!   and rerank under one deadline, [`prompt`], generation — as a stream of [`sse`] events that
//!   always ends with exactly one `done` or `error`; complete answers are written to the cache
//!   after `done`.
//! - [`ingest`]: the document path — parse, [`chunk`], embed, replace in the store — which
//!   needs no LLM.
//! - the contract between the stages — [`stages`], [`error`], [`codes`], [`tenant`],
//!   [`metadata`], [`filter`], [`fusion`] — is the crate `sluice-contract`, re-exported here;
//!   [`auth`]: API keys and what they allow;
//!   [`breaker`]: the circuit breaker of remote stores; [`trace`]: W3C trace context;
//!   [`config`]: the environment, read and checked once, in one section per owner;
//!   [`usage`]: what each tenant and
//!   key used, and the monthly token budgets.
//!
//! The heavy work lives in adapter crates that implement the traits in [`stages`]:
//! `sluice-embed` (tract + tokenizers), `sluice-retrieve` (Qdrant Edge, Qdrant, Pinecone),
//! `sluice-llm` (OpenAI-compatible streaming), `sluice-cache-dynamodb`, `sluice-rerank`
//! (wasmtime). The wire — routes, auth, quotas, the OpenAI surface, SSE framing, metrics — is
//! `sluice-http`.
#![warn(missing_docs)]

pub mod auth;
pub mod breaker;
pub mod cache;
pub mod chunk;
pub mod config;
pub mod ingest;
pub mod pipeline;
pub mod prompt;
pub mod sse;
pub mod trace;
pub mod usage;

// The contract between the stages lives in its own crate (adapters depend on it alone); the
// engine uses it under the same paths.
pub use sluice_contract::{
    REMEMBERED_TENANTS, Tenant, codes, error, filter, fusion, metadata, settings, sha256_hex,
    stages, tenant,
};

pub use config::Config;

pub use ingest::Ingest;

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
