//! The OpenAI-compatible client against a real llama.cpp server (started by `make test` and
//! named by SLUICE_TEST_LLM_URL), and against small stand-in TCP servers on 127.0.0.1 that
//! model transport failures only (silence, stalls, errors) — they are not an LLM.

use std::time::{Duration, Instant};

use futures::StreamExt;
use sluice_contract::error::LlmError;
use sluice_contract::stages::{ChatMessage, Llm, LlmEvent};
use sluice_llm::{OpenAiClient, Timeouts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const FAST: Timeouts = Timeouts {
    connect: Duration::from_millis(500),
    first_token: Duration::from_millis(400),
    idle: Duration::from_millis(300),
};

/// A W3C trace context, as the pipeline sends with each request.
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn real_llm_url() -> String {
    std::env::var("SLUICE_TEST_LLM_URL")
        .expect("SLUICE_TEST_LLM_URL is not set: run the tests with `make test`, which starts the local LLM")
}

fn real_client() -> OpenAiClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        first_token: Duration::from_secs(60),
        idle: Duration::from_secs(30),
    };
    OpenAiClient::new(&real_llm_url(), "SmolLM2-135M-Instruct", None, timeouts).unwrap()
}

async fn collect(
    client: &OpenAiClient,
    prompt: &str,
    max_tokens: u32,
) -> (Vec<String>, Result<LlmEvent, LlmError>) {
    let messages = vec![ChatMessage::new("user", prompt)];
    let mut stream = client.stream(messages, max_tokens, TRACE).await.unwrap();
    let mut tokens = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(LlmEvent::Token(t)) => tokens.push(t),
            other => return (tokens, other),
        }
    }
    panic!("stream ended without a finish or an error");
}

