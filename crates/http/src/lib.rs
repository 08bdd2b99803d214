//! The wire: the doors Sluice is served through, shared by `sluice serve` and the Lambda
//! functions (`sluice-app` builds the [`Server`] each one needs). Each door reads its
//! transport into the [`service`]'s typed requests — who is asking, the body, the deadline —
//! and writes what the service returns in its own shape; the rules around the pipeline
//! (admission, settings, budgets, streams, billing) live once, in the service.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/answer` | `{"query", "k"?, "session_id"?, "retrieval_deadline_ms"?, "cache"?, "include_prompt"?, "filter"?, "rerank_context"?, "extract"?}` → `text/event-stream` |
//! | `POST /v1/search` | the sources an answer would be built from, as JSON, without the LLM |
//! | `POST /v1/chat/completions`, `GET /v1/models` | OpenAI-compatible ([`openai`]) |
//! | `POST /mcp` | the MCP server (Streamable HTTP): tools `search`, `answer`, `list_documents`, `get_document` |
//! | `POST /v1/documents` | `{"documents": [{"id", "text", "title"?, "source"?}]}`, or a file's bytes with `?filename=` → ingest report |
//! | `GET /v1/documents`, `GET /v1/documents/{id}` | a page of the tenant's documents; one document |
//! | `DELETE /v1/documents/{id}`, `DELETE /v1/documents` | one document; those a filter matches |
//! | `PUT /v1/components/rerank` | upload a rerank component (bytes) → its version |
//! | `POST /v1/components/rerank/activate` | `{"version"}` → make it the tenant's active one |
//! | `GET /v1/components/rerank` | the tenant's versions and the active one |
//! | `DELETE /v1/components/rerank` | back to the built-in default (fused order) |
//! | `GET /v1/components/rerank/{version}/logs` | the version's last calls that logged or failed |
//! | `DELETE /v1/components/rerank/{version}` | delete an inactive version |
//! | `/v1/components/prompt` (the same six) | the tenant's prompt-assembly components |
//! | `GET`, `PUT /v1/settings` | the tenant's own settings |
//! | `GET /v1/evals/sets`; `GET`, `PUT`, `DELETE /v1/evals/sets/{name}` | the tenant's evaluation sets |
//! | `POST /v1/evals/sets/{name}/from-feedback` | the tenant's down-votes with an expected source, added to the set |
//! | `POST /v1/evals/runs` | `{"set", "mode"?, "k"?, "cache"?, "compare_to"?}` → a run, as `text/event-stream` |
//! | `GET /v1/evals/runs`, `GET /v1/evals/runs/{id}`, `POST /v1/evals/runs/{id}/cancel` | the tenant's runs |
//! | `GET /v1/sources`; `GET`, `PUT`, `DELETE /v1/sources/{name}` | the tenant's sources (a website, an S3 prefix) |
//! | `POST /v1/sources/{name}/sync`, `…/sync/cancel`, `GET …/syncs` | a sync, as `text/event-stream`; its cancel; the source's reports |
//! | `POST /v1/feedback` | `{"request_id", "rating": "up"\|"down", "comment"?, "expected_source"?}` → a rating of an answer |
//! | `GET /v1/feedback` | the tenant's ratings (`?rating=down`, `&limit=`) |
//! | `GET /v1/insights/gaps` | the questions the tenant's corpus did not answer, grouped |
//! | `DELETE /v1/cache` | forget the tenant's cached answers → `{"deleted": n}` |
//! | `GET /v1/cache` | the tenant's similarity threshold now, and what its learning says |
//! | `GET /v1/usage` | the tenant's usage per day (`?from&to`, `&keys=true` per key) |
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
//! the network in front of the server. A browser's request from a page of another origin is
//! refused on every `/v1` route. Then each tenant's request rate and open streams are limited
//! ([`quota`]): over a limit is a 429 with `Retry-After`.
//!
//! A `traceparent` header (W3C) is continued into the LLM call. Every response is counted by
//! route and status, and every answer by how it ended, in the [`metrics`] — read from the
//! pipeline's events as they pass, so the pipeline knows nothing of them.
//!
//! The wire's own sections of the environment — the listener, request limits, who may call —
//! are [`WireConfig`].
#![warn(missing_docs)]

