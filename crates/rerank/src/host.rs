//! The host calls a component may make (`embed`, `count-tokens`, `log`) and the budget of
//! host work each call has: the first host call that is late, over the call count or over
//! the copy budget traps, before any host work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use wasmtime::StoreLimits;

use sluice_contract::components::{LogLevel, LogLine};
use sluice_contract::stages::Embedder;

use crate::registry::truncate;
use crate::worlds::Level;
use crate::worlds::{bindings, bindings_0_1, bindings_prompt};

/// Dimension of the made-up vectors of the upload smoke run (the host model's).
pub(crate) const SMOKE_DIM: usize = 384;
/// What the host lends a component (the `host` interface, less `log`).
pub trait HostServices: Send + Sync {
    /// Unit-length embeddings of `texts`.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String>;
    /// Tokens in `text`.
    fn count_tokens(&self, text: &str) -> u32;
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

/// What one call cost, and what it logged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallCost {
    /// Fuel consumed (instructions, about).
    pub fuel: u64,
    /// Wall time of the call, host work included.
    pub wall: Duration,
    /// CPU time of the call's thread, host work included: what the deadline is measured in.
    pub cpu: Duration,
    /// Host work done for it.
    pub host: HostUsage,
    /// The lines it wrote with `log`, in order, within the call's log budget (the panic
    /// line of a call that panicked is its failure's message, not a line).
    pub logs: Vec<LogLine>,
}

/// How many deadlines of wall time a call may take, however little CPU it used, before it is
/// stopped anyway: a call waiting for a core on a loaded host is not failed for the wait, but
/// it does not hold its instance slot and thread for ever either.
pub const WALL_DEADLINES: u32 = 10;

/// A call's clocks: the wall clock, and its thread's CPU clock (the component's own work and
/// the host work it asked for, not the time the host's other work kept it off a core).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    wall: Instant,
    cpu: Duration,
}

