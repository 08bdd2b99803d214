//! What the answer function does per invocation and at shutdown, apart from its `main` so that
//! it is tested in-process: [`per_invocation`] reads the invocation's deadline and X-Ray trace
//! from the context Lambda passes with each event, and [`drain_on_sigterm`] ends the open
//! answers when Lambda shuts the environment down (see [`drain`]).

use std::sync::Arc;
use std::time::Duration;

use sluice_http::{Server, StreamDeadline};

/// How long before the invocation's deadline an answer still streaming is ended with an
/// `error` event: time to write it and for the runtime to flush the stream before Lambda
/// stops the function.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// After SIGTERM, how long the drained streams get to end and be handed to the runtime
/// before the process exits (Lambda's shutdown phase is short: see [`drain_on_sigterm`]).
const SHUTDOWN_WAIT: Duration = Duration::from_millis(400);

/// What the request's invocation says, read from the invocation context Lambda passes with
/// each event (per invocation: on Lambda Managed Instances many are in flight at once):
/// - the stream deadline it allows (Lambda sends the deadline as Unix milliseconds);
/// - its X-Ray trace, continued as the request's `traceparent` when the caller sent none.
pub async fn per_invocation(mut request: axum::extract::Request) -> axum::extract::Request {
    let Some(context) = request.extensions().get::<lambda_http::Context>() else {
        return request;
    };
    let deadline = context.deadline;
    let traceparent = context
        .xray_trace_id
        .as_deref()
        .and_then(sluice_core::trace::traceparent_from_xray);
    if let Some(traceparent) = traceparent
        && !request.headers().contains_key("traceparent")
        && let Ok(value) = axum::http::HeaderValue::from_str(&traceparent)
    {
        request.headers_mut().insert("traceparent", value);
    }
    // No deadline stated (an emulator's timeout): none then.
    let Some(left) = sluice_app::time_left(deadline) else {
        return request;
    };
    let left = left.saturating_sub(DEADLINE_MARGIN);
    request
        .extensions_mut()
        .insert(StreamDeadline(tokio::time::Instant::now() + left));
    request
}

/// On SIGTERM (Lambda's shutdown phase; on Managed Instances while answers may still be
/// streaming): [`drain`], then exit.
pub async fn drain_on_sigterm(server: Arc<Server>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        tracing::warn!("cannot listen for SIGTERM: open answers will be cut at shutdown");
        return;
    };
    term.recv().await;
    drain(&server).await;
    std::process::exit(0);
}

