//! The registry function: `/v1/components/rerank` and `/v1/components/prompt` (upload,
//! activate, list, deactivate) of the router, behind API Gateway. It loads no model, store or
//! LLM pool: the sandbox, the component storage and the tokenizer (for the upload smoke run's
//! `count-tokens`).
//!
//! An upload is validated and compiled here, in the init-warm sandbox, for this function's
//! architecture and engine settings — the answer function's (the SAM template gives both
//! one `Architecture`, and they are built from the same code) — and stored with its
//! artefact in S3 (`SLUICE_COMPONENT_BUCKET`); versions and the active pointer go to
//! DynamoDB (`SLUICE_COMPONENT_TABLE`). The answer function then loads the artefact without
//! compiling. Responses are small JSON: buffered.

use anyhow::Context;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let server = sluice_app::function("registry", sluice_app::Role::Components)
        .await
        .context("building the registry")?;
    lambda_http::run(sluice_http::router(server)).await
}
