//! The HTTP surface, shared by `sluice serve` and the Lambda functions:
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/answer` | `{"query", "k"?, "session_id"?, "retrieval_deadline_ms"?, "cache"?, "include_prompt"?}` → `text/event-stream` |
//! | `POST /v1/documents` | `{"documents": [{"id", "text", "title"?, "source"?}]}`, or a file's bytes with `?filename=` → ingest report |
//! | `PUT /v1/components/rerank` | upload a rerank component (bytes) → its version |
//! | `POST /v1/components/rerank/activate` | `{"version"}` → make it the tenant's active one |
//! | `GET /v1/components/rerank` | the tenant's versions and the active one |
//! | `DELETE /v1/components/rerank` | back to the built-in default (fused order) |
//! | `DELETE /v1/cache` | forget the tenant's cached answers → `{"deleted": n}` |
//! | `POST /v1/chat/completions`, `GET /v1/models` | OpenAI-compatible ([`crate::openai`]) |
//! | `GET /healthz` | the process is up |
//! | `GET /readyz` | model loaded, store open, LLM reachable (503 otherwise) |
//!
//! Every error is JSON: `{"error": {"code", "message"}}` with a 4xx/5xx status.
//!
//! **Auth.** With a key store (`SLUICE_API_KEYS_FILE`, `SLUICE_API_KEYS_TABLE`) every `/v1`
//! request needs `Authorization: Bearer <key>` (or `x-api-key: <key>`, for callers whose
//! `Authorization` carries a SigV4 signature): the key's tenant is the request's tenant.
//! No key or an unknown one is a 401; an `x-sluice-tenant` header naming another tenant, or a
//! route the key has no [`Permission`] for, a 403. Without a key store auth is off and the
//! tenant is the `x-sluice-tenant` header, or `SLUICE_DEFAULT_TENANT` without it: that trusts
//! the network in front of the server. Then each tenant's request rate and open streams are
//! limited ([`crate::quota`]): over a limit is a 429 with `Retry-After`.
//!
//! A `traceparent` header (W3C) is continued into the LLM call. Every response is counted by
//! route and status in the pipeline's metrics.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

use crate::auth::{Permission, digest};
use crate::config::{MAX_K, MAX_QUERY_CHARS, valid_tenant};
use crate::error::IngestError;
use crate::ingest::Document;
use crate::pipeline::{AnswerRequest, Pipeline};
use crate::quota::Limited;
use crate::sse::Event;
use crate::stages::{ComponentError, Components};
use crate::trace::TraceContext;

/// The moment an answer stream must have ended by, set as a request extension by an entry
/// point that is killed at a fixed time (on Lambda: the invocation's deadline less a margin);
/// `sluice serve` sets none. It becomes the answer's [`AnswerRequest::ends_by`].
#[derive(Debug, Clone, Copy)]
pub struct StreamDeadline(pub tokio::time::Instant);

/// Longest accepted `session_id`.
const MAX_SESSION_ID_CHARS: usize = 128;
/// Largest accepted per-request retrieval deadline.
const MAX_DEADLINE_MS: u64 = 60_000;
/// Largest component upload.
const MAX_COMPONENT_BYTES: usize = 2 << 20;
/// The API key's header when `Authorization` is taken by a SigV4 signature.
const KEY_HEADER: &str = "x-api-key";
/// The header naming the tenant (with auth on, it must name the key's own).
const TENANT_HEADER: &str = "x-sluice-tenant";
/// How long `/readyz` waits for the LLM.
const READY_LLM_TIMEOUT: Duration = Duration::from_secs(2);

/// An error answered as `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What is wrong, for people.
    pub message: String,
    /// When to try again (`Retry-After`, whole seconds), for 429 and 503.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        if let Some(after) = self.retry_after {
            let secs = after.as_secs_f64().ceil().max(1.0) as u64;
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice\""),
            );
        }
        response
    }
}

impl From<Limited> for ApiError {
    fn from(l: Limited) -> Self {
        Self {
            retry_after: Some(l.retry_after),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, l.code, l.message)
        }
    }
}

/// Serves `router` (usually [`router`]) on `listener` until `shutdown` completes, then lets
/// open streams finish.
///
/// Every accepted connection gets `TCP_NODELAY`: SSE events are small writes, and with
/// Nagle's algorithm a token written right after `meta` waits for the client's delayed ACK
/// (40 ms on Linux) — measured as 40 ms of extra time to first token before this.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

