//! The tenant: whose documents, cache entries, components and limits a request uses.
//!
//! A tenant's name comes from outside — a header, an API key's record, a setting, an S3 key —
//! and ends up inside keys, file names and filters. It is checked once, where it comes in
//! ([`Tenant::new`], or deserialising one), and from then on a [`Tenant`] is known to be
//! valid: every stage takes one, never a bare string.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// The request header that names the tenant (a key bound to one tenant need not send it).
pub const TENANT_HEADER: &str = "x-sluice-tenant";

/// Longest tenant name.
pub const MAX_TENANT_CHARS: usize = 64;

/// What a tenant name must be, for messages.
pub const TENANT_RULE: &str = "1-64 characters of letters, digits, '-' or '_'";

/// A tenant name that breaks [`TENANT_RULE`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("tenant {0:?} is not {TENANT_RULE}")]
pub struct InvalidTenant(pub String);

/// What [`Tenant::prompt_components`] adds to a tenant's name.
const PROMPT_SPACE: &str = ".prompt";

/// A valid tenant name: 1 to 64 ASCII letters, digits, `-` or `_` — safe in keys, file names,
/// S3 prefixes and store filters. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// `name`, if it is a valid tenant name.
    pub fn new(name: &str) -> Result<Self, InvalidTenant> {
        let valid = (1..=MAX_TENANT_CHARS).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        match valid {
            true => Ok(Self(name.into())),
            false => Err(InvalidTenant(name.to_string())),
        }
    }

    /// The name under which the tenant's prompt-assembly components are kept: `NAME.prompt`,
    /// which no tenant can have (`.` breaks the rule), so that a store keyed by tenant keeps
    /// them apart from its rerank components.
    pub fn prompt_components(&self) -> Tenant {
        Tenant(format!("{}{PROMPT_SPACE}", self.0).into())
    }

    /// Whether this is the name of a tenant's prompt components ([`Tenant::prompt_components`]).
    pub fn is_prompt_components(&self) -> bool {
        self.0.ends_with(PROMPT_SPACE)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Tenant {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Tenant {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Tenant {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Tenant {
    type Err = InvalidTenant;
    fn from_str(s: &str) -> Result<Self, InvalidTenant> {
        Self::new(s)
    }
}

impl TryFrom<&str> for Tenant {
    type Error = InvalidTenant;
    fn try_from(s: &str) -> Result<Self, InvalidTenant> {
        Self::new(s)
    }
}

impl PartialEq<str> for Tenant {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Tenant {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for Tenant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Tenant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::new(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_letters_digits_dashes_and_underscores_up_to_64_are_tenants() {
        for good in ["a", "acme", "Acme-2_x", &"x".repeat(64)] {
            assert_eq!(Tenant::new(good).unwrap().as_str(), good);
        }
        for bad in ["", "a b", "a/b", "../x", "é", "a.b", &"x".repeat(65)] {
            assert_eq!(
                Tenant::new(bad),
                Err(InvalidTenant(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_tenant_reads_back_from_json_only_when_valid() {
        let t: Tenant = serde_json::from_str("\"acme\"").unwrap();
        assert_eq!(t, "acme");
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"acme\"");
        let e = serde_json::from_str::<Tenant>("\"a b\"").unwrap_err();
        assert!(e.to_string().contains("is not 1-64 characters"), "{e}");
    }
}
