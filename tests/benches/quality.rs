//! What a tenant's quality loop costs, with the real model and a Qdrant Edge store holding the
//! sample corpus 40 times over (360 documents), served on 127.0.0.1 as `sluice serve` serves
//! it (the records in files, the cache in memory; the LLM a fixture that answers at once):
//!
//! - a retrieval-only evaluation run of 100 questions (`POST /v1/evals/runs`), beside the same
//!   100 questions sent as searches (`POST /v1/search`) one after another, three rounds each,
//!   interleaved;
//! - a rating (`POST /v1/feedback`): an up-vote, and a down-vote that forgets a cached answer;
//! - the time to first token of answers while every answer is rated, beside answers that are
//!   not: the answer's record is kept after its `done` and its gap is noted in the background,
//!   so nothing should move.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use sluice_core::Pipeline;
use sluice_core::cache::{CacheSettings, SemanticCache};
use sluice_testkit::tenant;

const TOPICS: &[&str] = &[
    "How long does a replacement card take",
    "What is the daily ATM withdrawal limit",
    "Can I overpay my fixed-rate mortgage",
    "When do international transfers leave",
    "How do I reset my online banking password",
    "What interest do savings accounts pay",
    "How do I report a lost card",
    "What does a SWIFT transfer cost",
    "How many wrong codes lock the password reset",
    "Which savings account pays the most",
];

/// 100 questions: each topic asked ten ways.
fn questions() -> Vec<String> {
    let ends = [
        "?",
        " today?",
        " for me?",
        " now?",
        " please?",
        " in 2026?",
        " online?",
        " here?",
        " abroad?",
        " again?",
    ];
    (TOPICS.iter())
        .flat_map(|t| ends.iter().map(move |e| format!("{t}{e}")))
        .collect()
}

