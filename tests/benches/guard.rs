//! The guard's cost per candidate, with the real lexicon (WordNet, `SLUICE_CACHE_LEXICON`,
//! default beside the model): what `SemanticCache::similar` does for every fresh candidate
//! past the threshold — read the candidate's guard features from its stored question and
//! compare them with the probe's. The pairs are the cache tests' labelled pairs (hand-written
//! and templated), each compared 200 times; p50, p99 and the largest of all comparisons are
//! printed, with the time to load the table (once per process) and its size on disk.

use std::time::Instant;

use sluice_core::cache::guard::Guard;
use sluice_core::config::Config;
use sluice_core::language::lexicon::Lexicon;
use sluice_core::language::normalise;

const ROUNDS: usize = 200;

fn main() {
    let path = Config::from_env()
        .expect("configuration")
        .cache
        .lexicon
        .expect("SLUICE_CACHE_LEXICON is none: nothing to measure");
    let started = Instant::now();
    let lexicon = Lexicon::load(&path).expect("the lexicon (scripts/setup.sh model)");
    let load = started.elapsed();
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);

    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let mut pairs = Vec::new();
    for file in ["cache_pairs.jsonl", "cache_guard_pairs.jsonl"] {
        let text = std::fs::read_to_string(fixtures.join(file)).expect("fixture");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).expect("fixture line");
            let field = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            pairs.push((field("asked"), normalise(&field("cached"))));
        }
    }
    let mut times = Vec::with_capacity(pairs.len() * ROUNDS);
    let mut conflicts = 0;
    for (asked, cached) in &pairs {
        let probe = Guard::of(&normalise(asked));
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let conflict = probe.conflict(&Guard::of(cached), &lexicon);
            times.push(t.elapsed().as_nanos() as u64);
            conflicts += usize::from(std::hint::black_box(conflict).is_some());
        }
    }
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    println!(
        "guard: {} pairs × {ROUNDS}: per candidate p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({} of {} refused)",
        pairs.len(),
        at(0.5),
        at(0.99),
        at(1.0),
        conflicts / ROUNDS,
        pairs.len()
    );
    println!(
        "guard lexicon: {:.1} MB on disk, loaded in {:.0} ms",
        bytes as f64 / 1e6,
        load.as_secs_f64() * 1000.0
    );
}