impl Clock {
    /// The clocks of a call starting now on this thread (the whole call runs on it: the
    /// guest, its host calls and the epoch callback).
    pub(crate) fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: thread_cpu(),
        }
    }

    /// CPU time this thread has used since the call started.
    pub(crate) fn cpu(&self) -> Duration {
        thread_cpu().saturating_sub(self.cpu)
    }

    /// Wall time since the call started.
    pub(crate) fn wall(&self) -> Duration {
        self.wall.elapsed()
    }

    /// Whether a call with `deadline` is past it: that much CPU time, or
    /// [`WALL_DEADLINES`] times it of wall time.
    pub(crate) fn past(&self, deadline: Duration) -> bool {
        self.cpu() >= deadline || self.wall() >= deadline * WALL_DEADLINES
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// How the SDK's panic hook begins the line it logs before the component traps (Rust's own
/// words: `panicked at src/lib.rs:36:59: message`).
pub const PANIC_PREFIX: &str = "panicked at ";

/// The longest panic message kept (a panic's message and location).
pub const MAX_PANIC_BYTES: usize = 1024;

/// The error a host function returns to stop a call that is over its host budget.
#[derive(Debug, Error)]
#[error("{0}")]
pub(crate) struct OverBudget(pub(crate) String);

/// Per-call state: limits, host services and what is left of the host budget; never shared
/// between calls.
pub(crate) struct CallState {
    pub(crate) limits: StoreLimits,
    pub(crate) host: Arc<dyn HostServices>,
    /// Host work left to this call.
    pub(crate) texts_left: usize,
    pub(crate) bytes_left: usize,
    pub(crate) log_lines_left: usize,
    pub(crate) log_bytes_left: usize,
    /// Host calls, and bytes passed to the host, left to this call.
    pub(crate) calls_left: usize,
    pub(crate) copy_left: usize,
    /// When the call started, and its deadline (CPU time; see [`Clock::past`]): no host work
    /// starts after it.
    pub(crate) clock: Clock,
    pub(crate) deadline: Duration,
    /// What the component's panic hook reported before it trapped (see [`PANIC_PREFIX`]).
    pub(crate) panic: Option<String>,
    /// The lines it logged (see [`CallCost::logs`]).
    pub(crate) lines: Vec<LogLine>,
    pub(crate) used: HostUsage,
    /// Embeddings the host already has (the query's, the candidates'): `embed` of these
    /// texts costs no model run and no budget.
    pub(crate) known: HashMap<String, Vec<f32>>,
}

impl CallState {
    pub(crate) fn late(&self) -> bool {
        self.clock.past(self.deadline)
    }

    /// Admits a host call that was passed `copied` bytes, or stops the component with a trap:
    /// once the call is late, past its number of host calls, or past the bytes it may pass
    /// to the host. Every host function starts here, before any work (`log`, whose lines
    /// past the deadline are dropped, with [`CallState::count`] alone).
    pub(crate) fn enter(&mut self, what: &str, copied: usize) -> wasmtime::Result<()> {
        if self.late() {
            let why = self.past_deadline(what);
            return Err(wasmtime::Error::new(OverBudget(self.refuse(why))));
        }
        self.count(what, copied)
    }

    /// Why `what` is refused once the call is late.
    fn past_deadline(&self, what: &str) -> String {
        format!(
            "{what}: the call's deadline of {:?} of CPU time has passed",
            self.deadline
        )
    }

    /// Counts a host call that was passed `copied` bytes against the call's host calls and
    /// copy budget, or stops the component with a trap past either.
    pub(crate) fn count(&mut self, what: &str, copied: usize) -> wasmtime::Result<()> {
        let why = if self.calls_left == 0 {
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
    pub(crate) fn refuse(&mut self, message: String) -> String {
        self.used.refused += 1;
        message
    }

    /// Takes `bytes` of tokenising from the budget, or says why not.
    pub(crate) fn take_bytes(&mut self, bytes: usize, what: &str) -> Result<(), String> {
        if self.late() {
            let why = self.past_deadline(what);
            return Err(self.refuse(why));
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

// A prompt component's host calls are the rerank world's `log` and `count-tokens`, under the
// same budget.
impl bindings_prompt::sluice::prompt::types::Host for CallState {}

impl bindings_prompt::sluice::prompt::host::Host for CallState {
    fn log(
        &mut self,
        level: bindings_prompt::sluice::prompt::host::Level,
        message: String,
    ) -> wasmtime::Result<()> {
        use bindings_prompt::sluice::prompt::host::Level as Prompt;
        let level = match level {
            Prompt::Debug => Level::Debug,
            Prompt::Info => Level::Info,
            Prompt::Warn => Level::Warn,
            Prompt::Error => Level::Error,
        };
        bindings::sluice::rerank::host::Host::log(self, level, message)
    }

    fn count_tokens(&mut self, text: String) -> wasmtime::Result<u32> {
        bindings::sluice::rerank::host::Host::count_tokens(self, text)
    }
}

impl bindings::sluice::rerank::host::Host for CallState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        // The first panic line is kept whatever the deadline and budgets, and costs nothing:
        // it is what the failed call will say (the component traps right after it).
        if matches!(level, Level::Error)
            && message.starts_with(PANIC_PREFIX)
            && self.panic.is_none()
        {
            self.panic = Some(truncate(&message, MAX_PANIC_BYTES).to_string());
            return Ok(());
        }
        // Every line counts against the host calls and the copy budget, which end a flood of
        // them; past the deadline it is then dropped, as the WIT says, not a trap (the epoch
        // stops a call that goes on working).
        self.count("log", message.len())?;
        if self.late() {
            self.used.refused += 1;
            return Ok(());
        }
        if self.log_lines_left == 0 || self.log_bytes_left == 0 {
            self.used.refused += 1;
            return Ok(());
        }
        let message = truncate(&message, self.log_bytes_left.min(1024));
        self.log_lines_left -= 1;
        self.log_bytes_left -= message.len();
        self.used.log_lines += 1;
        let level = match level {
            Level::Debug => {
                tracing::debug!(target: "component", "{message}");
                LogLevel::Debug
            }
            Level::Info => {
                tracing::info!(target: "component", "{message}");
                LogLevel::Info
            }
            Level::Warn => {
                tracing::warn!(target: "component", "{message}");
                LogLevel::Warn
            }
            Level::Error => {
                tracing::error!(target: "component", "{message}");
                LogLevel::Error
            }
        };
        // The operator's log has it above; the tenant reads it in the version's log.
        self.lines.push(LogLine {
            level,
            message: message.to_string(),
        });
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

/// The host's embedding model, lent to components through `host.embed`.
pub struct ModelHost(pub Arc<dyn Embedder>);

impl HostServices for ModelHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.0.embed(texts).map_err(|e| e.to_string())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        self.0.count_tokens(text) as u32
    }
}

/// The host of a process that validates uploads but runs no model (the registry function):
/// `count-tokens` counts with the model's tokenizer, and `embed` answers made-up unit vectors,
/// as the smoke run already does for its own texts. A smoke run checks that a component runs
/// within its limits and returns a valid order, not how well it ranks; the vectors a
/// component gets when it reranks answers come from the model ([`ModelHost`]).
pub struct UploadHost(pub Box<dyn Fn(&str) -> usize + Send + Sync>);

impl HostServices for UploadHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        use std::hash::{Hash, Hasher};
        Ok(texts
            .iter()
            .map(|t| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                t.hash(&mut h);
                let one = (h.finish() % SMOKE_DIM as u64) as usize;
                (0..SMOKE_DIM)
                    .map(|d| if d == one { 1.0 } else { 0.0 })
                    .collect()
            })
            .collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        (self.0)(text) as u32
    }
}
