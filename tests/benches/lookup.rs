//! Cache lookup latency, DynamoDB backend against the emulator (`make bench` starts
//! moto_server and sets `AWS_ENDPOINT_URL_DYNAMODB`), with the in-memory backend beside it.
//!
//! 100, then 1,000 entries with random 384-d unit vectors are stored for one tenant; lookups
//! ask for stored questions, exactly (one `GetItem`) and by a paraphrase vector at cosine
//! 0.97 (one parallel round of ten index `Query` calls). moto is a single Python process that
//! closes every connection (`Connection: close`) and answers an index `Query` by scanning the
//! whole table, so its figures grow with the table and say nothing about DynamoDB's service
//! time (where a `Query` reads only the items it returns); they bound the client's own cost.

use sluice_testkit::{scope, tenant};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sluice_contract::{cache::CacheStore, cache::CachedAnswer};
use sluice_core::{cache::CacheSettings, cache::Lookup, cache::Probe, cache::SemanticCache};
use sluice_local::MemoryCache;

const DIM: usize = 384;
/// Table sizes measured, in order (the table grows from one to the next).
const SIZES: [usize; 2] = [100, 1000];

/// A deterministic pseudo-random unit vector.
fn vector(seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let v: Vec<f32> = (0..DIM)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// A unit vector at cosine `c` from `base`.
fn paraphrase(base: &[f32], seed: u64, c: f32) -> Vec<f32> {
    let other = vector(seed);
    let d: f32 = base.iter().zip(&other).map(|(a, b)| a * b).sum();
    let ortho: Vec<f32> = other.iter().zip(base).map(|(o, b)| o - d * b).collect();
    let n = ortho.iter().map(|x| x * x).sum::<f32>().sqrt();
    let s = (1.0 - c * c).sqrt();
    base.iter()
        .zip(&ortho)
        .map(|(b, o)| c * b + s * o / n)
        .collect()
}

fn question(i: usize) -> String {
    format!("question number {i} about card limits")
}

struct Bench {
    cache: SemanticCache,
    name: &'static str,
}

impl Bench {
    async fn fill(&self, from: usize, to: usize) {
        for i in from..to {
            let answer = CachedAnswer {
                tokens: (0..60).map(|t| format!(" token{t}")).collect(),
                sources: vec![],
                finish_reason: "stop".into(),
                token_count: 60,
                token_count_source: "usage".into(),
                extract: None,
                grounding: None,
                cited: Vec::new(),
            };
            let q = question(i);
            let entry = self.cache.entry(
                &tenant("bench"),
                &Probe::new(&q),
                vector(i as u64),
                scope(1),
                answer,
            );
            self.cache.put(&entry).await.expect("put");
        }
    }

    async fn exact(&self, i: usize, entries: usize) -> Duration {
        let probe = Probe::new(&question(i % entries));
        let started = Instant::now();
        let found = self.cache.exact(&tenant("bench"), &probe, &scope(1)).await;
        let took = started.elapsed();
        assert!(
            matches!(found, Lookup::Hit { .. }),
            "{}: {found:?}",
            self.name
        );
        took
    }

    async fn similar(&self, i: usize, entries: usize) -> (Duration, bool) {
        let n = i % entries;
        let probe = Probe::new(&format!("{} please", question(n)));
        let v = paraphrase(&vector(n as u64), 1_000_000 + i as u64, 0.97);
        let started = Instant::now();
        let found = self
            .cache
            .similar(&tenant("bench"), &probe, &v, &scope(1))
            .await;
        let took = started.elapsed();
        if let Lookup::Failed(e) = &found {
            panic!("{}: {e}", self.name);
        }
        (took, matches!(found, Lookup::Hit { .. }))
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let at = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1e3
    };
    (at(0.5), at(0.99))
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let settings = CacheSettings {
        threshold: 0.95,
        tenant_thresholds: HashMap::new(),
        ttl: Duration::from_secs(3600),
        budget: Duration::from_secs(5),
        explore: Default::default(),
        error_bound: 0.01,
    };
    let dynamodb: Arc<dyn CacheStore> = runtime.block_on(async {
        assert!(
            std::env::var_os("AWS_ENDPOINT_URL_DYNAMODB").is_some(),
            "AWS_ENDPOINT_URL_DYNAMODB is not set: run `make bench`, which starts the emulator"
        );
        let name = format!("sluice-bench-{}", std::process::id());
        let table = sluice_cache_dynamodb::DynamoCache::connect(&name, None)
            .await
            .expect("client");
        table.create_table().await.expect("table");
        Arc::new(table)
    });
    let benches = [
        Bench {
            cache: SemanticCache::new(Arc::new(MemoryCache::new(10_000)), settings.clone(), DIM),
            name: "memory",
        },
        Bench {
            cache: SemanticCache::new(dynamodb, settings, DIM),
            name: "dynamodb (moto)",
        },
    ];
    let mut from = 0;
    for entries in SIZES {
        for b in &benches {
            runtime.block_on(b.fill(from, entries));
            let (exact, similar, hits) = runtime.block_on(async {
                let mut exact = Vec::new();
                let mut similar = Vec::new();
                let mut hits = 0;
                for i in 0..200 {
                    exact.push(b.exact(i, entries).await);
                    let (took, hit) = b.similar(i, entries).await;
                    similar.push(took);
                    hits += usize::from(hit);
                }
                (exact, similar, hits)
            });
            let (e50, e99) = percentiles(exact);
            let (s50, s99) = percentiles(similar);
            println!(
                "cache lookup, {}, {entries} entries, 200 lookups: exact p50 {e50:.3} ms p99 {e99:.3} ms; similar (cosine 0.97) p50 {s50:.3} ms p99 {s99:.3} ms, {hits}/200 found",
                b.name
            );
        }
        from = entries;
    }

    // Criterion's median for the in-memory similar lookup (the DynamoDB figures above come
    // from the emulator and are printed only).
    let memory = &benches[0];
    let entries = SIZES[SIZES.len() - 1];
    let mut i = 0;
    c.bench_function("cache_similar_lookup_memory", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    i += 1;
                    total += memory.similar(i, entries).await.0;
                }
                total
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
