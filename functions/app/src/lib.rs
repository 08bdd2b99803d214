//! The pipeline every entry point serves — `sluice serve` and the Lambda functions — wired
//! once from the configuration: the embedding model, the vector store, the LLM pool, the
//! tenants' rerank components and the answer cache. Everything heavy happens here, at start
//! (on Lambda: in the init phase, not on the first request).
#![warn(missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use sluice_core::error::{CacheError, EmbedError, LlmError, StoreError};
use sluice_core::stages::{ComponentError, Embedder};
use sluice_core::{Config, Pipeline};
use sluice_embed::MiniLm;
use sluice_llm::OpenAiClient;
use sluice_sandbox::Registry;
use tracing::info;

/// A part of the pipeline that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The embedding model did not load.
    #[error("loading the embedding model: {0}")]
    Model(#[from] EmbedError),
    /// The vector store did not open.
    #[error("opening the vector store: {0}")]
    Store(#[from] StoreError),
    /// The LLM client could not be built.
    #[error("building the LLM client: {0}")]
    Llm(#[from] LlmError),
    /// The rerank sandbox or the component storage failed.
    #[error("rerank components: {0:?}")]
    Components(ComponentError),
    /// The answer cache could not be set up.
    #[error("setting up the answer cache: {0}")]
    Cache(#[from] CacheError),
    /// The blocking task that loads the model died.
    #[error("start-up task failed: {0}")]
    Task(String),
}

/// Builds the pipeline `config` describes. The model load runs on the blocking pool; the
/// cache set-up may call DynamoDB (`SLUICE_CACHE=dynamodb`).
pub async fn pipeline(config: Config) -> Result<Pipeline, AppError> {
    let cache = sluice_cache::build(&config, sluice_embed::DIM).await?;
    match &cache {
        Some(c) => info!(backend = c.backend(), "answer cache ready"),
        None => info!("answer cache off"),
    }
    let pipeline = tokio::task::spawn_blocking(move || stages(config))
        .await
        .map_err(|e| AppError::Task(e.to_string()))??;
    Ok(match cache {
        Some(cache) => pipeline.with_cache(cache),
        None => pipeline,
    })
}

/// The stages without the cache: model, store, LLM pool, components.
fn stages(config: Config) -> Result<Pipeline, AppError> {
    let started = Instant::now();
    let embedder = MiniLm::load(&config.model_dir)?;
    info!(model_dir = %config.model_dir.display(), ms = started.elapsed().as_millis() as u64, "embedding model loaded");
    let store = sluice_retrieve::open(&config, sluice_embed::DIM)?;
    info!(store = ?config.store, data_dir = %config.data_dir.display(), "vector store open");
    let llm = OpenAiClient::from_config(&config)?;
    let embedder: Arc<dyn Embedder> = Arc::new(embedder);
    let registry = Arc::new(
        Registry::from_config(&config, Arc::clone(&embedder)).map_err(AppError::Components)?,
    );
    let pipeline = Pipeline::new(config, embedder, store, Arc::new(llm));
    Ok(pipeline.with_components(registry.clone(), registry))
}