mod admit;
pub mod answer;
mod body;
mod components;
mod config;
mod documents;
pub mod error;
mod evals;
mod feedback;
mod mcp;
pub mod metrics;
pub mod openai;
pub mod quota;
mod search;
mod serve;
pub mod service;
mod settings;
mod sources;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde_json::json;
use sluice_contract::Tenant;
use sluice_contract::codes::Code;
use sluice_contract::components::Components;
use sluice_contract::document::Converter;
use sluice_contract::{auth::KeyStore, auth::Permission};
use sluice_core::usage::Meter;
use sluice_core::{Ingest, Pipeline};

pub use answer::answer_request;
pub use config::{AuthConfig, RequestLimits, ServerConfig, WireConfig};
pub use error::ApiError;
use metrics::Metrics;
use quota::Quotas;
pub use serve::serve;

/// How long `/readyz` waits for the LLM.
const READY_LLM_TIMEOUT: Duration = Duration::from_secs(2);

/// What the routes serve, built once at start: the parts of Sluice this process runs, and what
/// the wire adds around them. A Lambda function holds only the parts its routes need; the
/// routes of a part it lacks answer 404 (`not_found`, or `components_disabled`).
pub struct Server {
    /// The answer path: `/v1/answer`, the OpenAI routes and `DELETE /v1/cache`.
    pub answers: Option<Arc<Pipeline>>,
    /// The document path: `/v1/documents`.
    pub ingest: Option<Arc<Ingest>>,
    /// The registry behind `/v1/components/rerank` and `/v1/components/prompt`.
    pub components: Option<Arc<dyn Components>>,
    /// API keys; `None` while auth is off (the tenant is then the `x-sluice-tenant` header).
    pub keys: Option<Arc<dyn KeyStore>>,
    /// Per-tenant request rate and open streams.
    pub quotas: Arc<Quotas>,
    /// Counters and histograms of requests and answers (`/metrics`; EMF lines on Lambda).
    pub metrics: Metrics,
    /// Request body caps.
    pub limits: RequestLimits,
    /// After this long without an event, a stream sends an SSE comment line (0: never).
    pub sse_keepalive: Duration,
    /// The tenant of a request without `x-sluice-tenant` while auth is off.
    pub default_tenant: Tenant,
    /// Counts each answer's and ingest's usage, and checks budgets; `None` with
    /// `SLUICE_USAGE=off`.
    pub usage: Option<Arc<Meter>>,
    /// Files made documents (`sluice-convert`, handed in by the composition root); `None` in
    /// a process that ingests none.
    pub converter: Option<Arc<dyn Converter>>,
    /// Each tenant's own settings (`/v1/settings`, and what its answers follow); `None` in a
    /// process that keeps none.
    pub tenants: Option<Arc<sluice_core::tenants::Tenants>>,
    /// Verifies end users' tokens by each tenant's identity (and keeps its providers' keys).
    pub identities: Arc<sluice_identity::Identities>,
    /// Each tenant's evaluation sets and runs' reports (`/v1/evals`); `None` in a process
    /// that keeps none.
    pub records: Option<Arc<dyn sluice_contract::evals::Records>>,
    /// The evaluation runs going in this process.
    pub(crate) runs: Arc<service::evals::Runs>,
    /// The answers this process made lately, kept by request id for their ratings.
    pub(crate) answered: Arc<service::feedback::AnswerLog>,
    /// Notes the questions the tenants' corpora did not answer.
    pub(crate) gaps: Arc<service::insights::GapWriter>,
    /// Fetches the pages of tenants' website sources (addresses checked, the operator's
    /// `SLUICE_FETCH_ALLOW` ranges allowed): built at the first sync, since a client costs
    /// milliseconds to build and most processes (the answer function) never sync.
    fetcher: std::sync::OnceLock<Arc<sluice_fetch::Fetcher>>,
    /// The ranges [`Server::fetcher`]'s client may reach although they are not public.
    fetch_allow: Vec<sluice_contract::net::IpRange>,
    /// The buckets of tenants' S3 sources; `None` in a process without AWS.
    pub objects: Option<Arc<dyn sluice_contract::sources::Objects>>,
    /// The sync queue: where the schedule sends each due source's start, and a sync of a
    /// sitemap or a prefix what it listed, in batches, each read by whichever process the
    /// queue hands it to ([`Server::sync_message`]); `None`: the schedule starts the syncs and
    /// a sync reads what it lists itself.
    pub batches: Option<Arc<dyn sluice_contract::sources::Batches>>,
    /// The syncs going in this process.
    pub(crate) syncs: Arc<service::sources::Syncs>,
}

