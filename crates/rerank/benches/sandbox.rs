//! The sandbox's own costs with the example components (Rust, built by
//! `scripts/build-components.sh`), side by side in one run: a fresh store and instance per
//! call (pooling allocator) with an empty call, for a 0.2 component (`policy`) and a 0.1 one
//! (`keyword-boost`); a call on 50 candidates with metadata end to end (limits checked,
//! strings and metadata lowered, the component's work, output validated); and the compile at
//! upload. p50/p99 of the per-call figures are printed.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use sluice_rerank::measure::{measure, sample_candidates};
use sluice_rerank::{Call, ComponentLimits, ContextEntry, HostServices, Sandbox};

struct NoHost;
impl HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| vec![0.0; 384]).collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.len() as u32
    }
}

/// Calls per case, in [`ROUNDS`] slices.
const RUNS: usize = 5000;
const ROUNDS: usize = 10;

fn bench(c: &mut Criterion) {
    let sandbox = Sandbox::new(ComponentLimits::default(), Arc::new(NoHost)).unwrap();
    let policy = sandbox
        .compile(&sluice_rerank::built_component("policy").unwrap())
        .unwrap();
    let boost_bytes = sluice_rerank::built_component("keyword-boost").unwrap();
    let boost = sandbox.compile(&boost_bytes).unwrap();
    let context = [ContextEntry {
        key: "plan".into(),
        value: "pro".into(),
    }];
    let fifty = sample_candidates(50);
    let call = |candidates| Call {
        query: "what is the card limit",
        context: &context,
        candidates,
    };
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let cases = [
        (
            "fresh store + instance + empty call, 0.2 (policy)",
            &policy,
            &[][..],
        ),
        (
            "fresh store + instance + empty call, 0.1 (keyword-boost)",
            &boost,
            &[][..],
        ),
        (
            "rerank 50 candidates with metadata, 0.2 (policy)",
            &policy,
            &fifty[..],
        ),
        (
            "rerank 50 candidates, 0.1 (keyword-boost)",
            &boost,
            &fifty[..],
        ),
    ];
    // Warm every case up, then sample them in turn, a slice of each per round, so that the
    // machine's noise and any drift hit all of them alike.
    for (_, prepared, candidates) in &cases {
        measure(&sandbox, prepared, &call(candidates), 200);
    }
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut tails: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut fuel = vec![0; cases.len()];
    // A call that failed (on a busy machine, one descheduled past its 5 ms deadline) is
    // counted and shown, not hidden.
    let mut failures: Vec<Vec<String>> = vec![Vec::new(); cases.len()];
    for _ in 0..ROUNDS {
        for (i, (_, prepared, candidates)) in cases.iter().enumerate() {
            let m = measure(&sandbox, prepared, &call(candidates), RUNS / ROUNDS);
            failures[i].extend(m.failure.map(|e| e.to_string()));
            medians[i].push(us(m.wall.0));
            tails[i].push(us(m.wall.1));
            fuel[i] = m.fuel.0;
        }
    }
    for (i, (what, _, _)) in cases.iter().enumerate() {
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "sandbox: {what}: p50 {:.1} µs, p99 {:.1} µs (medians over {ROUNDS} rounds of {} calls); fuel p50 {}{}",
            median(&mut medians[i]),
            median(&mut tails[i]),
            RUNS / ROUNDS,
            fuel[i],
            match failures[i].first() {
                None => String::new(),
                Some(e) => format!(
                    "; rounds with a failed call: {} (first: {e})",
                    failures[i].len()
                ),
            }
        );
    }

    c.bench_function("sandbox_instantiate_empty_call", |b| {
        b.iter(|| sandbox.rerank(&policy, "q", &[]).unwrap())
    });
    c.bench_function("sandbox_rerank_50", |b| {
        b.iter(|| {
            let call = call(&fifty);
            sandbox.rerank_costed(&policy, &call, Default::default())
        })
    });
    c.bench_function("sandbox_compile_upload", |b| {
        b.iter(|| sandbox.compile(&boost_bytes).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
