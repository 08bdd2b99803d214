//! API keys → tenants: what a key store keeps and answers (the boundary the key stores
//! implement: a file for `sluice serve`, a DynamoDB table on Lambda).
//!
//! A key is `sk-sluice-` and 64 hex digits (244 random bits). Only its SHA-256 is stored, with
//! the tenant it acts for and what it may do ([`Permission`]). A fast hash is enough: the
//! keys are random, not passwords, so there is nothing to guess from a leaked digest.

use crate::Tenant;
use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Every key starts with this, so that a leaked one is recognisable (secret scanners).
pub const KEY_PREFIX: &str = "sk-sluice-";

/// The request header a client sends its key in (`Authorization: Bearer` is read too).
pub const KEY_HEADER: &str = "x-api-key";

/// A new random key. Shown once to whoever made it; only its [`digest`] is kept.
pub fn new_key() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{KEY_PREFIX}{a}{b}")
}

/// What a key may do. Routes need one each; reading the assembled prompt back
/// (`"include_prompt": true`) needs [`Permission::Prompt`] on top of [`Permission::Answer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// `POST /v1/answer` (and the OpenAI routes); it holds [`Permission::Search`] too.
    Answer,
    /// `POST /v1/search`: the sources alone, no LLM. Keys made before it existed and hold
    /// `answer` have it through that.
    Search,
    /// `POST /v1/documents`, and listing and reading them (`GET /v1/documents[/{id}]`).
    Documents,
    /// Deleting documents (`DELETE /v1/documents[/{id}]`). Keys made before it existed do
    /// not have it: they keep what they could do.
    #[serde(rename = "documents:delete")]
    DocumentsDelete,
    /// `/v1/components/rerank` (upload, activate, list, deactivate).
    Components,
    /// `DELETE /v1/cache`.
    Cache,
    /// See the assembled prompt (system prompt and retrieved chunks) in `meta.prompt`.
    Prompt,
    /// `GET /v1/usage`: the tenant's usage per day. Keys made before it existed do not have
    /// it.
    Usage,
    /// `GET /v1/usage?keys=true`: the usage of each of the tenant's keys (an administrator's).
    #[serde(rename = "usage:keys")]
    UsageKeys,
    /// `GET` and `PUT /v1/settings`: the tenant's own settings and prompt, which every key's
    /// answers follow. Keys made before it existed do not have it.
    Settings,
}

impl Permission {
    /// Every permission, in the order the docs list them.
    pub const ALL: [Permission; 10] = [
        Permission::Answer,
        Permission::Search,
        Permission::Documents,
        Permission::DocumentsDelete,
        Permission::Components,
        Permission::Cache,
        Permission::Prompt,
        Permission::Usage,
        Permission::UsageKeys,
        Permission::Settings,
    ];

    /// What a new key gets unless told otherwise: everything but [`Permission::Prompt`] and
    /// [`Permission::UsageKeys`].
    pub const DEFAULT: [Permission; 7] = [
        Permission::Answer,
        Permission::Documents,
        Permission::DocumentsDelete,
        Permission::Components,
        Permission::Cache,
        Permission::Usage,
        Permission::Settings,
    ];

    /// What a key bound to a filter gets unless told otherwise: answers within its filter.
    pub const BOUND_DEFAULT: [Permission; 1] = [Permission::Answer];

    /// Whether `self` acts on the whole tenant, whatever a key's filter: the tenant's rerank
    /// component reorders every key's answers, its settings shape them, and the usage of each
    /// key names the others. A
    /// key bound to a filter holds these only when it was made [`Principal::tenant_wide`].
    /// (The cache is not among them: a bound key's `DELETE /v1/cache` forgets only the
    /// answers made under its own filter.)
    pub const fn tenant_wide(self) -> bool {
        matches!(
            self,
            Permission::Components | Permission::UsageKeys | Permission::Settings
        )
    }

    /// The name used in key files, the CLI and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Answer => "answer",
            Permission::Search => "search",
            Permission::Documents => "documents",
            Permission::DocumentsDelete => "documents:delete",
            Permission::Components => "components",
            Permission::Cache => "cache",
            Permission::Prompt => "prompt",
            Permission::Usage => "usage",
            Permission::UsageKeys => "usage:keys",
            Permission::Settings => "settings",
        }
    }

    /// The permission called `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name.trim())
    }
}

