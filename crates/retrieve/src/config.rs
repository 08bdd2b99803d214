//! The vector store's section of the configuration, read and checked by its owner.

use std::path::PathBuf;
use std::time::Duration;

use sluice_contract::settings::{ConfigError, Secret, https_url, is_http_url, millis, ranged};

/// The vector store: which backend, and how calls to a remote one are bounded.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `SLUICE_STORE`: where chunks live, with that backend's settings.
    pub backend: StoreBackend,
    /// `SLUICE_STORE_TIMEOUT_MS`: budget of one call to a remote store.
    pub timeout: Duration,
    /// `SLUICE_STORE_READ_RETRIES`: extra attempts of a failed read (inside the deadline).
    pub read_retries: usize,
    /// `SLUICE_BREAKER_FAILURES`: consecutive failures that open a remote store's breaker.
    pub breaker_failures: u32,
    /// `SLUICE_BREAKER_COOLDOWN_MS`: how long an open breaker skips the store.
    pub breaker_cool_down: Duration,
}

/// Where chunks live (`SLUICE_STORE`), with what that backend needs.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreBackend {
    /// Qdrant Edge in-process, in `SLUICE_DATA_DIR` (the default).
    Edge {
        /// The shard's folder (`SLUICE_DATA_DIR`).
        dir: PathBuf,
    },
    /// A Qdrant server or Qdrant Cloud over REST.
    Qdrant(QdrantConfig),
    /// Two Pinecone serverless indexes, dense and sparse.
    Pinecone(PineconeConfig),
}

/// A Qdrant server over REST (`SLUICE_STORE=qdrant`).
#[derive(Debug, Clone, PartialEq)]
pub struct QdrantConfig {
    /// `SLUICE_QDRANT_URL`: base URL of the REST API.
    pub url: String,
    /// `SLUICE_QDRANT_API_KEY`: sent as `api-key`.
    pub api_key: Option<Secret>,
    /// `SLUICE_QDRANT_COLLECTION`: the collection (corpus versions live in `<name>_versions`).
    pub collection: String,
}

/// Two Pinecone serverless indexes (`SLUICE_STORE=pinecone`).
#[derive(Debug, Clone, PartialEq)]
pub struct PineconeConfig {
    /// `SLUICE_PINECONE_API_KEY`: sent as `Api-Key`.
    pub api_key: Secret,
    /// `SLUICE_PINECONE_HOST`: data-plane URL of the dense index (a bare host means https).
    pub host: Option<String>,
    /// `SLUICE_PINECONE_SPARSE_HOST`: data-plane URL of the sparse (BM25) index.
    pub sparse_host: Option<String>,
    /// `SLUICE_PINECONE_INDEX`: name of the dense index; the sparse one is `<name>-bm25`.
    pub index: String,
    /// `SLUICE_PINECONE_CLOUD`: where `sluice store create-collection` creates the indexes.
    pub cloud: String,
    /// `SLUICE_PINECONE_REGION`: see `cloud`.
    pub region: String,
    /// `SLUICE_PINECONE_CONTROL_URL`: Pinecone's control-plane API.
    pub control_url: String,
    /// `SLUICE_PINECONE_LAG_MS`: how long a write may take to show in Pinecone's reads
    /// (serverless indexes are eventually consistent): a deleted document may still be
    /// retrieved that long, so no answer is cached that long after a tenant's corpus changes.
    pub lag: Duration,
}

