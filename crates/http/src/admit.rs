//! The doors' side of who is asking: a browser's request from a page of another origin is
//! refused, then the HTTP headers are read into the service's [`Credentials`] and [`Call`]
//! (the API key from `x-api-key` or `Authorization: Bearer`, the tenant from
//! `x-sluice-tenant`, the end user's token from `x-sluice-user`, the trace, `Cache-Control`,
//! the entry point's [`StreamDeadline`]), and the service admits the caller
//! ([`crate::service::caller`]).

use axum::http::{HeaderMap, header};
use sluice_contract::access::USER_HEADER;
use sluice_contract::auth::{KEY_HEADER, Permission};
use sluice_contract::codes::Code;
use sluice_contract::tenant::TENANT_HEADER;

use crate::error::ApiError;
use crate::service::{Call, Caller, Credentials, Key};
use crate::{Server, StreamDeadline};

/// Admits a REST request that needs `permission` and acts for no end user
/// ([`Server::admit`]), after [`cross_site`]'s check.
pub(crate) async fn admit(
    server: &Server,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    same_site(headers)?;
    server.admit(&credentials(headers), permission).await
}

/// Admits a REST request that reads documents for an end user ([`Server::admit_reader`]),
/// after [`cross_site`]'s check.
pub(crate) async fn admit_reader(
    server: &Server,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    same_site(headers)?;
    server.admit_reader(&credentials(headers), permission).await
}

/// 403 `cross_origin` for a browser's request from a page of another origin.
pub(crate) fn same_site(headers: &HeaderMap) -> Result<(), ApiError> {
    match cross_site(headers) {
        Some(why) => {
            tracing::warn!("{why}");
            Err(ApiError::new(Code::CrossOrigin, why))
        }
        None => Ok(()),
    }
}

/// Who the request says it is. With auth on, `x-api-key` is read first: behind IAM auth
/// (function URL, API Gateway) `Authorization` carries the caller's SigV4 signature, so the
/// key travels in a header of its own.
pub(crate) fn credentials(headers: &HeaderMap) -> Credentials {
    let text = |v: &axum::http::HeaderValue| v.to_str().ok().map(str::trim).map(str::to_string);
    let key = match (headers.get(KEY_HEADER), headers.get(header::AUTHORIZATION)) {
        (Some(v), _) => match text(v).filter(|key| !key.is_empty()) {
            Some(key) => Key::Given(key),
            None => Key::Unreadable("the x-api-key header is empty"),
        },
        (None, None) => Key::None,
        (None, Some(v)) => v
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .filter(|key| !key.is_empty())
            .map_or(
                Key::Unreadable("the Authorization header must be Bearer <key>"),
                |key| Key::Given(key.to_string()),
            ),
    };
    Credentials {
        key,
        // A value that is not text is no tenant name, and is refused as one.
        tenant: (headers.get(TENANT_HEADER)).map(|v| v.to_str().unwrap_or("\u{fffd}").to_string()),
        user_token: (headers.get(USER_HEADER)).map(|v| text(v).unwrap_or_default()),
    }
}

/// The call as the service sees it: [`credentials`], received at `received`, with its trace,
/// its `Cache-Control` and the entry point's deadline.
pub(crate) fn call(
    headers: &HeaderMap,
    received: std::time::Instant,
    deadline: Option<&StreamDeadline>,
) -> Call {
    Call {
        credentials: credentials(headers),
        received,
        traceparent: (headers.get("traceparent"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        no_cache: no_cache(headers),
        ends_by: deadline.map(|d| d.0),
    }
}

/// Whether `Cache-Control` says `no-cache` or `no-store`: the request then neither reads
/// nor writes the answer cache.
pub(crate) fn no_cache(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|d| d.trim().to_ascii_lowercase())
        .any(|d| d == "no-cache" || d == "no-store")
}

/// Why a request was sent by a web page of another origin than this server's, if it was:
/// browsers name the page's origin in `Origin` (every `POST`, and cross-origin `fetch`), or
/// at least say `Sec-Fetch-Site: cross-site`. Without this, any site the user visits could
/// post a form to a local `sluice serve` with auth off and plant documents, switch components
/// or burn LLM time (the body is read as JSON whatever its content type). Clients that are not
/// browsers send neither header (curl, the CLI, SDKs); the page at `/` is same-origin.
/// Same origin: `Origin`'s host and port are the request's `Host` (or `X-Forwarded-Host`, set
/// by a proxy in front; a page cannot set it on a form post, nor on a cross-origin `fetch`
/// without a preflight this server never grants).
pub(crate) fn cross_site(headers: &HeaderMap) -> Option<String> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
            Some(site @ ("cross-site" | "same-site")) => Some(format!(
                "requests from web pages of other sites are refused (Sec-Fetch-Site: {site})"
            )),
            _ => None,
        };
    };
    let origin = origin.to_str().unwrap_or("(not text)");
    let own = |name| headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    let same = own(header::HOST)
        .chain(own(axum::http::HeaderName::from_static("x-forwarded-host")))
        .flat_map(|v| v.split(','))
        .any(|host| same_origin(origin, host.trim()));
    (!same)
        .then(|| format!("requests from web pages of other origins are refused (Origin: {origin})"))
}

/// Whether the origin `scheme://host[:port]` is the one of a server reached as `host[:port]`
/// (the port defaulting to the scheme's).
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        // `null` (a sandboxed frame, a file) and anything else is not this server.
        return false;
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let with_port = |a: &str| -> (String, String) {
        let a = a.to_ascii_lowercase();
        // `[::1]:8080`, `[::1]`, `name:8080`, `name`.
        match a.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') && !h.is_empty() => (h.to_string(), p.to_string()),
            _ => (a, default.to_string()),
        }
    };
    !authority.contains('/') && with_port(authority) == with_port(host)
}
