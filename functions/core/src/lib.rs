//! Sluice core: the request pipeline, stage by stage, with no heavy dependencies.
//!
//! A request flows through these modules in order:
//!
//! 1. [`http`]: routes (and the OpenAI-compatible ones in [`openai`]), [`auth`] (API key → tenant) and [`quota`] (per-tenant rate and
//!    streams), input validation, JSON errors, the SSE response.
//! 2. [`pipeline`]: [`cache`] lookup → embed → retrieve under the retrieval deadline →
//!    [`prompt`] → generate, emitting the [`sse`] events `meta`, `token`…, then exactly one
//!    `done` or `error`; complete answers are written to the cache after `done`.
//! 3. [`ingest`]: documents in — parse, [`chunk`], embed, replace in the store.
//!
//! The heavy work lives in adapter crates that implement the traits in [`stages`]:
//! `sluice-embed` (tract + tokenizers), `sluice-retrieve` (Qdrant Edge), `sluice-llm`
//! (OpenAI-compatible streaming), `sluice-cache` (DynamoDB), `sluice-sandbox` (wasmtime). [`config`] reads and validates the environment.
#![warn(missing_docs)]

pub mod auth;
pub mod breaker;
pub mod cache;
pub mod chunk;
pub mod config;
pub mod error;
pub mod http;
pub mod ingest;
pub mod metrics;
pub mod openai;
pub mod pipeline;
pub mod prompt;
pub mod quota;
pub mod sse;
pub mod stages;
pub mod trace;

pub use config::Config;

/// Most tenants (or API keys) any per-tenant memory of a process holds — the quota table, the
/// rerank registry's components, a remote store's corpus versions, the key look-ups — before
/// it forgets the ones least worth keeping: names come from outside, so nothing keyed by them
/// may grow without bound.
pub const REMEMBERED_TENANTS: usize = 10_000;
pub use pipeline::Pipeline;