/// Ends every open answer at once with its retryable `shutting_down` error — Lambda's
/// shutdown phase leaves no time to let them finish — waits up to [`SHUTDOWN_WAIT`] for the
/// streams to end, and writes the usage still pending.
pub async fn drain(server: &Server) {
    let open = server.metrics.active_streams();
    tracing::info!(open, "SIGTERM: ending open answers");
    if let Some(pipeline) = &server.answers {
        pipeline.drain();
    }
    let started = tokio::time::Instant::now();
    while server.metrics.active_streams() > 0 && started.elapsed() < SHUTDOWN_WAIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The last events leave through the runtime's own request for each stream.
    tokio::time::sleep(Duration::from_millis(50)).await;
    if let Some(meter) = &server.usage {
        meter.flush_before_exit().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;

    fn now_ms() -> u64 {
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
            .map_or(0, |d| d.as_millis() as u64)
    }

    /// A request as the runtime hands it over: with the invocation's context.
    fn invoked(deadline: u64, xray: Option<&str>, traceparent: Option<&str>) -> Request {
        let mut context = lambda_http::Context::default();
        context.deadline = deadline;
        context.xray_trace_id = xray.map(str::to_string);
        let mut request = Request::builder().uri("/v1/answer");
        if let Some(t) = traceparent {
            request = request.header("traceparent", t);
        }
        let mut request = request.body(Body::empty()).unwrap();
        request.extensions_mut().insert(context);
        request
    }

    fn stream_deadline(request: &Request) -> Option<Duration> {
        (request.extensions().get::<StreamDeadline>())
            .map(|d| d.0.saturating_duration_since(tokio::time::Instant::now()))
    }

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[tokio::test]
    async fn an_answer_must_end_a_margin_before_the_invocations_deadline() {
        let request = per_invocation(invoked(now_ms() + 10_000, None, None)).await;
        let left = stream_deadline(&request).expect("a stream deadline");
        let expected = Duration::from_millis(10_000) - DEADLINE_MARGIN;
        assert!(
            left <= expected && left > expected - Duration::from_millis(500),
            "{left:?} left, {expected:?} expected"
        );
        // A deadline already within the margin leaves nothing: the answer ends at once.
        let request = per_invocation(invoked(now_ms() + 100, None, None)).await;
        assert_eq!(stream_deadline(&request), Some(Duration::ZERO));
    }

    #[tokio::test]
    async fn an_emulators_timeout_or_no_context_is_no_deadline() {
        // cargo-lambda sends the timeout (600000 ms), not an instant: decades in the past.
        let request = per_invocation(invoked(600_000, None, None)).await;
        assert!(stream_deadline(&request).is_none());
        let request = Request::builder().body(Body::empty()).unwrap();
        let request = per_invocation(request).await;
        assert!(stream_deadline(&request).is_none());
        assert!(!request.headers().contains_key("traceparent"));
    }

    #[tokio::test]
    async fn the_invocations_xray_trace_is_continued_unless_the_caller_sent_its_own() {
        let request = per_invocation(invoked(600_000, Some(XRAY), None)).await;
        let traceparent = request.headers()["traceparent"].to_str().unwrap();
        assert_eq!(
            traceparent,
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
        );
        let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let request = per_invocation(invoked(600_000, Some(XRAY), Some(own))).await;
        assert_eq!(request.headers()["traceparent"], own);
        // A malformed X-Ray header is ignored, not forwarded.
        let request = per_invocation(invoked(600_000, Some("Root=nonsense"), None)).await;
        assert!(!request.headers().contains_key("traceparent"));
    }

    /// A server whose LLM sends one token and then stalls, its usage counted in memory.
    fn stalling_server() -> (Arc<Server>, Arc<dyn sluice_contract::usage::UsageStore>) {
        use sluice_contract::usage::UsageStore;
        use sluice_local::LocalUsage;
        use sluice_testkit::{HashEmbedder, MemoryStore, ScriptedLlm};
        let vars = std::collections::HashMap::from([
            ("SLUICE_DATA_DIR", "/nonexistent/sluice-answer"),
            ("SLUICE_CACHE", "off"),
        ]);
        let settings = sluice_app::Settings::from_lookup(|k| vars.get(k).map(|v| v.to_string()))
            .expect("configuration");
        let usage: Arc<dyn UsageStore> = Arc::new(LocalUsage::in_memory());
        let llm = ScriptedLlm::answering("one two").gap(Duration::from_secs(600));
        let parts = sluice_app::Parts {
            config: settings.config,
            wire: settings.wire,
            replica_id: None,
            converter: None,
            role: sluice_app::Role::Answers,
            embedder: Some(Arc::new(HashEmbedder::new())),
            store: Some(Arc::new(MemoryStore::new())),
            llm: Some(Arc::new(llm)),
            cache: None,
            lexicon: Default::default(),
            reranker: None,
            components: None,
            keys: None,
            usage: Some(usage.clone()),
            settings: None,
            secrets: None,
            records: None,
            objects: None,
            batches: None,
        };
        (Arc::new(parts.into_server()), usage)
    }

    #[tokio::test]
    async fn a_drain_ends_open_answers_at_once_and_writes_their_usage() {
        use futures::StreamExt;
        use tower::ServiceExt;
        let (server, usage) = stalling_server();
        let request = Request::post("/v1/answer")
            .header("content-type", "application/json")
            .body(Body::from(r#"{"query":"how long does a new card take?"}"#))
            .unwrap();
        let response = sluice_http::router(server.clone())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body().into_data_stream();
        // Streaming: meta and the first token, then the LLM stalls.
        let mut seen = String::new();
        while !seen.contains("event: token") {
            let chunk = body.next().await.expect("more").expect("a chunk");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        assert_eq!(server.metrics.active_streams(), 1);
        let started = tokio::time::Instant::now();
        let both = async {
            tokio::join!(drain(&server), async {
                let mut rest = String::new();
                while let Some(chunk) = body.next().await {
                    rest.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
                }
                rest
            })
        };
        let (_, rest) = tokio::time::timeout(Duration::from_secs(30), both)
            .await
            .expect("the drain ends the stream");
        // The stream ended well before the LLM would have gone on (600 s), with the error a
        // client retries on.
        assert!(started.elapsed() < SHUTDOWN_WAIT + Duration::from_secs(5));
        assert!(rest.contains("event: error"), "{rest}");
        assert!(rest.contains(r#""code":"shutting_down""#), "{rest}");
        assert_eq!(server.metrics.active_streams(), 0);
        // What the answer used is written, not lost with the process.
        let meter = server.usage.as_ref().expect("a meter");
        let today = meter.today();
        let rows = usage
            .read(&sluice_testkit::tenant("default"), today, today)
            .await
            .expect("usage");
        assert_eq!(rows.len(), 1, "{rows:?}");
    }

    /// The MCP server is behind the answer function's URL too: its `answer` tool ends by the
    /// invocation's deadline as `/v1/answer` does, with the same retryable error — the
    /// deadline travels with the request into the service, whichever door it came in by.
    #[tokio::test]
    async fn an_mcp_answer_ends_by_the_invocations_deadline_as_the_answer_route_does() {
        use tower::ServiceExt;
        let (server, _) = stalling_server();
        let router = sluice_http::router(server.clone())
            .layer(axum::middleware::map_request(per_invocation));
        let question = serde_json::json!({"query": "how long does a new card take?"});
        let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "answer", "arguments": question}});
        for (path, body) in [("/v1/answer", question.clone()), ("/mcp", call)] {
            let mut request = Request::post(path)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("host", "127.0.0.1")
                .body(Body::from(body.to_string()))
                .unwrap();
            // The stalling LLM would go on for ten minutes; the invocation has a moment.
            let mut context = lambda_http::Context::default();
            context.deadline = now_ms() + DEADLINE_MARGIN.as_millis() as u64 + 300;
            request.extensions_mut().insert(context);
            let read = async {
                let response = router.clone().oneshot(request).await.unwrap();
                let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await;
                String::from_utf8_lossy(&bytes.unwrap()).into_owned()
            };
            let text = tokio::time::timeout(Duration::from_secs(60), read)
                .await
                .unwrap_or_else(|_| panic!("{path}: the answer did not end by its deadline"));
            let (code, retryable) = match path {
                "/mcp" => {
                    let reply: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                    let data = &reply["error"]["data"];
                    (data["code"].clone(), data["retryable"].clone())
                }
                _ => {
                    let error = (text.split("\n\n"))
                        .find_map(|e| e.strip_prefix("event: error\ndata: "))
                        .unwrap_or_else(|| panic!("no error event in {text}"));
                    let error: serde_json::Value = serde_json::from_str(error).expect("JSON");
                    (error["code"].clone(), error["retryable"].clone())
                }
            };
            assert_eq!(code, "deadline_exceeded", "{path}: {text}");
            assert_eq!(retryable, true, "{path}: {text}");
        }
    }
}
