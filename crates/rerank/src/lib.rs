//! Tenant components on wasmtime: the `reranker` world of `sluice:rerank@0.2.0`
//! (`wit/rerank-0.2`) and, for components built before it, of `@0.1.0` (`wit/rerank`); and
//! the `assembler` world of `sluice:prompt@0.1.0` (`wit/prompt`), a tenant's own prompt
//! assembly, run under the same limits (`prompt`: its smoke input and the checks of what it
//! returns).
//!
//! - Both worlds are linked: a component runs in the one it was built for (found at upload
//!   by its export's type). The pipeline speaks 0.2; a 0.1 component gets the same
//!   candidates without their metadata and chunk index, no request context, and cannot drop.
//! - One [`Engine`] per process, with the pooling allocator (instantiation reuses
//!   pre-allocated slots instead of mapping memory per request), fuel metering and epoch
//!   interruption. A background thread advances the epoch every millisecond.
//! - A component is validated and compiled once, at upload ([`Sandbox::compile`]); the
//!   compiled artefact can be stored and loaded again without recompiling
//!   ([`Sandbox::load`]). Either way the result is a [`Prepared`] component: an
//!   `InstancePre` with every import already resolved.
//! - Every call gets a fresh [`Store`] with its own fuel, epoch deadline and [`StoreLimits`],
//!   so nothing survives from one request (or tenant) to the next.
//! - Host calls (`embed`, `count-tokens`, `log`) run host code, which neither fuel nor epochs
//!   stop — and straight-line code calling the host has no loop or function entry where the
//!   epoch could interrupt it. So each rerank call has a budget of host work ([`ComponentLimits`]):
//!   host calls, bytes passed to the host (capped as wasmtime copies them, by its hostcall
//!   fuel), texts, bytes tokenised, log lines and bytes. The first host call that is late,
//!   over the call count or over the copy budget traps, before any host work. So one call
//!   costs the host at most: copying 2 × [`ComponentLimits::max_host_copy_bytes`], tokenising
//!   [`ComponentLimits::max_host_bytes`], the model's embeddings of the texts begun before the deadline
//!   (the last at most one text of 256 tokens), [`ComponentLimits::max_host_calls`] entries into the
//!   host, and a few log lines (`docs/security.md` states the measured bound).
//! - The output is validated: every candidate scored (finitely) or, in 0.2, dropped, once.
//!
//! The crate, a file per role: `engine` ([`Sandbox`]) (the wasmtime engine, compiling and calling
//! a component), `limits` ([`ComponentLimits`], each explained where it is set), `host` (the
//! host calls and their budget), `worlds` (the two WIT worlds and what each component is
//! given), and the registry of tenants' components apart (`registry`, over a
//! [`ComponentStorage`](sluice_contract::components::ComponentStorage)).
#![warn(missing_docs)]

use std::time::Duration;

use thiserror::Error;

pub mod complexity;
pub mod config;
pub mod contexts;
mod engine;
mod host;
mod limits;
pub mod measure;
mod prompt;
mod registry;
mod smoke;
mod worlds;

pub use complexity::Complexity;
pub use config::RerankConfig;
pub use engine::{Call, Prepared, Sandbox};
pub use host::{CallCost, HostServices, HostUsage, ModelHost, UploadHost, WALL_DEADLINES};
pub use limits::{ComponentLimits, memory_reset};
pub use registry::{Disk, Registry, candidates, context_entries, limits};
pub use worlds::{
    Candidate, ContextEntry, Date, Level, Message, MetaField, MetaValue, PromptInput,
    PromptSettings, Ranking, Scored, Source, Turn, WORLD_0_1, WORLD_0_2, WORLD_PROMPT, kind_of,
};

