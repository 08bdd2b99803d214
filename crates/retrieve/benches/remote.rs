//! Client overhead of the remote-store adapters per query: building the bodies (BM25
//! encoding, JSON), the pooled keep-alive connections, parsing the hits with their 384-d
//! vectors, and for Pinecone the second request and the fusion.
//!
//! The server is a stand-in on 127.0.0.1 — a stand-in for the transport only — that answers
//! every request at once with a canned response. It runs on its own thread and runtime, so
//! the client's runtime does only the client's work; the time measured is the client's plus
//! one loopback round trip (Pinecone: two, in parallel).

use sluice_testkit::tenant;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use sluice_contract::stages::{Search, Store};
use sluice_retrieve::StoreConfig;
use sluice_retrieve::pinecone::PineconeStore;
use sluice_retrieve::qdrant::QdrantStore;

const QUERIES: usize = 2000;

/// A 384-d vector as the servers write it: each f32 in its shortest decimal form (about
/// nine digits), not widened to a 17-digit f64.
fn vector() -> Vec<f64> {
    (0..384)
        .map(|i| {
            let x = (i as f32 / 384.0) - 0.5;
            x.to_string().parse().unwrap()
        })
        .collect()
}

fn payload(i: usize) -> Value {
    json!({"tenant": "bench", "doc_id": format!("doc-{i}"), "chunk": 0, "title": "T",
           "source": "s", "text": "a chunk of about two hundred words ".repeat(30), "tokens": 200})
}

/// Qdrant's query response: 5 fused points with their dense vectors.
fn qdrant_response() -> String {
    let points: Vec<_> = (0..5)
        .map(|i| {
            json!({"id": "550e8400-e29b-41d4-a716-446655440000", "version": 1,
                   "score": 0.5 / (i + 1) as f64, "payload": payload(i),
                   "vector": {"dense": vector()}})
        })
        .collect();
    json!({"result": {"points": points}, "status": "ok", "time": 0.0001}).to_string()
}

/// Pinecone's query response: 20 matches per index (the candidates fusion needs), values
/// only on the dense side.
fn pinecone_response(dense: bool) -> String {
    let matches: Vec<_> = (0..20)
        .map(|i| {
            let mut m = json!({"id": format!("id-{}", if dense { i } else { 19 - i }),
                               "score": 1.0 / (i + 1) as f64, "metadata": payload(i)});
            if dense {
                m["values"] = json!(vector());
            }
            m
        })
        .collect();
    json!({"matches": matches, "namespace": "bench", "usage": {"readUnits": 5}}).to_string()
}

/// Serves `body` at every path from a thread of its own; returns the base URL.
fn stand_in(body: String) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}", listener.local_addr().unwrap()))
                .unwrap();
            let app = axum::Router::new().fallback(move || {
                let body = body.clone();
                async move { ([("content-type", "application/json")], body) }
            });
            axum::serve(listener, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

fn config(vars: &[(&str, &str)]) -> StoreConfig {
    StoreConfig::from_lookup(
        &|k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        },
        std::path::Path::new("sluice-data"),
    )
    .unwrap()
}

/// `QUERIES` timed calls of `call` after a warm-up, on the single-threaded client runtime;
/// returns (p50, p99) in µs.
fn measure<F: std::future::Future<Output = ()>>(
    runtime: &tokio::runtime::Runtime,
    call: impl Fn() -> F,
) -> (f64, f64) {
    let mut samples = runtime.block_on(async {
        let mut samples = Vec::with_capacity(QUERIES);
        for i in 0..QUERIES + 100 {
            let started = Instant::now();
            call().await;
            if i >= 100 {
                samples.push(started.elapsed());
            }
        }
        samples
    });
    samples.sort();
    let at = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1e6
    };
    (at(0.5), at(0.99))
}

