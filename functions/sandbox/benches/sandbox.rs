//! The sandbox's own costs with the keyword-boost example component (Rust, built by
//! `scripts/build-components.sh`): a fresh store and instance per call (pooling allocator),
//! a call on 50 candidates end to end (limits checked, strings lowered, the component's work,
//! output validated), and the compile at upload. p50/p99 of the per-call figures are printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sluice_sandbox::{Candidate, HostServices, Limits, Sandbox};

struct NoHost;
impl HostServices for NoHost {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|_| vec![0.0; 384]).collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.len() as u32
    }
}

fn candidates(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| Candidate {
            id: format!("doc-{i}"),
            title: format!("Document {i}"),
            text: "a chunk of retrieved text about card limits and international transfers "
                .repeat(12),
            score: 1.0 / (60.0 + i as f32),
        })
        .collect()
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}

fn bench(c: &mut Criterion) {
    let sandbox = Sandbox::new(Limits::default(), Arc::new(NoHost)).unwrap();
    let bytes = sluice_sandbox::built_component("keyword-boost").unwrap();
    let prepared = sandbox.compile(&bytes).unwrap();
    let none: Vec<Candidate> = Vec::new();
    let fifty = candidates(50);
    assert_eq!(sandbox.rerank(&prepared, "q", &fifty).unwrap().len(), 50);

    let sample = |cands: &[Candidate]| -> Vec<Duration> {
        (0..2000)
            .map(|_| {
                let t = Instant::now();
                sandbox
                    .rerank(&prepared, "what is the card limit", cands)
                    .unwrap();
                t.elapsed()
            })
            .collect()
    };
    let (p50, p99) = percentiles(sample(&none));
    println!("sandbox: fresh store + instance + empty call: p50 {p50:.1} µs, p99 {p99:.1} µs");
    let (p50, p99) = percentiles(sample(&fifty));
    println!("sandbox: rerank 50 candidates end to end: p50 {p50:.1} µs, p99 {p99:.1} µs");

    c.bench_function("sandbox_instantiate_empty_call", |b| {
        b.iter(|| sandbox.rerank(&prepared, "q", &none).unwrap())
    });
    c.bench_function("sandbox_rerank_50", |b| {
        b.iter(|| sandbox.rerank(&prepared, "q", &fifty).unwrap())
    });
    c.bench_function("sandbox_compile_upload", |b| {
        b.iter(|| sandbox.compile(&bytes).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