impl Server {
    /// The wire alone — tenant limits, body caps, keep-alive, the default tenant — with no
    /// part to serve yet, and auth off.
    pub fn new(wire: &WireConfig) -> Self {
        let WireConfig {
            limits,
            server,
            auth,
        } = wire;
        Self {
            answers: None,
            ingest: None,
            components: None,
            keys: None,
            quotas: Arc::new(Quotas::new(
                limits.tenant_rate,
                limits.tenant_burst,
                limits.tenant_max_streams,
            )),
            metrics: Metrics::default(),
            limits: limits.clone(),
            sse_keepalive: server.sse_keepalive,
            default_tenant: auth.default_tenant.clone(),
            usage: None,
            converter: None,
            tenants: None,
            identities: Arc::new(
                sluice_identity::Identities::new(sluice_identity::REFETCH_EVERY)
                    .allowing(auth.fetch_allow.clone()),
            ),
            records: None,
            runs: Arc::default(),
            answered: Arc::default(),
            gaps: Arc::default(),
            fetcher: std::sync::OnceLock::new(),
            fetch_allow: auth.fetch_allow.clone(),
            objects: None,
            batches: None,
            syncs: Arc::default(),
        }
    }

    /// Serves answers from `pipeline`.
    pub fn with_answers(mut self, pipeline: Arc<Pipeline>) -> Self {
        if let Some(cache) = &pipeline.cache {
            self.metrics.watch_cache(Arc::clone(cache));
        }
        self.answers = Some(pipeline);
        self
    }

    /// Serves document ingestion through `ingest`.
    pub fn with_ingest(mut self, ingest: Arc<Ingest>) -> Self {
        self.ingest = Some(ingest);
        self
    }

    /// The client website sources' pages are fetched with, built on first use.
    pub(crate) fn fetcher(&self) -> Arc<sluice_fetch::Fetcher> {
        let build = || {
            let timeout = self.limits.sync.page_timeout;
            Arc::new(sluice_fetch::Fetcher::new(
                self.fetch_allow.clone(),
                timeout,
            ))
        };
        Arc::clone(self.fetcher.get_or_init(build))
    }

    /// Serves the component registry.
    pub fn with_components(mut self, components: Arc<dyn Components>) -> Self {
        self.components = Some(components);
        self
    }

    /// Turns auth on: every `/v1` request needs a key from `keys`.
    pub fn with_keys(mut self, keys: Arc<dyn KeyStore>) -> Self {
        self.keys = Some(keys);
        self
    }
}

/// The point an answer stream must have ended by, set as a request extension by an entry
/// point that is killed at a fixed time (on Lambda: the invocation's deadline less a margin);
/// `sluice serve` sets none. It becomes the answer's
/// [`AnswerRequest::ends_by`](sluice_core::pipeline::AnswerRequest::ends_by).
#[derive(Debug, Clone, Copy)]
pub struct StreamDeadline(pub tokio::time::Instant);