/// The bytes of `NAME.component.wasm` as `scripts/build-components.sh` leaves it in
/// `SLUICE_COMPONENTS_DIR`, else `$SLUICE_HOME/components`, else `~/.cache/sluice/components`.
/// The error names the file and how to build it.
pub fn built_component(name: &str) -> Result<Vec<u8>, String> {
    use sluice_contract::settings::{env, home};
    let dir = env("SLUICE_COMPONENTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| home(&env).join("components"));
    let path = dir.join(format!("{name}.component.wasm"));
    std::fs::read(&path).map_err(|e| {
        format!(
            "{}: {e} (run `scripts/build-components.sh`, or `make test`)",
            path.display()
        )
    })
}

/// Why a component was refused at upload. Each message says what to fix.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum UploadError {
    /// Over [`ComponentLimits::max_component_bytes`].
    #[error("component is {size} bytes; the limit is {limit}")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Its functions are bigger than the compiler may be asked to compile
    /// ([`ComponentLimits::complexity`]).
    #[error("component is too complex to compile: {0}")]
    TooComplex(String),
    /// Not a WebAssembly component (a core module, or not wasm at all).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// It imports something other than the `sluice:rerank` host interface.
    #[error(
        "component imports {0:?}; only sluice:rerank/host, sluice:rerank/types, sluice:prompt/host and sluice:prompt/types are allowed (no WASI)"
    )]
    ForbiddenImport(String),
    /// It implements none of the worlds (rerank 0.2 or 0.1, prompt 0.1), or not the one the
    /// route it was uploaded to takes.
    #[error(
        "component does not implement the sluice:rerank/reranker world (0.2.0 or 0.1.0) or sluice:prompt/assembler (0.1.0): {0}"
    )]
    WrongWorld(String),
    /// It failed its smoke run under the limits, under the context named (the smoke run's
    /// own, or one the component declares: [`contexts`]).
    #[error("component failed its smoke run{context}: {error}")]
    SmokeRun {
        /// ` under the declared context {…}`, or nothing for the smoke run's own.
        context: String,
        /// How it failed.
        error: RerankError,
    },
}

/// Why a call failed; the pipeline then keeps the fused order.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RerankError {
    /// The input is over the limits (too many candidates, text too long).
    #[error("input over the limits: {0}")]
    Input(String),
    /// The fuel budget ran out.
    #[error("out of fuel ({0} instructions)")]
    OutOfFuel(u64),
    /// The deadline (the call's CPU time, or ten times it of wall time) passed.
    #[error("deadline of {0:?} of CPU time passed")]
    Deadline(Duration),
    /// The component tried to grow memory past the limit.
    #[error("memory limit of {0} bytes hit")]
    Memory(usize),
    /// The component trapped.
    #[error("trap: {0}")]
    Trap(String),
    /// The component panicked: the message and location its panic hook reported.
    #[error("{0}")]
    Panic(String),
    /// The component returned an error of its own.
    #[error("component error: {0}")]
    Guest(String),
    /// The result does not score (finitely) or drop each candidate exactly once.
    #[error("invalid output: {0}")]
    InvalidOutput(String),
    /// A host call went past the call's host budget (or its deadline) where the host function
    /// has no error to return (`count-tokens`): the call was stopped.
    #[error("host budget exceeded: {0}")]
    HostBudget(String),
}

impl RerankError {
    /// The failure as the tenant is shown it: its kind, and its message (for an error of the
    /// component's own, just the component's string).
    pub fn failure(&self) -> sluice_contract::stages::RerankFailure {
        use sluice_contract::stages::{FailureKind as K, RerankFailure};
        match self {
            RerankError::Input(why) => RerankFailure::new(K::Input, why.clone()),
            RerankError::OutOfFuel(_) => RerankFailure::new(K::Fuel, self.to_string()),
            RerankError::Deadline(_) => RerankFailure::new(K::Deadline, self.to_string()),
            RerankError::Memory(_) => RerankFailure::new(K::Memory, self.to_string()),
            RerankError::Trap(what) => RerankFailure::new(K::Trap, what.clone()),
            RerankError::Panic(what) => RerankFailure::new(K::Panic, what.clone()),
            RerankError::Guest(own) => RerankFailure::new(K::ComponentError, own.clone()),
            RerankError::InvalidOutput(why) => RerankFailure::new(K::InvalidOutput, why.clone()),
            RerankError::HostBudget(why) => RerankFailure::new(K::HostBudget, why.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{is_core_module, order};

    fn s(index: u32, score: f32) -> Scored {
        Scored { index, score }
    }

    #[test]
    fn component_scores_become_an_order_or_an_invalid_output_error() {
        assert_eq!(
            order(&[s(0, 0.1), s(1, 0.9), s(2, 0.1)], &[], 3).unwrap(),
            vec![(1, 0.9), (0, 0.1), (2, 0.1)]
        );
        assert_eq!(
            order(&[s(2, 0.1), s(0, 0.9)], &[1], 3).unwrap(),
            vec![(0, 0.9), (2, 0.1)]
        );
        let e = order(&[s(0, 1.0), s(0, 2.0)], &[], 2).unwrap_err();
        assert!(
            matches!(&e, RerankError::InvalidOutput(m) if m.contains("scored twice")),
            "{e}"
        );
    }

    #[test]
    fn the_preamble_tells_modules_from_components() {
        assert!(is_core_module(b"\0asm\x01\0\0\0"));
        assert!(!is_core_module(b"\0asm\x0d\0\x01\0"));
        assert!(!is_core_module(b"(component)"));
    }
}
