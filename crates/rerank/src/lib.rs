//! Tenant rerank components on wasmtime: the `reranker` world of `sluice:rerank@0.2.0`
//! (`wit/rerank-0.2`) and, for components built before it, of `@0.1.0` (`wit/rerank`).
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
#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_contract::stages::rerank_order;
use thiserror::Error;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits,
    StoreLimitsBuilder, Trap,
};

pub mod complexity;
pub mod config;
pub mod measure;
mod registry;

pub use complexity::Complexity;
pub use config::RerankConfig;
use registry::truncate;
pub use registry::{Disk, ModelHost, Registry, UploadHost, candidates, context_entries, limits};

// Generated from the WIT; its docs live in `wit/rerank-0.2/rerank.wit`. Host functions may
// trap (`trappable`): that is how a call over its host budget is stopped where the WIT gives
// the function no error to return.
#[allow(missing_docs)]
mod bindings {
    wasmtime::component::bindgen!({
        world: "reranker",
        path: "../../wit/rerank-0.2",
        imports: { default: trappable },
    });
}

// The frozen 0.1 world (`wit/rerank/rerank.wit`), for components built before 0.2.
#[allow(missing_docs)]
mod bindings_0_1 {
    wasmtime::component::bindgen!({
        world: "reranker",
        path: "../../wit/rerank",
        imports: { default: trappable },
    });
}

pub use bindings::sluice::rerank::host::Level;
pub use bindings::sluice::rerank::types::{
    Candidate, ContextEntry, Date, MetaField, MetaValue, Ranking, Scored,
};
use bindings::{Reranker, RerankerPre};

/// The bytes of `NAME.component.wasm` as `scripts/build-components.sh` leaves it in
/// `SLUICE_COMPONENTS_DIR`, else `$SLUICE_HOME/components`, else `~/.cache/sluice/components`.
/// The error names the file and how to build it.
pub fn built_component(name: &str) -> Result<Vec<u8>, String> {
    let dir = std::env::var_os("SLUICE_COMPONENTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("SLUICE_HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/sluice")
                });
            home.join("components")
        });
    let path = dir.join(format!("{name}.component.wasm"));
    std::fs::read(&path).map_err(|e| {
        format!(
            "{}: {e} (run `scripts/build-components.sh`, or `make test`)",
            path.display()
        )
    })
}

/// Linear memory a slot keeps resident between calls where dirty pages can be found
/// ([`pagemap_scan_supported`]): a Rust component's stack, data and first heap pages. At most
/// this much per slot (64 slots) stays resident after a call that touched more.
const KEEP_RESIDENT: usize = 2 << 20;

/// How a pool slot's linear memory is reset between calls on this machine: `"pagemap_scan"`
/// (only the pages the call dirtied, the low 2 MiB kept resident; Linux 6.7+) or `"madvise"`
/// (the slot given back to the kernel, zero on the next touch).
pub fn memory_reset() -> &'static str {
    if pagemap_scan_supported() {
        "pagemap_scan"
    } else {
        "madvise"
    }
}

/// Whether the kernel has the `PAGEMAP_SCAN` ioctl (Linux 6.7 and later).
fn pagemap_scan_supported() -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 7)
}

/// How often the epoch advances: the unit of [`ComponentLimits::deadline`].
const EPOCH_TICK: Duration = Duration::from_millis(1);
/// Dimension of the made-up vectors of the upload smoke run (the host model's).
pub(crate) const SMOKE_DIM: usize = 384;
/// Interface names a component may import (any patch release of 0.1 or 0.2).
const ALLOWED_IMPORTS: [&str; 4] = [
    "sluice:rerank/host@0.2.",
    "sluice:rerank/types@0.2.",
    "sluice:rerank/host@0.1.",
    "sluice:rerank/types@0.1.",
];
/// The world a component implements, as [`Prepared::world`] names it.
pub const WORLD_0_2: &str = "sluice:rerank/reranker@0.2.0";
/// The world of components built before 0.2.
pub const WORLD_0_1: &str = "sluice:rerank/reranker@0.1.0";