#[tokio::test]
async fn a_real_server_streams_tokens_then_finishes() {
    sluice_testkit::needs!(Llm);
    let client = real_client();
    client.ready().await.unwrap();
    let (tokens, end) = collect(&client, "Name three colours.", 48).await;
    assert!(!tokens.is_empty());
    match end {
        Ok(LlmEvent::Finish {
            finish_reason,
            completion_tokens,
            prompt_tokens,
        }) => {
            assert!(
                ["stop", "length"].contains(&finish_reason.as_str()),
                "{finish_reason}"
            );
            if let Some(n) = completion_tokens {
                assert!(
                    n as usize >= tokens.len() / 2 && n <= 48,
                    "usage {n} for {} events",
                    tokens.len()
                );
                // The chat template and the question: more than the question's 5 words.
                assert!(prompt_tokens.is_some_and(|p| p > 5), "{prompt_tokens:?}");
            }
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn max_tokens_caps_the_answer() {
    sluice_testkit::needs!(Llm);
    let (tokens, end) = collect(&real_client(), "Write a long story about the sea.", 4).await;
    match end {
        Ok(LlmEvent::Finish {
            finish_reason,
            completion_tokens,
            ..
        }) => {
            assert_eq!(finish_reason, "length");
            assert!(completion_tokens.unwrap_or(tokens.len() as u64) <= 4);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_closed_port_is_unavailable_at_once() {
    let client = OpenAiClient::new(&closed_port_url(), "m", None, FAST).unwrap();
    let started = Instant::now();
    let err = client
        .stream(vec![ChatMessage::new("user", "hi")], 8, TRACE)
        .await
        .err()
        .unwrap();
    assert!(matches!(err, LlmError::Unavailable(_)), "{err:?}");
    assert!(err.retryable());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(client.ready().await.is_err());
}

/// A stand-in HTTP server for transport behaviour: reads a request, then writes `reply`
/// (raw bytes, in parts with pauses) and keeps the connection open until `hold` passes.
async fn stand_in(parts: Vec<(&'static str, Duration)>, hold: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let parts = parts.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 8192];
                let _ = socket.read(&mut buf).await;
                for (bytes, pause) in parts {
                    tokio::time::sleep(pause).await;
                    if socket.write_all(bytes.as_bytes()).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(hold).await;
            });
        }
    });
    format!("http://{addr}/v1")
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
const TOKEN: &str =
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";

/// One request to `url`: the tokens seen and how the stream ended.
async fn run(url: &str) -> (usize, Result<(), LlmError>) {
    run_endpoints(&[url.to_string()]).await
}

#[tokio::test]
async fn silence_before_the_first_token_times_out() {
    let url = stand_in(vec![], Duration::from_secs(5)).await;
    let started = Instant::now();
    let (_, r) = run(&url).await;
    assert!(matches!(r, Err(LlmError::Timeout("first-token"))), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn headers_without_tokens_still_hit_the_first_token_timeout() {
    let url = stand_in(vec![(SSE_HEAD, Duration::ZERO)], Duration::from_secs(5)).await;
    let (tokens, r) = run(&url).await;
    assert_eq!(tokens, 0);
    assert!(matches!(r, Err(LlmError::Timeout("first-token"))), "{r:?}");
}

#[tokio::test]
async fn a_stall_mid_stream_hits_the_idle_timeout() {
    let url = stand_in(
        vec![(SSE_HEAD, Duration::ZERO), (TOKEN, Duration::ZERO)],
        Duration::from_secs(5),
    )
    .await;
    let (tokens, r) = run(&url).await;
    assert_eq!(tokens, 1);
    assert!(matches!(r, Err(LlmError::Timeout("idle"))), "{r:?}");
}

#[tokio::test]
async fn an_upstream_5xx_is_a_retryable_status_error() {
    let reply = "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\nconnection: close\r\n\r\noverload";
    let url = stand_in(vec![(reply, Duration::ZERO)], Duration::ZERO).await;
    let (_, r) = run(&url).await;
    match r {
        Err(e @ LlmError::Status { status: 503, .. }) => {
            assert!(e.retryable());
            assert!(e.to_string().contains("overload"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_stream_cut_before_finish_is_an_error_not_a_silent_truncation() {
    let url = stand_in(
        vec![
            (SSE_HEAD, Duration::ZERO),
            (TOKEN, Duration::ZERO),
            (TOKEN, Duration::ZERO),
        ],
        Duration::ZERO,
    )
    .await;
    let (tokens, r) = run(&url).await;
    assert_eq!(tokens, 2);
    assert!(matches!(r, Err(LlmError::Stream(_))), "{r:?}");
}

#[tokio::test]
async fn a_chunk_that_is_not_openai_json_is_an_error() {
    let url = stand_in(
        vec![
            (SSE_HEAD, Duration::ZERO),
            ("data: <html>oops</html>\n\n", Duration::ZERO),
        ],
        Duration::ZERO,
    )
    .await;
    let (_, r) = run(&url).await;
    assert!(
        matches!(r, Err(LlmError::Stream(ref m)) if m.contains("not an OpenAI stream chunk")),
        "{r:?}"
    );
}

#[tokio::test]
async fn usage_from_the_upstream_is_reported() {
    let finish = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":7,\"total_tokens\":16}}\n\ndata: [DONE]\n\n";
    let url = stand_in(
        vec![
            (SSE_HEAD, Duration::ZERO),
            (TOKEN, Duration::ZERO),
            (finish, Duration::ZERO),
            (usage, Duration::ZERO),
        ],
        Duration::ZERO,
    )
    .await;
    let client = OpenAiClient::new(&url, "m", None, FAST).unwrap();
    let events: Vec<_> = client
        .stream(vec![ChatMessage::new("user", "hi")], 8, TRACE)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[1].as_ref().unwrap(),
        &LlmEvent::Finish {
            finish_reason: "stop".into(),
            completion_tokens: Some(7),
            prompt_tokens: Some(9),
        }
    );
}

/// A stand-in that streams one token and finishes (a transport stand-in, not a model).
async fn good_stand_in() -> String {
    let finish =
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    stand_in(
        vec![
            (SSE_HEAD, Duration::ZERO),
            (TOKEN, Duration::ZERO),
            (finish, Duration::ZERO),
        ],
        Duration::ZERO,
    )
    .await
}

/// The `/v1` URL of a port on 127.0.0.1 that nothing listens on.
fn closed_port_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// One request over `urls` (failover in order): the tokens seen and how the stream ended.
async fn run_endpoints(urls: &[String]) -> (usize, Result<(), LlmError>) {
    let client = OpenAiClient::with_endpoints(urls, "m", None, FAST).unwrap();
    let mut stream = match client
        .stream(vec![ChatMessage::new("user", "hi")], 8, TRACE)
        .await
    {
        Ok(s) => s,
        Err(e) => return (0, Err(e)),
    };
    let mut tokens = 0;
    while let Some(item) = stream.next().await {
        match item {
            Ok(LlmEvent::Token(_)) => tokens += 1,
            Ok(LlmEvent::Finish { .. }) => return (tokens, Ok(())),
            Err(e) => return (tokens, Err(e)),
        }
    }
    (tokens, Ok(()))
}

#[tokio::test]
async fn a_refused_overloaded_or_silent_endpoint_fails_over_before_the_first_token() {
    let overloaded = "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 8\r\nconnection: close\r\n\r\noverload";
    let failing = [
        ("refused", closed_port_url()),
        (
            "503",
            stand_in(vec![(overloaded, Duration::ZERO)], Duration::ZERO).await,
        ),
        (
            "silent",
            stand_in(vec![(SSE_HEAD, Duration::ZERO)], Duration::from_secs(5)).await,
        ),
        (
            "broken before a token",
            stand_in(vec![(SSE_HEAD, Duration::ZERO)], Duration::ZERO).await,
        ),
    ];
    for (what, bad) in failing {
        let good = good_stand_in().await;
        let started = Instant::now();
        let (tokens, r) = run_endpoints(&[bad, good]).await;
        assert!(r.is_ok(), "{what}: {r:?}");
        assert_eq!(tokens, 1, "{what}: the second endpoint's token");
        // A silent endpoint costs its first-token timeout (400 ms here), no more.
        assert!(started.elapsed() < Duration::from_secs(2), "{what}");
    }
}

#[tokio::test]
async fn a_rejected_request_is_not_sent_elsewhere_and_all_down_reports_the_last_failure() {
    let rejected = "HTTP/1.1 400 Bad Request\r\ncontent-length: 3\r\nconnection: close\r\n\r\nbad";
    let bad_request = stand_in(vec![(rejected, Duration::ZERO)], Duration::ZERO).await;
    let good = good_stand_in().await;
    let (tokens, r) = run_endpoints(&[bad_request, good]).await;
    assert_eq!(tokens, 0);
    assert!(
        matches!(r, Err(LlmError::Status { status: 400, .. })),
        "{r:?}"
    );

    let (_, r) = run_endpoints(&[closed_port_url(), closed_port_url()]).await;
    let e = r.unwrap_err();
    assert!(matches!(e, LlmError::Unavailable(_)), "{e:?}");
    assert!(e.retryable());
}

#[tokio::test]
async fn a_failure_after_the_first_token_is_not_retried() {
    // One token, then a stall: the answer has started, so the idle timeout ends it here
    // instead of a second endpoint starting the answer again.
    let stalls = stand_in(
        vec![(SSE_HEAD, Duration::ZERO), (TOKEN, Duration::ZERO)],
        Duration::from_secs(5),
    )
    .await;
    let good = good_stand_in().await;
    let (tokens, r) = run_endpoints(&[stalls, good]).await;
    assert_eq!(tokens, 1);
    assert!(matches!(r, Err(LlmError::Timeout("idle"))), "{r:?}");
}

#[tokio::test]
async fn ready_when_any_endpoint_answers() {
    sluice_testkit::needs!(Llm);
    let client = OpenAiClient::with_endpoints(
        &[closed_port_url(), real_llm_url()],
        "SmolLM2-135M-Instruct",
        None,
        FAST,
    )
    .unwrap();
    client.ready().await.unwrap();
    let client =
        OpenAiClient::with_endpoints(&[closed_port_url(), closed_port_url()], "m", None, FAST)
            .unwrap();
    assert!(client.ready().await.is_err());
    assert!(OpenAiClient::with_endpoints(&[], "m", None, FAST).is_err());
}

/// An HTTP/1.1 stand-in (keep-alive, as vLLM and llama.cpp serve) that streams `body` to every
/// chat completion; its URL and the number of TCP connections it has accepted.
async fn keep_alive_stand_in(
    body: &'static str,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use axum::serve::ListenerExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let listener = listener.tap_io(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || async move { ([("content-type", "text/event-stream")], body) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, connections)
}

#[tokio::test]
async fn many_answers_share_one_pooled_connection() {
    // Connection set-up is time the first token waits for: answers one after the other must
    // reuse the pool's connection, which needs each answer's body read to its end.
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\
                data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                data: [DONE]\n\n";
    let (url, connections) = keep_alive_stand_in(body).await;
    let client = OpenAiClient::new(&url, "m", None, FAST).unwrap();
    for _ in 0..20 {
        let (tokens, end) = collect(&client, "hi", 8).await;
        assert_eq!(tokens, ["Hello"]);
        assert!(matches!(end, Ok(LlmEvent::Finish { .. })), "{end:?}");
    }
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "twenty answers, one connection"
    );
}

#[tokio::test]
async fn an_event_past_the_size_cap_ends_the_stream_at_once() {
    // 100 KB of one line that never ends: without a cap it would be buffered until the
    // first-token timeout (here 400 ms); with it the stream fails as soon as the cap passes.
    let head = SSE_HEAD;
    let line: &'static str = Box::leak(format!("data: {}", "x".repeat(100_000)).into_boxed_str());
    let url = stand_in(
        vec![(head, Duration::ZERO), (line, Duration::ZERO)],
        Duration::from_secs(30),
    )
    .await;
    let client = OpenAiClient::new(&url, "m", None, FAST).unwrap();
    let started = Instant::now();
    let err = match client
        .stream(vec![ChatMessage::new("user", "hi")], 8, TRACE)
        .await
    {
        Ok(_) => panic!("a stream past the cap must not start"),
        Err(e) => e,
    };
    assert!(
        matches!(&err, LlmError::Stream(m) if m.contains("bytes")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}
