//! The contract, in-process: the router called directly (`tower::ServiceExt::oneshot`, no
//! socket) over the pipeline assembled as `sluice-app` assembles it, with test doubles
//! (`sluice-testkit`) in place of the model, the store, the LLM and the key store. What these
//! tests check is the specification of the API — the stream's events and fields, every
//! degraded reason, every error code, auth, limits, the cache's rules, the OpenAI shapes — and
//! none of it needs a real dependency; the end-to-end tests (`tests/`) keep the real ones.

mod access;
mod access_property;
mod bound;
mod cache;
mod codes;
mod degraded;
mod documents;
mod doors;
mod end_users;
mod endings;
mod evals;
mod feedback;
mod files;
mod filters;
mod fusion;
mod gate;
mod grounding;
mod insights;
mod kit;
mod mcp;
mod openai;
mod prompt;
mod rerank;
mod search;
mod serve;
mod settings;
mod sources;
mod stream;
mod usage;
