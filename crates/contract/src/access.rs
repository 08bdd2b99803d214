//! End users and what they may see inside a tenant.
//!
//! A tenant that configures an identity ([`IdentitySettings`], in its settings) has its end
//! users send a token signed by its own identity provider in [`USER_HEADER`]; the verified
//! claims become the user's principals (`user:<sub>`, `group:<g>`, …). A document's access
//! list is the reserved metadata key [`ACCESS_KEY`]: absent, every end user of the tenant
//! may see it; a list, only the holders of one of its principals; an empty list (stored as
//! [`NOBODY`]), no end user. What a user may see is a metadata filter ([`access_filter`]),
//! ANDed with the key's and the request's, so every store applies it inside its query.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::filter::{Filter, Op, Scalar};

/// How much of its tenant's documents' text a caller may read: the one rule behind every route
/// that returns text — answers and their prompts, search, listing and reading, MCP's tools,
/// and the records of other requests (component failures, log lines, replay inputs). A route
/// that reads documents for the caller applies it as a filter inside the store's query
/// ([`access_filter`] with the key's filter); a route that shows records of calls made for
/// other requests applies [`TextAccess::reads_record`] to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextAccess {
    /// Every document of the tenant: the tenant's admin — a key that holds the `documents`
    /// permission, bound to no filter, with no end user's token (or any caller with auth off).
    All,
    /// Documents without an access list: a key without the `documents` permission and without
    /// an end user's token (a front end's key).
    Open,
    /// What its own filter lets it retrieve, document by document: a key bound to a filter, or
    /// an end user. Records of other requests' calls are never shown it whole: which documents
    /// those calls saw is not kept to be filtered again.
    Filtered,
}

impl TextAccess {
    /// The access of a caller whose key holds `documents` (or not), is `bound` to a filter (or
    /// not), and carries an `end_user`'s token (or not).
    pub fn of(documents: bool, bound: bool, end_user: bool) -> Self {
        match (documents, bound || end_user) {
            (_, true) => TextAccess::Filtered,
            (true, false) => TextAccess::All,
            (false, false) => TextAccess::Open,
        }
    }

    /// Whether a record of a call made for another request — its messages, lines and input,
    /// any of which can quote a document it saw — may be shown whole; `restricted`: the call
    /// saw a document with an access list.
    pub fn reads_record(self, restricted: bool) -> bool {
        match self {
            TextAccess::All => true,
            TextAccess::Open => !restricted,
            TextAccess::Filtered => false,
        }
    }
}

/// The header that carries the end user's token (a JWT).
pub const USER_HEADER: &str = "x-sluice-user";
/// The metadata key of a document's access list.
pub const ACCESS_KEY: &str = "_access";
/// The principal nobody holds: what an empty access list is stored as (an empty list would
/// read as an absent key in Qdrant's filters, which would open the document to everyone).
pub const NOBODY: &str = "-";
/// Most principals one user may hold (their groups and mapped claims, with `user:<sub>`).
pub const MAX_PRINCIPALS: usize = 1_000;
/// Longest principal, in bytes.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// Longest principal kind (`group`, `user`, or a mapped claim's), in bytes.
pub const MAX_KIND_BYTES: usize = 32;

/// Whether `kind` may name a kind of principal: lowercase ASCII letters, digits, `_` and `-`,
/// starting with a letter, at most [`MAX_KIND_BYTES`].
pub fn check_kind(kind: &str) -> Result<(), String> {
    let ok = !kind.is_empty()
        && kind.len() <= MAX_KIND_BYTES
        && kind.as_bytes()[0].is_ascii_lowercase()
        && (kind.bytes())
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "{kind:?} is not a principal kind: lowercase letters, digits, _ and -, starting with \
             a letter, at most {MAX_KIND_BYTES} bytes"
        )),
    }
}

/// Whether `principal` is one: `kind:value` ([`check_kind`]), the value not empty and free of
/// control characters, the whole at most [`MAX_PRINCIPAL_BYTES`] — or [`NOBODY`].
pub fn check_principal(principal: &str) -> Result<(), String> {
    if principal == NOBODY {
        return Ok(());
    }
    let Some((kind, value)) = principal.split_once(':') else {
        return Err(format!(
            "{principal:?} is not a principal: write kind:value (user:alice, group:hr)"
        ));
    };
    check_kind(kind)?;
    if value.is_empty() || has_control(value) {
        return Err(format!(
            "{principal:?}: the value after the kind is empty or has control characters"
        ));
    }
    if principal.len() > MAX_PRINCIPAL_BYTES {
        return Err(format!(
            "a principal of {} bytes; at most {MAX_PRINCIPAL_BYTES}",
            principal.len()
        ));
    }
    Ok(())
}

