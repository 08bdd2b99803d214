//! Fault injection: each fault on 127.0.0.1 — the vector store slow, failing or unreachable,
//! the LLM refusing connections, answering 5xx, stalling before or during the stream, cutting
//! the stream or sending garbage, the answer cache failing — must end the answer in a degraded
//! answer (`meta.degraded` says why, then `done`) or a clean `error` event (code and
//! `retryable` right), within its deadline. Never a hang, never a stream that just stops.
//!
//! Elsewhere: the client going away cancels the upstream request (`disconnect.rs`), DynamoDB
//! dying under a running `sluice serve` (`functions/local/tests/cli.rs`), a failing rerank
//! component (`components.rs`), the Lambda time limit (`sluice_core::http` unit tests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use serde_json::{Value, json};
use sluice_core::cache::{CacheEntry, CacheStore};
use sluice_core::error::CacheError;
use sluice_core::stages::Store;
use sluice_tests::{Troubled, closed_llm_url, start_custom};

/// What the LLM stand-in does with every request.
#[derive(Clone, Copy)]
enum Llm {
    /// Answers with this status and a JSON error.
    Status(u16),
    /// Sends the response headers, then nothing.
    StallBefore,
    /// Streams `n` tokens, then nothing.
    StallAfter(usize),
    /// Streams `n` tokens, then closes the stream without a finish or `[DONE]`.
    CutAfter(usize),
    /// Streams something that is not SSE JSON.
    Garbage,
}

fn token(n: usize) -> String {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": format!("w{n} ")}}]});
    format!("data: {chunk}\n\n")
}

/// An OpenAI-compatible stand-in on 127.0.0.1 that misbehaves as `mode` says.
async fn llm(mode: Llm) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let handler = move || async move {
        let sse = |body: Body| {
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap()
        };
        match mode {
            Llm::Status(code) => axum::response::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(r#"{"error":{"message":"injected"}}"#))
                .unwrap(),
            Llm::StallBefore => sse(Body::from_stream(futures::stream::pending::<
                Result<String, std::io::Error>,
            >())),
            Llm::StallAfter(n) => {
                let tokens = futures::stream::iter((0..n).map(|i| Ok(token(i))));
                sse(Body::from_stream(futures::StreamExt::chain(
                    tokens,
                    futures::stream::pending::<Result<String, std::io::Error>>(),
                )))
            }
            Llm::CutAfter(n) => {
                let tokens = (0..n).map(token).collect::<String>();
                sse(Body::from(tokens))
            }
            Llm::Garbage => sse(Body::from("data: <html>502 Bad Gateway</html>\n\n")),
        }
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(handler));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A cache backend that fails every call (DynamoDB throttling or unreachable).
struct BrokenCache;

#[async_trait::async_trait]
impl CacheStore for BrokenCache {
    fn backend(&self) -> &'static str {
        "broken"
    }
    fn in_process(&self) -> bool {
        false
    }
    async fn get(&self, _: &str, _: &str) -> Result<Option<CacheEntry>, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn candidates(&self, _: &str, _: &[u32]) -> Result<Vec<CacheEntry>, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn put(&self, _: &CacheEntry) -> Result<(), CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
    async fn clear(&self, _: &str) -> Result<usize, CacheError> {
        Err(CacheError::Backend("injected: cache unreachable".into()))
    }
}