/// The router over a pipeline built at start.
pub fn router(pipeline: Arc<Pipeline>) -> Router {
    Router::new()
        .route("/v1/answer", post(answer))
        .route("/v1/documents", post(documents))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        .route(
            "/v1/components/rerank",
            get(list_components)
                .put(upload_component)
                .delete(deactivate_component),
        )
        .route("/v1/components/rerank/activate", post(activate_component))
        .route("/v1/cache", delete(clear_cache))
        .route(
            "/v1/chat/completions",
            post(crate::openai::chat_completions),
        )
        .route("/v1/models", get(crate::openai::models))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&pipeline),
            count_request,
        ))
        .with_state(pipeline)
}

/// `router`, answering only requests whose `Host` names one of `hosts` (lower-case names or
/// addresses without a port, IPv6 in brackets; `*` for any): 403 `forbidden_host` otherwise.
/// For a server on a private address (`sluice serve`): a DNS-rebinding page — a site whose
/// name the attacker points at 127.0.0.1 after the page has loaded — reaches the server as
/// that name, same-origin to the browser, and is refused here. A request without `Host`
/// (HTTP/1.0) is no browser's.
pub fn only_hosts(router: Router, hosts: Vec<String>) -> Router {
    if hosts.iter().any(|h| h == "*") {
        return router;
    }
    let hosts = Arc::new(hosts);
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let hosts = Arc::clone(&hosts);
            async move {
                let named = request
                    .headers()
                    .get(header::HOST)
                    .map(|h| h.to_str().map(host_name).unwrap_or_default());
                match named {
                    Some(name) if !hosts.contains(&name) => {
                        tracing::warn!(host = %name, "a request for another host name was refused");
                        ApiError::new(
                            StatusCode::FORBIDDEN,
                            "forbidden_host",
                            format!(
                                "this server answers to {} (SLUICE_ALLOWED_HOSTS), not {name:?}",
                                hosts.join(", ")
                            ),
                        )
                        .into_response()
                    }
                    _ => next.run(request).await,
                }
            }
        },
    ))
}

/// The host part of a `Host` header (`name:port`, `[::1]:port`), lower-cased.
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name.to_string()
        }
        _ => host,
    }
}

/// Counts each response by its route pattern (`/v1/answer`, not the raw path: unknown paths
/// are all `unmatched`, so that a scan cannot grow the series without bound) and status.
async fn count_request(
    State(pipeline): State<Arc<Pipeline>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    let response = next.run(request).await;
    pipeline.metrics.request(&route, response.status().as_u16());
    response
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Who is asking: the tenant, and whether it may see the assembled prompt.
pub(crate) struct Caller {
    pub(crate) tenant: String,
    may_see_prompt: bool,
}

/// Admits a `/v1` request that needs `permission`, or says why not (every `/v1` route starts
/// here): a browser's request from a page of another origin is refused (403 `cross_origin`);
/// then the caller — with auth on, the tenant of its key (see the module docs for 401 and
/// 403); with auth off, the `x-sluice-tenant` header, else the default tenant — and one
/// request from its tenant's rate (429). An answer's stream slot is [`open_answer`]'s.
pub(crate) async fn admit(
    pipeline: &Pipeline,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    if let Some(why) = cross_site(headers) {
        tracing::warn!("{why}");
        return Err(ApiError::new(StatusCode::FORBIDDEN, "cross_origin", why));
    }
    let caller = identify(pipeline, headers, permission).await?;
    pipeline
        .quotas
        .request(&caller.tenant)
        .map_err(|l| limited(&caller.tenant, l))?;
    Ok(caller)
}

/// Who is asking, by key or by header (see [`admit`]).
async fn identify(
    pipeline: &Pipeline,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    let named = match headers.get(TENANT_HEADER) {
        None => None,
        Some(v) => match v.to_str() {
            Ok(t) if valid_tenant(t) => Some(t.to_string()),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_tenant",
                    format!(
                        "{TENANT_HEADER} must be 1-64 characters of letters, digits, '-' or '_'"
                    ),
                ));
            }
        },
    };
    let Some(keys) = &pipeline.keys else {
        return Ok(Caller {
            tenant: named.unwrap_or_else(|| pipeline.config.default_tenant.clone()),
            may_see_prompt: true,
        });
    };
    let unauthorized =
        |code, message: &str| ApiError::new(StatusCode::UNAUTHORIZED, code, message.to_string());
    // `x-api-key` first: behind IAM auth (function URL, API Gateway) `Authorization` carries
    // the caller's SigV4 signature, so the key travels in a header of its own.
    let key = match (headers.get(KEY_HEADER), headers.get(header::AUTHORIZATION)) {
        (Some(v), _) => v
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .ok_or_else(|| unauthorized("invalid_api_key", "the x-api-key header is empty"))?,
        (None, None) => {
            return Err(unauthorized(
                "missing_api_key",
                "this server needs an API key: send Authorization: Bearer <key> (or x-api-key: <key>)",
            ));
        }
        (None, Some(v)) => v
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, key)| key.trim())
            .filter(|key| !key.is_empty())
            .ok_or_else(|| {
                unauthorized(
                    "invalid_api_key",
                    "the Authorization header must be Bearer <key>",
                )
            })?,
    };
    let principal = match keys.find(&digest(key)).await {
        Ok(Some(p)) => p,
        Ok(None) => return Err(unauthorized("invalid_api_key", "the API key is not valid")),
        Err(e) => {
            tracing::error!(error = %e, "API key lookup failed");
            return Err(ApiError {
                retry_after: Some(Duration::from_secs(1)),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "auth_unavailable",
                    "API keys cannot be checked right now; try again",
                )
            });
        }
    };
    if let Some(named) = named
        && named != principal.tenant
    {
        tracing::warn!(tenant = %principal.tenant, asked_for = %named, "a key asked for another tenant");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_tenant",
            format!("this API key belongs to another tenant than {named:?}"),
        ));
    }
    if !principal.may(permission) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_denied",
            format!(
                "this API key does not have the {:?} permission",
                permission.name()
            ),
        ));
    }
    Ok(Caller {
        may_see_prompt: principal.may(Permission::Prompt),
        tenant: principal.tenant,
    })
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

