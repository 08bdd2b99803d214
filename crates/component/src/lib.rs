//! A tenant's loop for a rerank component (`sluice component …`, arguments in [`cli`]): start
//! a crate from the SDK ([`new`], in a workspace of its own anywhere: the SDK and the WIT come
//! from this binary), build it into a component ([`build`]), run it on questions over a corpus
//! without a server and check what each question expects ([`test`]), measure what it costs
//! ([`bench`]); then on a server: upload it ([`upload`]), read a version's log ([`logs`]), run
//! its stored failing calls on a local build ([`replay`]), and all of it on every save
//! ([`dev`]). `test` runs the component as
//! the answer path does (the registry, the same limits, the same candidates with their
//! metadata); `bench` runs it in the sandbox alone, on synthetic candidates or the tenant's
//! own.

mod assemble;
mod bench;
mod build;
pub mod cli;
mod dev;
mod new;
mod questions;
mod remote;
mod test;

pub use bench::{SYNTHETIC, bench};
pub use build::build;
pub use dev::dev;
pub use new::{Kind, new};
pub use questions::{Expect, Question, questions};
pub use remote::{logs, replay, upload};
pub use test::test;

use std::sync::Arc;

use sluice_rerank::{Sandbox, UploadHost};

/// Why a step of the loop could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// A file or folder could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// The file, and what was done to it.
        what: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// What was asked for is not valid: a crate name, a questions file, a context, a folder
    /// that is no component crate; the message names the place.
    #[error("{0}")]
    Invalid(String),
    /// The toolchain could not build the crate into a component (or is missing).
    #[error("{0}")]
    Toolchain(String),
    /// The component is one the registry refuses at upload.
    #[error("{file}: refused at upload: {reason}")]
    Refused {
        /// The `.component.wasm`.
        file: String,
        /// The registry's reason.
        reason: String,
    },
    /// A part of the pipeline the loop runs failed: the model, the store, the ingest, the
    /// registry.
    #[error("{0}")]
    Pipeline(String),
    /// The component failed (or exceeded a limit) on some calls; the report says which.
    #[error("{0}")]
    Failed(String),
}

/// What a step of the loop returns.
pub type Result<T> = std::result::Result<T, LoopError>;

impl LoopError {
    /// An I/O failure on `what`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| LoopError::Io { what, source }
    }
}

/// A part of the pipeline that failed, as the loop's error.
pub(crate) fn pipeline(e: impl std::fmt::Display) -> LoopError {
    LoopError::Pipeline(e.to_string())
}

/// A sandbox under the configured limits whose host runs no model (made-up embeddings, as
/// at upload; words counted as tokens).
fn sandbox(settings: &sluice_app::Settings) -> Result<Sandbox> {
    let host = UploadHost(Box::new(|text: &str| text.split_whitespace().count()));
    Sandbox::new(sluice_rerank::limits(&settings.rerank), Arc::new(host))
        .map_err(|e| LoopError::Pipeline(format!("starting the sandbox: {e:#}")))
}

/// Where a report line could not be written.
fn report(e: std::io::Error) -> LoopError {
    LoopError::io("writing the report")(e)
}
