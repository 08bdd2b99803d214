//! Fetching a URL a tenant gave (its identity provider's key set), so that the URL cannot make
//! Sluice reach inside: the rules of [`sluice_contract::net`] applied to where the connection
//! really goes.
//!
//! - **Resolved, then checked, then connected to.** A name is resolved by this client's own
//!   resolver, which drops every address that is not public (loopback, private, link-local
//!   and the metadata service, unspecified, …) unless the operator allows its range
//!   (`SLUICE_FETCH_ALLOW`); the connection goes to an address it returned, so a name that
//!   resolves differently a moment later (DNS rebinding) changes nothing. An address written in
//!   the URL is checked the same way before the request. No proxy from the environment.
//! - **No redirects.** A redirect is a failure: it is never followed, so it cannot lead inside.
//! - **Bounded.** [`FETCH_TIMEOUT`](crate::FETCH_TIMEOUT) for the whole fetch, a cap on the
//!   body read while it is read, and at most [`FETCHES_PER_MINUTE`] fetches per tenant.
//! - **Nothing echoed.** What the network said (refused, a status, TLS, not JSON) is logged
//!   for the operator; the tenant is told the URL's setting is wrong or that no key set was
//!   read from it, never which — a tenant cannot use the error to map ports or services.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_contract::net::{IpRange, not_public, tenant_url};

/// Fetches one tenant may start per minute (a key set is fetched on first use and again at
/// most once a minute per URL; more than a few a minute is a tenant changing its URL to probe).
pub const FETCHES_PER_MINUTE: u32 = 6;

/// Tenants whose fetch counts are kept (older windows are forgotten first).
const MAX_TENANTS: usize = 10_000;

/// Why a fetch failed, as the tenant is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The URL, or where it leads, is not one Sluice fetches: what is wrong with the setting.
    #[error("{0}")]
    Refused(String),
    /// The tenant started more than [`FETCHES_PER_MINUTE`] fetches in the last minute.
    #[error(
        "more than {FETCHES_PER_MINUTE} key fetches for this tenant in a minute; try again later"
    )]
    RateLimited,
    /// The network did not give a usable answer; the reason is in the operator's log.
    #[error("nothing usable was read from it")]
    Failed,
}

/// A client for tenants' URLs with its resolver, the operator's allowed ranges and each
/// tenant's count of fetches.
pub struct Fetcher {
    client: reqwest::Client,
    allowed: Arc<Vec<IpRange>>,
    counts: Mutex<HashMap<String, (Instant, u32)>>,
}

/// A name service: the addresses a host name resolves to now. The system's ([`system`]), or
/// a test's (one whose answers change from one lookup to the next, as a rebinding name's do).
pub type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system's name service.
pub fn system() -> Lookup {
    Arc::new(|name: String| {
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            Ok(found.map(|a| a.ip()).collect())
        })
    })
}

impl Fetcher {
    /// A fetcher that connects only to public addresses and to `allowed` ranges, each fetch
    /// within `timeout`, resolving names with the system's name service.
    pub fn new(allowed: Vec<IpRange>, timeout: Duration) -> Self {
        Self::resolving(allowed, timeout, system())
    }

    /// [`Fetcher::new`] with names resolved by `lookup`.
    pub fn resolving(allowed: Vec<IpRange>, timeout: Duration, lookup: Lookup) -> Self {
        let allowed = Arc::new(allowed);
        let resolver = Checked {
            allowed: Arc::clone(&allowed),
            lookup,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(resolver))
            .build()
            .unwrap_or_default();
        Self {
            client,
            allowed,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// The body at `url`, fetched for `tenant`, at most `max_bytes` of it.
    pub async fn get(
        &self,
        tenant: &str,
        url: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>, FetchError> {
        let parsed = tenant_url(url).map_err(FetchError::Refused)?;
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal
            && let Some(why) = refused(ip, &self.allowed)
        {
            return Err(FetchError::Refused(why));
        }
        self.count(tenant)?;
        let failed = |what: &str, detail: String| {
            tracing::warn!(tenant, url, what, detail, "a tenant's URL was not fetched");
            FetchError::Failed
        };
        let mut response = match self.client.get(parsed).send().await {
            Ok(response) => response,
            // The resolver's refusal comes back as a connect error: the setting is at fault.
            Err(e) => {
                return Err(refusal_in(&e).unwrap_or_else(|| failed("request", e.to_string())));
            }
        };
        if !response.status().is_success() {
            return Err(failed("status", response.status().to_string()));
        }
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) if body.len() + chunk.len() > max_bytes => {
                    return Err(failed("body", format!("over {max_bytes} bytes")));
                }
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => return Ok(body),
                Err(e) => return Err(failed("body", e.to_string())),
            }
        }
    }

    /// Counts a fetch of `tenant`'s, or refuses it past [`FETCHES_PER_MINUTE`].
    fn count(&self, tenant: &str) -> Result<(), FetchError> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if counts.len() >= MAX_TENANTS && !counts.contains_key(tenant) {
            counts.retain(|_, (since, _)| now.duration_since(*since) < Duration::from_secs(60));
            if counts.len() >= MAX_TENANTS {
                return Err(FetchError::RateLimited);
            }
        }
        let (since, n) = counts.entry(tenant.to_string()).or_insert((now, 0));
        if now.duration_since(*since) >= Duration::from_secs(60) {
            (*since, *n) = (now, 0);
        }
        if *n >= FETCHES_PER_MINUTE {
            return Err(FetchError::RateLimited);
        }
        *n += 1;
        Ok(())
    }
}

/// Why `ip` is not connected to, unless an allowed range holds it.
fn refused(ip: IpAddr, allowed: &[IpRange]) -> Option<String> {
    let why = not_public(ip)?;
    if allowed.iter().any(|r| r.contains(ip)) {
        return None;
    }
    Some(format!(
        "its host is {why}; Sluice fetches only from public addresses"
    ))
}

/// The resolver's refusal, found in a request error's sources.
fn refusal_in(e: &reqwest::Error) -> Option<FetchError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(refusal) = s.downcast_ref::<Refusal>() {
            return Some(FetchError::Refused(refusal.0.clone()));
        }
        source = s.source();
    }
    None
}

/// What the resolver says of a name whose every address is refused.
#[derive(Debug)]
struct Refusal(String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// The system resolver, with every address that is not public (and not allowed) dropped.
struct Checked {
    allowed: Arc<Vec<IpRange>>,
    lookup: Lookup,
}

impl reqwest::dns::Resolve for Checked {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = Arc::clone(&self.allowed);
        let found = (self.lookup)(name.as_str().to_string());
        Box::pin(async move {
            let found: Vec<SocketAddr> = (found.await?.into_iter())
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            let mut why = None;
            let kept: Vec<SocketAddr> = (found.into_iter())
                .filter(|a| match refused(a.ip(), &allowed) {
                    None => true,
                    Some(w) => {
                        why.get_or_insert(w);
                        false
                    }
                })
                .collect();
            if kept.is_empty() {
                let why = why.unwrap_or_else(|| "its host resolves to no address".into());
                return Err(Box::new(Refusal(why)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}