/// A 429, logged with the tenant.
fn limited(tenant: &str, l: Limited) -> ApiError {
    tracing::warn!(%tenant, code = l.code, retry_after_s = l.retry_after.as_secs(), "request over a tenant limit");
    ApiError::from(l)
}

/// Reads the whole body, refusing (413) more than `limit` bytes.
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is larger than {limit} bytes"),
        )
    };
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(s) = source {
            if s.is::<http_body_util::LengthLimitError>() {
                return too_large();
            }
            source = s.source();
        }
        ApiError::bad_request(
            "unreadable_body",
            format!("could not read the request body: {e}"),
        )
    })
}

/// Parses JSON, naming the problem (syntax, or a field of the wrong type) in the message.
fn parse_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("request body is not valid JSON for this route: {e}"),
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    query: Option<String>,
    k: Option<serde_json::Value>,
    session_id: Option<String>,
    retrieval_deadline_ms: Option<u64>,
    cache: Option<String>,
    #[serde(default)]
    include_prompt: bool,
}

/// Parses and validates the body of `POST /v1/answer` (with its `Cache-Control` and
/// `traceparent` headers) into a pipeline request for `tenant`; defaults from `config`.
/// Request bodies are untrusted input: this is fuzzed (`fuzz/`).
pub fn answer_request(
    config: &crate::Config,
    tenant: String,
    headers: &HeaderMap,
    body: &[u8],
    received: Instant,
) -> Result<AnswerRequest, ApiError> {
    let body: AnswerBody = parse_json(body)?;
    let query = body
        .query
        .ok_or_else(|| ApiError::bad_request("missing_query", "\"query\" is required"))?;
    let query = query.trim().to_string();
    if query.is_empty() {
        return Err(ApiError::bad_request("empty_query", "\"query\" is empty"));
    }
    let chars = query.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(
            "query_too_long",
            format!("\"query\" has {chars} characters; the limit is {MAX_QUERY_CHARS}"),
        ));
    }
    let k = match body.k {
        None => config.top_k,
        Some(k) => match k.as_u64() {
            Some(n) if (1..=MAX_K as u64).contains(&n) => n as usize,
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_k",
                    format!("\"k\" is {k}; it must be a whole number from 1 to {MAX_K}"),
                ));
            }
        },
    };
    if let Some(s) = &body.session_id
        && (s.is_empty() || s.chars().count() > MAX_SESSION_ID_CHARS)
    {
        return Err(ApiError::bad_request(
            "invalid_session_id",
            format!("\"session_id\" must have 1 to {MAX_SESSION_ID_CHARS} characters"),
        ));
    }
    let retrieval_deadline = match body.retrieval_deadline_ms {
        None => config.retrieval_deadline,
        Some(ms) if ms <= MAX_DEADLINE_MS => Duration::from_millis(ms),
        Some(ms) => {
            return Err(ApiError::bad_request(
                "invalid_deadline",
                format!("\"retrieval_deadline_ms\" is {ms}; the limit is {MAX_DEADLINE_MS}"),
            ));
        }
    };
    let bypass_cache = match body.cache.as_deref() {
        None | Some("auto") => no_cache(headers),
        Some("bypass") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_cache",
                format!("\"cache\" is {other:?}; it must be \"auto\" or \"bypass\""),
            ));
        }
    };
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
    Ok(AnswerRequest {
        tenant,
        query,
        k,
        session_id: body.session_id,
        retrieval_deadline,
        received,
        bypass_cache,
        trace: TraceContext::from_header(traceparent),
        include_prompt: body.include_prompt,
        ends_by: None,
    })
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

