//! Who is asking, and may they: every `/v1` route starts at [`admit`] — a browser's request
//! from a page of another origin is refused, the caller is identified (by API key with auth
//! on, by header with it off), and one request is taken from its tenant's rate.

use std::time::Duration;

use axum::http::{HeaderMap, header};
use sluice_contract::Tenant;
use sluice_contract::access::{TextAccess, USER_HEADER, access_filter};
use sluice_contract::auth::{KEY_HEADER, Permission, digest, key_id};
use sluice_contract::codes::Code;
use sluice_contract::filter::Filter;
use sluice_contract::tenant::{TENANT_HEADER, TENANT_RULE};
use sluice_core::pipeline::AnswerRequest;
use sluice_identity::TokenError;

use crate::Server;
use crate::error::ApiError;
use crate::quota::Limited;

/// Who is asking: the tenant, and what its key allows and is bound to.
pub(crate) struct Caller {
    pub(crate) tenant: Tenant,
    pub(crate) may_see_prompt: bool,
    /// The key's mandatory filter, ANDed with whatever the request sends.
    pub(crate) filter: Option<Filter>,
    /// The key's id ([`key_id`]), under which its usage is counted; `None` with auth off.
    pub(crate) key: Option<String>,
    /// The key's monthly token budget.
    pub(crate) token_budget: Option<u64>,
    /// Whether the key may see the usage of each of the tenant's keys.
    pub(crate) may_see_keys: bool,
    /// Whether the key is confined to its filter (bound, and not made tenant-wide): what it
    /// does to the tenant's shared state reaches only its own part (its usage, the answers
    /// cached under its filter).
    pub(crate) confined: bool,
    /// Whether the key manages the tenant's components (the `components` permission,
    /// tenant-wide): its answers' `meta` says why the component failed.
    pub(crate) may_see_component_failures: bool,
    /// Whether every request of the key must carry an end user's token.
    pub(crate) user_token: bool,
    /// Whether the key holds the `documents` permission (with auth off: yes): with no filter
    /// and no end user, the tenant's admin, who may read every document's text.
    pub(crate) documents: bool,
    /// The documents the end user may see ([`sluice_contract::access`]), set by
    /// [`admit_reader`]: `None` for a tenant without an identity (all the key allows).
    pub(crate) access: Option<Filter>,
}

impl Caller {
    /// How much of the tenant's documents' text the caller may read
    /// ([`sluice_contract::access::TextAccess`]: one rule for every route that returns text).
    pub(crate) fn text(&self) -> TextAccess {
        TextAccess::of(self.documents, self.filter.is_some(), self.access.is_some())
    }

    /// What the caller may read: the key's filter and the end user's access, ANDed (a
    /// request's own filter is ANDed to it, so it can narrow and never widen).
    pub(crate) fn reads(&self) -> Option<Filter> {
        Filter::and(self.filter.as_ref(), self.access.as_ref())
    }

    /// `request` as this caller asks it (an answer or a search): with the end user's access,
    /// which retrieval ANDs with the request's filter and the cache keeps apart (an answer
    /// made for other principals is replayed only when this user's retrieval returns its
    /// sources), and told why the tenant's component failed only if the caller manages it.
    pub(crate) fn asks(&self, request: AnswerRequest) -> AnswerRequest {
        AnswerRequest {
            access: self.access.clone(),
            show_rerank_failure: self.may_see_component_failures,
            ..request
        }
    }
}

/// Admits a request of a route that reads documents (answers, listings) on behalf of an end
/// user: [`admit`]'s checks, then the end user's token (`x-sluice-user`) verified by the
/// tenant's identity and read into [`Caller::access`]. A tenant without an identity: no
/// token may be sent, and the caller sees what its key allows. With one: a token that does
/// not verify is 401 `invalid_user_token`; none, 401 `missing_user_token` where the tenant or
/// the key requires one, else the documents open to every end user. Settings or keys that
/// cannot be read leave nothing seen: 503 `identity_unavailable`.
pub(crate) async fn admit_reader(
    server: &Server,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    let mut caller = admitted(server, headers, permission).await?;
    caller.access = end_user(server, headers, &caller).await?;
    Ok(caller)
}

