//! Who is asking, and may they: the caller identified once from its [`Credentials`] (by API
//! key with auth on, by the tenant it names with auth off), one request taken from its
//! tenant's rate, each permission the operation needs checked against the same key, and —
//! for the operations that read documents — the end user's token verified by the tenant's
//! identity, from the tenant's settings read once for the whole request.

use std::sync::Arc;
use std::time::Duration;

use sluice_contract::Tenant;
use sluice_contract::access::{TextAccess, access_filter};
use sluice_contract::auth::{Permission, Principal, digest, key_id};
use sluice_contract::codes::{Code, ErrorCode};
use sluice_contract::filter::Filter;
use sluice_contract::tenant::TENANT_RULE;
use sluice_contract::tenant_settings::StoredSettings;
use sluice_core::pipeline::AnswerRequest;

use super::{Credentials, Key};
use crate::Server;
use crate::error::ApiError;
use crate::quota::Limited;

/// Who is asking: the tenant, and what its key allows and is bound to.
#[derive(Clone)]
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
    /// [`Server::admit_reader`]: `None` for a tenant without an identity (all the key allows).
    pub(crate) access: Option<Filter>,
    /// The end user's own principal (`user:<sub>`), when a token was verified: whose answers
    /// its feedback may rate.
    pub(crate) user: Option<String>,
    /// The tenant's settings, read once by [`Server::admit_reader`] (`None`: it has set none,
    /// the process keeps none, or the caller was admitted to an operation that reads none).
    pub(crate) settings: Option<Arc<StoredSettings>>,
}

impl Caller {
    /// How much of the tenant's documents' text the caller may read
    /// ([`sluice_contract::access::TextAccess`]: one rule for every operation that returns text).
    pub(crate) fn text(&self) -> TextAccess {
        TextAccess::of(self.documents, self.filter.is_some(), self.user.is_some())
    }