/// The routes over `server`.
pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/v1/answer", post(answer::answer))
        .route("/v1/search", post(search::search))
        .nest_service("/mcp", mcp::router(Arc::clone(&server)))
        .route(
            "/v1/documents",
            post(documents::documents)
                .get(documents::list_documents)
                .delete(documents::delete_documents),
        )
        .route(
            "/v1/documents/{*id}",
            get(documents::get_document).delete(documents::delete_document),
        )
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(ready))
        .route(
            "/v1/components/{kind}",
            get(components::list_components)
                .put(components::upload_component)
                .delete(components::deactivate_component),
        )
        .route(
            "/v1/components/{kind}/{version}",
            delete(components::delete_component),
        )
        .route(
            "/v1/components/{kind}/{version}/logs",
            get(components::component_logs),
        )
        .route(
            "/v1/components/{kind}/activate",
            post(components::activate_component),
        )
        .route("/v1/cache", delete(clear_cache).get(cache_state))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/settings", get(settings::get).put(settings::put))
        .route("/v1/evals/sets", get(evals::list_sets))
        .route(
            "/v1/evals/sets/{name}",
            get(evals::get_set)
                .put(evals::put_set)
                .delete(evals::delete_set),
        )
        .route(
            "/v1/evals/runs",
            get(evals::list_runs).post(evals::start_run),
        )
        .route(
            "/v1/evals/sets/{name}/from-feedback",
            post(evals::set_from_feedback),
        )
        .route("/v1/evals/runs/{id}", get(evals::get_run))
        .route("/v1/evals/runs/{id}/cancel", post(evals::cancel_run))
        .route("/v1/sources", get(sources::list))
        .route(
            "/v1/sources/{name}",
            get(sources::get).put(sources::put).delete(sources::delete),
        )
        .route("/v1/sources/{name}/sync", post(sources::sync))
        .route("/v1/sources/{name}/sync/cancel", post(sources::cancel))
        .route("/v1/sources/{name}/syncs", get(sources::syncs))
        .route("/v1/feedback", post(feedback::rate).get(feedback::list))
        .route("/v1/insights/gaps", get(feedback::gaps))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&server),
            count_request,
        ))
        .with_state(server)
}