/// The limits of every call. Each has a default and can be changed by the operator.
#[derive(Debug, Clone)]
pub struct ComponentLimits {
    /// Largest linear memory a component may grow to (16 MiB; Shopify Functions allow 10 MB).
    pub memory_bytes: usize,
    /// Instructions a call may execute, counted by fuel (deterministic, whatever the load).
    pub fuel: u64,
    /// Wall-clock budget of a call, enforced by epoch interruption.
    pub deadline: Duration,
    /// Most candidates passed in one call.
    pub max_candidates: usize,
    /// Most request-context entries passed in one call (the API caps them too).
    pub max_context_entries: usize,
    /// Longest candidate text, in bytes.
    pub max_text_bytes: usize,
    /// Most texts a call may ask the host to embed (summed over its `embed` calls; texts
    /// whose vectors the host already has are free).
    pub max_embed_texts: usize,
    /// Most bytes of text a call may have the host tokenise: `count-tokens` arguments and
    /// new texts to `embed`, summed over the call.
    pub max_host_bytes: usize,
    /// Most `log` lines a call may write; later ones are dropped (and counted).
    pub max_log_lines: usize,
    /// Most bytes of `log` messages a call may write; the rest is dropped.
    pub max_log_bytes: usize,
    /// Most host calls (`log`, `embed`, `count-tokens`) one rerank call may make: the next
    /// one traps. Straight-line code calling the host has no loop or function entry for the
    /// epoch to interrupt, so this, not the deadline, is what ends a flood of cheap calls.
    pub max_host_calls: usize,
    /// Most bytes one rerank call may pass to the host, summed over its host calls (strings
    /// and lists are copied out of the guest's memory before the host function runs). One
    /// host call may pass at most this much (wasmtime's hostcall fuel, checked as it copies,
    /// so a larger argument is never copied whole); a call that takes the total past it
    /// traps. So a call copies at most twice this.
    pub max_host_copy_bytes: usize,
    /// Largest component accepted at upload.
    pub max_component_bytes: usize,
    /// What an upload's functions may ask of the compiler ([`complexity`]).
    pub complexity: Complexity,
}

impl Default for ComponentLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 16 << 20,
            // About 10-30 ms of straight-line wasm: ample for scoring 200 candidates, small
            // enough that a runaway loop stops long before anyone notices.
            fuel: 50_000_000,
            deadline: Duration::from_millis(5),
            max_candidates: 200,
            max_context_entries: sluice_contract::stages::MAX_CONTEXT_ENTRIES,
            max_text_bytes: 8 << 10,
            max_embed_texts: 64,
            // About 4 ms of tokenising on one core: a deadline's worth.
            max_host_bytes: 64 << 10,
            max_log_lines: 32,
            max_log_bytes: 4 << 10,
            // A component that logs or counts tokens once per candidate stays well within it.
            max_host_calls: 256,
            // Every candidate's text passed back to `embed` once (200 × 8 KiB) fits.
            max_host_copy_bytes: 2 << 20,
            max_component_bytes: 2 << 20,
            complexity: Complexity::default(),
        }
    }
}

/// What the host lends a component (the `host` interface, less `log`).
pub trait HostServices: Send + Sync {
    /// Unit-length embeddings of `texts`.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
    /// Tokens in `text`.
    fn count_tokens(&self, text: &str) -> u32;
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
        "component imports {0:?}; only sluice:rerank/host and sluice:rerank/types are allowed (no WASI)"
    )]
    ForbiddenImport(String),
    /// It implements neither `reranker` world (0.2 nor 0.1).
    #[error("component does not implement the sluice:rerank/reranker world (0.2.0 or 0.1.0): {0}")]
    WrongWorld(String),
    /// It failed its smoke run under the limits.
    #[error("component failed its smoke run: {0}")]
    SmokeRun(RerankError),
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
    /// The wall-clock deadline passed.
    #[error("deadline of {0:?} passed")]
    Deadline(Duration),
    /// The component tried to grow memory past the limit.
    #[error("memory limit of {0} bytes hit")]
    Memory(usize),
    /// The component trapped.
    #[error("trap: {0}")]
    Trap(String),
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
            RerankError::Guest(own) => RerankFailure::new(K::ComponentError, own.clone()),
            RerankError::InvalidOutput(why) => RerankFailure::new(K::InvalidOutput, why.clone()),
            RerankError::HostBudget(why) => RerankFailure::new(K::HostBudget, why.clone()),
        }
    }
}

/// Host work a call asked for (and what it was refused), for [`CallCost`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostUsage {
    /// Texts the host model embedded (texts whose vectors were lent are not counted).
    pub embedded_texts: usize,
    /// Bytes of text the host tokenised (`count-tokens`, and new texts to embed).
    pub tokenised_bytes: usize,
    /// `log` lines written.
    pub log_lines: usize,
    /// Host calls refused: over a budget, or after the deadline (log lines dropped too).
    pub refused: usize,
}

