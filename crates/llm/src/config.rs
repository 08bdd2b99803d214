//! The LLM client's section of the configuration, read and checked by its owner.

use std::time::Duration;

use sluice_contract::settings::{ConfigError, Secret, is_http_url, millis};

/// The OpenAI-compatible upstream (vLLM in production).
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// `SLUICE_LLM_URL`: base URLs of the OpenAI-compatible API (each ends in `/v1`),
    /// comma-separated; tried in order before the first token (failover).
    pub urls: Vec<String>,
    /// `SLUICE_LLM_MODEL`: model name sent upstream.
    pub model: String,
    /// `SLUICE_LLM_API_KEY`: bearer token for the upstream, if it wants one.
    pub api_key: Option<Secret>,
    /// `SLUICE_LLM_CONNECT_TIMEOUT_MS`.
    pub connect_timeout: Duration,
    /// `SLUICE_LLM_FIRST_TOKEN_TIMEOUT_MS`: from sending the request to the first token.
    pub first_token_timeout: Duration,
    /// `SLUICE_LLM_IDLE_TIMEOUT_MS`: longest silence between two tokens.
    pub idle_timeout: Duration,
}

impl LlmConfig {
    /// Reads the section through `get` (the environment, or a map in tests).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let urls: Vec<String> = get("SLUICE_LLM_URL")
            .unwrap_or_else(|| "http://127.0.0.1:8081/v1".into())
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .collect();
        if let Some(bad) = urls.iter().find(|u| !is_http_url(u)) {
            return Err(ConfigError {
                name: "SLUICE_LLM_URL",
                value: bad.clone(),
                expected: "http:// or https:// URLs of an OpenAI-compatible API, comma-separated, such as http://127.0.0.1:8081/v1".into(),
            });
        }
        Ok(LlmConfig {
            urls,
            model: get("SLUICE_LLM_MODEL").unwrap_or_else(|| "SmolLM2-135M-Instruct".into()),
            api_key: get("SLUICE_LLM_API_KEY").map(Secret::new),
            connect_timeout: millis(get, "SLUICE_LLM_CONNECT_TIMEOUT_MS", 1000, 1)?,
            first_token_timeout: millis(get, "SLUICE_LLM_FIRST_TOKEN_TIMEOUT_MS", 30_000, 1)?,
            idle_timeout: millis(get, "SLUICE_LLM_IDLE_TIMEOUT_MS", 10_000, 1)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<LlmConfig, ConfigError> {
        LlmConfig::from_lookup(&sluice_contract::settings::pairs(vars))
    }

    #[test]
    fn endpoints_default_to_the_local_server_and_lose_their_trailing_slash() {
        assert_eq!(with(&[]).unwrap().urls, ["http://127.0.0.1:8081/v1"]);
        let c = with(&[("SLUICE_LLM_URL", "http://10.0.0.5:8000/v1/")]).unwrap();
        assert_eq!(c.urls, ["http://10.0.0.5:8000/v1"]);
        let two = with(&[(
            "SLUICE_LLM_URL",
            "http://10.0.0.5:8000/v1/, https://llm-b.internal/v1",
        )])
        .unwrap();
        assert_eq!(
            two.urls,
            ["http://10.0.0.5:8000/v1", "https://llm-b.internal/v1"]
        );
    }

    #[test]
    fn every_endpoint_is_checked_an_empty_one_too() {
        let e = with(&[("SLUICE_LLM_URL", "127.0.0.1:8081")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_LLM_URL");
        let e = with(&[("SLUICE_LLM_URL", "http://a/v1,,http://b/v1")]).unwrap_err();
        assert_eq!((e.name, e.value.as_str()), ("SLUICE_LLM_URL", ""));
        let e = with(&[("SLUICE_LLM_IDLE_TIMEOUT_MS", "0")]).unwrap_err();
        assert_eq!(e.name, "SLUICE_LLM_IDLE_TIMEOUT_MS");
    }

    #[test]
    fn the_api_key_is_redacted_in_debug_output() {
        let c = with(&[("SLUICE_LLM_API_KEY", "sk-secret")]).unwrap();
        assert!(!format!("{c:?}").contains("sk-secret"));
        assert_eq!(
            c.api_key.map(|k| k.expose().to_string()).as_deref(),
            Some("sk-secret")
        );
    }
}
