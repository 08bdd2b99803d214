//! Pipeline overhead before the LLM call: from a request entering `Pipeline::answer` to the
//! moment the upstream request is sent (embed + hybrid retrieval + prompt), with the real
//! model and a Qdrant Edge store holding the sample corpus. The LLM here is a bench fixture
//! that records when it is called and finishes at once; it is not a model.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use futures::StreamExt;
use sluice_core::error::LlmError;
use sluice_core::pipeline::AnswerRequest;
use sluice_core::sse::{Event, Timings};
use sluice_core::stages::{ChatMessage, Llm, LlmEvent, LlmStream, Store};
use sluice_core::{Config, Pipeline};
use sluice_retrieve::EdgeStore;

/// Records the instant `stream` is called; yields one token and finishes.
struct Stopwatch(Mutex<Option<Instant>>);

#[async_trait]
impl Llm for Stopwatch {
    fn model_id(&self) -> &str {
        "bench-fixture"
    }
    async fn stream(&self, _: Vec<ChatMessage>, _: u32) -> Result<LlmStream, LlmError> {
        *self.0.lock().unwrap() = Some(Instant::now());
        let events = vec![
            Ok(LlmEvent::Token("ok".into())),
            Ok(LlmEvent::Finish {
                finish_reason: "stop".into(),
                completion_tokens: Some(1),
            }),
        ];
        Ok(Box::pin(futures::stream::iter(events)))
    }
    async fn ready(&self) -> Result<(), LlmError> {
        Ok(())
    }
}

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
    let llm = Arc::new(Stopwatch(Mutex::new(None)));
    let pipeline = Arc::new(Pipeline::new(
        config,
        sluice_tests::model(),
        store,
        llm.clone(),
    ));

    // The sample corpus, copied 40 times under different ids (360 documents).
    runtime.block_on(async {
        let mut docs = Vec::new();
        for entry in std::fs::read_dir(sluice_tests::samples_dir()).unwrap() {
            let p = entry.unwrap().path();
            let name = p.display().to_string();
            docs.extend(
                sluice_core::ingest::parse_file(&name, &std::fs::read(&p).unwrap()).unwrap(),
            );
        }
        let mut all = Vec::new();
        for copy in 0..40 {
            for d in &docs {
                let mut d = d.clone();
                d.id = format!("{}#{copy}", d.id);
                all.push(d);
            }
        }
        pipeline.ingest("default", all).await.unwrap();
    });

    let stages: Mutex<Vec<Timings>> = Mutex::new(Vec::new());
    let overhead = |i: usize| -> Duration {
        let request = AnswerRequest {
            tenant: "default".into(),
            query: QUERIES[i % QUERIES.len()].into(),
            k: 5,
            session_id: None,
            retrieval_deadline: Duration::from_secs(10),
            received: Instant::now(),
        };
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
        "pipeline stages (median ms): embed {:.2}, retrieve {:.2}, prompt {:.2}",
        median(|t| t.embed_ms),
        median(|t| t.retrieve_ms),
        median(|t| t.prompt_ms)
    );

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

criterion_group!(benches, bench);
criterion_main!(benches);