/// Whether `text` holds a control character (`char::is_control`: U+0000–U+001F, U+007F,
/// U+0080–U+009F), read byte by byte — C1 controls are 0xC2 0x80–0x9F in UTF-8 — since a
/// token's thousand principals are each checked.
fn has_control(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b < 0x20
            || b == 0x7f
            || (b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    })
}

/// The documents a user holding `principals` may see: those without an access list, and
/// those whose list names one of the principals. `None` principals: a request without a user
/// token, which sees the open documents only.
pub fn access_filter(principals: Option<&[String]>) -> Filter {
    let open = Filter::Field {
        key: ACCESS_KEY.into(),
        op: Op::Exists(false),
    };
    match principals {
        Some(held) if !held.is_empty() => Filter::Or(vec![
            open,
            Filter::Field {
                key: ACCESS_KEY.into(),
                op: Op::In(held.iter().map(|p| Scalar::Text(p.clone())).collect()),
            },
        ]),
        _ => open,
    }
}

/// An access list written as text, principals separated by commas (`group:hr,user:alice`;
/// nothing for no end user), as a document's [`ACCESS_KEY`] value: what a file upload's
/// `access` parameter, `sluice ingest --access` and an S3 object's tag say. The principals
/// are checked with the rest of the document's metadata.
pub fn access_list(text: &str) -> serde_json::Value {
    (text.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| serde_json::Value::String(p.to_string()))
        .collect()
}

/// Whether a document with `access` (its [`ACCESS_KEY`] list; `None` when it has none) is one
/// a user holding `principals` may see: the reference meaning of [`access_filter`].
pub fn may_see(access: Option<&[String]>, principals: Option<&[String]>) -> bool {
    match access {
        None => true,
        Some(list) => principals.is_some_and(|held| list.iter().any(|p| held.contains(p))),
    }
}

/// How a tenant's end users are known: how the token in [`USER_HEADER`] is verified, and
/// which of its claims name principals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySettings {
    /// The `iss` every token must carry.
    pub issuer: String,
    /// The `aud` every token must carry (one of its values, when it is a list).
    pub audience: String,
    /// Where the identity provider publishes its public keys (a JWKS document; `https`, or
    /// `http` on a loopback address). Each key's type picks its algorithm: RSA RS256, EC P-256
    /// ES256, Ed25519 EdDSA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<String>,
    /// Instead, one public key (PEM, `-----BEGIN PUBLIC KEY-----`), of the type `algorithm`
    /// says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
    /// Or a secret shared with the identity provider, for HS256: the ARN (or name) of a
    /// Secrets Manager secret whose value — its string's bytes, or its binary — is the key,
    /// at least [`MIN_SECRET_BYTES`]. For tests and small setups: whoever can read the secret
    /// can mint tokens for any user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_arn: Option<String>,
    /// The algorithm of `public_key`: `RS256`, `ES256` or `EdDSA` (of `secret_arn`: `HS256`,
    /// which may be left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// The claim that lists the user's groups (default `groups`): each one a `group:<g>`.
    #[serde(default = "groups_claim", skip_serializing_if = "is_groups_claim")]
    pub groups_claim: String,
    /// More claims read as principals: claim → kind (`{"department": "dept"}` makes
    /// `dept:<value>` of each value of the `department` claim).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims: BTreeMap<String, String>,
    /// Whether every request must carry a user token (then one without is refused with 401
    /// `missing_user_token`); `false` (the default): one without sees only the documents open
    /// to every end user.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

fn groups_claim() -> String {
    "groups".into()
}

fn is_groups_claim(claim: &String) -> bool {
    *claim == groups_claim()
}

/// The algorithms a static `public_key` may be for.
pub const KEY_ALGORITHMS: [&str; 3] = ["RS256", "ES256", "EdDSA"];
/// The shortest HMAC secret taken: as long as SHA-256's output (RFC 7518, section 3.2).
pub const MIN_SECRET_BYTES: usize = 32;

/// Where a tenant's HMAC secret ([`IdentitySettings::secret_arn`]) is read from: Secrets
/// Manager in a deployment.
#[async_trait::async_trait]
pub trait SecretReader: Send + Sync {
    /// The value of the secret `id`, as bytes; the error says why it could not be read.
    async fn read(&self, id: &str) -> Result<Vec<u8>, String>;
}