/// Nanoseconds this thread has spent on a CPU (Linux `schedstat`), or `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Times `store`'s searches and prints them beside the bare round trip, with the CPU time the
/// client's thread spent per query (all of the client's work, none of the waiting).
fn report(name: &str, store: &dyn Store, bare: (f64, f64), runtime: &tokio::runtime::Runtime) {
    let vector: Vec<f32> = (0..384).map(|i| ((i * 7) % 13) as f32 / 13.0).collect();
    let query = "How long does a replacement card take to arrive?";
    let cpu_before = thread_cpu_ns();
    let (p50, p99) = measure(runtime, || async {
        let hits = store
            .search(&tenant("bench"), &Search::new(query, &vector, 5))
            .await
            .unwrap();
        assert_eq!(hits.len(), 5);
    });
    let cpu = match (cpu_before, thread_cpu_ns()) {
        (Some(a), Some(b)) => format!("{:.0} µs", (b - a) as f64 / 1e3 / (QUERIES + 100) as f64),
        _ => "unknown".into(),
    };
    println!(
        "{name} client overhead per query (stand-in on loopback), {QUERIES} queries: p50 {p50:.0} µs, p99 {p99:.0} µs; beyond a bare HTTP round trip: p50 {:.0} µs; client CPU per query (mean): {cpu}",
        p50 - bare.0
    );
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let qdrant_url = stand_in(qdrant_response());
    let dense_url = stand_in(pinecone_response(true));
    let sparse_url = stand_in(pinecone_response(false));
    let (qdrant, pinecone) = runtime.block_on(async {
        let qdrant = QdrantStore::from_config(&config(&[
            ("SLUICE_STORE", "qdrant"),
            ("SLUICE_QDRANT_URL", &qdrant_url),
        ]))
        .unwrap();
        let pinecone = PineconeStore::from_config(&config(&[
            ("SLUICE_STORE", "pinecone"),
            ("SLUICE_PINECONE_API_KEY", "bench"),
            ("SLUICE_PINECONE_HOST", &dense_url),
            ("SLUICE_PINECONE_SPARSE_HOST", &sparse_url),
        ]))
        .unwrap();
        (qdrant, pinecone)
    });
    // The floor: the same kind of pooled client asking the stand-in for a 2-byte body.
    let tiny = stand_in("{}".into());
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let cpu_before = thread_cpu_ns();
    let bare = measure(&runtime, || async {
        let r = client.post(&tiny).body("{}").send().await.unwrap();
        r.text().await.unwrap();
    });
    let cpu = cpu_before
        .zip(thread_cpu_ns())
        .map_or(0.0, |(a, b)| (b - a) as f64 / 1e3 / (QUERIES + 100) as f64);
    println!(
        "bare HTTP round trip on loopback (pooled reqwest client, 2-byte bodies), {QUERIES} calls: p50 {:.0} µs, p99 {:.0} µs; client CPU per call (mean): {cpu:.0} µs",
        bare.0, bare.1
    );
    report(
        "qdrant (5 hits with 384-d vectors)",
        &qdrant,
        bare,
        &runtime,
    );
    let body = qdrant_response();
    let (parse, _) = measure(&runtime, || async {
        let hits = sluice_retrieve::qdrant::parse_query_response(&body).unwrap();
        assert_eq!(hits.len(), 5);
    });
    println!(
        "qdrant response parsing alone ({} bytes): p50 {parse:.0} µs",
        body.len()
    );
    report(
        "pinecone (2 × 20 matches, fused to 5)",
        &pinecone,
        bare,
        &runtime,
    );
    for (name, store) in [
        ("qdrant_client_query", &qdrant as &dyn Store),
        ("pinecone_client_query", &pinecone),
    ] {
        c.bench_function(name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let vector = vec![0.1f32; 384];
                    let started = Instant::now();
                    for _ in 0..iters {
                        store
                            .search(
                                &tenant("bench"),
                                &Search::new("replacement card", &vector, 5),
                            )
                            .await
                            .unwrap();
                    }
                    started.elapsed()
                })
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