    /// The documents the caller manages — lists, reads and deletes by id — as a filter: every
    /// one of the tenant's for its admin ([`TextAccess::All`]: restricted documents included,
    /// with their access lists), else the key's filter and the end user's access, ANDed (a
    /// request's own filter is ANDed to it, so it can narrow and never widen). Answers and
    /// searches are not managing: without a token they see the open documents only.
    pub(crate) fn manages(&self) -> Option<Filter> {
        match self.text() {
            TextAccess::All => None,
            TextAccess::Open | TextAccess::Filtered => {
                Filter::and(self.filter.as_ref(), self.access.as_ref())
            }
        }
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

/// The caller as identified, before any permission is checked.
enum Identified {
    /// Auth is off: the tenant named, or the default one.
    Open(Tenant),
    /// The key's principal, and the digest it was found by.
    Key(Principal, String),
}

/// How long an operation that has no retrieval deadline waits for a tenant's settings.
const SETTINGS_WAIT: Duration = Duration::from_secs(2);

impl Server {
    /// Admits a request that needs `permission` and acts for no end user: the caller
    /// identified (401 without a valid key where auth is on; 403 for another tenant than the
    /// key's or a permission it lacks), then one request from its tenant's rate (429). A
    /// request that carries an end user's token, or a key made for end users, is refused:
    /// end users only read.
    pub(crate) async fn admit(
        &self,
        who: &Credentials,
        permission: Permission,
    ) -> Result<Caller, ApiError> {
        let caller = self.admitted(who, permission).await?;
        if caller.user_token || who.user_token.is_some() {
            return Err(ApiError::new(
                Code::PermissionDenied,
                "end users only read (answers and document listings): this operation takes \
                 no end user's token (x-sluice-user), nor a key made for end users \
                 (--user-token)",
            ));
        }
        Ok(caller)
    }

    /// Admits a request that reads documents (answers, searches, listings) on behalf of an
    /// end user: [`admit`](Self::admit)'s checks, then the tenant's settings read (once for
    /// the whole request: what its answer follows, and who its end users are) and the end
    /// user's token verified by the tenant's identity into [`Caller::access`]. A tenant
    /// without an identity: no token may be sent, and the caller sees what its key allows.
    /// With one: a token that does not verify is 401 `invalid_user_token`; none, 401
    /// `missing_user_token` where the tenant or the key requires one, else the documents open
    /// to every end user. Settings or keys that cannot be read leave nothing seen: 503
    /// `identity_unavailable`.
    pub(crate) async fn admit_reader(
        &self,
        who: &Credentials,
        permission: Permission,
    ) -> Result<Caller, ApiError> {
        let mut caller = self.admitted(who, permission).await?;
        caller.settings = self.settings_of(&caller.tenant).await?;
        // The tenant's admin managing its documents, with no end user's token, sees every one
        // of them: an identity the tenant requires is for whoever reads its answers.
        let managing = permission == Permission::Documents
            && who.user_token.is_none()
            && !caller.user_token
            && caller.text() == TextAccess::All;
        if !managing {
            (caller.access, caller.user) = self.end_user(who, &caller).await?;
        }
        Ok(caller)
    }

    /// Which of `permissions` the caller's key holds, admitted as one request — the key
    /// looked up once, one token of its tenant's rate, its end user's token checked once —
    /// for a listing of what it may do (MCP's `tools/list`).
    pub(crate) async fn admit_any(
        &self,
        who: &Credentials,
        permissions: &[Permission],
    ) -> Result<Vec<bool>, ApiError> {
        let identified = self.identify(who).await?;
        let (mut held, mut caller) = (Vec::with_capacity(permissions.len()), None);
        for &permission in permissions {
            match authorize(&identified, permission) {
                Ok(c) => {
                    caller.get_or_insert(c);
                    held.push(true);
                }
                Err(e) if e.code == Code::PermissionDenied => held.push(false),
                Err(e) => return Err(e),
            }
        }
        if let Some(mut caller) = caller {
            self.take_request(&caller.tenant)?;
            caller.settings = self.settings_of(&caller.tenant).await?;
            self.end_user(who, &caller).await?;
        }
        Ok(held)
    }

    /// Whether the credentials carry a key this server knows (any key, whatever it may do;
    /// always with auth off): checked before a transport that would otherwise answer a
    /// missing key with a 200 (MCP's). Costs no token of the tenant's rate.
    pub(crate) async fn authenticated(&self, who: &Credentials) -> Result<(), ApiError> {
        self.identify(who).await.map(|_| ())
    }

    /// [`admit`](Self::admit)'s checks but the end user's.
    async fn admitted(
        &self,
        who: &Credentials,
        permission: Permission,
    ) -> Result<Caller, ApiError> {
        let caller = authorize(&self.identify(who).await?, permission)?;
        self.take_request(&caller.tenant)?;
        Ok(caller)
    }

    /// One request from `tenant`'s rate, or the 429 that says when to come back.
    fn take_request(&self, tenant: &Tenant) -> Result<(), ApiError> {
        self.quotas.request(tenant).map_err(|l| limited(tenant, l))
    }

    /// Who is asking, by key or by the tenant named (see [`admit`](Self::admit)).
    async fn identify(&self, who: &Credentials) -> Result<Identified, ApiError> {
        let named = match &who.tenant {
            None => None,
            Some(name) => Some(Tenant::new(name).map_err(|_| {
                ApiError::new(
                    Code::InvalidTenant,
                    format!(
                        "{} must be {TENANT_RULE}",
                        sluice_contract::tenant::TENANT_HEADER
                    ),
                )
            })?),
        };
        let Some(keys) = &self.keys else {
            return Ok(Identified::Open(
                named.unwrap_or_else(|| self.default_tenant.clone()),
            ));
        };
        let key = match &who.key {
            Key::Given(key) => key,
            Key::Unreadable(why) => return Err(ApiError::new(Code::InvalidApiKey, *why)),
            Key::None => {
                return Err(ApiError::new(
                    Code::MissingApiKey,
                    "this server needs an API key: send Authorization: Bearer <key> (or \
                     x-api-key: <key>)",
                ));
            }
        };
        let hash = digest(key);
        let principal = match keys.find(&hash).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(ApiError::new(
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
        Ok(Identified::Key(principal, hash))
    }

    /// The tenant's settings, read once per request within the retrieval deadline (from
    /// memory while fresh); an error where they cannot be read and none were known before,
    /// since they say who the tenant's end users are and a rule about them must not fail open.
    pub(crate) async fn settings_of(
        &self,
        tenant: &Tenant,
    ) -> Result<Option<Arc<StoredSettings>>, ApiError> {
        let Some(tenants) = &self.tenants else {
            return Ok(None);
        };
        let within = (self.answers.as_ref()).map_or(SETTINGS_WAIT, |p| p.config.retrieval_deadline);
        let by = tokio::time::Instant::now() + within;
        tenants.known_by(tenant, by).await.map_err(|e| {
            tracing::warn!(%tenant, error = %e, "the tenant's settings are unknown");
            unavailable(
                "the tenant's settings, which say who its end users are, cannot be read now; \
                 try again",
            )
        })
    }

    /// The end user's access filter (see [`admit_reader`](Self::admit_reader)), and their own
    /// principal when a token was verified.
    async fn end_user(
        &self,
        who: &Credentials,
        caller: &Caller,
    ) -> Result<(Option<Filter>, Option<String>), ApiError> {
        let token = match who.user_token.as_deref().map(str::trim) {
            None => None,
            Some("") => {
                return Err(ApiError::new(
                    Code::InvalidUserToken,
                    "the end user's token (x-sluice-user) is empty",
                ));
            }
            Some(token) => Some(token),
        };
        let identity = (caller.settings.as_ref()).and_then(|s| s.settings.identity.clone());
        let missing = || {
            ApiError::new(
                Code::MissingUserToken,
                "this request needs an end user's token: send x-sluice-user: <JWT>",
            )
        };
        let Some(identity) = identity else {
            return match (token, caller.user_token) {
                (None, false) => Ok((None, None)),
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
                false => Ok((Some(access_filter(None)), None)),
            };
        };
        match (self.identities)
            .verify(caller.tenant.as_str(), &identity, token)
            .await
        {
            Ok(user) => Ok((
                Some(access_filter(Some(&user.principals))),
                user.principals.first().cloned(),
            )),
            Err(e) if e.code() == Code::IdentityUnavailable => Err(unavailable(e.to_string())),
            Err(e) => {
                tracing::info!(tenant = %caller.tenant, reason = %e, "user token refused");
                Err(ApiError::of(&e))
            }
        }
    }
}

/// 503 `identity_unavailable`: who the end user is cannot be known now.
fn unavailable(why: impl Into<String>) -> ApiError {
    ApiError {
        retry_after: Some(Duration::from_secs(1)),
        ..ApiError::new(Code::IdentityUnavailable, why)
    }
}

/// The caller, if what it was identified as may do `permission`.
fn authorize(identified: &Identified, permission: Permission) -> Result<Caller, ApiError> {
    let (principal, hash) = match identified {
        Identified::Open(tenant) => {
            return Ok(Caller {
                tenant: tenant.clone(),
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
                user: None,
                settings: None,
            });
        }
        Identified::Key(principal, hash) => (principal, hash),
    };
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
        key: Some(key_id(hash)),
        token_budget: principal.token_budget,
        user_token: principal.user_token,
        documents: principal.may(Permission::Documents),
        tenant: principal.tenant.clone(),
        filter: principal.filter.clone(),
        access: None,
        user: None,
        settings: None,
    })
}

/// A 429, logged with the tenant.
pub(crate) fn limited(tenant: &str, l: Limited) -> ApiError {
    tracing::warn!(%tenant, code = %l.code, retry_after_s = l.retry_after.as_secs(), "request over a tenant limit");
    ApiError::from(l)
}
