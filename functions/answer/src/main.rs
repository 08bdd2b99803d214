//! The answer function: Sluice's answer routes (`/v1/answer`, the OpenAI routes,
//! `DELETE /v1/cache`) on AWS Lambda, behind a function URL (`InvokeMode: RESPONSE_STREAM`)
//! or an API Gateway REST API in STREAM mode.
//!
//! Everything heavy — the embedding model, the store, the LLM connection pool, the rerank
//! sandbox, the cache client — is built in the init phase, before the first event; each
//! invocation then runs the same routes as `sluice serve`, with the response body streamed
//! to the client as it is produced (no `content-length`: SSE events leave as they are made).
//! Documents and components are the ingest and registry functions' routes.
//!
//! One binary for both kinds of Lambda capacity. On classic Lambda an environment runs one
//! invocation at a time. On Lambda Managed Instances, Lambda sets `AWS_LAMBDA_MAX_CONCURRENCY`
//! and the runtime starts that many workers, each polling for its own invocation, so one
//! process streams that many answers at once: the model, the store and LLM connections, the
//! sandbox engine and the cache are the process's, shared; everything an invocation owns —
//! its tenant, deadline, trace and stream — travels with its request, never in process-wide
//! state (the runtime does not set `_X_AMZN_TRACE_ID` in that mode, and nothing here reads it).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sluice_http::{Server, StreamDeadline};

/// How long before the invocation's deadline an answer still streaming is ended with an
/// `error` event: time to write it and for the runtime to flush the stream before Lambda
/// stops the function.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// See [`per_invocation`].
const NOT_A_DEADLINE_MS: u64 = 86_400_000;

/// After SIGTERM, how long the drained streams get to end and be handed to the runtime
/// before the process exits (Lambda's shutdown phase is short: see [`drain_on_sigterm`]).
const SHUTDOWN_WAIT: Duration = Duration::from_millis(400);

/// What the request's invocation says, read from the invocation context Lambda passes with
/// each event (per invocation: on Lambda Managed Instances many are in flight at once):
/// - the stream deadline it allows (Lambda sends the deadline as Unix milliseconds);
/// - its X-Ray trace, continued as the request's `traceparent` when the caller sent none.
async fn per_invocation(mut request: axum::extract::Request) -> axum::extract::Request {
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
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // A value a day or more in the past is not a deadline but an emulator's timeout
    // (cargo-lambda sends `600000`): no deadline then.
    if deadline < now.saturating_sub(NOT_A_DEADLINE_MS) {
        return request;
    }
    let left = Duration::from_millis(deadline.saturating_sub(now)).saturating_sub(DEADLINE_MARGIN);
    request
        .extensions_mut()
        .insert(StreamDeadline(tokio::time::Instant::now() + left));
    request
}

/// On SIGTERM (Lambda's shutdown phase; on Managed Instances while answers may still be
/// streaming): every open answer ends at once with its retryable `shutting_down` error —
/// there is no time to let them finish — the process waits up to [`SHUTDOWN_WAIT`] for them
/// to end, writes the usage still pending, and exits.
async fn drain_on_sigterm(server: std::sync::Arc<Server>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        tracing::warn!("cannot listen for SIGTERM: open answers will be cut at shutdown");
        return;
    };
    term.recv().await;
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
    std::process::exit(0);
}

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let server = sluice_app::function("answer", sluice_app::Role::Answers)
        .await
        .context("building the pipeline")?;
    tokio::spawn(drain_on_sigterm(server.clone()));
    let router = sluice_http::router(server).layer(axum::middleware::map_request(per_invocation));
    // Sequential unless AWS_LAMBDA_MAX_CONCURRENCY > 1 (Lambda Managed Instances): then one
    // worker per concurrent invocation, all on this process's tokio runtime.
    lambda_http::run_with_streaming_response_concurrent(router).await
}