/// Which of `permissions` the caller's key holds, admitted as one request — one token of its
/// tenant's rate, its end user's token checked once — for a listing of what it may do (MCP's
/// `tools/list`).
pub(crate) async fn admit_any(
    server: &Server,
    headers: &HeaderMap,
    permissions: &[Permission],
) -> Result<Vec<bool>, ApiError> {
    if let Some(why) = cross_site(headers) {
        return Err(ApiError::new(Code::CrossOrigin, why));
    }
    let (mut held, mut caller) = (Vec::with_capacity(permissions.len()), None);
    for &permission in permissions {
        match identify(server, headers, permission).await {
            Ok(c) => {
                caller.get_or_insert(c);
                held.push(true);
            }
            Err(e) if e.code == Code::PermissionDenied => held.push(false),
            Err(e) => return Err(e),
        }
    }
    if let Some(caller) = caller {
        (server.quotas.request(&caller.tenant)).map_err(|l| limited(&caller.tenant, l))?;
        end_user(server, headers, &caller).await?;
    }
    Ok(held)
}

/// Whether the request carries a key this server knows (any key, whatever it may do; always
/// with auth off): checked before a transport that would otherwise answer a missing key with
/// a 200 (MCP's). Costs no token of the tenant's rate.
pub(crate) async fn authenticated(server: &Server, headers: &HeaderMap) -> Result<(), ApiError> {
    match identify(server, headers, Permission::Search).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == Code::PermissionDenied => Ok(()),
        Err(e) => Err(e),
    }
}