impl IdentitySettings {
    /// Checks the fields: the message names the first bad one (relative to `identity.`).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, why: String| Err((field.to_string(), why));
        for (field, value) in [("issuer", &self.issuer), ("audience", &self.audience)] {
            if value.trim().is_empty() || value.len() > 1_024 {
                return bad(field, "must be 1 to 1,024 bytes".into());
            }
        }
        match (&self.jwks_url, &self.public_key, &self.secret_arn) {
            (None, None, Some(arn)) => {
                let name = |c: char| c.is_ascii_alphanumeric() || "/_+=.@:-".contains(c);
                if arn.is_empty() || arn.len() > 2_048 || !arn.chars().all(name) {
                    return bad(
                        "secret_arn",
                        "must be a Secrets Manager secret's ARN or name".into(),
                    );
                }
                if self.algorithm.as_deref().is_some_and(|a| a != "HS256") {
                    return bad("algorithm", "a secret_arn is for HS256 alone".into());
                }
            }
            (Some(url), None, None) => {
                if let Err(why) = crate::net::tenant_url(url) {
                    return bad("jwks_url", why);
                }
                if self.algorithm.is_some() {
                    return bad(
                        "algorithm",
                        "goes with public_key only (a JWKS key's type says its own)".into(),
                    );
                }
            }
            (None, Some(pem), None) => {
                if !pem.trim_start().starts_with("-----BEGIN PUBLIC KEY-----") || pem.len() > 16_384
                {
                    return bad(
                        "public_key",
                        "must be a PEM public key (-----BEGIN PUBLIC KEY-----), at most 16 KiB"
                            .into(),
                    );
                }
                match self.algorithm.as_deref() {
                    Some(a) if KEY_ALGORITHMS.contains(&a) => {}
                    _ => {
                        return bad(
                            "algorithm",
                            format!("must be one of {}", KEY_ALGORITHMS.join(", ")),
                        );
                    }
                }
            }
            _ => {
                return bad(
                    "jwks_url",
                    "give one of jwks_url, public_key and secret_arn".into(),
                );
            }
        }
        if self.groups_claim.is_empty() || self.groups_claim.len() > 256 {
            return bad("groups_claim", "must be 1 to 256 bytes".into());
        }
        if self.claims.len() > 16 {
            return bad("claims", "at most 16 claims".into());
        }
        for (claim, kind) in &self.claims {
            if claim.is_empty() || claim.len() > 256 {
                return bad(
                    "claims",
                    format!("{claim:?}: a claim name of 1 to 256 bytes"),
                );
            }
            check_kind(kind).map_err(|why| ("claims".to_string(), why))?;
            if kind == "user" {
                return bad("claims", "\"user\" is the subject's own kind".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_reads_what_text() {
        use TextAccess::*;
        assert_eq!(TextAccess::of(true, false, false), All);
        assert_eq!(TextAccess::of(false, false, false), Open);
        for (documents, bound, user) in [
            (true, true, false),
            (true, false, true),
            (false, true, true),
        ] {
            assert_eq!(TextAccess::of(documents, bound, user), Filtered);
        }
        assert!(All.reads_record(true) && All.reads_record(false));
        assert!(Open.reads_record(false) && !Open.reads_record(true));
        assert!(!Filtered.reads_record(false) && !Filtered.reads_record(true));
    }

    #[test]
    fn control_characters_are_found_as_char_is_control_finds_them() {
        let chars = (0..0x3000u32)
            .chain([0x1f600, 0x10ffff])
            .filter_map(char::from_u32);
        for c in chars {
            for text in [
                c.to_string(),
                format!("hr{c}"),
                format!("{c}é"),
                format!("é{c}x"),
            ] {
                assert_eq!(
                    has_control(&text),
                    text.chars().any(char::is_control),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn principals_are_kind_colon_value() {
        for ok in [
            "user:alice",
            "group:hr",
            "dept:sales-emea",
            "group:a:b",
            NOBODY,
        ] {
            assert!(check_principal(ok).is_ok(), "{ok}");
        }
        for bad in ["alice", ":x", "User:alice", "group:", "9x:y", "group:\n"] {
            assert!(check_principal(bad).is_err(), "{bad}");
        }
        let long = format!("group:{}", "x".repeat(MAX_PRINCIPAL_BYTES));
        assert!(check_principal(&long).is_err());
    }

    #[test]
    fn the_filter_means_what_may_see_says() {
        let held = ["user:alice".to_string(), "group:hr".to_string()];
        fn doc(access: Option<Vec<&str>>) -> (crate::metadata::Metadata, Option<Vec<&str>>) {
            let mut m = serde_json::Map::new();
            if let Some(list) = &access {
                m.insert(ACCESS_KEY.into(), serde_json::json!(list));
            }
            (crate::metadata::Metadata::from_json(&m).unwrap(), access)
        }
        for access in [
            None,
            Some(vec!["group:hr"]),
            Some(vec!["group:finance", "user:alice"]),
            Some(vec!["group:finance"]),
            Some(vec![NOBODY]),
        ] {
            let (metadata, access) = doc(access);
            let list: Option<Vec<String>> =
                access.map(|l| l.iter().map(|s| s.to_string()).collect());
            for principals in [Some(&held[..]), None, Some(&[][..])] {
                assert_eq!(
                    access_filter(principals).matches(&metadata),
                    may_see(list.as_deref(), principals),
                    "{list:?} for {principals:?}"
                );
            }
        }
    }
}
