//! The sandbox's own costs with the example components (Rust, built by
//! `scripts/build-components.sh`), side by side in one run: a fresh store and instance per
//! call (pooling allocator) with an empty call, for a 0.2 component (`policy`) and a 0.1 one
//! (`keyword-boost`); a call on 50 candidates with metadata end to end (limits checked,
//! strings and metadata lowered, the component's work, output validated); and the compile at
//! upload. p50/p99 of the per-call figures are printed.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use sluice_sandbox::measure::{measure, sample_candidates};
use sluice_sandbox::{Call, ContextEntry, HostServices, Limits, Sandbox};

struct NoHost;
impl HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| vec![0.0; 384]).collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.len() as u32
    }
}

const RUNS: usize = 5000;

fn bench(c: &mut Criterion) {
    let sandbox = Sandbox::new(Limits::default(), Arc::new(NoHost)).unwrap();
    let policy = sandbox
        .compile(&sluice_sandbox::built_component("policy").unwrap())
        .unwrap();
    let boost_bytes = sluice_sandbox::built_component("keyword-boost").unwrap();
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
    // Warm both up, then sample them in turn so that the machine's noise hits both alike.
    for prepared in [&policy, &boost] {
        measure(&sandbox, prepared, &call(&fifty), 200);
    }
    for (what, prepared, candidates) in [
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
    ] {
        let m = measure(&sandbox, prepared, &call(candidates), RUNS);
        assert!(m.failure.is_none(), "{what}: {:?}", m.failure);
        println!(
            "sandbox: {what}: p50 {:.1} µs, p99 {:.1} µs; fuel p50 {}",
            us(m.wall.0),
            us(m.wall.1),
            m.fuel.0
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