impl StoreConfig {
    /// Reads the section through `get` (the environment, or a map in tests); the embedded
    /// store lives in `data_dir` (`SLUICE_DATA_DIR`, read by the engine's own section).
    pub fn from_lookup(
        get: &impl Fn(&str) -> Option<String>,
        data_dir: &std::path::Path,
    ) -> Result<Self, ConfigError> {
        let backend = match get("SLUICE_STORE").as_deref().map(str::trim) {
            None | Some("edge") => StoreBackend::Edge {
                dir: data_dir.to_path_buf(),
            },
            Some("qdrant") => {
                let url = get("SLUICE_QDRANT_URL")
                    .unwrap_or_else(|| "http://127.0.0.1:6333".into())
                    .trim_end_matches('/')
                    .to_string();
                if !is_http_url(&url) {
                    return Err(ConfigError {
                        name: "SLUICE_QDRANT_URL",
                        value: url,
                        expected: "an http:// or https:// URL of the Qdrant REST API, such as https://xyz.cloud.qdrant.io:6333".into(),
                    });
                }
                StoreBackend::Qdrant(QdrantConfig {
                    url,
                    api_key: get("SLUICE_QDRANT_API_KEY").map(Secret::new),
                    collection: get("SLUICE_QDRANT_COLLECTION").unwrap_or_else(|| "sluice".into()),
                })
            }
            Some("pinecone") => {
                let api_key = get("SLUICE_PINECONE_API_KEY").ok_or_else(|| ConfigError {
                    name: "SLUICE_PINECONE_API_KEY",
                    value: String::new(),
                    expected: "the API key of the Pinecone project (SLUICE_STORE=pinecone)".into(),
                })?;
                let index = get("SLUICE_PINECONE_INDEX").unwrap_or_else(|| "sluice".into());
                if index.is_empty()
                    || index.len() > 40
                    || !index
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    || index.starts_with('-')
                    || index.ends_with('-')
                {
                    return Err(ConfigError {
                        name: "SLUICE_PINECONE_INDEX",
                        value: index,
                        expected: "1-40 lower-case letters, digits or '-', not at either end (Pinecone's rule for index names, leaving room for the -bm25 suffix)".into(),
                    });
                }
                StoreBackend::Pinecone(PineconeConfig {
                    api_key: Secret::new(api_key),
                    host: get("SLUICE_PINECONE_HOST").map(|h| https_url(&h)),
                    sparse_host: get("SLUICE_PINECONE_SPARSE_HOST").map(|h| https_url(&h)),
                    index,
                    cloud: get("SLUICE_PINECONE_CLOUD").unwrap_or_else(|| "aws".into()),
                    region: get("SLUICE_PINECONE_REGION").unwrap_or_else(|| "us-east-1".into()),
                    control_url: https_url(
                        &get("SLUICE_PINECONE_CONTROL_URL")
                            .unwrap_or_else(|| "https://api.pinecone.io".into()),
                    ),
                    lag: millis(&get, "SLUICE_PINECONE_LAG_MS", 10_000, 0)?,
                })
            }
            Some(other) => {
                return Err(ConfigError {
                    name: "SLUICE_STORE",
                    value: other.to_string(),
                    expected: "edge, qdrant or pinecone".into(),
                });
            }
        };
        Ok(StoreConfig {
            backend,
            timeout: millis(get, "SLUICE_STORE_TIMEOUT_MS", 1000, 1)?,
            read_retries: ranged(get, "SLUICE_STORE_READ_RETRIES", 1, 0, 5)?,
            breaker_failures: ranged(get, "SLUICE_BREAKER_FAILURES", 5, 1, 1000)? as u32,
            breaker_cool_down: millis(get, "SLUICE_BREAKER_COOLDOWN_MS", 5000, 1)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<StoreConfig, ConfigError> {
        StoreConfig::from_lookup(
            &sluice_contract::settings::pairs(vars),
            std::path::Path::new(
                (vars.iter())
                    .find(|(n, _)| *n == "SLUICE_DATA_DIR")
                    .map_or("sluice-data", |(_, v)| *v),
            ),
        )
    }

    #[test]
    fn the_store_section_holds_the_chosen_backend_with_its_settings() {
        let c = with(&[("SLUICE_DATA_DIR", "/var/sluice")]).unwrap();
        assert_eq!(
            c.backend,
            StoreBackend::Edge {
                dir: PathBuf::from("/var/sluice")
            }
        );
        let c = with(&[
            ("SLUICE_STORE", "qdrant"),
            ("SLUICE_QDRANT_URL", "https://q.example:6333/"),
            ("SLUICE_QDRANT_API_KEY", "q-secret"),
        ])
        .unwrap();
        let StoreBackend::Qdrant(qdrant) = &c.backend else {
            panic!("not Qdrant: {:?}", c.backend)
        };
        assert_eq!(
            (qdrant.url.as_str(), qdrant.collection.as_str()),
            ("https://q.example:6333", "sluice")
        );
        assert!(!format!("{c:?}").contains("q-secret"));
        let e = with(&[("SLUICE_STORE", "qdrant"), ("SLUICE_QDRANT_URL", "q:6333")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_QDRANT_URL");
        let e = with(&[("SLUICE_STORE", "redis")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_STORE");
    }

    #[test]
    fn pinecone_needs_a_key_and_a_valid_index_name() {
        let e = with(&[("SLUICE_STORE", "pinecone")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_PINECONE_API_KEY");
        let c = with(&[
            ("SLUICE_STORE", "pinecone"),
            ("SLUICE_PINECONE_API_KEY", "pc-secret"),
            ("SLUICE_PINECONE_HOST", "sluice-abc.svc.aped-1.pinecone.io/"),
            ("SLUICE_PINECONE_SPARSE_HOST", "http://127.0.0.1:9/"),
        ])
        .unwrap();
        let StoreBackend::Pinecone(pinecone) = &c.backend else {
            panic!("not Pinecone: {:?}", c.backend)
        };
        assert_eq!(
            pinecone.host.as_deref(),
            Some("https://sluice-abc.svc.aped-1.pinecone.io")
        );
        assert_eq!(pinecone.sparse_host.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(pinecone.control_url, "https://api.pinecone.io");
        assert_eq!(pinecone.api_key.expose(), "pc-secret");
        assert!(!format!("{c:?}").contains("pc-secret"));
        // Another backend's settings are not read (nor checked) while it is not chosen.
        assert!(with(&[("SLUICE_PINECONE_INDEX", "Bad_Name")]).is_ok());
        for bad in ["Sluice", "-x", "a_b"] {
            let e = with(&[
                ("SLUICE_STORE", "pinecone"),
                ("SLUICE_PINECONE_API_KEY", "k"),
                ("SLUICE_PINECONE_INDEX", bad),
            ])
            .unwrap_err();
            assert_eq!(e.name, "SLUICE_PINECONE_INDEX", "{bad}");
        }
    }
}