/// The end user's access filter (see [`admit_reader`]).
async fn end_user(
    server: &Server,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<Option<Filter>, ApiError> {
    let token = match headers.get(USER_HEADER) {
        None => None,
        Some(v) => Some(
            (v.to_str().ok().map(str::trim).filter(|t| !t.is_empty())).ok_or_else(|| {
                ApiError::new(Code::InvalidUserToken, "the x-sluice-user header is empty")
            })?,
        ),
    };
    let unavailable = |why: String| ApiError {
        retry_after: Some(Duration::from_secs(1)),
        ..ApiError::new(Code::IdentityUnavailable, why)
    };
    let identity = match &server.tenants {
        None => None,
        Some(tenants) => {
            let within =
                (server.answers.as_ref()).map_or(SETTINGS_WAIT, |p| p.config.retrieval_deadline);
            let by = tokio::time::Instant::now() + within;
            match tenants.known_by(&caller.tenant, by).await {
                Ok(stored) => stored.and_then(|s| s.settings.identity.clone()),
                Err(e) => {
                    tracing::warn!(tenant = %caller.tenant, error = %e, "end-user access unknown");
                    return Err(unavailable(
                        "the tenant's settings, which say who its end users are, cannot be read \
                         now; try again"
                            .into(),
                    ));
                }
            }
        }
    };
    let missing = || {
        ApiError::new(
            Code::MissingUserToken,
            "this request needs an end user's token: send x-sluice-user: <JWT>",
        )
    };
    let Some(identity) = identity else {
        return match (token, caller.user_token) {
            (None, false) => Ok(None),
            (None, true) => Err(missing()),
            (Some(_), _) => Err(ApiError::new(
                Code::InvalidUserToken,
                "the tenant has no identity configured (its settings' \"identity\"), so an \
                 x-sluice-user token cannot be checked",
            )),
        };
    };
    let Some(token) = token else {
        return match identity.required || caller.user_token {
            true => Err(missing()),
            false => Ok(Some(access_filter(None))),
        };
    };
    match (server.identities)
        .verify(caller.tenant.as_str(), &identity, token)
        .await
    {
        Ok(user) => Ok(Some(access_filter(Some(&user.principals)))),
        Err(e @ TokenError::KeysUnavailable(_)) => Err(unavailable(e.to_string())),
        Err(e) => {
            tracing::info!(tenant = %caller.tenant, reason = %e, "user token refused");
            Err(ApiError::new(Code::InvalidUserToken, e.to_string()))
        }
    }
}

/// How long a route that has no retrieval deadline waits for a tenant's settings.
const SETTINGS_WAIT: Duration = Duration::from_secs(2);

/// Admits a `/v1` request that needs `permission`, or says why not (every `/v1` route starts
/// here): a browser's request from a page of another origin is refused (403 `cross_origin`);
/// then the caller — with auth on, the tenant of its key (see the module docs for 401 and
/// 403); with auth off, the `x-sluice-tenant` header, else the default tenant — and one
/// request from its tenant's rate (429). An answer's stream slot is [`open_answer`]'s.
pub(crate) async fn admit(
    server: &Server,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    let caller = admitted(server, headers, permission).await?;
    if caller.user_token || headers.contains_key(USER_HEADER) {
        return Err(ApiError::new(
            Code::PermissionDenied,
            "end users only read (answers and document listings): this route takes no \
             x-sluice-user token, nor a key made for end users (--user-token)",
        ));
    }
    Ok(caller)
}

/// [`admit`]'s checks but the end user's.
async fn admitted(
    server: &Server,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    if let Some(why) = cross_site(headers) {
        tracing::warn!("{why}");
        return Err(ApiError::new(Code::CrossOrigin, why));
    }
    let caller = identify(server, headers, permission).await?;
    server
        .quotas
        .request(&caller.tenant)
        .map_err(|l| limited(&caller.tenant, l))?;
    Ok(caller)
}

/// Who is asking, by key or by header (see [`admit`]).
async fn identify(
    server: &Server,
    headers: &HeaderMap,
    permission: Permission,
) -> Result<Caller, ApiError> {
    let named = match headers.get(TENANT_HEADER) {
        None => None,
        Some(v) => match v.to_str().ok().map(Tenant::new) {
            Some(Ok(tenant)) => Some(tenant),
            _ => {
                return Err(ApiError::new(
                    Code::InvalidTenant,
                    format!("{TENANT_HEADER} must be {TENANT_RULE}"),
                ));
            }
        },
    };
    let Some(keys) = &server.keys else {
        return Ok(Caller {
            tenant: named.unwrap_or_else(|| server.default_tenant.clone()),
            may_see_prompt: true,
            filter: None,
            key: None,
            token_budget: None,
            may_see_keys: true,
            confined: false,
            may_see_component_failures: true,
            user_token: false,
            documents: true,
            access: None,
        });
    };
    let unauthorized = |code, message: &str| ApiError::new(code, message.to_string());
    // `x-api-key` first: behind IAM auth (function URL, API Gateway) `Authorization` carries
    // the caller's SigV4 signature, so the key travels in a header of its own.
    let key = match (headers.get(KEY_HEADER), headers.get(header::AUTHORIZATION)) {
        (Some(v), _) => v
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .ok_or_else(|| unauthorized(Code::InvalidApiKey, "the x-api-key header is empty"))?,
        (None, None) => {
            return Err(unauthorized(
                Code::MissingApiKey,
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
                    Code::InvalidApiKey,
                    "the Authorization header must be Bearer <key>",
                )
            })?,
    };
    let hash = digest(key);
    let principal = match keys.find(&hash).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Err(unauthorized(
                Code::InvalidApiKey,
                "the API key is not valid",
            ));
        }
        Err(e) => {
            tracing::error!(error = %e, "API key lookup failed");
            return Err(ApiError {
                retry_after: Some(Duration::from_secs(1)),
                ..ApiError::new(
                    Code::AuthUnavailable,
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
            Code::ForbiddenTenant,
            format!("this API key belongs to another tenant than {named:?}"),
        ));
    }
    if !principal.holds(permission) {
        return Err(ApiError::new(
            Code::PermissionDenied,
            format!(
                "this API key does not have the {:?} permission",
                permission.name()
            ),
        ));
    }
    if let Some(why) = principal.confined_from(permission) {
        tracing::warn!(tenant = %principal.tenant, permission = permission.name(), "a bound key asked for a tenant-wide action");
        return Err(ApiError::new(Code::PermissionDenied, why));
    }
    Ok(Caller {
        may_see_prompt: principal.may(Permission::Prompt),
        may_see_keys: principal.may(Permission::UsageKeys),
        confined: principal.confined(),
        may_see_component_failures: principal.may(Permission::Components)
            && principal.confined_from(Permission::Components).is_none(),
        key: Some(key_id(&hash)),
        token_budget: principal.token_budget,
        user_token: principal.user_token,
        documents: principal.may(Permission::Documents),
        tenant: principal.tenant,
        filter: principal.filter,
        access: None,
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
pub(crate) fn limited(tenant: &str, l: Limited) -> ApiError {
    tracing::warn!(%tenant, code = %l.code, retry_after_s = l.retry_after.as_secs(), "request over a tenant limit");
    ApiError::from(l)
}