fn percentiles(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
    (at(0.5), at(0.99))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let (config, wire, store) = sluice_tests::bench_parts(data.path());
    let ingest =
        sluice_core::Ingest::new(config.ingest.clone(), sluice_tests::model(), store.clone());
    let mut pipeline = Pipeline::new(
        config.answer.clone(),
        sluice_tests::model(),
        store,
        Arc::new(sluice_tests::Stopwatch::default()),
    );
    pipeline.cache = Some(Arc::new(SemanticCache::new(
        Arc::new(sluice_local::MemoryCache::new(10_000)),
        CacheSettings::from_config(&config.cache),
        sluice_embed::DIM,
    )));
    let mut server = sluice_http::Server::new(&wire).with_answers(Arc::new(pipeline));
    server.records = Some(Arc::new(sluice_local::FileRecords::new(
        &data.path().join("records"),
    )));
    let (url, _stop) = runtime.block_on(async {
        let all = sluice_tests::sample_copies(40);
        ingest.ingest(&tenant("default"), all).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let header_timeout = server.limits.header_timeout;
        tokio::spawn(sluice_http::serve(
            listener,
            sluice_http::router(Arc::new(server)),
            header_timeout,
            async move {
                let _ = stopped.await;
            },
        ));
        (url, stop)
    });
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let call = |method: reqwest::Method, path: &str, body: Value| -> (Value, String) {
        runtime.block_on(async {
            let response = (client
                .request(method, format!("{url}{path}"))
                .json(&body)
                .send())
            .await
            .unwrap();
            let text = response.text().await.unwrap();
            (serde_json::from_str(&text).unwrap_or(Value::Null), text)
        })
    };

    let questions = questions();
    let set = json!({"questions": questions.iter().map(|q| json!({"question": q, "documents": ["samples/*"]})).collect::<Vec<_>>()});
    let (stored, raw) = call(reqwest::Method::PUT, "/v1/evals/sets/bench", set);
    assert_eq!(stored["questions"], 100, "{raw}");

    // A warm-up of each, then three rounds, interleaved.
    let (mut runs, mut searches, mut per_question) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..4 {
        let started = Instant::now();
        let (_, streamed) = call(
            reqwest::Method::POST,
            "/v1/evals/runs",
            json!({"set": "bench"}),
        );
        let run_ms = started.elapsed().as_secs_f64() * 1e3;
        let report: Value = (streamed.split("\n\n"))
            .find_map(|f| {
                f.strip_prefix("event: report\ndata: ")
                    .map(|d| serde_json::from_str(d).unwrap())
            })
            .expect("a report");
        assert_eq!(
            (report["done"].clone(), report["status"].clone()),
            (json!(100), json!("finished"))
        );
        let started = Instant::now();
        for q in &questions {
            let (found, raw) = call(reqwest::Method::POST, "/v1/search", json!({"query": q}));
            assert!(
                found["documents"].as_array().is_some_and(|d| !d.is_empty()),
                "{raw}"
            );
        }
        let search_ms = started.elapsed().as_secs_f64() * 1e3;
        if round > 0 {
            runs.push(run_ms);
            searches.push(search_ms);
            per_question.extend(
                (report["questions"].as_array().unwrap().iter())
                    .filter_map(|q| q["timings"]["total_ms"].as_f64()),
            );
        }
    }
    let (q50, q99) = percentiles(per_question);
    println!(
        "eval run, 100 questions, retrieval only: {:.0} / {:.0} / {:.0} ms (three runs; per question p50 {q50:.2} ms, p99 {q99:.2} ms); the same 100 as searches one by one: {:.0} / {:.0} / {:.0} ms; run / searches {:.2}",
        runs[0],
        runs[1],
        runs[2],
        searches[0],
        searches[1],
        searches[2],
        runs.iter().sum::<f64>() / searches.iter().sum::<f64>()
    );

    // Answers over HTTP, time to first token, interleaved: one rated (down, then up) after
    // each, one not.
    let ttft = |query: &str| -> (f64, String) {
        runtime.block_on(async {
            let sent = Instant::now();
            let body = json!({"query": query, "cache": "bypass"});
            let response = client
                .post(format!("{url}/v1/answer"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let mut stream = response.bytes_stream();
            let (mut seen, mut first) = (String::new(), None);
            while let Some(chunk) = stream.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
                if first.is_none() && seen.contains("event: token") {
                    first = Some(sent.elapsed().as_secs_f64() * 1e3);
                }
            }
            let id = seen
                .split("\"request_id\":\"")
                .nth(1)
                .and_then(|s| s.split('"').next());
            (first.expect("a token"), id.unwrap_or_default().to_string())
        })
    };
    let (mut rated, mut unrated, mut up, mut down) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, q) in questions.iter().cycle().take(400).enumerate() {
        let (ms, id) = ttft(q);
        if i % 2 == 0 {
            unrated.push(ms);
            continue;
        }
        rated.push(ms);
        let rating = ["up", "down"][(i / 2) % 2];
        let started = Instant::now();
        let (answer, raw) = call(
            reqwest::Method::POST,
            "/v1/feedback",
            json!({"request_id": id, "rating": rating}),
        );
        assert_eq!(answer["rating"], rating, "{raw}");
        let took = started.elapsed().as_secs_f64() * 1e3;
        if rating == "up" {
            up.push(took)
        } else {
            down.push(took)
        }
    }
    let ((r50, r99), (u50, u99)) = (percentiles(rated), percentiles(unrated));
    let ((up50, up99), (down50, down99)) = (percentiles(up), percentiles(down));
    println!(
        "feedback: a rating p50 {up50:.2} / p99 {up99:.2} ms (up), {down50:.2} / {down99:.2} ms (down: the cache forgotten and the question kept out), up to 200 kept in the tenant's file; answers' ttft rated p50 {r50:.2} / p99 {r99:.2} ms, not rated {u50:.2} / {u99:.2} ms (200 each, interleaved)"
    );
}
