//! The engine: one per process (pooling allocator, fuel, epochs), components validated and
//! compiled once at upload or loaded from their artefact, and each call in a fresh store.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_contract::stages::rerank_order;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimitsBuilder,
    Trap, UpdateDeadline,
};

use crate::host::HostUsage;
use crate::host::{CallCost, CallState, Clock, HostServices, OverBudget};
use crate::limits::{ComponentLimits, EPOCH_TICK, KEEP_RESIDENT, pagemap_scan_supported};
use crate::worlds::bindings::{Reranker, RerankerPre};
use crate::worlds::bindings_prompt::{Assembler, AssemblerPre};
use crate::worlds::{
    ALLOWED_IMPORTS, Candidate, ContextEntry, Message, PromptInput, Scored, WORLD_0_1, WORLD_0_2,
    WORLD_PROMPT, bindings_0_1, candidate_0_1,
};
use crate::{RerankError, UploadError};

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
    Prompt(AssemblerPre<CallState>),
}

impl Prepared {
    /// The world the component implements ([`WORLD_0_2`], [`WORLD_0_1`] or [`WORLD_PROMPT`]).
    pub fn world(&self) -> &'static str {
        match self.pre {
            Pre::V0_2(_) => WORLD_0_2,
            Pre::V0_1(_) => WORLD_0_1,
            Pre::Prompt(_) => WORLD_PROMPT,
        }
    }

    /// Whether it assembles prompts (else it reranks).
    pub fn is_prompt(&self) -> bool {
        matches!(self.pre, Pre::Prompt(_))
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
        Assembler::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut CallState| state)?;

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
        crate::complexity::check(&binary, &self.limits.complexity)
            .map_err(UploadError::TooComplex)?;
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
        crate::smoke::run(self, &prepared, &binary)?;
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
        // The export's type says which world: checked against rerank 0.2, then 0.1, then
        // prompt assembly.
        match RerankerPre::new(pre.clone()) {
            Ok(current) => Ok(Pre::V0_2(current)),
            Err(e) => bindings_0_1::RerankerPre::new(pre.clone())
                .map(Pre::V0_1)
                .or_else(|_| AssemblerPre::new(pre).map(Pre::Prompt))
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
        let clock = Clock::start();
        let candidates = call.candidates;
        if let Err(e) = self.check_input(call) {
            return (Err(e), CallCost::default());
        }
        let mut store = match self.store(clock, known) {
            Ok(store) => store,
            Err(e) => return (Err(e), CallCost::default()),
        };
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
            Pre::Prompt(_) => Ok(Ok(Err(RerankError::Input(
                "a prompt-assembly component does not rerank".into(),
            )))),
        };
        self.finish(&mut store, clock, result)
    }

    /// Runs a prompt-assembly component on `input` in a fresh store, under the same limits
    /// as a rerank call, and checks what it returned ([`crate::prompt::check`]: roles, the
    /// user's message last, the bytes, and the token budget as the host counts it): the
    /// messages with their tokens as counted, and what the call cost, failed calls included.
    pub fn assemble_costed(
        &self,
        prepared: &Prepared,
        input: &PromptInput,
    ) -> (Result<(Vec<Message>, usize), RerankError>, CallCost) {
        let clock = Clock::start();
        if let Err(e) = crate::prompt::check_input(input, &self.limits) {
            return (Err(e), CallCost::default());
        }
        let mut store = match self.store(clock, HashMap::new()) {
            Ok(store) => store,
            Err(e) => return (Err(e), CallCost::default()),
        };
        let result = match &prepared.pre {
            Pre::Prompt(pre) => pre.instantiate(&mut store).and_then(|a| {
                a.call_assemble(&mut store, input).map(|out| {
                    out.map(|messages| {
                        let count = |text: &str| self.host.count_tokens(text) as usize;
                        crate::prompt::check(&messages, input.budget as usize, &self.limits, &count)
                            .map(|tokens| (messages, tokens))
                    })
                })
            }),
            Pre::V0_2(_) | Pre::V0_1(_) => Ok(Ok(Err(RerankError::Input(
                "a rerank component does not assemble prompts".into(),
            )))),
        };
        self.finish(&mut store, clock, result)
    }

    /// A fresh store for one call: its own memory limit, fuel, epoch deadline and host budget,
    /// lending the component the embeddings in `known`.
    fn store(
        &self,
        clock: Clock,
        known: HashMap<String, Vec<f32>>,
    ) -> Result<Store<CallState>, RerankError> {
        let limits = &self.limits;
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
            clock,
            deadline: limits.deadline,
            panic: None,
            lines: Vec::new(),
            used: HostUsage::default(),
            known,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // What wasmtime may copy out of the guest for one host call (its default is 128 MiB):
        // an argument larger than the whole call's copy budget traps as it is copied.
        store.set_hostcall_fuel(limits.max_host_copy_bytes);
        store
            .set_fuel(limits.fuel)
            .map_err(|e| RerankError::Trap(format!("{e:#}")))?;
        // The deadline is the call's CPU time ([`Clock::past`]): the epoch, a wall-clock tick,
        // only says when to look. No call can be past it before a deadline's worth of ticks;
        // from then on each tick asks the call's clocks, and the call goes on for another tick
        // or traps (`Trap::Interrupt`).
        let ticks = limits.deadline.as_millis().max(1) as u64;
        store.set_epoch_deadline(ticks);
        let deadline = limits.deadline;
        store.epoch_deadline_callback(move |_| {
            Ok(match clock.past(deadline) {
                true => UpdateDeadline::Interrupt,
                false => UpdateDeadline::Continue(1),
            })
        });
        Ok(store)
    }

    /// What a call gave (wasmtime's outcome, then the component's own error, then the host's
    /// check of its output), and what it cost.
    fn finish<T>(
        &self,
        store: &mut Store<CallState>,
        clock: Clock,
        result: wasmtime::Result<Result<Result<T, RerankError>, String>>,
    ) -> (Result<T, RerankError>, CallCost) {
        let mut cost = CallCost {
            fuel: self
                .limits
                .fuel
                .saturating_sub(store.get_fuel().unwrap_or(0)),
            wall: clock.wall(),
            cpu: clock.cpu(),
            host: store.data().used,
            logs: std::mem::take(&mut store.data_mut().lines),
        };
        let out = match result {
            Ok(Ok(out)) => out,
            Ok(Err(message)) => Err(RerankError::Guest(message.chars().take(1024).collect())),
            // A panic the SDK reported before the trap: its message and location, not the
            // trap's offsets into the binary.
            Err(e) => match &store.data().panic {
                Some(panic) if is_abort(&e) => Err(RerankError::Panic(panic.clone())),
                _ => Err(self.classify(e)),
            },
        };
        // A host call wasmtime stopped as it copied the argument never reached the host's
        // own count.
        if matches!(out, Err(RerankError::HostBudget(_))) {
            cost.host.refused = cost.host.refused.max(1);
        }
        (out, cost)
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

/// Whether a call ended in the trap a panic ends in (`unreachable`, as `panic = "abort"`
/// compiles it), rather than a limit.
fn is_abort(e: &wasmtime::Error) -> bool {
    matches!(e.downcast_ref::<Trap>(), Some(Trap::UnreachableCodeReached))
}

/// A binary core module: the wasm magic number, then layer 0 (components have layer 1).
/// Anything else, binary component or component text, is left to wasmtime to judge.
pub(crate) fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes.starts_with(b"\0asm") && bytes[6] == 0 && bytes[7] == 0
}

/// Validates the scores and drops and turns them into an order ([`rerank_order`]).
pub(crate) fn order(
    scored: &[Scored],
    dropped: &[u32],
    n: usize,
) -> Result<Vec<(usize, f32)>, RerankError> {
    let pairs: Vec<(u32, f32)> = scored.iter().map(|s| (s.index, s.score)).collect();
    rerank_order(&pairs, dropped, n).map_err(RerankError::InvalidOutput)
}