/// Who a key belongs to and what it may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Principal {
    /// The tenant every request with this key acts for.
    pub tenant: Tenant,
    /// What the key may do.
    pub permissions: Vec<Permission>,
    /// The documents the key may see: a metadata filter ANDed with every request's own, which
    /// no request can widen or remove (`sluice keys create --filter JSON`). `None`: all of the
    /// tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<crate::filter::Filter>,
    /// Tokens (prompt + completion) the key may spend per calendar month (UTC); past them its
    /// answers are refused with 429 `budget_exceeded` (usage, in `sluice-core`). `None`: no budget of
    /// its own (the tenant's may still apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Whether a key bound to a `filter` may also act on the whole tenant (the permissions
    /// that are [`Permission::tenant_wide`]): set only by an explicit choice
    /// (`sluice keys create --filter … --tenant-wide`). Without it such a key is refused those
    /// permissions even when it lists them. Meaningless without a filter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tenant_wide: bool,
    /// Whether every request with the key must carry an end user's token
    /// ([`crate::access::USER_HEADER`]): a key for a tenant's front end, which acts for its end
    /// users and so only reads (`sluice keys create --user-token`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub user_token: bool,
}

impl Principal {
    /// A key of `tenant` that may do `permissions` and nothing more: no filter of its own, no
    /// token budget, no end user's token required.
    pub fn new(tenant: Tenant, permissions: Vec<Permission>) -> Self {
        Self {
            tenant,
            permissions,
            filter: None,
            token_budget: None,
            tenant_wide: false,
            user_token: false,
        }
    }

    /// Whether the key may do `p`: it holds `p`, and `p` does not reach past the key's filter
    /// unless the key was made [`tenant_wide`](Self::tenant_wide).
    pub fn may(&self, p: Permission) -> bool {
        self.holds(p) && self.confined_from(p).is_none()
    }

    /// Whether the key lists `p`, or a permission that includes it (`answer` includes
    /// `search`: whoever may have an answer may have its sources).
    pub fn holds(&self, p: Permission) -> bool {
        let including = match p {
            Permission::Search => Some(Permission::Answer),
            _ => None,
        };
        self.permissions.contains(&p) || including.is_some_and(|i| self.permissions.contains(&i))
    }

    /// Whether the key is confined to its filter: bound to one, and not made tenant-wide.
    pub fn confined(&self) -> bool {
        self.filter.is_some() && !self.tenant_wide
    }

    /// Why a key that holds `p` is still refused it: `p` acts on the whole tenant and the key
    /// is [`confined`](Self::confined). `None` when nothing confines it.
    pub fn confined_from(&self, p: Permission) -> Option<String> {
        (p.tenant_wide() && self.confined()).then(|| confined_message(p))
    }
}

/// What a confined key is told when it asks for `p`, a permission that acts on the whole
/// tenant.
pub fn confined_message(p: Permission) -> String {
    format!(
        "this API key is bound to a filter, and {:?} acts on the whole tenant beyond it; only a \
         key made tenant-wide (sluice keys create --filter … --tenant-wide) has it",
        p.name()
    )
}

/// Checks the permissions a new key bound to `filter` is to get: one that acts on the whole
/// tenant needs `tenant_wide` said explicitly, so that nobody hands a bound key the power to
/// reorder or read across the tenant without meaning to.
pub fn check_grant(
    permissions: &[Permission],
    filter: Option<&crate::filter::Filter>,
    tenant_wide: bool,
) -> Result<(), String> {
    if filter.is_none() || tenant_wide {
        return Ok(());
    }
    let wide: Vec<&str> = (permissions.iter())
        .filter(|p| p.tenant_wide())
        .map(|p| p.name())
        .collect();
    if wide.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} act on the whole tenant, beyond the key's filter; leave them out, or say \
         --tenant-wide to give this bound key tenant-wide powers",
        wide.join(", ")
    ))
}

