//! Pipeline overhead before the LLM call: from a request entering `Pipeline::answer` to the
//! moment the upstream request is sent (embed + hybrid retrieval + prompt), with the real
//! model and a Qdrant Edge store holding the sample corpus. The LLM here is a bench fixture
//! that records when it is called and finishes at once; it is not a model.
//!
//! Then time to first token of cache hits on the local server (the router on 127.0.0.1 with
//! the in-memory cache), measured by an HTTP client from sending the request to receiving
//! the first `token` event: exact repeats, paraphrases (which need the query embedding), and
//! the same questions with the cache bypassed for comparison. Last, what usage metering
//! costs (`usage:` line).

use sluice_testkit::tenant;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use sluice_contract::sse::{Event, Timings};
use sluice_contract::stages::Store;
use sluice_core::cache::{CacheSettings, SemanticCache};
use sluice_core::pipeline::AnswerRequest;
use sluice_core::{Config, Pipeline};
use sluice_local::MemoryCache;
use sluice_retrieve::EdgeStore;

const QUERIES: &[&str] = &[
    "How long does a replacement card take?",
    "What is the daily ATM withdrawal limit for premium accounts?",
    "Can I overpay my fixed-rate mortgage without a charge?",
    "When do international transfers leave the same day?",
];

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut config = Config::from_env().expect("config");
    config.data_dir = data.path().to_path_buf();
    let store: Arc<dyn Store> =
        Arc::new(EdgeStore::open(&config.data_dir, sluice_embed::DIM).unwrap());
    let llm = Arc::new(sluice_tests::Stopwatch::default());
    let ingest =
        sluice_core::Ingest::new(config.ingest.clone(), sluice_tests::model(), store.clone());
    let pipeline = Arc::new(Pipeline::new(
        config.answer,
        sluice_tests::model(),
        store,
        llm.clone(),
    ));

    // The sample corpus, copied 40 times under different ids (360 documents).
    runtime.block_on(async {
        let all = sluice_tests::sample_copies(40);
        ingest.ingest(&tenant("default"), all).await.unwrap();
    });

    let stages: Mutex<Vec<Timings>> = Mutex::new(Vec::new());
    let ask = |i: usize| AnswerRequest {
        tenant: tenant("default"),
        query: QUERIES[i % QUERIES.len()].into(),
        k: 5,
        filter: None,
        binding: None,
        access: None,
        conversation: Default::default(),
        max_tokens: None,
        rerank_context: Default::default(),
        session_id: None,
        retrieval_deadline: Duration::from_secs(10),
        received: Instant::now(),
        bypass_cache: false,
        trace: sluice_core::trace::TraceContext::from_header(None),
        include_prompt: false,
        ends_by: None,
        show_rerank_failure: false,
        settings: None,
        extract: None,
        pinned: Default::default(),
    };
    let overhead = |i: usize| -> Duration {
        let request = ask(i);
        let received = request.received;
        let done = runtime.block_on(async {
            let events: Vec<_> = pipeline.answer(request).collect().await;
            match events.into_iter().last() {
                Some(Event::Done(done)) => done,
                other => panic!("expected done, got {other:?}"),
            }
        });
        stages.lock().unwrap().push(done.timings.clone());
        llm.0.lock().unwrap().take().expect("LLM called") - received
    };

    // Percentiles over a fixed number of requests, printed for the README.
    for i in 0..20 {
        overhead(i);
    }
    let mut samples: Vec<Duration> = (0..400).map(overhead).collect();
    let in_order = samples.clone();
    samples.sort();
    let pct = |p: f64| {
        samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64() * 1e3
    };
    println!(
        "pipeline overhead before the LLM call over {} requests: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms",
        samples.len(),
        pct(0.50),
        pct(0.90),
        pct(0.99)
    );

    let stages = std::mem::take(&mut *stages.lock().unwrap());
    let median = |f: fn(&Timings) -> Option<f64>| {
        let mut v: Vec<f64> = stages.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "pipeline stages (median ms): embed {:.2}, retrieve {:.2}, prompt {:.2}, evidence {:.2}",
        median(|t| t.embed_ms),
        median(|t| t.retrieve_ms),
        median(|t| t.prompt_ms),
        median(|t| t.evidence_ms)
    );
    // The evidence step (highlights and the extract) inside the same 400 requests: its own
    // percentiles, and the overhead of each request with and without its evidence time.
    let measured = &stages[20..20 + in_order.len()];
    let mut evidence: Vec<f64> = measured.iter().filter_map(|t| t.evidence_ms).collect();
    let mut without: Vec<f64> = (in_order.iter().zip(measured))
        .map(|(d, t)| d.as_secs_f64() * 1e3 - t.evidence_ms.unwrap_or(0.0))
        .collect();
    evidence.sort_by(f64::total_cmp);
    without.sort_by(f64::total_cmp);
    let at = |v: &[f64], p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    println!(
        "pipeline evidence step: p50 {:.3} ms, p99 {:.3} ms; overhead with it p50 {:.2} / p99 {:.2} ms, without it p50 {:.2} / p99 {:.2} ms",
        at(&evidence, 0.5),
        at(&evidence, 0.99),
        pct(0.50),
        pct(0.99),
        at(&without, 0.5),
        at(&without, 0.99)
    );

    // A search (the sources alone) beside an answer's time before its LLM call, request by
    // request, interleaved: the same stages but the prompt.
    let search = |i: usize| -> Duration {
        let request = ask(i);
        let found = runtime.block_on(pipeline.search(&request));
        assert!(
            found.degraded.is_empty() && !found.documents.is_empty(),
            "{found:?}"
        );
        request.received.elapsed()
    };
    let (mut answered, mut searched): (Vec<f64>, Vec<f64>) = (0..400)
        .map(|i| {
            (
                overhead(i).as_secs_f64() * 1e3,
                search(i).as_secs_f64() * 1e3,
            )
        })
        .unzip();
    answered.sort_by(f64::total_cmp);
    searched.sort_by(f64::total_cmp);
    println!(
        "search: p50 {:.2} / p99 {:.2} ms; the answer before its LLM call p50 {:.2} / p99 {:.2} ms \
         (400 each, interleaved); p99 difference {:+.2} ms",
        at(&searched, 0.5),
        at(&searched, 0.99),
        at(&answered, 0.5),
        at(&answered, 0.99),
        at(&searched, 0.99) - at(&answered, 0.99)
    );

    cache_hits(&runtime, llm.clone());
    usage_costs(&runtime);

    let mut i = 0;
    c.bench_function("pipeline_overhead_before_llm", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    i += 1;
                    overhead(i)
                })
                .sum()
        })
    });
}

