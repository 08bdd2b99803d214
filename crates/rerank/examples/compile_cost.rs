//! What compiling an uploaded component costs, for choosing the limits of
//! `sluice_rerank::Complexity` (docs/security.md has the figures):
//!
//! - `cargo run -p sluice-rerank --example compile_cost -- LOCALS BLOCKS [nested|flat] [N]`
//!   compiles N functions (default 1) of LOCALS locals and BLOCKS `block`/`br_if`s each
//!   (nested by default) with the limits off — made as text, turned into the binary it stands
//!   for before the clock starts — and prints the CPU time of the check and the compile and
//!   the process's peak RSS (one compile per process, so the peak is the compile's);
//! - `… --example compile_cost -- shapes` prints the shape of the example components
//!   (`scripts/build-components.sh` builds them) as the upload check measures it.

use std::sync::Arc;
use std::time::Instant;

use sluice_rerank::complexity::{Complexity, check};
use sluice_rerank::{ComponentLimits, HostServices, Sandbox, built_component};

struct NoHost;

impl HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| vec![0.0]).collect())
    }
    fn count_tokens(&self, _: &str) -> u32 {
        0
    }
}

/// CPU seconds this process has used, and its peak resident memory in MB.
fn usage() -> (f64, f64) {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        secs(u.ru_utime) + secs(u.ru_stime),
        u.ru_maxrss as f64 / 1024.0,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("shapes") {
        for name in ["keyword-boost", "mmr", "policy"] {
            match built_component(name) {
                Ok(bytes) => {
                    let shape = check(&bytes, &Complexity::default());
                    println!("{name}: {} bytes, {shape:?}", bytes.len());
                }
                Err(e) => println!("{name}: {e}"),
            }
        }
        return;
    }
    let number = |i: usize| -> usize {
        (args.get(i).and_then(|a| a.parse().ok())).unwrap_or_else(|| {
            panic!("usage: compile_cost LOCALS BLOCKS [nested|flat] [N] | shapes")
        })
    };
    let (locals, blocks) = (number(0), number(1));
    let nested = args.get(2).map(String::as_str) != Some("flat");
    let functions: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(1);
    let body = if nested {
        format!(
            "{}{}",
            "(block local.get 0 br_if 0 ".repeat(blocks),
            ")".repeat(blocks)
        )
    } else {
        "(block local.get 0 br_if 0) ".repeat(blocks)
    };
    let function = format!("(func (param i32) {} {body})", "(local i32)".repeat(locals));
    let wat = format!("(component (core module {}))", function.repeat(functions));
    let unlimited = Complexity {
        max_locals: u64::MAX,
        max_blocks: u64::MAX,
        max_depth: u64::MAX,
        max_function_cost: u64::MAX,
        max_work: u64::MAX,
    };
    let limits = ComponentLimits {
        complexity: unlimited,
        max_component_bytes: usize::MAX,
        ..ComponentLimits::default()
    };
    let sandbox = Sandbox::new(limits, Arc::new(NoHost)).expect("engine");
    // The binary the text stands for (an upload of binary costs no text parse): what is timed
    // is the check and the compile.
    let binary = wat::parse_str(&wat).expect("valid text");
    let (cpu0, _) = usage();
    let started = Instant::now();
    // Not a reranker: refused for its world once compiled, which is what is timed.
    let result = sandbox.compile(&binary);
    let wall = started.elapsed().as_secs_f64();
    let (cpu1, peak) = usage();
    let refused_by = match result {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.to_string().chars().take(60).collect(),
    };
    let default_check = check(&binary, &Complexity::default());
    println!(
        "{functions} × locals {locals} blocks {blocks} {}: {} KB of text, {} KB binary, wall {wall:.2} s, CPU {:.2} s, peak RSS {peak:.0} MB ({refused_by}); default limits: {}",
        if nested { "nested" } else { "flat" },
        wat.len() / 1024,
        binary.len() / 1024,
        cpu1 - cpu0,
        match default_check {
            Ok(_) => "accepted".to_string(),
            Err(e) => format!("refused ({e})"),
        }
    );
}
