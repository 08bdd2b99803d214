//! The HTTP client shared by the remote stores: one keep-alive pool per process (idle
//! connections kept 90 s), TCP keepalive, no Nagle, HTTP/2 when a TLS server offers it, a
//! timeout on every call, and retries of reads only (transport errors and 5xx; the pipeline's
//! retrieval deadline cancels them). Writes are sent once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::StoreConfig;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use sluice_contract::error::StoreError;

/// Pause before retrying a failed read.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

pub(crate) fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// One REST endpoint.
pub(crate) struct Rest {
    http: reqwest::Client,
    base: String,
    read_retries: usize,
    /// Said when a write gets 404 (the collection or index is missing).
    missing: &'static str,
}

impl Rest {
    /// A client for `base` sending `headers` (API keys: never logged) on every call.
    pub(crate) fn new(
        config: &StoreConfig,
        base: &str,
        headers: &[(&'static str, &str)],
        missing: &'static str,
    ) -> Result<Self, StoreError> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| StoreError::Open(format!("the {name} header value is not valid")))?;
            value.set_sensitive(true);
            map.insert(HeaderName::from_static(name), value);
        }
        let http = reqwest::Client::builder()
            .default_headers(map)
            .connect_timeout(config.timeout)
            .timeout(config.timeout)
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_keepalive(Duration::from_secs(30))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| StoreError::Open(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_string(),
            read_retries: config.read_retries,
            missing,
        })
    }

    /// One call with a JSON body. Returns the body of a successful response, or `None` when
    /// a read finds nothing (404); a write's 404 is an error.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        read: bool,
    ) -> Result<Option<String>, StoreError> {
        let attempts = if read { 1 + self.read_retries } else { 1 };
        let mut last = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.base));
            if let Some(body) = &body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
            }
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) => {
                    last = Some(backend(format!("{method} {path}: {e}")));
                    continue;
                }
            };
            let status = response.status();
            if status == StatusCode::NOT_FOUND {
                if read {
                    return Ok(None);
                }
                return Err(backend(format!("{method} {path}: 404: {}", self.missing)));
            }
            let text = response
                .text()
                .await
                .map_err(|e| backend(format!("{method} {path}: {e}")))?;
            if status.is_success() {
                return Ok(Some(text));
            }
            let error = backend(format!(
                "{method} {path}: {status}: {}",
                text.chars().take(300).collect::<String>()
            ));
            if !status.is_server_error() {
                return Err(error);
            }
            last = Some(error);
        }
        Err(last.unwrap_or_else(|| backend("no attempt made")))
    }
}

/// How long a corpus version read from a remote store is trusted before it is read again:
/// other processes' ingests become visible to this one's cache within this time.
pub(crate) const VERSION_FRESH: Duration = Duration::from_secs(1);

/// The corpus versions a remote store read or wrote lately, per tenant.
#[derive(Default)]
pub(crate) struct VersionMemo(Mutex<HashMap<String, (u64, Instant)>>);

impl VersionMemo {
    /// The tenant's version when it is fresh.
    pub(crate) fn get(&self, tenant: &str) -> Option<u64> {
        let memo = self.0.lock().ok()?;
        let (v, at) = memo.get(tenant)?;
        (at.elapsed() < VERSION_FRESH).then_some(*v)
    }

    pub(crate) fn put(&self, tenant: &str, version: u64) {
        if let Ok(mut memo) = self.0.lock() {
            if memo.len() >= sluice_contract::REMEMBERED_TENANTS && !memo.contains_key(tenant) {
                // Bounded: versions past their second are of no use; then start afresh.
                memo.retain(|_, (_, at)| at.elapsed() < VERSION_FRESH);
                if memo.len() >= sluice_contract::REMEMBERED_TENANTS {
                    memo.clear();
                }
            }
            memo.insert(tenant.to_string(), (version, Instant::now()));
        }
    }

    /// How many tenants it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }
}

/// The version an ingest sets: Unix milliseconds, and past `current`. Two processes ingesting
/// at once still move the version (an increment's read-modify-write could lose one).
pub(crate) fn next_version(current: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    now.max(current + 1)
}

#[derive(Deserialize)]
struct Envelope<T> {
    result: T,
}

/// The `result` of a Qdrant response body.
pub(crate) fn qdrant_result<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str::<Envelope<T>>(text)
        .map(|e| e.result)
        .map_err(|e| format!("unexpected response: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_memo_stays_bounded_whatever_tenants_it_sees() {
        let memo = VersionMemo::default();
        for i in 0..sluice_contract::REMEMBERED_TENANTS * 2 + 7 {
            memo.put(&format!("t{i}"), i as u64);
        }
        assert!(
            memo.len() <= sluice_contract::REMEMBERED_TENANTS,
            "{}",
            memo.len()
        );
        // What was put last is still there and fresh.
        let last = sluice_contract::REMEMBERED_TENANTS * 2 + 6;
        assert_eq!(memo.get(&format!("t{last}")), Some(last as u64));
    }
}