/// Paraphrases of [`QUERIES`] (cosine ≥ 0.95 with MiniLM, no guard conflict).
const PARAPHRASES: &[&str] = &[
    "How long will a replacement card take?",
    "What's the daily ATM withdrawal limit for premium accounts?",
    "Can I overpay my fixed rate mortgage without a charge?",
    "When do international transfers leave on the same day?",
];

/// Client-measured TTFT of cache hits over HTTP, printed as percentiles.
fn cache_hits(runtime: &tokio::runtime::Runtime, llm: Arc<sluice_tests::Stopwatch>) {
    let data = tempfile::tempdir().unwrap();
    let (config, wire, store) = sluice_tests::bench_parts(data.path());
    let cache = SemanticCache::new(
        Arc::new(MemoryCache::new(10_000)),
        CacheSettings::from_config(&config.cache),
        sluice_embed::DIM,
    );
    let ingest =
        sluice_core::Ingest::new(config.ingest.clone(), sluice_tests::model(), store.clone());
    let mut pipeline = Pipeline::new(config.answer.clone(), sluice_tests::model(), store, llm);
    pipeline.cache = Some(Arc::new(cache));
    let server = sluice_http::Server::new(&wire).with_answers(Arc::new(pipeline));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (url, server) = runtime.block_on(async {
        let docs = sluice_tests::sample_documents();
        ingest.ingest(&tenant("default"), docs).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/answer", listener.local_addr().unwrap());
        let shutdown = async {
            let _ = stopped.await;
        };
        let header_timeout = server.limits.header_timeout;
        let server = tokio::spawn(sluice_http::serve(
            listener,
            sluice_http::router(Arc::new(server)),
            header_timeout,
            shutdown,
        ));
        (url, server)
    });
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Sends `body`; returns the time to the first token event and the `meta.cache` state.
    let ttft = |body: serde_json::Value| -> (Duration, String) {
        runtime.block_on(async {
            let sent = Instant::now();
            let response = client.post(&url).json(&body).send().await.unwrap();
            let mut stream = response.bytes_stream();
            let mut seen = String::new();
            let mut first = None;
            while let Some(chunk) = stream.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
                if first.is_none() && seen.contains("event: token") {
                    first = Some(sent.elapsed());
                }
            }
            let state = ["hit", "miss", "bypass"]
                .into_iter()
                .find(|s| seen.contains(&format!("\"cache\":\"{s}\"")))
                .unwrap_or("?");
            (first.expect("a token event"), state.to_string())
        })
    };
    for q in QUERIES {
        assert_eq!(ttft(serde_json::json!({ "query": q })).1, "miss");
    }
    std::thread::sleep(Duration::from_millis(100));
    for (name, questions, cache) in [
        ("exact repeat", QUERIES, "auto"),
        ("paraphrase", PARAPHRASES, "auto"),
        ("bypassed (no cache)", QUERIES, "bypass"),
    ] {
        let mut hits = 0;
        let mut samples: Vec<Duration> = (0..400)
            .map(|i| {
                let body =
                    serde_json::json!({ "query": questions[i % questions.len()], "cache": cache });
                let (took, state) = ttft(body);
                hits += usize::from(state == "hit");
                took
            })
            .collect();
        samples.sort();
        let pct = |p: f64| {
            samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)].as_secs_f64()
                * 1e3
        };
        println!(
            "cache-hit ttft, {name}: p50 {:.2} ms, p99 {:.2} ms over {} requests ({hits} hits)",
            pct(0.5),
            pct(0.99),
            samples.len()
        );
    }
    // Stop the server before its store's folder goes away.
    let _ = stop.send(());
    drop(client);
    let _ = runtime.block_on(server);
}