/// What one call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCost {
    /// Fuel consumed (instructions, about).
    pub fuel: u64,
    /// Wall time of the call, host work included.
    pub wall: Duration,
    /// Host work done for it.
    pub host: HostUsage,
}

/// The error a host function returns to stop a call that is over its host budget.
#[derive(Debug, Error)]
#[error("{0}")]
struct OverBudget(String);

/// Per-call state: limits, host services and what is left of the host budget; never shared
/// between calls.
struct CallState {
    limits: StoreLimits,
    host: Arc<dyn HostServices>,
    /// Host work left to this call.
    texts_left: usize,
    bytes_left: usize,
    log_lines_left: usize,
    log_bytes_left: usize,
    /// Host calls, and bytes passed to the host, left to this call.
    calls_left: usize,
    copy_left: usize,
    /// When the call started, and its wall-clock budget: no host work starts after it.
    started: Instant,
    deadline: Duration,
    used: HostUsage,
    /// Embeddings the host already has (the query's, the candidates'): `embed` of these
    /// texts costs no model run and no budget.
    known: HashMap<String, Vec<f32>>,
}

impl CallState {
    fn late(&self) -> bool {
        self.started.elapsed() >= self.deadline
    }

    /// Admits a host call that was passed `copied` bytes, or stops the component with a trap:
    /// once the call is late, past its number of host calls, or past the bytes it may pass
    /// to the host. Every host function starts here, before any work.
    fn enter(&mut self, what: &str, copied: usize) -> wasmtime::Result<()> {
        let why = if self.late() {
            Some(format!(
                "{what}: the call's deadline of {:?} has passed",
                self.deadline
            ))
        } else if self.calls_left == 0 {
            Some(format!("{what}: this call has made all its host calls"))
        } else if copied > self.copy_left {
            Some(format!(
                "{what}: {copied} bytes passed to the host, {} left of this call's copy budget",
                self.copy_left
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(wasmtime::Error::new(OverBudget(self.refuse(why))));
        }
        self.calls_left -= 1;
        self.copy_left -= copied;
        Ok(())
    }

    /// Refuses a host call: counted, and the message for the guest (or the trap).
    fn refuse(&mut self, message: String) -> String {
        self.used.refused += 1;
        message
    }

    /// Takes `bytes` of tokenising from the budget, or says why not.
    fn take_bytes(&mut self, bytes: usize, what: &str) -> Result<(), String> {
        if self.late() {
            return Err(self.refuse(format!(
                "{what}: the call's deadline of {:?} has passed",
                self.deadline
            )));
        }
        if bytes > self.bytes_left {
            let left = self.bytes_left;
            return Err(self.refuse(format!(
                "{what}: {bytes} bytes of text asked, {left} left in this call's host budget"
            )));
        }
        self.bytes_left -= bytes;
        self.used.tokenised_bytes += bytes;
        Ok(())
    }
}

impl bindings::sluice::rerank::types::Host for CallState {}
impl bindings_0_1::sluice::rerank::types::Host for CallState {}

/// The 0.1 host interface is the 0.2 one: same functions, same budgets.
impl bindings_0_1::sluice::rerank::host::Host for CallState {
    fn log(
        &mut self,
        level: bindings_0_1::sluice::rerank::host::Level,
        message: String,
    ) -> wasmtime::Result<()> {
        use bindings_0_1::sluice::rerank::host::Level as Old;
        let level = match level {
            Old::Debug => Level::Debug,
            Old::Info => Level::Info,
            Old::Warn => Level::Warn,
            Old::Error => Level::Error,
        };
        bindings::sluice::rerank::host::Host::log(self, level, message)
    }

    fn embed(&mut self, texts: Vec<String>) -> wasmtime::Result<Result<Vec<Vec<f32>>, String>> {
        bindings::sluice::rerank::host::Host::embed(self, texts)
    }

    fn count_tokens(&mut self, text: String) -> wasmtime::Result<u32> {
        bindings::sluice::rerank::host::Host::count_tokens(self, text)
    }
}

impl bindings::sluice::rerank::host::Host for CallState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        self.enter("log", message.len())?;
        if self.log_lines_left == 0 || self.log_bytes_left == 0 {
            self.used.refused += 1;
            return Ok(());
        }
        let message = truncate(&message, self.log_bytes_left.min(1024));
        self.log_lines_left -= 1;
        self.log_bytes_left -= message.len();
        self.used.log_lines += 1;
        match level {
            Level::Debug => tracing::debug!(target: "component", "{message}"),
            Level::Info => tracing::info!(target: "component", "{message}"),
            Level::Warn => tracing::warn!(target: "component", "{message}"),
            Level::Error => tracing::error!(target: "component", "{message}"),
        }
        Ok(())
    }

