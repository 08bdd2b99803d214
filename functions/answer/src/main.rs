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

use anyhow::Context;
use sluice_lambda_answer::{drain_on_sigterm, per_invocation};

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
