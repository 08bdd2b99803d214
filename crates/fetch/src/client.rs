//! The client for URLs a tenant gave — its identity provider's key set, its website — so that
//! the URL cannot make Sluice reach inside: the rules of [`sluice_contract::net`] applied to
//! where each connection really goes.
//!
//! - **Resolved, then checked, then connected to.** A name is resolved by this client's own
//!   resolver, which drops every address that is not public (loopback, private, link-local
//!   and the metadata service, unspecified, …) unless the operator allows its range
//!   (`SLUICE_FETCH_ALLOW`); the connection goes to an address it returned, so a name that
//!   resolves differently a moment later (DNS rebinding) changes nothing. An address written in
//!   the URL is checked the same way before the request. No proxy from the environment.
//! - **Redirects are the caller's.** The client follows none: [`Fetcher::get`] (a key set)
//!   fails on one; [`Fetcher::page`] hands the `Location` back, and whoever follows it asks
//!   again — the new URL checked from the start ([`Fetcher::follow`] does, up to
//!   [`MAX_REDIRECTS`]), so a redirect cannot lead inside.
//! - **Bounded.** A time limit for the whole fetch, a cap on the body checked while it is read
//!   (no compressed encoding is asked for, so what is read is what is capped), and for key
//!   sets at most [`FETCHES_PER_MINUTE`] fetches per tenant.
//! - **Nothing echoed.** For a key set, what the network said (refused, a status, TLS, not
//!   JSON) is logged for the operator; the tenant is told the URL's setting is wrong or that
//!   no key set was read from it, never which — a tenant cannot use the error to map ports or
//!   services. A page's status is reported: it came from an address the rule let through.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_contract::net::{IpRange, not_public, site_url, tenant_url};

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
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
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

    /// The body at `url` (a key set), fetched for `tenant`, at most `max_bytes` of it; a
    /// redirect is a failure.
    pub async fn get(
        &self,
        tenant: &str,
        url: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>, FetchError> {
        let parsed = tenant_url(url).map_err(FetchError::Refused)?;
        self.check_literal(&parsed)
            .map_err(|r| FetchError::Refused(r.0))?;
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
        read_capped(&mut response, max_bytes)
            .await
            .map_err(|e| failed("body", e))
    }

    /// One request for the page at `url` (checked by [`site_url`]'s rules, then its address),
    /// conditional on `held` — the validator of the version held already — at most
    /// `max_bytes` of its body read. A redirect is handed back, not followed.
    pub async fn page(
        &self,
        url: &str,
        held: Option<&Validator>,
        max_bytes: usize,
    ) -> Result<Answer, Refused> {
        let parsed = site_url(url).map_err(Refused)?;
        self.check_literal(&parsed)?;
        let mut request = self.client.get(parsed);
        match held {
            Some(Validator::Etag(tag)) => request = request.header("if-none-match", tag),
            Some(Validator::Modified(date)) => request = request.header("if-modified-since", date),
            None => {}
        }
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(e) => {
                return match refusal_in(&e) {
                    Some(FetchError::Refused(why)) => Err(Refused(why)),
                    _ => Ok(Answer::Failed(failure(&e))),
                };
            }
        };
        let status = response.status();
        let header = |name: &str| {
            (response.headers().get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        if status.is_redirection() && status != reqwest::StatusCode::NOT_MODIFIED {
            return Ok(match header("location") {
                Some(location) => Answer::Redirect(location),
                None => Answer::Status(status.as_u16()),
            });
        }
        if status == reqwest::StatusCode::NOT_MODIFIED {
            return Ok(Answer::NotModified);
        }
        if !status.is_success() {
            return Ok(Answer::Status(status.as_u16()));
        }
        let validator = match (header("etag"), header("last-modified")) {
            (Some(tag), _) => Some(Validator::Etag(tag)),
            (None, Some(date)) => Some(Validator::Modified(date)),
            (None, None) => None,
        };
        let media_type = header("content-type");
        Ok(match read_capped(&mut response, max_bytes).await {
            Ok(bytes) => Answer::Page(Fetched {
                bytes,
                media_type,
                validator,
            }),
            Err(why) => Answer::Failed(why),
        })
    }

    /// The page at `url`, its redirects followed — each new URL checked from the start — up
    /// to [`MAX_REDIRECTS`]: where it ended and what it answered there (a site's robots.txt
    /// and sitemaps, which may have moved).
    pub async fn follow(&self, url: &str, max_bytes: usize) -> Result<(String, Answer), Refused> {
        let mut at = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            match self.page(&at, None, max_bytes).await? {
                Answer::Redirect(location) => at = joined(&at, &location)?,
                answer => return Ok((at, answer)),
            }
        }
        Ok((
            at,
            Answer::Failed(format!("more than {MAX_REDIRECTS} redirects")),
        ))
    }

    /// Refuses a URL whose host is an address written out that is not public (a name is
    /// checked by the resolver, at each connection).
    fn check_literal(&self, url: &url::Url) -> Result<(), Refused> {
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        match literal.and_then(|ip| refused(ip, &self.allowed)) {
            Some(why) => Err(Refused(why)),
            None => Ok(()),
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
        if let Some(refusal) = s.downcast_ref::<Refused>() {
            return Some(FetchError::Refused(refusal.0.clone()));
        }
        source = s.source();
    }
    None
}

/// A URL, or where it leads, that Sluice does not fetch: what is wrong with it, for the tenant
/// (also what the resolver says of a name whose every address is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

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
                return Err(Box::new(Refused(why)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Redirects [`Fetcher::follow`] follows before it gives up.
pub const MAX_REDIRECTS: usize = 5;

/// What a server said identifies the version of a page it sent: asked again with it, a page
/// that has not changed answers 304 and sends nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validator {
    /// Its `ETag` (sent back as `If-None-Match`).
    Etag(String),
    /// Its `Last-Modified` (sent back as `If-Modified-Since`).
    Modified(String),
}

impl Validator {
    /// As kept beside a document: `etag:<tag>` or `modified:<date>`.
    pub fn kept(&self) -> String {
        match self {
            Validator::Etag(tag) => format!("etag:{tag}"),
            Validator::Modified(date) => format!("modified:{date}"),
        }
    }

    /// Read back from [`kept`](Self::kept)'s form.
    pub fn from_kept(text: &str) -> Option<Self> {
        match text.split_once(':')? {
            ("etag", tag) => Some(Validator::Etag(tag.to_string())),
            ("modified", date) => Some(Validator::Modified(date.to_string())),
            _ => None,
        }
    }
}

/// What one request for a page answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: the page.
    Page(Fetched),
    /// 304: the version held is current.
    NotModified,
    /// 3xx with a `Location` (as sent: relative or not).
    Redirect(String),
    /// Another status (404 and 410 say the page is gone).
    Status(u16),
    /// No usable answer: the connection, the time limit, or a body over its cap.
    Failed(String),
}

/// A page as fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Its body.
    pub bytes: Vec<u8>,
    /// Its `Content-Type`.
    pub media_type: Option<String>,
    /// What identifies this version, when the server said.
    pub validator: Option<Validator>,
}

/// `location` read relative to `base`, checked as a page's URL.
pub fn joined(base: &str, location: &str) -> Result<String, Refused> {
    let base = url::Url::parse(base).map_err(|e| Refused(format!("is not a URL ({e})")))?;
    let next = (base.join(location)).map_err(|e| Refused(format!("redirects to no URL ({e})")))?;
    site_url(next.as_str())
        .map(String::from)
        .map_err(|why| Refused(format!("redirects to a URL that {why}")))
}

/// A request error said in a few words (never the address: the operator's log has it).
fn failure(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "no answer in time".into()
    } else if e.is_connect() {
        "could not connect".into()
    } else {
        "the connection failed".into()
    }
}

/// The body of `response`, or why not: failed, or over `max_bytes` (checked at each chunk, so
/// no more than a chunk past the cap is ever held).
async fn read_capped(
    response: &mut reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, String> {
    if let Some(length) = response.content_length()
        && length > max_bytes as u64
    {
        return Err(format!("its body is over {max_bytes} bytes"));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > max_bytes => {
                return Err(format!("its body is over {max_bytes} bytes"));
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok(body),
            Err(e) => return Err(failure(&e)),
        }
    }
}
