//! `sluice serve`: build every stage once, then serve the core router.

use std::sync::Arc;

use anyhow::{Context, Result};
use sluice_core::Config;
use tracing::info;

/// Serves until Ctrl-C or SIGTERM, then lets open streams finish.
pub async fn run(config: Config) -> Result<()> {
    let addr = config.addr;
    let llm_url = config.llm_url.clone();
    let pipeline = sluice_app::pipeline(config).await?;
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
