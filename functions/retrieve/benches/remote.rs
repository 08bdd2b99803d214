//! Client overhead of the Qdrant REST adapter per query: building the body (BM25 encoding,
//! JSON), the pooled keep-alive connection, and parsing 5 hits with their 384-d vectors.
//! The server is a stand-in on 127.0.0.1 that answers every request at once with the same
//! canned response (a stand-in for the transport only), so the time measured is the client's
//! plus one loopback round trip.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use sluice_core::Config;
use sluice_core::stages::Store;
use sluice_retrieve::qdrant::QdrantStore;

fn canned() -> String {
    let vector: Vec<f32> = (0..384).map(|i| (i as f32 / 384.0) - 0.5).collect();
    let points: Vec<_> = (0..5)
        .map(|i| {
            json!({
                "id": "550e8400-e29b-41d4-a716-446655440000", "version": 1, "score": 0.5 / (i + 1) as f64,
                "payload": {"tenant": "bench", "doc_id": format!("doc-{i}"), "chunk": 0, "title": "T",
                            "source": "s", "text": "a chunk of about two hundred words ".repeat(30), "tokens": 200},
                "vector": {"dense": vector},
            })
        })
        .collect();
    json!({"result": {"points": points}, "status": "ok", "time": 0.0001}).to_string()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let body = canned();
    let store = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(move || {
            let body = body.clone();
            async move { ([("content-type", "application/json")], body) }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let vars = [
            ("SLUICE_STORE", "qdrant"),
            ("SLUICE_QDRANT_URL", url.as_str()),
        ];
        let config = Config::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap();
        QdrantStore::from_config(&config).unwrap()
    });
    let vector: Vec<f32> = (0..384).map(|i| ((i * 7) % 13) as f32 / 13.0).collect();
    let query = "How long does a replacement card take to arrive?";
    let once = || {
        runtime.block_on(async {
            let started = Instant::now();
            let hits = store.search("bench", query, &vector, 5).await.unwrap();
            assert_eq!(hits.len(), 5);
            started.elapsed()
        })
    };
    for _ in 0..50 {
        once();
    }
    let mut samples: Vec<Duration> = (0..2000).map(|_| once()).collect();
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    println!(
        "qdrant client overhead per query (stand-in on loopback, 5 hits with 384-d vectors), 2,000 queries: p50 {:.0} µs, p99 {:.0} µs",
        at(0.5).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
    c.bench_function("qdrant_client_query", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| once()).sum())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
