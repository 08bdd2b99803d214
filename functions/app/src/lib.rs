//! The pipeline every entry point serves — `sluice serve` and the Lambda functions — wired
//! once from the configuration: the embedding model, the vector store, the LLM pool, the
//! tenants' rerank components and the answer cache. Everything heavy happens here, at start
//! (on Lambda: in the init phase, not on the first request).
#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_core::auth::KeyStore;
use sluice_core::error::{CacheError, EmbedError, LlmError, StoreError};
use sluice_core::stages::{ComponentError, ComponentStorage, Embedder};
use sluice_core::{Config, Pipeline};
use sluice_embed::MiniLm;
use sluice_http::Server;
use sluice_llm::OpenAiClient;
use sluice_sandbox::{Disk, Registry};
use tracing::{info, warn};

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
    /// The API keys could not be read.
    #[error("{0}")]
    Auth(#[from] sluice_core::auth::AuthError),
    /// The configuration is invalid.
    #[error("configuration: {0}")]
    Config(#[from] sluice_core::config::ConfigError),
    /// An AWS client or call needed at start failed (secrets, component storage).
    #[error("{0}")]
    Aws(#[from] sluice_aws::AwsError),
    /// The blocking task that loads the model died.
    #[error("start-up task failed: {0}")]
    Task(String),
}

/// The configuration from the environment, where `SLUICE_SECRETS_ARN` (when set) names a
/// Secrets Manager secret whose `SLUICE_*` values take the place of environment variables.
pub async fn config() -> Result<Config, AppError> {
    let secret = match std::env::var("SLUICE_SECRETS_ARN") {
        Ok(arn) if !arn.trim().is_empty() => {
            let settings = sluice_aws::secrets::settings(arn.trim()).await?;
            info!(
                settings = settings.len(),
                "settings read from Secrets Manager"
            );
            settings
        }
        _ => HashMap::new(),
    };
    Ok(Config::from_lookup(|name| {
        secret
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    })?)
}

/// Builds the pipeline `config` describes, and the wire around it. The model load — most of a
/// cold start — begins first, on the blocking pool, and the rest is set up beside it: the cache
/// (which may call DynamoDB, `SLUICE_CACHE=dynamodb`), the component storage (S3 clients with
/// `SLUICE_COMPONENT_BUCKET`) and the store; then the LLM pool and the rerank sandbox.
pub async fn server(config: Config) -> Result<Server, AppError> {
    let model = {
        let dir = config.model_dir.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let model = MiniLm::load(&dir)?;
            info!(model = %model.source().display(), ms = started.elapsed().as_millis() as u64, "embedding model loaded");
            Ok::<_, AppError>(model)
        })
    };
    let store = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            let store = sluice_retrieve::open(&config, sluice_embed::DIM)?;
            info!(store = ?config.store, data_dir = %config.data_dir.display(), "vector store open");
            Ok::<_, AppError>(store)
        })
    };
    let cache = sluice_cache::build(&config, sluice_embed::DIM).await?;
    match &cache {
        Some(c) => info!(backend = c.backend(), "answer cache ready"),
        None => info!("answer cache off"),
    }
    let storage: Arc<dyn ComponentStorage> = match &config.component_bucket {
        Some(bucket) => {
            let s3 = sluice_aws::components::S3Components::connect(&config).await?;
            info!(bucket = %bucket, table = %s3.table(), "components in S3 and DynamoDB");
            Arc::new(s3)
        }
        None => {
            Arc::new(Disk::open(&config.data_dir.join("components")).map_err(AppError::Components)?)
        }
    };
    let keys: Option<Arc<dyn KeyStore>> = match &config.api_keys_table {
        Some(table) => {
            info!(%table, "auth on: API keys in DynamoDB");
            Some(Arc::new(
                sluice_aws::keys::DynamoKeys::connect(&config).await?,
            ))
        }
        None => match sluice_core::auth::file_keys(&config)? {
            Some(keys) => {
                info!(keys = keys.len(), file = ?config.api_keys_file, "auth on: API keys from the key file");
                Some(Arc::new(keys))
            }
            None => {
                warn!(
                    "auth is off (no SLUICE_API_KEYS_FILE or SLUICE_API_KEYS_TABLE): the x-sluice-tenant header is trusted"
                );
                None
            }
        },
    };
    let llm = OpenAiClient::from_config(&config)?;
    let joined = |e: tokio::task::JoinError| AppError::Task(e.to_string());
    let store = store.await.map_err(joined)??;
    let embedder: Arc<dyn Embedder> = Arc::new(model.await.map_err(joined)??);
    let registry = Arc::new(
        Registry::from_config(&config, Arc::clone(&embedder), storage)
            .map_err(AppError::Components)?,
    );
    let mut pipeline =
        Pipeline::new(config, embedder, store, Arc::new(llm)).with_reranker(registry.clone());
    if let Some(cache) = cache {
        pipeline = pipeline.with_cache(cache);
    }
    let server = Server::new(Arc::new(pipeline)).with_components(registry);
    Ok(match keys {
        Some(keys) => server.with_keys(keys),
        None => server,
    })
}

/// What every Lambda function does in its init phase: JSON log lines (CloudWatch keeps one
/// event per line, queryable by field), the configuration (with the secret's settings), and
/// the pipeline with CloudWatch EMF metrics; the time it took is logged as `init_ms`.
pub async fn function(name: &'static str) -> Result<Arc<Server>, AppError> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        // The answer's span (request id, tenant, trace id) on each of its lines.
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .init();
    let started = Instant::now();
    let mut server = server(config().await?).await?;
    // Nothing scrapes a Lambda process: each answer's metrics go out as an EMF log line.
    let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| name.into());
    server.metrics = sluice_http::metrics::Metrics::with_emf(&function);
    info!(
        function = name,
        init_ms = started.elapsed().as_millis() as u64,
        "function ready"
    );
    Ok(Arc::new(server))
}