/// The `Host` names the server answers to: `SLUICE_ALLOWED_HOSTS`, else the loopback names and
/// the address it listens on (when it is one address).
pub fn allowed_hosts(config: &ServerConfig) -> Vec<String> {
    if let Some(hosts) = &config.allowed_hosts {
        return hosts.clone();
    }
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).into();
    let ip = config.addr.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        hosts.push(match ip {
            std::net::IpAddr::V4(v4) => v4.to_string(),
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    hosts
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
                            Code::ForbiddenHost,
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
    State(server): State<Arc<Server>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    let response = next.run(request).await;
    server.metrics.request(&route, response.status().as_u16());
    response
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        Code::NotFound,
        format!("no route for {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        Code::MethodNotAllowed,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Whether each part this process runs can work now: the embedding model (loaded before the
/// router exists: its presence is the check), the store, the LLM; 503 when one cannot.
async fn ready(State(server): State<Arc<Server>>) -> Response {
    let mut checks = serde_json::Map::new();
    let parts = server
        .answers
        .as_ref()
        .map(|p| (&p.embedder, &p.store))
        .or(server.ingest.as_ref().map(|i| (&i.embedder, &i.store)));
    if let Some((embedder, store)) = parts {
        checks.insert(
            "model".into(),
            json!({"ok": true, "id": embedder.model_id()}),
        );
        let counted = store.count(&server.default_tenant).await;
        checks.insert("store".into(), check(counted.map(|_| ())));
    }
    if let Some(pipeline) = &server.answers {
        let llm = match tokio::time::timeout(READY_LLM_TIMEOUT, pipeline.llm.ready()).await {
            // Unauthenticated: the kind of failure, not the LLM's address (that is logged).
            Ok(r) => r.map_err(|e| {
                tracing::warn!(error = %e, "readiness: the LLM is not ready");
                e.public()
            }),
            Err(_) => Err(format!("no answer within {READY_LLM_TIMEOUT:?}")),
        };
        checks.insert("llm".into(), check(llm));
    }
    let ok = checks.values().all(|c| c["ok"] == true);
    let status = if ok {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(json!({"ready": ok, "checks": checks}))).into_response()
}

/// One `/readyz` check: `{"ok": true}`, or `{"ok": false, "error"}`.
fn check<E: std::fmt::Display>(result: Result<(), E>) -> serde_json::Value {
    match result {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "error": e.to_string()}),
    }
}

/// The answer path's cache; 404 `cache_disabled` without one.
fn answer_cache(server: &Server) -> Result<Arc<sluice_core::cache::SemanticCache>, ApiError> {
    server.pipeline()?.cache.clone().ok_or_else(|| {
        ApiError::new(
            Code::CacheDisabled,
            "this server runs without an answer cache (SLUICE_CACHE=off)",
        )
    })
}

/// `GET /v1/cache`: the threshold the tenant's lookups use now and, for a tenant that learns
/// it (`SLUICE_CACHE_EXPLORE`), what its comparisons say: the estimated false-hit rate at that
/// threshold and its 95 % upper bound, from this process's comparisons.
async fn cache_state(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit::admit(&server, &headers, Permission::Usage).await?;
    let cache = answer_cache(&server)?;
    Ok(Json(json!({
        "threshold": sluice_core::cache::learn::rounded(cache.threshold(&caller.tenant)),
        "learning": cache.estimate(&caller.tenant),
    }))
    .into_response())
}

async fn clear_cache(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = admit::admit(&server, &headers, Permission::Cache).await?;
    let tenant = caller.tenant;
    // A key bound to a filter forgets only the answers made for keys bound to that filter:
    // the rest of the tenant's cache is other keys' to keep.
    let binding = caller
        .filter
        .as_ref()
        .map(sluice_contract::filter::Filter::digest);
    let cache = answer_cache(&server)?;
    match cache.clear(&tenant, binding.as_deref()).await {
        Ok(deleted) => Ok(Json(json!({ "deleted": deleted })).into_response()),
        Err(e) => {
            tracing::error!(%tenant, error = %e, "clearing the cache failed");
            Err(ApiError::of(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(addr: &str, hosts: Option<&str>) -> ServerConfig {
        let get = |name: &str| match name {
            "SLUICE_ADDR" => Some(addr.to_string()),
            "SLUICE_ALLOWED_HOSTS" => hosts.map(str::to_string),
            _ => None,
        };
        let config = WireConfig::from_lookup(&get, std::path::Path::new("data"));
        config.expect("config").server
    }

    #[test]
    fn the_default_host_names_are_loopback_and_the_one_address_listened_on() {
        let loopback = ["localhost", "127.0.0.1", "[::1]"]
            .map(String::from)
            .to_vec();
        assert_eq!(allowed_hosts(&server("127.0.0.1:8080", None)), loopback);
        assert_eq!(allowed_hosts(&server("0.0.0.0:8080", None)), loopback);
        let mut lan = loopback.clone();
        lan.push("10.0.0.7".into());
        assert_eq!(allowed_hosts(&server("10.0.0.7:8080", None)), lan);
        let mut v6 = loopback;
        v6.push("[fd00::7]".into());
        assert_eq!(allowed_hosts(&server("[fd00::7]:8080", None)), v6);
        let named = allowed_hosts(&server("0.0.0.0:8080", Some("sluice.internal")));
        assert_eq!(named, vec!["sluice.internal".to_string()]);
    }
}
