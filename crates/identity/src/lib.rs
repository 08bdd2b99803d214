//! End users' tokens: a JWT in `x-sluice-user`, verified against the tenant's identity
//! provider ([`IdentitySettings`]) and read into the principals that decide which documents
//! the user may see ([`sluice_contract::access`]).
//!
//! - **Keys.** A JWKS URL is fetched on first use and kept; a token naming a key (`kid`) the
//!   set does not hold fetches it again — at most once a minute per URL ([`REFETCH_EVERY`]), within
//!   [`FETCH_TIMEOUT`], at most [`MAX_JWKS_BYTES`] read, only from public addresses and never
//!   through a redirect ([`sluice_fetch::client`]). Each tenant's key sets are its own: at most
//!   [`MAX_SETS_PER_TENANT`] kept, so one tenant's fetches never push out another's keys. A
//!   failed fetch leaves the keys already
//!   held in force; a token whose key is not among them is refused, never let through. Or one
//!   static public key (PEM) of a stated algorithm. Or, for tests and small setups, an HMAC
//!   secret read from a [`SecretReader`] (Secrets Manager) on first use and again once it is
//!   a window old (a rotated secret is taken within a minute), with the same bounds; a failed
//!   read keeps the secret held.
//! - **Algorithms.** Each key allows one: RSA RS256, EC P-256 ES256, Ed25519 EdDSA (a JWKS key
//!   by its type; a static key by the tenant's `algorithm`). A token whose header names
//!   another is refused before its signature is read, so `alg: none` and a token re-signed
//!   with HS256 using the public key as the secret get nowhere; symmetric (`oct`) keys in a
//!   JWKS are ignored. A tenant's secret allows HS256 alone.
//! - **Claims.** `iss` and `aud` as configured, `exp` required, `nbf` honoured, 30 s of
//!   clock skew either way; `sub` required.
//!
//! Signatures are checked by `jsonwebtoken` on aws-lc-rs.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use sluice_contract::access::{
    IdentitySettings, MAX_PRINCIPALS, MIN_SECRET_BYTES, SecretReader, check_principal,
};
use sluice_contract::net::IpRange;

use sluice_fetch::{FetchError, Fetcher};

/// How long one JWKS fetch may take (connect, headers and body).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a JWKS URL may be fetched again for a key it did not hold.
pub const REFETCH_EVERY: Duration = Duration::from_secs(60);
/// Most bytes of a JWKS document read.
pub const MAX_JWKS_BYTES: usize = 256 << 10;
/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 30;
/// Most key sources (JWKS URLs, secrets) kept per tenant: a tenant that changes its URL often
/// forgets its own least recently used ones, never another tenant's.
pub const MAX_SETS_PER_TENANT: usize = 4;

/// A verified end user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The token's `sub`.
    pub subject: String,
    /// `user:<sub>`, then a `group:<g>` per group, then the mapped claims', each once.
    pub principals: Vec<String>,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT, or claims of the wrong shape.
    #[error("the user token is malformed: {0}")]
    Malformed(String),
    /// Past its `exp`.
    #[error("the user token has expired")]
    Expired,
    /// Before its `nbf`.
    #[error("the user token is not valid yet")]
    NotYetValid,
    /// Another `iss`.
    #[error("the user token is from another issuer")]
    Issuer,
    /// Another `aud`.
    #[error("the user token is for another audience")]
    Audience,
    /// The signature does not verify.
    #[error("the user token's signature does not verify")]
    Signature,
    /// The header names an algorithm the key does not allow.
    #[error("the user token's algorithm is not the key's ({0})")]
    Algorithm(String),
    /// No key of the identity provider's has the token's `kid`.
    #[error("the user token names a key the identity provider does not publish ({0})")]
    UnknownKey(String),
    /// A claim that cannot be read into principals.
    #[error("the user token's claims: {0}")]
    Claims(String),
    /// The identity provider's keys could not be fetched and none are known yet.
    #[error("the identity provider's keys cannot be fetched: {0}")]
    KeysUnavailable(String),
}

impl sluice_contract::codes::ErrorCode for TokenError {
    fn code(&self) -> sluice_contract::codes::Code {
        use sluice_contract::codes::Code;
        match self {
            // Who the end user is cannot be known now: not the token's fault.
            TokenError::KeysUnavailable(_) => Code::IdentityUnavailable,
            _ => Code::InvalidUserToken,
        }
    }
}

/// One JWKS URL's keys, by `kid`, each with the algorithm it allows (or a tenant's secret,
/// as the one key of a set).
#[derive(Default)]
struct KeySet {
    keys: Option<Arc<HashMap<String, (DecodingKey, Algorithm)>>>,
    /// When it was last fetched (or tried).
    tried: Option<Instant>,
}

