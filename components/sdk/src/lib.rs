//! Write a Sluice rerank component in Rust.
//!
//! ```ignore
//! use sluice_rerank_sdk::{Candidate, Guest, Scored, export_reranker};
//!
//! struct MyReranker;
//! impl Guest for MyReranker {
//!     fn rerank(query: String, candidates: Vec<Candidate>) -> Result<Vec<Scored>, String> {
//!         Ok(sluice_rerank_sdk::scores(candidates.iter().map(|c| c.score)))
//!     }
//! }
//! export_reranker!(MyReranker);
//! ```
//!
//! Build with `scripts/build-components.sh DIR`; upload the `.component.wasm` it prints.

/// The generated bindings of the `reranker` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "reranker",
        path: "../../wit/rerank",
        pub_export_macro: true,
        export_macro_name: "export_reranker",
        default_bindings_module: "sluice_rerank_sdk::bindings",
    });
}

pub use bindings::sluice::rerank::host::{Level, count_tokens, embed, log};
pub use bindings::{Candidate, Guest, Scored, export_reranker};

/// One [`Scored`] per candidate, in input order, from an iterator of scores.
pub fn scores(values: impl IntoIterator<Item = f32>) -> Vec<Scored> {
    values
        .into_iter()
        .enumerate()
        .map(|(index, score)| Scored { index: index as u32, score })
        .collect()
}