    fn embed(&mut self, texts: Vec<String>) -> wasmtime::Result<Result<Vec<Vec<f32>>, String>> {
        // Each text: its bytes and its (pointer, length) pair in the list.
        let copied = texts.iter().map(|t| t.len() + 8).sum();
        self.enter("embed", copied)?;
        let unknown: Vec<&str> = texts
            .iter()
            .filter(|t| !self.known.contains_key(t.as_str()))
            .map(String::as_str)
            .collect();
        if unknown.len() > self.texts_left {
            let left = self.texts_left;
            return Ok(Err(self.refuse(format!(
                "embed budget exceeded: {} new texts asked, {left} left in this call",
                unknown.len()
            ))));
        }
        let bytes = unknown.iter().map(|t| t.len()).sum();
        if let Err(e) = self.take_bytes(bytes, "embed") {
            return Ok(Err(e));
        }
        self.texts_left -= unknown.len();
        // One text at a time, so that no model run starts once the deadline has passed.
        let mut fresh = Vec::with_capacity(unknown.len());
        for text in &unknown {
            if self.late() {
                let message = format!(
                    "embed: the call's deadline of {:?} passed after {} of {} new texts",
                    self.deadline,
                    fresh.len(),
                    unknown.len()
                );
                return Ok(Err(self.refuse(message)));
            }
            match self.host.embed(&[text]) {
                Ok(mut v) if v.len() == 1 => fresh.push(v.remove(0)),
                Ok(_) => return Ok(Err("the host model returned no vector".to_string())),
                Err(e) => return Ok(Err(e)),
            }
            self.used.embedded_texts += 1;
        }
        let mut fresh = fresh.into_iter();
        Ok(texts
            .iter()
            .map(|t| match self.known.get(t) {
                Some(v) => Ok(v.clone()),
                None => fresh
                    .next()
                    .ok_or_else(|| "the host model returned too few vectors".to_string()),
            })
            .collect())
    }

    fn count_tokens(&mut self, text: String) -> wasmtime::Result<u32> {
        self.enter("count-tokens", text.len())?;
        match self.take_bytes(text.len(), "count-tokens") {
            Ok(()) => Ok(self.host.count_tokens(&text)),
            Err(e) => Err(wasmtime::Error::new(OverBudget(e))),
        }
    }
}

/// A compiled component, ready to instantiate.
#[derive(Clone)]
pub struct Prepared {
    pre: Pre,
    /// The compiled artefact, for storage (load it again with [`Sandbox::load`]).
    pub artifact: Arc<Vec<u8>>,
}

/// The world a component was built for, with its imports resolved.
#[derive(Clone)]
enum Pre {
    V0_2(RerankerPre<CallState>),
    V0_1(bindings_0_1::RerankerPre<CallState>),
}

impl Prepared {
    /// The world the component implements ([`WORLD_0_2`] or [`WORLD_0_1`]).
    pub fn world(&self) -> &'static str {
        match self.pre {
            Pre::V0_2(_) => WORLD_0_2,
            Pre::V0_1(_) => WORLD_0_1,
        }
    }
}

/// What one rerank call is given.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The question.
    pub query: &'a str,
    /// The caller's request context, sorted by key (a 0.1 component does not see it).
    pub context: &'a [ContextEntry],
    /// The candidates, best fused score first.
    pub candidates: &'a [Candidate],
}

