//! What one component call may use, each limit explained where it is set, and how the
//! pooling allocator's slots give memory back between calls.

use std::time::Duration;

use crate::complexity::Complexity;

/// Linear memory a slot keeps resident between calls where dirty pages can be found
/// ([`pagemap_scan_supported`]): a Rust component's stack, data and first heap pages. At most
/// this much per slot (64 slots) stays resident after a call that touched more.
pub(crate) const KEEP_RESIDENT: usize = 2 << 20;

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
pub(crate) fn pagemap_scan_supported() -> bool {
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
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(1);
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
    /// Most bytes of text in the messages a prompt-assembly component returns (checked before
    /// their tokens are counted, so the host never tokenises more). They were lifted out of
    /// the guest's memory, so never more than [`ComponentLimits::memory_bytes`] to begin with.
    pub max_prompt_bytes: usize,
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
            // Eight times what a 32k-token context holds at four bytes a token: a prompt
            // component that stays under the token budget never comes near it.
            max_prompt_bytes: 1 << 20,
            complexity: Complexity::default(),
        }
    }
}
