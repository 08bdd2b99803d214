//! `sluice serve`: build every stage once, then serve the core router plus what only a
//! long-lived local process has: the web page at `/` and Prometheus metrics at `/metrics`.

use std::sync::Arc;

use anyhow::{Context, Result};
use axum::http::header;
use axum::routing::get;
use sluice_http::Server;
use tracing::info;

/// The web page: one file, no build step; it talks to the API routes of the same server.
const PAGE: &str = include_str!("../web/index.html");

/// The API's routes, `GET /` (the page) and `GET /metrics`.
pub fn router(server: Arc<Server>) -> axum::Router {
    let metrics = server.metrics.clone();
    sluice_http::router(server)
        .route(
            "/",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        // The page's script and style are inline; nothing else may load.
                        (
                            header::CONTENT_SECURITY_POLICY,
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'none'; base-uri 'none'",
                        ),
                    ],
                    PAGE,
                )
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let text = metrics.encode();
                async move { ([(header::CONTENT_TYPE, sluice_http::metrics::CONTENT_TYPE)], text) }
            }),
        )
}

/// Serves until Ctrl-C or SIGTERM, then stops accepting connections and lets open streams
/// finish for up to `SLUICE_DRAIN_TIMEOUT_MS`; any still open then end with a retryable
/// `shutting_down` error, and the process exits.
pub async fn run(settings: sluice_app::Settings) -> Result<()> {
    let config = &settings.wire;
    let addr = config.server.addr;
    let auth = config.auth.api_keys_file.is_some() || settings.aws.api_keys_table.is_some();
    if !auth && !addr.ip().is_loopback() && !config.server.allow_unauthenticated {
        anyhow::bail!(
            "refusing to listen on {addr} with auth off: anyone who can reach it could read and change every tenant's documents. \
             Set SLUICE_API_KEYS_FILE (see `sluice keys create`), listen on 127.0.0.1, or set SLUICE_ALLOW_UNAUTHENTICATED=true if a trusted proxy in front authenticates"
        );
    }
    let hosts = sluice_http::allowed_hosts(&config.server);
    if config.server.allowed_hosts.is_none() && addr.ip().is_unspecified() {
        tracing::warn!(hosts = %hosts.join(","), "listening on every address, but answering only requests for these host names: set SLUICE_ALLOWED_HOSTS to the names clients use");
    }
    let llm_url = settings.llm.urls.join(",");
    let drain_timeout = config.server.drain_timeout;
    let header_timeout = config.limits.header_timeout;
    let server = Arc::new(sluice_app::server(settings, sluice_app::Role::All).await?);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    info!(%addr, llm = %llm_url, "sluice serving");
    let draining = server.answers.clone();
    let signalled = async move {
        shutdown().await;
        info!(
            timeout_ms = drain_timeout.as_millis() as u64,
            "shutting down: draining open streams"
        );
        tokio::spawn(async move {
            tokio::time::sleep(drain_timeout).await;
            info!("drain time is up: ending the streams still open");
            if let Some(pipeline) = draining {
                pipeline.drain();
            }
        });
    };
    // Tenants' scheduled sources: the due ones started every half minute.
    sluice_http::service::sources::keep_syncing(Arc::clone(&server));
    let usage = server.usage.clone();
    let router = sluice_http::only_hosts(router(server), hosts);
    sluice_http::serve(listener, router, header_timeout, signalled).await?;
    // Every stream writes its usage as it ends; a stream the client dropped left its counts
    // to a task, which may not have run yet.
    if let Some(meter) = usage {
        meter.flush_before_exit().await;
    }
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
}