/// A tenant's key source in [`Identities`]' map: (tenant, URL or secret).
type SetKey = (String, String);
/// A key set shared by the requests that need it, with when it was last used.
type Slot = (Instant, Arc<tokio::sync::Mutex<KeySet>>);

/// Verifies end users' tokens; keeps each tenant's key sets. Shared by every request.
pub struct Identities {
    fetcher: Fetcher,
    refetch_every: Duration,
    /// Each set, with when it was last used.
    sets: Mutex<HashMap<SetKey, Slot>>,
    /// Where tenants' HMAC secrets are read; `None`: a tenant configured with one is refused.
    secrets: Option<Arc<dyn SecretReader>>,
    /// What time it is, for the refetch windows (the system's; a test's own clock).
    clock: Arc<dyn Fn() -> Instant + Send + Sync>,
}

/// Where a tenant's keys come from.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// A JWKS URL: fetched again for a key it lacks.
    Jwks(&'a str),
    /// A secret's id: read again once a window old.
    Secret(&'a str),
}

impl Identities {
    /// A verifier that fetches a JWKS URL again for an unknown key at most once per
    /// `refetch_every` ([`REFETCH_EVERY`]), over one keep-alive client of its own, from public
    /// addresses only.
    pub fn new(refetch_every: Duration) -> Self {
        Self {
            fetcher: Fetcher::new(Vec::new(), FETCH_TIMEOUT),
            refetch_every,
            sets: Mutex::new(HashMap::new()),
            secrets: None,
            clock: Arc::new(Instant::now),
        }
    }

    /// Tells time by `clock` instead of the system's: a window passes when it says so.
    pub fn with_clock(mut self, clock: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Fetches key sets from the operator's `allowed` ranges too (`SLUICE_FETCH_ALLOW`), which
    /// are not public addresses.
    pub fn allowing(mut self, allowed: Vec<IpRange>) -> Self {
        self.fetcher = Fetcher::new(allowed, FETCH_TIMEOUT);
        self
    }

    /// Reads tenants' HMAC secrets ([`IdentitySettings::secret_arn`]) from `reader`.
    pub fn with_secrets(mut self, reader: Arc<dyn SecretReader>) -> Self {
        self.secrets = Some(reader);
        self
    }

    /// Verifies `token` under `tenant`'s `identity`, and reads its principals.
    pub async fn verify(
        &self,
        tenant: &str,
        identity: &IdentitySettings,
        token: &str,
    ) -> Result<User, TokenError> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
        let configured = (
            &identity.jwks_url,
            &identity.public_key,
            &identity.secret_arn,
        );
        let (key, algorithm) = match configured {
            (Some(url), _, _) => {
                (self.key(tenant, Source::Jwks(url), header.kid.as_deref())).await?
            }
            (None, Some(pem), _) => static_key(pem, identity.algorithm.as_deref())?,
            (None, None, Some(id)) => self.key(tenant, Source::Secret(id), None).await?,
            (None, None, None) => {
                return Err(TokenError::KeysUnavailable("no key configured".into()));
            }
        };
        if header.alg != algorithm {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
        }
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&identity.issuer]);
        validation.set_audience(&[&identity.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        // Each claim kept as its JSON text, and only those read parsed: a token of a user in
        // many groups is large, and its other claims need no parsing here.
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| refused(e.kind()))?
            .claims;
        principals(identity, &claims)
    }

    /// The key `kid` of the JWKS at `url` (the only key, when the token names none and the
    /// set has one), fetching the set on first use and again for a key it lacks; or a
    /// tenant's secret, read on first use and again once a window old.
    async fn key(
        &self,
        tenant: &str,
        source: Source<'_>,
        kid: Option<&str>,
    ) -> Result<(DecodingKey, Algorithm), TokenError> {
        let name = match source {
            Source::Jwks(url) => url.to_string(),
            Source::Secret(id) => format!("secret {id}"),
        };
        let now = (self.clock)();
        let slot = {
            let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
            let key = (tenant.to_string(), name);
            if !sets.contains_key(&key) {
                let own: Vec<(&SetKey, Instant)> = (sets.iter())
                    .filter(|((t, _), _)| t == tenant)
                    .map(|(k, (used, _))| (k, *used))
                    .collect();
                if own.len() >= MAX_SETS_PER_TENANT
                    && let Some((oldest, _)) = own.into_iter().min_by_key(|(_, used)| *used)
                {
                    let oldest = oldest.clone();
                    sets.remove(&oldest);
                }
            }
            let entry = sets.entry(key).or_insert_with(|| (now, Arc::default()));
            entry.0 = now;
            Arc::clone(&entry.1)
        };
        // One fetch at a time per source: the others wait for it, within their own bounds.
        let mut set = slot.lock().await;
        let due =
            (set.tried).is_none_or(|t| now.saturating_duration_since(t) >= self.refetch_every);
        let held = set.keys.as_ref().and_then(|k| pick(k, kid));
        match (source, held) {
            (Source::Jwks(_), Some(found)) => return Ok(found),
            (Source::Secret(_), Some(found)) if !due => return Ok(found),
            _ => {}
        }
        let mut failure = None;
        if due {
            set.tried = Some(now);
            let fetched = match source {
                Source::Jwks(url) => self.fetch(tenant, url).await,
                Source::Secret(id) => self.read_secret(id).await,
            };
            match fetched {
                Ok(keys) => set.keys = Some(Arc::new(keys)),
                Err(why) => {
                    let source = match source {
                        Source::Jwks(url) | Source::Secret(url) => url,
                    };
                    tracing::warn!(source, error = %why, "keys not fetched; the keys held stay in force");
                    failure = Some(why);
                }
            }
        }
        match &set.keys {
            Some(keys) => pick(keys, kid).ok_or_else(|| {
                TokenError::UnknownKey(kid.map_or("no kid".into(), |k| format!("kid {k:?}")))
            }),
            None => Err(TokenError::KeysUnavailable(failure.unwrap_or_else(|| {
                "fetched less than a minute ago, and failed".into()
            }))),
        }
    }

    /// A tenant's secret `id`, as the one key of a set (HS256).
    async fn read_secret(
        &self,
        id: &str,
    ) -> Result<HashMap<String, (DecodingKey, Algorithm)>, String> {
        let reader = (self.secrets.as_ref())
            .ok_or("this process reads no secrets (it has no Secrets Manager)")?;
        let secret = tokio::time::timeout(FETCH_TIMEOUT, reader.read(id))
            .await
            .map_err(|_| format!("no answer within {} ms", FETCH_TIMEOUT.as_millis()))??;
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the secret is {} bytes; HS256 takes {MIN_SECRET_BYTES} or more",
                secret.len()
            ));
        }
        let key = DecodingKey::from_secret(&secret).map_err(|e| e.to_string())?;
        let key = (key, Algorithm::HS256);
        Ok(HashMap::from([(String::new(), key)]))
    }

    /// The JWKS at `url`, for `tenant`: each RS256, ES256 or EdDSA key by its `kid`. The
    /// error says what is wrong with the setting, never what the network answered (that is
    /// logged).
    async fn fetch(
        &self,
        tenant: &str,
        url: &str,
    ) -> Result<HashMap<String, (DecodingKey, Algorithm)>, String> {
        let failed = || format!("no key set was read from jwks_url ({})", FetchError::Failed);
        let body =
            tokio::time::timeout(FETCH_TIMEOUT, self.fetcher.get(tenant, url, MAX_JWKS_BYTES))
                .await
                .unwrap_or(Err(FetchError::Failed))
                .map_err(|e| match e {
                    FetchError::Failed => failed(),
                    other => format!("jwks_url: {other}"),
                })?;
        let keys = (serde_json::from_slice::<Value>(&body).ok())
            .and_then(|d| d.get("keys").and_then(Value::as_array).cloned());
        let Some(keys) = keys else {
            tracing::warn!(
                tenant,
                url,
                "a tenant's jwks_url did not answer with a JWKS document"
            );
            return Err(failed());
        };
        Ok(keys.iter().filter_map(usable).collect())
    }
}