/// How an answer under a fault must end.
enum Ending {
    /// `meta.degraded` holds this reason, tokens stream, then `done`.
    Degraded(&'static str),
    /// `done` with nothing degraded (a fault the answer must not even show).
    Done,
    /// An `error` event with this code and `retryable`, after `tokens` tokens.
    Error(&'static str, bool, usize),
}

struct Fault {
    name: &'static str,
    overrides: Vec<(&'static str, String)>,
    store: Option<(Duration, bool)>,
    cache: bool,
    ending: Ending,
    /// `meta` (degraded or normal answers) or the closing `error` must arrive before this.
    within: Duration,
}

/// The retrieval deadline every fault runs under.
const DEADLINE: (&str, &str) = ("SLUICE_RETRIEVAL_DEADLINE_MS", "150");

/// Short LLM timeouts, so that the stalls are found in a second. Only for the stand-ins: the
/// real local model's prefill of a prompt with sources can take longer than this on a loaded
/// machine.
fn stand_in_timeouts(url: String) -> Vec<(&'static str, String)> {
    vec![
        ("SLUICE_LLM_URL", url),
        ("SLUICE_LLM_FIRST_TOKEN_TIMEOUT_MS", "800".into()),
        ("SLUICE_LLM_IDLE_TIMEOUT_MS", "500".into()),
    ]
}

async fn faults() -> Vec<Fault> {
    let llm_at = stand_in_timeouts;
    let secs = Duration::from_secs;
    vec![
        Fault {
            name: "vector store slow (5 s, deadline 150 ms)",
            overrides: vec![],
            store: Some((secs(5), false)),
            cache: false,
            ending: Ending::Degraded("retrieval_timeout"),
            within: secs(3),
        },
        Fault {
            name: "vector store failing",
            overrides: vec![],
            store: Some((Duration::ZERO, true)),
            cache: false,
            ending: Ending::Degraded("retrieval_failed"),
            within: secs(3),
        },
        Fault {
            name: "remote vector store unreachable (Qdrant, closed port)",
            overrides: vec![
                ("SLUICE_STORE", "qdrant".into()),
                (
                    "SLUICE_QDRANT_URL",
                    closed_llm_url().trim_end_matches("/v1").into(),
                ),
            ],
            store: None,
            cache: false,
            ending: Ending::Degraded("retrieval_failed"),
            within: secs(3),
        },
        Fault {
            name: "answer cache failing",
            overrides: vec![],
            store: None,
            cache: true,
            ending: Ending::Done,
            within: secs(3),
        },
        Fault {
            name: "LLM refusing connections",
            overrides: llm_at(closed_llm_url()),
            store: None,
            cache: false,
            ending: Ending::Error("llm_unavailable", true, 0),
            within: secs(3),
        },
        Fault {
            name: "LLM answering 503",
            overrides: llm_at(llm(Llm::Status(503)).await),
            store: None,
            cache: false,
            ending: Ending::Error("llm_unavailable", true, 0),
            within: secs(3),
        },
        Fault {
            name: "LLM answering 400",
            overrides: llm_at(llm(Llm::Status(400)).await),
            store: None,
            cache: false,
            ending: Ending::Error("llm_rejected", false, 0),
            within: secs(3),
        },
        Fault {
            name: "LLM stalling before the first token",
            overrides: llm_at(llm(Llm::StallBefore).await),
            store: None,
            cache: false,
            ending: Ending::Error("llm_timeout", true, 0),
            within: secs(4),
        },
        Fault {
            name: "LLM stalling mid-stream",
            overrides: llm_at(llm(Llm::StallAfter(3)).await),
            store: None,
            cache: false,
            ending: Ending::Error("llm_stream_failed", true, 3),
            within: secs(4),
        },
        Fault {
            name: "LLM cutting the stream mid-answer",
            overrides: llm_at(llm(Llm::CutAfter(3)).await),
            store: None,
            cache: false,
            ending: Ending::Error("llm_stream_failed", true, 3),
            within: secs(3),
        },
        Fault {
            name: "LLM sending garbage",
            overrides: llm_at(llm(Llm::Garbage).await),
            store: None,
            cache: false,
            ending: Ending::Error("llm_stream_failed", true, 0),
            within: secs(3),
        },
    ]
}

/// Runs one fault; `Err` says how the answer failed the contract.
async fn inject(fault: &Fault) -> Result<(), String> {
    let mut overrides: Vec<(&str, &str)> = vec![DEADLINE];
    overrides.extend(fault.overrides.iter().map(|(k, v)| (*k, v.as_str())));
    let store = fault.store;
    let wrap = move |inner: Arc<dyn Store>| -> Arc<dyn Store> {
        match store {
            Some((delay, fail)) => Arc::new(Troubled { inner, delay, fail }),
            None => inner,
        }
    };
    let cache = fault
        .cache
        .then(|| Arc::new(BrokenCache) as Arc<dyn CacheStore>);
    let server = start_custom(&overrides, wrap, cache).await;
    if fault.store.is_some() || fault.cache {
        server.ingest_samples().await;
    }
    let answer = server
        .answer(&json!({"query": "How do I reset my password?"}))
        .await;
    server.stop().await;
    answer.assert_well_formed();
    let names = answer.names();
    let last = answer.events.last().ok_or("no events")?;
    let meta = answer.first("meta");
    // A degraded answer must not wait for the fault: `meta` (sources or none, and why) leaves
    // within the limit, then the model answers at its own pace. An error ends the stream
    // within it.
    let (what, at) = match fault.ending {
        Ending::Error(..) => ("ended", last.at),
        _ => ("meta", meta.at),
    };
    if at > fault.within {
        return Err(format!("{what} after {at:?} (limit {:?})", fault.within));
    }
    let meta = &meta.data;
    let tokens = names.iter().filter(|n| **n == "token").count();
    match fault.ending {
        Ending::Degraded(_) | Ending::Done => {
            let degraded: Vec<&str> = meta["degraded"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let expected: Vec<&str> = match fault.ending {
                Ending::Degraded(reason) => vec![reason],
                _ => vec![],
            };
            if degraded != expected {
                return Err(format!("degraded {degraded:?}, expected {expected:?}"));
            }
            if last.name != "done" || tokens == 0 {
                return Err(format!(
                    "expected tokens then done: {names:?} {}",
                    last.data
                ));
            }
        }
        Ending::Error(code, retryable, after) => {
            let error = &last.data;
            if last.name != "error" || error["code"] != code || error["retryable"] != retryable {
                return Err(format!(
                    "expected error {code} (retryable {retryable}): {names:?} {error}"
                ));
            }
            if tokens != after {
                return Err(format!(
                    "{tokens} tokens before the error, expected {after}"
                ));
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_injected_fault_ends_in_a_degraded_answer_or_a_clean_error_in_time() {
    let faults = faults().await;
    let mut failed = Vec::new();
    for fault in &faults {
        let started = Instant::now();
        let result = inject(fault).await;
        let outcome = match &result {
            Ok(()) => "survived".to_string(),
            Err(why) => format!("FAILED: {why}"),
        };
        println!(
            "fault: {:<55} {outcome} ({:?})",
            fault.name,
            started.elapsed()
        );
        if let Err(why) = result {
            failed.push(format!("{}: {why}", fault.name));
        }
    }
    println!(
        "faults injected: {}, survived: {}",
        faults.len(),
        faults.len() - failed.len()
    );
    assert!(failed.is_empty(), "{failed:#?}");
}