async fn answer(
    State(pipeline): State<Arc<Pipeline>>,
    deadline: Option<axum::Extension<StreamDeadline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let caller = admit(&pipeline, &headers, Permission::Answer).await?;
    let bytes = read_body(body, pipeline.config.max_body_bytes).await?;
    let request = answer_request(
        &pipeline.config,
        caller.tenant.clone(),
        &headers,
        &bytes,
        received,
    )?;
    let events = open_answer(&pipeline, &caller, deadline, request)?;
    Ok(sse_response(
        events.map(|e| e.to_sse()),
        pipeline.config.sse_keepalive,
    ))
}

/// Starts answering `request` for `caller` (the tenant's stream quota permitting): the
/// pipeline's events, which end early — with a closing retryable `error` — when the server's
/// drain time is up or the entry point's [`StreamDeadline`] comes. The stream holds the
/// tenant's stream permit until it ends or is dropped.
pub(crate) fn open_answer(
    pipeline: &Arc<Pipeline>,
    caller: &Caller,
    deadline: Option<axum::Extension<StreamDeadline>>,
    request: AnswerRequest,
) -> Result<futures::stream::BoxStream<'static, Event>, ApiError> {
    if request.include_prompt && !caller.may_see_prompt {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "permission_denied",
            "\"include_prompt\" needs an API key with the \"prompt\" permission",
        ));
    }
    let permit = pipeline
        .quotas
        .stream(&caller.tenant)
        .map_err(|l| limited(&caller.tenant, l))?;
    let request = AnswerRequest {
        ends_by: deadline.map(|axum::Extension(StreamDeadline(at))| at),
        ..request
    };
    Ok(pipeline
        .answer(request)
        .map(move |e| {
            let _held = &permit;
            e
        })
        .boxed())
}

/// A `text/event-stream` response of already-framed events, passed on as they come. After
/// `keepalive` without an event (a loaded fleet can take seconds to its first token) an SSE
/// comment line goes out, which clients ignore, so that proxies and load balancers with idle
/// timeouts do not cut the stream; zero sends none.
pub(crate) fn sse_response(
    events: impl futures::Stream<Item = String> + Send + 'static,
    keepalive: Duration,
) -> Response {
    let events = kept_alive(events, keepalive);
    let body = events.map(|e| Ok::<_, Infallible>(Bytes::from(e)));
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell buffering proxies (nginx and the like) to pass events through at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The SSE comment line of [`sse_response`]'s keep-alive.
pub const KEEPALIVE: &str = ": keep-alive\n\n";

/// `events`, with [`KEEPALIVE`] after every `every` of silence (none when zero).
fn kept_alive(
    events: impl futures::Stream<Item = String> + Send + 'static,
    every: Duration,
) -> futures::stream::BoxStream<'static, String> {
    if every.is_zero() {
        return events.boxed();
    }
    async_stream::stream! {
        let mut events = std::pin::pin!(events);
        loop {
            // Waiting for the next event may stop at any time: nothing is lost.
            match tokio::time::timeout(every, events.next()).await {
                Ok(Some(event)) => yield event,
                Ok(None) => break,
                Err(_) => yield KEEPALIVE.to_string(),
            }
        }
    }
    .boxed()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentsBody {
    documents: Vec<Document>,
}

#[derive(Debug, Deserialize)]
struct DocumentsQuery {
    filename: Option<String>,
}

/// `{"documents": [...]}`, or with `?filename=NAME` the file itself (.txt, .md, .json,
/// .jsonl), read as `sluice ingest` and the ingest function read files.
async fn documents(
    State(pipeline): State<Arc<Pipeline>>,
    axum::extract::Query(query): axum::extract::Query<DocumentsQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let tenant = admit(&pipeline, &headers, Permission::Documents)
        .await?
        .tenant;
    let bytes = read_body(body, pipeline.config.max_ingest_bytes).await?;
    let documents = match query.filename {
        Some(name) => crate::ingest::parse_file(&name, &bytes)
            .map_err(|e| ApiError::bad_request("invalid_document", e.to_string()))?,
        None => parse_json::<DocumentsBody>(&bytes)?.documents,
    };
    match pipeline.ingest(&tenant, documents).await {
        Ok(report) => {
            let mut value = serde_json::to_value(&report).unwrap_or_default();
            value["elapsed_ms"] = json!(started.elapsed().as_millis() as u64);
            Ok(Json(value).into_response())
        }
        Err(IngestError::Invalid(message)) => {
            Err(ApiError::bad_request("invalid_document", message))
        }
        Err(IngestError::TooLarge(message)) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ingest_too_large",
            message,
        )),
        Err(e) => {
            tracing::error!(%tenant, error = %e, "ingest failed");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ingest_failed",
                e.to_string(),
            ))
        }
    }
}

