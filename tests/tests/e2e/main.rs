//! The end-to-end tests: the real model, Qdrant Edge, llama-server, moto, the validators and
//! the scripts, each file a module of one test binary. One binary links the workspace's heavy
//! dependencies (tract, wasmtime, qdrant-edge, the AWS SDK) once instead of once per file,
//! which is most of what a fresh machine's test build used to spend linking.
//! Run one file with `cargo test --workspace --test e2e faults::`.

mod answer;
mod auth;
mod aws;
mod bad_input;
mod cache;
mod cache_pairs;
mod components;
mod disconnect;
mod dynamodb_cache;
mod evals;
mod faults;
mod iac;
mod mcp;
mod observability;
mod openai;
mod scripts;
mod sources;
mod wire;
