//! Sluice core: the engine — the pipeline and its rules, stage by stage, with no web
//! framework, cloud, engine or file parser in it.
//!
//! - [`pipeline`]: the answer path — the scope reads, [`cache`] lookup, embedding, retrieval
//!   and rerank under one deadline, [`prompt`], generation — as a stream of the contract's
//!   events (`sluice_contract::sse`) that always ends with exactly one `done` or `error`;
//!   complete answers are written to the cache after `done`.
//! - [`grounding`]: the sources' evidence sentences for the question, and the verdict on
//!   every sentence of an answer; [`language`]: what both it and the cache's guard know of
//!   English words (normalisation, canonical words, WordNet).
//! - [`ingest`]: the document path — validate, [`chunk`], embed, replace in the store — which
//!   needs no LLM (files become documents before: `sluice-convert`).
//! - [`quality`]: the retrieval metrics, and an evaluation set's questions scored from what
//!   the pipeline gave for them.
//! - [`trace`]: W3C trace context; [`config`]: the engine's sections of the environment;
//!   [`usage`]: what each tenant and key used, and the monthly token budgets; [`tenants`]:
//!   each tenant's settings as the pipeline reads them.
//!
//! What passes between the stages — traits, errors, codes, tenants, documents, the stream's
//! events — is the crate `sluice-contract`, used under its own paths. The heavy work lives in
//! adapter crates that implement its traits: `sluice-embed` (tract + tokenizers),
//! `sluice-retrieve` (Qdrant Edge, Qdrant, Pinecone), `sluice-llm` (OpenAI-compatible
//! streaming), `sluice-cache-dynamodb`, `sluice-rerank` (wasmtime); the local backends of
//! `sluice serve` (key, usage and settings files, the in-memory cache) are `sluice-local`. The wire —
//! routes, auth, quotas, the OpenAI surface, SSE framing, metrics — is `sluice-http`.
#![warn(missing_docs)]

pub mod cache;
pub mod chunk;
pub mod config;
pub mod grounding;
pub mod ingest;
pub mod language;
pub mod pipeline;
pub mod prompt;
pub mod quality;
pub mod tenants;
pub mod trace;
pub mod usage;

pub use config::Config;

pub use ingest::Ingest;

pub use pipeline::Pipeline;
