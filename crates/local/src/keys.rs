//! [`FileKeys`]: the API keys of `sluice serve`, in a JSON file.
//!
//! A key is `sk-sluice-` and 64 hex digits (244 random bits, from two v4 UUIDs). Only its
//! SHA-256 is stored — a file for `sluice serve` ([`FileKeys`], `SLUICE_API_KEYS_FILE`), a
//! DynamoDB table on Lambda (`sluice-aws`, `SLUICE_API_KEYS_TABLE`) — with the tenant it acts
//! for and what it may do ([`Permission`]). A fast hash is enough: the keys are random, not
//! passwords, so there is nothing to guess from a leaked digest.
//!
//! The HTTP layer hashes the bearer token of each request and asks the [`KeyStore`]; no key
//! (or an unknown one) is a 401, a key used for another tenant or beyond its permissions a 403.

use sluice_contract::auth::*;

use std::collections::HashMap;
use std::path::Path;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The key file of `sluice serve`: `{"keys": [{"hash", "tenant", "permissions", "name"?}]}`,
/// read once at start (`sluice keys create` appends to it; restart to pick up new keys).
#[derive(Debug, Default)]
pub struct FileKeys {
    by_hash: HashMap<String, Principal>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    keys: Vec<KeyRecord>,
}

impl FileKeys {
    /// Reads and checks `path`: every record well-formed, no digest twice.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let records = read_records(path)?;
        let fail = |message: String| AuthError::File {
            path: path.to_path_buf(),
            message,
        };
        let mut by_hash = HashMap::with_capacity(records.len());
        for (i, record) in records.into_iter().enumerate() {
            check_record(&record).map_err(|m| fail(format!("key {i}: {m}")))?;
            if by_hash
                .insert(record.hash.clone(), record.principal)
                .is_some()
            {
                return Err(fail(format!("key {i}: the same digest appears twice")));
            }
        }
        Ok(Self { by_hash })
    }

    /// How many keys the file holds.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether the file holds no keys (then nobody gets in).
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

fn read_records(path: &Path) -> Result<Vec<KeyRecord>, AuthError> {
    let fail = |message: String| AuthError::File {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let file: KeyFile = serde_json::from_str(&text).map_err(|e| {
        fail(format!(
            "expected {{\"keys\": [{{\"hash\", \"tenant\", \"permissions\", \"name\"?}}]}} ({e})"
        ))
    })?;
    Ok(file.keys)
}

/// Adds `record` to the key file at `path` (created when missing), keeping the others.
/// The file is replaced whole (written beside it, then renamed), so that a server reading
/// it never sees half a file.
pub fn append_to_file(path: &Path, record: KeyRecord) -> Result<(), AuthError> {
    let fail = |message: String| AuthError::File {
        path: path.to_path_buf(),
        message,
    };
    check_record(&record).map_err(fail)?;
    let mut keys = if path.exists() {
        read_records(path)?
    } else {
        Vec::new()
    };
    keys.push(record);
    let text = serde_json::to_string_pretty(&KeyFile { keys }).map_err(|e| fail(e.to_string()))?;
    crate::replace_file(path, &(text + "\n")).map_err(|e| fail(e.to_string()))
}

#[async_trait]
impl KeyStore for FileKeys {
    async fn find(&self, hash: &str) -> Result<Option<Principal>, AuthError> {
        Ok(self.by_hash.get(hash).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::Tenant;

    fn record(key: &str, tenant: &str, permissions: &[Permission]) -> KeyRecord {
        let principal = Principal::new(Tenant::new(tenant).unwrap(), permissions.to_vec());
        KeyRecord::new(key, principal, None)
    }

    #[test]
    fn keys_are_random_prefixed_and_only_their_digest_is_kept() {
        let (a, b) = (new_key(), new_key());
        assert_ne!(a, b);
        assert!(
            a.starts_with(KEY_PREFIX) && a.len() == KEY_PREFIX.len() + 64,
            "{a}"
        );
        assert!(valid_digest(&digest(&a)));
        assert_ne!(digest(&a), digest(&b));
        assert!(!digest(&a).contains(&a[KEY_PREFIX.len()..]));
        // A known vector: SHA-256 of "abc".
        assert_eq!(
            digest("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(!valid_digest("sha256:ABC"));
        assert!(!valid_digest(&digest("x")[1..]));
    }

    #[test]
    fn permissions_round_trip_by_name() {
        for p in Permission::ALL {
            assert_eq!(Permission::parse(p.name()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.name());
        }
        assert_eq!(Permission::parse("admin"), None);
        assert!(!Permission::DEFAULT.contains(&Permission::Prompt));
    }

    #[tokio::test]
    async fn a_key_file_maps_digests_to_tenants() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        append_to_file(&path, record("key-a", "acme", &Permission::DEFAULT)).unwrap();
        append_to_file(&path, record("key-b", "globex", &[Permission::Answer])).unwrap();
        let keys = FileKeys::load(&path).unwrap();
        assert_eq!(keys.len(), 2);
        let a = keys.find(&digest("key-a")).await.unwrap().unwrap();
        assert_eq!(a.tenant, "acme");
        assert!(a.may(Permission::Documents) && !a.may(Permission::Prompt));
        let b = keys.find(&digest("key-b")).await.unwrap().unwrap();
        assert_eq!(
            (b.tenant.as_str(), b.may(Permission::Documents)),
            ("globex", false)
        );
        assert_eq!(keys.find(&digest("key-c")).await.unwrap(), None);
        // The key itself is nowhere in the file.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("key-a") && text.contains(&digest("key-a")));
    }

    #[test]
    fn bad_key_files_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let missing = FileKeys::load(&path).unwrap_err().to_string();
        assert!(missing.contains("keys.json"), "{missing}");
        for (text, says) in [
            (
                "{\"keys\": [{\"hash\": \"plain-key\", \"tenant\": \"a\", \"permissions\": [\"answer\"]}]}",
                "not a key digest",
            ),
            (
                &format!(
                    "{{\"keys\": [{{\"hash\": \"{}\", \"tenant\": \"a b\", \"permissions\": [\"answer\"]}}]}}",
                    digest("k")
                ),
                "tenant",
            ),
            (
                &format!(
                    "{{\"keys\": [{{\"hash\": \"{}\", \"tenant\": \"a\", \"permissions\": []}}]}}",
                    digest("k")
                ),
                "no permissions",
            ),
            (
                &format!(
                    "{{\"keys\": [{{\"hash\": \"{}\", \"tenant\": \"a\", \"permissions\": [\"root\"]}}]}}",
                    digest("k")
                ),
                "unknown variant",
            ),
            ("[]", "expected"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = FileKeys::load(&path).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        let twice = record("k", "a", &[Permission::Answer]);
        std::fs::remove_file(&path).unwrap();
        append_to_file(&path, twice.clone()).unwrap();
        append_to_file(&path, twice).unwrap();
        let e = FileKeys::load(&path).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
    }
}