/// What a new key is asked to be, as people write it (`sluice keys create`'s flags): each
/// field checked by [`Principal::asked`].
#[derive(Debug, Clone, Default)]
pub struct KeyAsk {
    /// The tenant's name.
    pub tenant: String,
    /// Permission names; `None`: [`Permission::DEFAULT`], or [`Permission::BOUND_DEFAULT`]
    /// with a filter.
    pub permissions: Option<Vec<String>>,
    /// A filter as JSON text.
    pub filter: Option<String>,
    /// Tokens a month (from 1).
    pub token_budget: Option<u64>,
    /// See [`Principal::tenant_wide`].
    pub tenant_wide: bool,
    /// See [`Principal::user_token`].
    pub user_token: bool,
}

impl Principal {
    /// The principal `ask` describes, or what is wrong with it, naming the field
    /// (`permissions: "read" is not one of …`).
    pub fn asked(ask: KeyAsk) -> Result<Self, String> {
        if ask.token_budget == Some(0) {
            return Err("token_budget: a budget is a whole number of tokens from 1".into());
        }
        let tenant = Tenant::new(&ask.tenant).map_err(|e| format!("tenant: {e}"))?;
        let filter = (ask.filter.as_deref())
            .map(|text| {
                let value: serde_json::Value =
                    serde_json::from_str(text).map_err(|e| format!("filter: not JSON: {e}"))?;
                crate::filter::Filter::parse(&value).map_err(|e| format!("filter: {e}"))
            })
            .transpose()?;
        let permissions = match ask.permissions {
            None if filter.is_some() => Permission::BOUND_DEFAULT.to_vec(),
            None => Permission::DEFAULT.to_vec(),
            Some(names) => (names.iter())
                .map(|p| {
                    Permission::parse(p).ok_or_else(|| {
                        let known: Vec<&str> = Permission::ALL.iter().map(|p| p.name()).collect();
                        format!("permissions: {p:?} is not one of {}", known.join(", "))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        check_grant(&permissions, filter.as_ref(), ask.tenant_wide)
            .map_err(|e| format!("permissions: {e}"))?;
        Ok(Self {
            tenant,
            permissions,
            filter,
            token_budget: ask.token_budget,
            tenant_wide: ask.tenant_wide,
            user_token: ask.user_token,
        })
    }
}

/// A stored key: its digest and whom it stands for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRecord {
    /// `sha256:` and the 64 hex digits of the key's SHA-256 ([`digest`]).
    pub hash: String,
    /// The tenant and permissions.
    #[serde(flatten)]
    pub principal: Principal,
    /// A label for people ("ci", "alice's laptop"); never used for access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl KeyRecord {
    /// The record of `key` (stored by its [`digest`], never itself) for `principal`.
    pub fn new(key: &str, principal: Principal, name: Option<String>) -> Self {
        Self {
            hash: digest(key),
            principal,
            name,
        }
    }
}

/// Why keys could not be read.
#[derive(Debug, Error)]
pub enum AuthError {
    /// The key file is missing, unreadable or malformed.
    #[error("API key file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The key store (DynamoDB) could not be asked.
    #[error("API key store unavailable: {0}")]
    Unavailable(String),
}

/// Where keys are looked up by digest.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The principal of the key whose [`digest`] is `hash`; `None` for an unknown key.
    async fn find(&self, hash: &str) -> Result<Option<Principal>, AuthError>;
}

/// `sha256:<hex>` of `key`: what key stores hold and are searched by.
pub fn digest(key: &str) -> String {
    format!("sha256:{}", crate::sha256_hex(key.as_bytes()))
}

/// A key's public id: the first 12 hex digits of its digest. Usage is counted per key under
/// it, and `sluice keys create` prints it; it tells keys apart without revealing anything
/// that would let anyone use one.
pub fn key_id(hash: &str) -> String {
    let hex = hash.strip_prefix("sha256:").unwrap_or(hash);
    hex.chars().take(12).collect()
}

/// Whether `hash` has the form [`digest`] gives.
pub fn valid_digest(hash: &str) -> bool {
    hash.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Checks a record read from storage: a digest and at least one permission (its tenant was
/// checked when it was read, as every [`Tenant`] is).
pub fn check_record(record: &KeyRecord) -> Result<(), String> {
    if !valid_digest(&record.hash) {
        return Err(format!(
            "{:?} is not a key digest (sha256: and 64 lower-case hex digits)",
            record.hash
        ));
    }
    if record.principal.permissions.is_empty() {
        return Err(format!(
            "the key of {:?} has no permissions",
            record.principal.tenant
        ));
    }
    Ok(())
}