/// The engine, the linker and the limits: built once per process.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<CallState>,
    limits: ComponentLimits,
    host: Arc<dyn HostServices>,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Sandbox {
    /// Builds the engine (pooling allocator, fuel, epochs) and starts the epoch ticker.
    pub fn new(
        limits: ComponentLimits,
        host: Arc<dyn HostServices>,
    ) -> Result<Self, wasmtime::Error> {
        let mut pool = PoolingAllocationConfig::default();
        // Slots for concurrent calls; a call holds one component instance for microseconds.
        pool.total_component_instances(64)
            .total_core_instances(256)
            .total_memories(64)
            .total_tables(256)
            .max_memory_size(limits.memory_bytes);
        // Where the kernel can say which pages a call dirtied (PAGEMAP_SCAN, Linux 6.7+), a
        // slot's low memory stays resident and only those pages are reset: the next call
        // takes no page faults on the stack and data a Rust component touches (its 1 MiB
        // stack sits below its data), and the slot is not madvised. Measured: an empty call
        // from 62 to 24 µs (p50). Without the ioctl the same setting would memset the whole
        // region on every call (slower than madvise), so it is left off there.
        if pagemap_scan_supported() {
            pool.linear_memory_keep_resident(KEEP_RESIDENT.min(limits.memory_bytes))
                .table_keep_resident(64 << 10)
                .pagemap_scan(wasmtime::Enabled::Auto);
        }
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .consume_fuel(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        Reranker::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut CallState| state)?;
        bindings_0_1::Reranker::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |state: &mut CallState| state,
        )?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (tick_engine, stop) = (engine.clone(), Arc::clone(&ticker_stop));
        std::thread::Builder::new()
            .name("sluice-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    tick_engine.increment_epoch();
                }
            })
            .map_err(wasmtime::Error::from)?;
        Ok(Self {
            engine,
            linker,
            limits,
            host,
            ticker_stop,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &ComponentLimits {
        &self.limits
    }

    /// Identifies the engine configuration: artefacts compiled under another one must be
    /// compiled again.
    pub fn engine_fingerprint(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        format!("{:016x}", h.finish())
    }

    /// Validates and compiles an uploaded component, then smoke-runs it under the limits.
    pub fn compile(&self, bytes: &[u8]) -> Result<Prepared, UploadError> {
        if bytes.len() > self.limits.max_component_bytes {
            return Err(UploadError::TooLarge {
                size: bytes.len(),
                limit: self.limits.max_component_bytes,
            });
        }
        if is_core_module(bytes) {
            return Err(UploadError::NotAComponent(
                "this is a core wasm module; wrap it with `wasm-tools component new` or `jco new`"
                    .into(),
            ));
        }
        // The text format (which wasmtime also takes) as the binary it stands for, so that
        // what is measured below is what would be compiled.
        let binary =
            wat::parse_bytes(bytes).map_err(|e| UploadError::NotAComponent(format!("{e:#}")))?;
        // Before Cranelift, whose cost grows faster than the bytes and cannot be stopped.
        complexity::check(&binary, &self.limits.complexity).map_err(UploadError::TooComplex)?;
        let component = Component::new(&self.engine, &binary)
            .map_err(|e| UploadError::NotAComponent(format!("{e:#}")))?;
        let pre = self.prepare(&component)?;
        let artifact = component
            .serialize()
            .map_err(|e| UploadError::WrongWorld(format!("{e:#}")))?;
        let prepared = Prepared {
            pre,
            artifact: Arc::new(artifact),
        };
        // Metadata of every kind and a context entry, so that a component reading them is
        // exercised before it is accepted.
        let metadata = vec![
            MetaField {
                key: "audience".into(),
                value: MetaValue::Strings(vec!["smoke".into()]),
            },
            MetaField {
                key: "draft".into(),
                value: MetaValue::Boolean(false),
            },
            MetaField {
                key: "topic".into(),
                value: MetaValue::Text("smoke".into()),
            },
            MetaField {
                key: "updated_at".into(),
                value: MetaValue::Date(Date {
                    text: "2026-01-01T00:00:00Z".into(),
                    seconds: 1_767_225_600.0,
                }),
            },
            MetaField {
                key: "year".into(),
                value: MetaValue::Number(2026.0),
            },
        ];
        let smoke = [
            Candidate {
                id: "a".into(),
                title: "A".into(),
                text: "first candidate".into(),
                score: 0.03,
                chunk: 0,
                metadata: metadata.clone(),
            },
            Candidate {
                id: "b".into(),
                title: "B".into(),
                text: "second candidate".into(),
                score: 0.02,
                chunk: 1,
                metadata: Vec::new(),
            },
        ];
        let context = [ContextEntry {
            key: "plan".into(),
            value: "smoke".into(),
        }];
        // The smoke run's texts come with made-up unit vectors, so that a component calling
        // `embed` is checked without running (or depending on) the host's model.
        let unit = |i: usize| {
            (0..SMOKE_DIM)
                .map(|d| if d == i { 1.0 } else { 0.0 })
                .collect::<Vec<f32>>()
        };
        let known = HashMap::from([
            ("smoke test".to_string(), unit(0)),
            (smoke[0].text.clone(), unit(1)),
            (smoke[1].text.clone(), unit(2)),
        ]);
        let call = Call {
            query: "smoke test",
            context: &context,
            candidates: &smoke,
        };
        self.rerank_costed(&prepared, &call, known)
            .0
            .map_err(UploadError::SmokeRun)?;
        Ok(prepared)
    }

    /// Loads an artefact made by [`Sandbox::compile`] on an engine with the same fingerprint.
    pub fn load(&self, artifact: &[u8]) -> Result<Prepared, UploadError> {
        // SAFETY: artefacts are produced by `compile` of this program and stored in the
        // operator's own data directory; wasmtime checks the engine compatibility hash and
        // refuses artefacts from another configuration or version.
        let component = unsafe { Component::deserialize(&self.engine, artifact) }
            .map_err(|e| UploadError::NotAComponent(format!("stored artefact: {e:#}")))?;
        Ok(Prepared {
            pre: self.prepare(&component)?,
            artifact: Arc::new(artifact.to_vec()),
        })
    }

    /// Checks the imports and the world, and resolves the imports once.
    fn prepare(&self, component: &Component) -> Result<Pre, UploadError> {
        let ty = component.component_type();
        for (name, _) in ty.imports(&self.engine) {
            if !ALLOWED_IMPORTS
                .iter()
                .any(|allowed| name.starts_with(allowed))
            {
                return Err(UploadError::ForbiddenImport(name.to_string()));
            }
        }
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(|e| UploadError::WrongWorld(format!("{e:#}")))?;
        // The export's type says which world: checked against 0.2, then 0.1.
        match RerankerPre::new(pre.clone()) {
            Ok(current) => Ok(Pre::V0_2(current)),
            Err(e) => bindings_0_1::RerankerPre::new(pre)
                .map(Pre::V0_1)
                .map_err(|_| UploadError::WrongWorld(format!("{e:#}"))),
        }
    }

    /// Runs the component on `candidates` (no request context) in a fresh store and returns
    /// the new order: the candidates' indices, best first (ties keep the fused order), less
    /// those it dropped.
    pub fn rerank(
        &self,
        prepared: &Prepared,
        query: &str,
        candidates: &[Candidate],
    ) -> Result<Vec<usize>, RerankError> {
        let call = Call {
            query,
            context: &[],
            candidates,
        };
        let ranked = self.rerank_costed(prepared, &call, HashMap::new()).0?;
        Ok(ranked.into_iter().map(|(i, _)| i).collect())
    }

    /// Runs `call` in a fresh store, lending the component embeddings the host already has
    /// (text → vector, so that `host.embed` of those texts runs no model): the new order (each
    /// kept candidate's index with the component's score for it), and what the call cost
    /// (fuel, wall time, host work), failed calls included.
    pub fn rerank_costed(
        &self,
        prepared: &Prepared,
        call: &Call<'_>,
        known: HashMap<String, Vec<f32>>,
    ) -> (Result<Vec<(usize, f32)>, RerankError>, CallCost) {
        let limits = &self.limits;
        let started = Instant::now();
        let candidates = call.candidates;
        if let Err(e) = self.check_input(call) {
            return (Err(e), CallCost::default());
        }
        let state = CallState {
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            host: Arc::clone(&self.host),
            texts_left: limits.max_embed_texts,
            bytes_left: limits.max_host_bytes,
            log_lines_left: limits.max_log_lines,
            log_bytes_left: limits.max_log_bytes,
            calls_left: limits.max_host_calls,
            copy_left: limits.max_host_copy_bytes,
            started,
            deadline: limits.deadline,
            used: HostUsage::default(),
            known,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // What wasmtime may copy out of the guest for one host call (its default is 128 MiB):
        // an argument larger than the whole call's copy budget traps as it is copied.
        store.set_hostcall_fuel(limits.max_host_copy_bytes);
        if let Err(e) = store.set_fuel(limits.fuel) {
            return (
                Err(RerankError::Trap(format!("{e:#}"))),
                CallCost::default(),
            );
        }
        let ticks = limits.deadline.as_millis().max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();

        let n = candidates.len();
        let result = match &prepared.pre {
            Pre::V0_2(pre) => pre.instantiate(&mut store).and_then(|r| {
                r.call_rerank(&mut store, call.query, call.context, candidates)
                    .map(|out| out.map(|r| order(&r.scores, &r.dropped, n)))
            }),
            Pre::V0_1(pre) => {
                let old: Vec<_> = candidates.iter().map(candidate_0_1).collect();
                pre.instantiate(&mut store).and_then(|r| {
                    r.call_rerank(&mut store, call.query, &old).map(|out| {
                        out.map(|scored| {
                            let pairs: Vec<(u32, f32)> =
                                scored.iter().map(|s| (s.index, s.score)).collect();
                            rerank_order(&pairs, &[], n).map_err(RerankError::InvalidOutput)
                        })
                    })
                })
            }
        };
        let mut cost = CallCost {
            fuel: limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0)),
            wall: started.elapsed(),
            host: store.data().used,
        };
        let order = match result {
            Ok(Ok(order)) => order,
            Ok(Err(message)) => Err(RerankError::Guest(message.chars().take(1024).collect())),
            Err(e) => Err(self.classify(e)),
        };
        // A host call wasmtime stopped as it copied the argument never reached the host's
        // own count.
        if matches!(order, Err(RerankError::HostBudget(_))) {
            cost.host.refused = cost.host.refused.max(1);
        }
        (order, cost)
    }

    /// Refuses a call over the input limits before anything runs.
    fn check_input(&self, call: &Call<'_>) -> Result<(), RerankError> {
        let limits = &self.limits;
        let candidates = call.candidates;
        if candidates.len() > limits.max_candidates {
            return Err(RerankError::Input(format!(
                "{} candidates; the limit is {}",
                candidates.len(),
                limits.max_candidates
            )));
        }
        if let Some(c) = candidates
            .iter()
            .find(|c| c.text.len() > limits.max_text_bytes)
        {
            return Err(RerankError::Input(format!(
                "candidate {:?} has {} bytes of text; the limit is {}",
                c.id,
                c.text.len(),
                limits.max_text_bytes
            )));
        }
        if call.context.len() > limits.max_context_entries {
            return Err(RerankError::Input(format!(
                "{} context entries; the limit is {}",
                call.context.len(),
                limits.max_context_entries
            )));
        }
        Ok(())
    }

    fn classify(&self, e: wasmtime::Error) -> RerankError {
        if let Some(over) = e.downcast_ref::<OverBudget>() {
            return RerankError::HostBudget(over.0.clone());
        }
        // wasmtime's hostcall fuel: a host call's argument, or the call's output, over the copy
        // budget, stopped as it was copied (its error type is private; its message is what
        // identifies it).
        if format!("{e:#}").contains("fuel allocated for hostcalls has been exhausted") {
            return RerankError::HostBudget(format!(
                "over {} bytes copied out of the component at once (the call's copy budget)",
                self.limits.max_host_copy_bytes
            ));
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => RerankError::OutOfFuel(self.limits.fuel),
            Some(Trap::Interrupt) => RerankError::Deadline(self.limits.deadline),
            _ => {
                let text = format!("{e:#}");
                if text.contains("forcing trap when growing memory") {
                    RerankError::Memory(self.limits.memory_bytes)
                } else {
                    RerankError::Trap(text.chars().take(1024).collect())
                }
            }
        }
    }
}

/// A binary core module: the wasm magic number, then layer 0 (components have layer 1).
/// Anything else, binary component or component text, is left to wasmtime to judge.
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes.starts_with(b"\0asm") && bytes[6] == 0 && bytes[7] == 0
}

/// Validates the scores and drops and turns them into an order ([`rerank_order`]).
fn order(scored: &[Scored], dropped: &[u32], n: usize) -> Result<Vec<(usize, f32)>, RerankError> {
    let pairs: Vec<(u32, f32)> = scored.iter().map(|s| (s.index, s.score)).collect();
    rerank_order(&pairs, dropped, n).map_err(RerankError::InvalidOutput)
}

/// A candidate as a 0.1 component sees it: no chunk index, no metadata.
fn candidate_0_1(c: &Candidate) -> bindings_0_1::sluice::rerank::types::Candidate {
    bindings_0_1::sluice::rerank::types::Candidate {
        id: c.id.clone(),
        title: c.title.clone(),
        text: c.text.clone(),
        score: c.score,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