/// A JWKS entry Sluice verifies with: its `kid`, key and algorithm; `None` for another type
/// of key (symmetric keys above all), another curve, or one marked for encryption.
fn usable(entry: &Value) -> Option<(String, (DecodingKey, Algorithm))> {
    let jwk: Jwk = serde_json::from_value(entry.clone()).ok()?;
    let for_encryption = matches!(entry.get("use").and_then(Value::as_str), Some("enc"));
    let algorithm = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        _ => return None,
    };
    // A key that names an algorithm must name the one its type is used with here.
    let named = entry.get("alg").and_then(Value::as_str);
    if for_encryption || named.is_some_and(|a| a != format!("{algorithm:?}")) {
        return None;
    }
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some((
        jwk.common.key_id.clone().unwrap_or_default(),
        (key, algorithm),
    ))
}

/// The key `kid` names, or the only one when the token names none.
fn pick(
    keys: &HashMap<String, (DecodingKey, Algorithm)>,
    kid: Option<&str>,
) -> Option<(DecodingKey, Algorithm)> {
    match kid {
        Some(kid) => keys.get(kid).cloned(),
        None if keys.len() == 1 => keys.values().next().cloned(),
        None => None,
    }
}

/// Whether the identity's static public key (if it has one) reads as a key of its algorithm:
/// the message says why not, for the tenant's settings.
pub fn check_key(identity: &IdentitySettings) -> Result<(), String> {
    match &identity.public_key {
        Some(pem) => static_key(pem, identity.algorithm.as_deref())
            .map(|_| ())
            .map_err(|e| match e {
                TokenError::KeysUnavailable(why) => why,
                other => other.to_string(),
            }),
        None => Ok(()),
    }
}

