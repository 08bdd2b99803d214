//! The registry function: `/v1/components/rerank` (upload, activate, list, deactivate) of
//! the core router, behind API Gateway.
//!
//! An upload is validated and compiled here, in the init-warm sandbox, for this function's
//! architecture and engine settings — the answer function's (both are arm64 and built from
//! the same code) — and stored with its artefact in S3 (`SLUICE_COMPONENT_BUCKET`); versions
//! and the active pointer go to DynamoDB (`SLUICE_COMPONENT_TABLE`). The answer function
//! then loads the artefact without compiling. Responses are small JSON: buffered.

use anyhow::Context;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let server = sluice_app::function("registry")
        .await
        .context("building the pipeline")?;
    if server.pipeline.config.component_bucket.is_none() {
        // The components would stay in this function's own /tmp, which no other function
        // sees: almost certainly a configuration mistake.
        tracing::warn!(
            "SLUICE_COMPONENT_BUCKET is not set: components are kept in SLUICE_DATA_DIR, \
             which the answer function cannot read"
        );
    }
    lambda_http::run(sluice_http::router(server)).await
}