async fn ready(State(pipeline): State<Arc<Pipeline>>) -> Response {
    let store = pipeline
        .store
        .count(&pipeline.config.default_tenant)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let llm = match tokio::time::timeout(READY_LLM_TIMEOUT, pipeline.llm.ready()).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {READY_LLM_TIMEOUT:?}")),
    };
    let check = |r: &Result<(), String>| match r {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "error": e}),
    };
    let ok = store.is_ok() && llm.is_ok();
    let body = json!({
        "ready": ok,
        "checks": {
            // The model is loaded before the router exists: its presence is the check.
            "model": {"ok": true, "id": pipeline.embedder.model_id()},
            "store": check(&store),
            "llm": check(&llm),
        }
    });
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// The registry, or 404 when this deployment runs without tenant components.
fn components(pipeline: &Pipeline) -> Result<Arc<dyn Components>, ApiError> {
    pipeline.components.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "components_disabled",
            "this server runs without tenant rerank components",
        )
    })
}

impl From<ComponentError> for ApiError {
    fn from(e: ComponentError) -> Self {
        match e {
            ComponentError::Invalid(m) => ApiError::bad_request("invalid_component", m),
            ComponentError::TooLarge(m) => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", m)
            }
            ComponentError::NotFound(m) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_version", m)
            }
            ComponentError::Storage(m) => {
                tracing::error!(error = %m, "component storage failed");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "storage_failed", m)
            }
        }
    }
}

/// Runs registry work (compilation, file I/O) on the blocking pool.
async fn registry<T: Send + 'static>(
    pipeline: &Pipeline,
    work: impl FnOnce(&dyn Components) -> Result<T, ComponentError> + Send + 'static,
) -> Result<T, ApiError> {
    let registry = components(pipeline)?;
    tokio::task::spawn_blocking(move || work(registry.as_ref()))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(ApiError::from)
}

async fn upload_component(
    State(pipeline): State<Arc<Pipeline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant = admit(&pipeline, &headers, Permission::Components)
        .await?
        .tenant;
    let bytes = read_body(body, MAX_COMPONENT_BYTES).await?;
    let version = registry(&pipeline, move |r| r.upload(&tenant, &bytes)).await?;
    Ok((StatusCode::CREATED, Json(version)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivateBody {
    version: String,
}

async fn activate_component(
    State(pipeline): State<Arc<Pipeline>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant = admit(&pipeline, &headers, Permission::Components)
        .await?
        .tenant;
    let bytes = read_body(body, pipeline.config.max_body_bytes).await?;
    let body: ActivateBody = parse_json(&bytes)?;
    let version = registry(&pipeline, move |r| r.activate(&tenant, &body.version)).await?;
    Ok(Json(version).into_response())
}

async fn list_components(
    State(pipeline): State<Arc<Pipeline>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = admit(&pipeline, &headers, Permission::Components)
        .await?
        .tenant;
    let versions = registry(&pipeline, move |r| r.list(&tenant)).await?;
    let active = versions
        .iter()
        .find(|v| v.active)
        .map(|v| v.version.clone());
    Ok(Json(json!({ "versions": versions, "active": active })).into_response())
}

async fn deactivate_component(
    State(pipeline): State<Arc<Pipeline>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = admit(&pipeline, &headers, Permission::Components)
        .await?
        .tenant;
    registry(&pipeline, move |r| r.deactivate(&tenant)).await?;
    Ok(Json(json!({ "active": null })).into_response())
}

async fn clear_cache(
    State(pipeline): State<Arc<Pipeline>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = admit(&pipeline, &headers, Permission::Cache).await?.tenant;
    let cache = pipeline.cache.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "cache_disabled",
            "this server runs without an answer cache (SLUICE_CACHE=off)",
        )
    })?;
    match cache.clear(&tenant).await {
        Ok(deleted) => Ok(Json(json!({ "deleted": deleted })).into_response()),
        Err(e) => {
            tracing::error!(%tenant, error = %e, "clearing the cache failed");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cache_unavailable",
                e.to_string(),
            ))
        }
    }
}
