//! The answer function: Sluice's answer routes (`/v1/answer`, the OpenAI routes,
//! `DELETE /v1/cache`) on AWS Lambda, behind a function URL (`InvokeMode: RESPONSE_STREAM`)
//! or an API Gateway REST API in STREAM mode.
//!
//! Everything heavy — the embedding model, the store, the LLM connection pool, the rerank
//! sandbox, the cache client — is built in the init phase, before the first event; each
//! invocation then runs the same routes as `sluice serve`, with the response body streamed
//! to the client as it is produced (no `content-length`: SSE events leave as they are made).
//! Documents and components are the ingest and registry functions' routes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sluice_http::StreamDeadline;

/// How long before the invocation's deadline an answer still streaming is ended with an
/// `error` event: time to write it and for the runtime to flush the stream before Lambda
/// stops the function.
const DEADLINE_MARGIN: Duration = Duration::from_millis(1500);

/// See [`with_deadline`].
const NOT_A_DEADLINE_MS: u64 = 86_400_000;

/// Gives each request the stream deadline its invocation allows (Lambda passes the deadline
/// in the invocation context, as Unix milliseconds).
async fn with_deadline(mut request: axum::extract::Request) -> axum::extract::Request {
    if let Some(context) = request.extensions().get::<lambda_http::Context>() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // Lambda sends Unix milliseconds. A value a day or more in the past is not a deadline
        // but an emulator's timeout (cargo-lambda sends `600000`): no deadline then.
        if context.deadline < now.saturating_sub(NOT_A_DEADLINE_MS) {
            return request;
        }
        let left = Duration::from_millis(context.deadline.saturating_sub(now))
            .saturating_sub(DEADLINE_MARGIN);
        request
            .extensions_mut()
            .insert(StreamDeadline(tokio::time::Instant::now() + left));
    }
    request
}

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let server = sluice_app::function("answer", sluice_app::Role::Answers)
        .await
        .context("building the pipeline")?;
    let router = sluice_http::router(server).layer(axum::middleware::map_request(with_deadline));
    lambda_http::run_with_streaming_response(router).await
}