/// What usage metering adds: the budget check on the request path (memory only), recording
/// an answer's counts, and one flush to the local file after a stream ends — with a year of
/// rows already in the file for 100 tenants × 5 keys — printed as percentiles.
fn usage_costs(runtime: &tokio::runtime::Runtime) {
    use sluice_contract::{usage::Counts, usage::UsageKey, usage::UsageStore};
    use sluice_core::{usage::Meter, usage::MeterSettings};
    use sluice_local::LocalUsage;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.json");
    let store = Arc::new(LocalUsage::open(&path).unwrap());
    let one = Counts {
        answers: 1,
        prompt_tokens: 900,
        completion_tokens: 200,
        ..Counts::default()
    };
    let tenants: Vec<_> = (0..100).map(|t| tenant(&format!("t{t}"))).collect();
    let today = sluice_core::usage::today();
    let history: Vec<_> = (0..30)
        .flat_map(|d| {
            let day = today - time_days(d);
            tenants.iter().flat_map(move |t| {
                (0..5).map(move |k| {
                    let key = UsageKey {
                        tenant: t.clone(),
                        key: Some(format!("key{k}")),
                        day,
                    };
                    (key, one)
                })
            })
        })
        .collect();
    runtime.block_on(store.add(&history)).unwrap();
    let settings = MeterSettings {
        timeout: Duration::from_secs(2),
        refresh: Duration::from_secs(10),
        tenant_budgets: tenants.iter().map(|t| (t.clone(), u64::MAX)).collect(),
    };
    let meter = Arc::new(Meter::new(store, settings));
    let pct = |mut v: Vec<Duration>, p: f64| {
        v.sort();
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1e6
    };
    let (mut checks, mut records, mut flushes) = (vec![], vec![], vec![]);
    runtime.block_on(async {
        for i in 0..2000 {
            let t = &tenants[i % tenants.len()];
            let started = Instant::now();
            // Admission as the answer route does it: a hold of the model's window, released.
            let _ = meter.reserve(t, Some("key1"), Some(u64::MAX), 8192);
            checks.push(started.elapsed());
            let started = Instant::now();
            meter.record(t, Some("key1"), one);
            records.push(started.elapsed());
            if i % 10 == 0 {
                let started = Instant::now();
                meter.flush().await.unwrap();
                flushes.push(started.elapsed());
            }
        }
    });
    println!(
        "usage: budget check p50 {:.2} µs p99 {:.2} µs; record p50 {:.2} µs; flush to the local file ({} rows) p50 {:.0} µs p99 {:.0} µs",
        pct(checks.clone(), 0.5),
        pct(checks, 0.99),
        pct(records, 0.5),
        history.len(),
        pct(flushes.clone(), 0.5),
        pct(flushes, 0.99),
    );
}

fn time_days(n: i64) -> std::time::Duration {
    std::time::Duration::from_secs(86_400 * n as u64)
}

criterion_group!(benches, bench);
criterion_main!(benches);