/// A tenant's one public key, for its `algorithm`.
fn static_key(pem: &str, algorithm: Option<&str>) -> Result<(DecodingKey, Algorithm), TokenError> {
    let bad = |e: jsonwebtoken::errors::Error| {
        TokenError::KeysUnavailable(format!("the configured public key: {e}"))
    };
    let pem = pem.as_bytes();
    match algorithm {
        Some("RS256") => Ok((
            DecodingKey::from_rsa_pem(pem).map_err(bad)?,
            Algorithm::RS256,
        )),
        Some("ES256") => Ok((
            DecodingKey::from_ec_pem(pem).map_err(bad)?,
            Algorithm::ES256,
        )),
        Some("EdDSA") => Ok((
            DecodingKey::from_ed_pem(pem).map_err(bad)?,
            Algorithm::EdDSA,
        )),
        other => Err(TokenError::KeysUnavailable(format!(
            "the configured algorithm {other:?} is not RS256, ES256 or EdDSA"
        ))),
    }
}

/// What a refused token is told, by `jsonwebtoken`'s reason.
fn refused(kind: &ErrorKind) -> TokenError {
    match kind {
        ErrorKind::ExpiredSignature => TokenError::Expired,
        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
        ErrorKind::InvalidIssuer => TokenError::Issuer,
        ErrorKind::InvalidAudience => TokenError::Audience,
        ErrorKind::InvalidSignature => TokenError::Signature,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => {
            TokenError::Algorithm("not allowed for this key".into())
        }
        ErrorKind::MissingRequiredClaim(claim) => TokenError::Claims(format!("no {claim:?} claim")),
        other => TokenError::Malformed(format!("{other:?}")),
    }
}

/// A token's claims, each as its JSON text.
type Claims = HashMap<String, Box<serde_json::value::RawValue>>;

/// The strings a claim holds: one, a list of them, or none (absent or null).
fn strings<'a>(
    claims: &'a Claims,
    claim: &str,
) -> Result<Vec<std::borrow::Cow<'a, str>>, TokenError> {
    let Some(raw) = claims.get(claim) else {
        return Ok(Vec::new());
    };
    let text = raw.get();
    let read = match text.trim_start().as_bytes().first() {
        Some(b'[') => serde_json::from_str::<Vec<std::borrow::Cow<'a, str>>>(text),
        Some(b'"') => serde_json::from_str::<std::borrow::Cow<'a, str>>(text).map(|one| vec![one]),
        _ if text.trim() == "null" => Ok(Vec::new()),
        _ => {
            return Err(TokenError::Claims(format!(
                "{claim:?} is neither a string nor a list of strings"
            )));
        }
    };
    read.map_err(|_| TokenError::Claims(format!("{claim:?} holds a non-string")))
}

/// The principals the verified `claims` give, under the tenant's claim mapping.
fn principals(identity: &IdentitySettings, claims: &Claims) -> Result<User, TokenError> {
    let subject = match strings(claims, "sub")?.as_slice() {
        [one] => one.to_string(),
        _ => return Err(TokenError::Claims("\"sub\" is not a string".into())),
    };
    let bad = |why: String| TokenError::Claims(why);
    let mut principals = vec![format!("user:{subject}")];
    check_principal(&principals[0]).map_err(bad)?;
    // Each claim's values (the mapped kinds were checked when the settings were stored);
    // then each (kind, value) once, checked as a principal.
    let mut read = Vec::new();
    let mapped = std::iter::once((&identity.groups_claim, "group"))
        .chain(identity.claims.iter().map(|(c, k)| (c, k.as_str())));
    for (claim, kind) in mapped {
        read.push((kind, strings(claims, claim)?));
    }
    // foldhash, not SipHash: a token of many groups spends most of its reading here, and the
    // set lives for one token (nothing to flood across requests).
    let count = read.iter().map(|(_, values)| values.len()).sum();
    let mut seen: HashSet<(&str, &str), foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(count, Default::default());
    for (kind, values) in &read {
        for value in values {
            if !seen.insert((*kind, value.as_ref())) {
                continue;
            }
            if principals.len() == MAX_PRINCIPALS {
                return Err(bad(format!("more than {MAX_PRINCIPALS} principals")));
            }
            let mut principal = String::with_capacity(kind.len() + 1 + value.len());
            principal.extend([*kind, ":", value]);
            check_principal(&principal).map_err(bad)?;
            principals.push(principal);
        }
    }
    Ok(User {
        subject,
        principals,
    })
}
