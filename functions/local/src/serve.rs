//! `sluice serve`: build every stage once, then serve the core router.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use sluice_core::stages::Embedder;
use sluice_core::{Config, Pipeline};
use sluice_embed::MiniLm;
use sluice_llm::OpenAiClient;
use sluice_sandbox::Registry;
use tracing::info;

/// Loads the model, opens the store and the LLM pool: the pipeline every request shares
/// (the cache, which may need the network, is added by [`run`]).
pub fn build(config: Config) -> Result<Pipeline> {
    let started = Instant::now();
    let embedder = MiniLm::load(&config.model_dir).context("loading the embedding model")?;
    info!(model_dir = %config.model_dir.display(), ms = started.elapsed().as_millis() as u64, "embedding model loaded");
    let store =
        sluice_retrieve::open(&config, sluice_embed::DIM).context("opening the vector store")?;
    info!(store = ?config.store, data_dir = %config.data_dir.display(), "vector store open");
    let llm = OpenAiClient::from_config(&config).context("building the LLM client")?;
    let embedder: Arc<dyn Embedder> = Arc::new(embedder);
    let registry = Registry::from_config(&config, Arc::clone(&embedder))
        .map_err(|e| anyhow::anyhow!("rerank components: {e:?}"))?;
    let registry = Arc::new(registry);
    let pipeline = Pipeline::new(config, embedder, store, Arc::new(llm));
    Ok(pipeline.with_components(registry.clone(), registry))
}

/// Serves until Ctrl-C or SIGTERM, then lets open streams finish.
pub async fn run(config: Config) -> Result<()> {
    let addr = config.addr;
    let llm_url = config.llm_url.clone();
    let cache = sluice_cache::build(&config, sluice_embed::DIM)
        .await
        .context("setting up the answer cache")?;
    match &cache {
        Some(c) => info!(backend = c.backend(), "answer cache ready"),
        None => info!("answer cache off"),
    }
    let mut pipeline = tokio::task::spawn_blocking(move || build(config)).await??;
    if let Some(cache) = cache {
        pipeline = pipeline.with_cache(cache);
    }
    let pipeline = Arc::new(pipeline);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(%addr, llm = %llm_url, "sluice serving");
    sluice_core::http::serve(listener, pipeline, shutdown()).await?;
    Ok(())
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await.unwrap_or(());
    info!("shutting down: draining open streams");
}
