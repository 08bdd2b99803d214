//! A tenant's own settings: what it sets of the deployment's defaults (the environment's
//! values), and its assistant's instructions — one document per tenant, stored beside its keys,
//! versioned, managed through `GET`/`PUT /v1/settings`. A field left out keeps the
//! deployment's default.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Tenant;
use crate::fusion::Fusion;
use crate::grounding::GroundingMode;
use crate::stages::MAX_K;

/// The most bytes of `prompt.instructions`.
pub const MAX_INSTRUCTIONS_BYTES: usize = 4_000;
/// The most bytes of `prompt.no_answer`.
pub const MAX_NO_ANSWER_BYTES: usize = 500;
/// The longest retrieval deadline a request may ask for, or a tenant set.
pub const MAX_DEADLINE_MS: u64 = 60_000;
/// The cache thresholds `SLUICE_CACHE_THRESHOLD` (and its per-tenant entries) and a tenant's
/// settings allow.
pub const THRESHOLDS: std::ops::RangeInclusive<f64> = 0.8..=1.0;

/// A tenant's settings, as `PUT /v1/settings` takes them and `GET` returns them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSettings {
    /// How hybrid search fuses dense and BM25 (`SLUICE_FUSION`'s spelling, e.g.
    /// `rrf:k=60:dense=1:bm25=1` or `convex:dense=0.7`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "fusion_text")]
    pub fusion: Option<Fusion>,
    /// Sources per answer when the request does not say (1 to 50; `SLUICE_TOP_K`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    /// The retrieval deadline when the request does not say, in ms (`SLUICE_RETRIEVAL_DEADLINE_MS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrieval_deadline_ms: Option<u64>,
    /// The cosine a paraphrase needs to be answered from the cache (0.8 to 1.0;
    /// `SLUICE_CACHE_THRESHOLD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_threshold: Option<f64>,
    /// The most tokens an answer generates (at most the deployment's `SLUICE_MAX_TOKENS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// The assistant's instructions and how answers cite.
    #[serde(default, skip_serializing_if = "PromptSettings::is_default")]
    pub prompt: PromptSettings,
    /// The grounding check of its answers: `off`, `annotate` or `strict` (`SLUICE_GROUNDING`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding: Option<GroundingMode>,
    /// Whether `meta` carries the best evidence sentence (`extract`) when the request does
    /// not say (`SLUICE_EXTRACT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<bool>,
    /// Who its end users are: how their tokens are verified and which claims name the
    /// documents they may see ([`crate::access`]). Unset: requests carry no user, and see all
    /// the key lets them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::access::IdentitySettings>,
    /// The evaluation set every change to its answers is tried on before it goes live, and
    /// how much each figure may drop ([`crate::evals::QualityGate`]). Unset: changes go live
    /// untried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_gate: Option<crate::evals::QualityGate>,
    /// How many days the questions behind `GET /v1/insights/gaps` keep their text (0: none is
    /// kept, only counts; default [`DEFAULT_QUESTION_DAYS`], at most [`MAX_QUESTION_DAYS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question_retention_days: Option<u32>,
}

/// How many days a tenant's unanswered questions keep their text unless its settings say.
pub const DEFAULT_QUESTION_DAYS: u32 = 30;
/// The most days a tenant may keep them.
pub const MAX_QUESTION_DAYS: u32 = 365;

/// What the tenant's assistant is told, before Sluice's own rules (sources numbered, answers
/// from the sources), which stay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptSettings {
    /// Who the assistant is and how it speaks: its name, persona, language, tone (at most
    /// [`MAX_INSTRUCTIONS_BYTES`]). Unset: a neutral assistant with no name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// What to say when the sources do not answer (at most [`MAX_NO_ANSWER_BYTES`]). Unset:
    /// that it does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_answer: Option<String>,
    /// How answers cite their sources.
    #[serde(default, skip_serializing_if = "Citations::is_default")]
    pub citations: Citations,
    /// Whether to answer from general knowledge when retrieval found nothing (or was late):
    /// `true` (the default) answers and says no sources were available; `false` gives the
    /// `no_answer` text without asking the model anything more.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub answer_without_sources: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(value: &bool) -> bool {
    *value
}

impl Default for PromptSettings {
    fn default() -> Self {
        Self {
            instructions: None,
            no_answer: None,
            citations: Citations::Numbers,
            answer_without_sources: true,
        }
    }
}

impl PromptSettings {
    fn is_default(&self) -> bool {
        self == &PromptSettings::default()
    }
}

/// How an answer cites its sources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Citations {
    /// Inline `[n]`, the number of the source (the default).
    #[default]
    Numbers,
    /// No markers in the text: the sources are listed in `meta` only.
    None,
}

impl Citations {
    fn is_default(&self) -> bool {
        *self == Citations::Numbers
    }
}

/// A tenant's settings as stored: the document, its version (1 for the first `PUT`, one more
/// for each after) and when it was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSettings {
    /// The settings.
    pub settings: TenantSettings,
    /// Counts the tenant's `PUT`s; answers cached under another version are not replayed.
    pub version: u64,
    /// When the version was written (RFC 3339, UTC).
    pub updated_at: String,
}

/// Now, as RFC 3339 in UTC: a version's `updated_at`.
pub fn now() -> String {
    let now = time::OffsetDateTime::now_utc();
    (now.format(&time::format_description::well_known::Rfc3339)).unwrap_or_default()
}

/// A field of a settings document that is not valid, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSettings {
    /// The field, as JSON names it (`prompt.instructions`).
    pub field: String,
    /// What is wrong with its value, and what is allowed.
    pub message: String,
}

impl InvalidSettings {
    fn new(field: &str, message: impl fmt::Display) -> Self {
        Self {
            field: field.to_string(),
            message: message.to_string(),
        }
    }
}

impl TenantSettings {
    /// Reads a settings document: an unknown field, or a value of the wrong type, is refused
    /// naming the field (`prompt.citations`), then each value is checked ([`Self::validate`]).
    pub fn parse(json: &serde_json::Value, max_tokens: u32) -> Result<Self, InvalidSettings> {
        named(
            "",
            json,
            &[
                "fusion",
                "k",
                "retrieval_deadline_ms",
                "cache_threshold",
                "max_tokens",
                "prompt",
                "grounding",
                "extract",
                "identity",
                "quality_gate",
                "question_retention_days",
            ],
        )?;
        let prompt = json.get("prompt").unwrap_or(&serde_json::Value::Null);
        let fields = [
            "instructions",
            "no_answer",
            "citations",
            "answer_without_sources",
        ];
        if !prompt.is_null() {
            named("prompt.", prompt, &fields)?;
        }
        let settings: TenantSettings = serde_json::from_value(json.clone())
            .map_err(|e| InvalidSettings::new("settings", e))?;
        settings.validate(max_tokens)?;
        Ok(settings)
    }

    /// Checks every value against what the deployment allows (`max_tokens`: its
    /// `SLUICE_MAX_TOKENS`).
    pub fn validate(&self, max_tokens: u32) -> Result<(), InvalidSettings> {
        if let Some(k) = self.k.filter(|k| !(1..=MAX_K).contains(k)) {
            return Err(InvalidSettings::new(
                "k",
                format!("{k} is not from 1 to {MAX_K}"),
            ));
        }
        if let Some(ms) = self
            .retrieval_deadline_ms
            .filter(|ms| *ms > MAX_DEADLINE_MS)
        {
            let why = format!("{ms} is over the limit, {MAX_DEADLINE_MS}");
            return Err(InvalidSettings::new("retrieval_deadline_ms", why));
        }
        if let Some(t) = self.cache_threshold.filter(|t| !THRESHOLDS.contains(t)) {
            let why = format!("{t} is not from 0.8 to 1.0");
            return Err(InvalidSettings::new("cache_threshold", why));
        }
        if let Some(n) = self.max_tokens.filter(|n| !(1..=max_tokens).contains(n)) {
            let why =
                format!("{n} is not from 1 to {max_tokens} (the deployment's SLUICE_MAX_TOKENS)");
            return Err(InvalidSettings::new("max_tokens", why));
        }
        let text = |field: &str, value: &Option<String>, max: usize| match value {
            Some(v) if v.trim().is_empty() => Err(InvalidSettings::new(
                field,
                "is empty; leave it out for the default",
            )),
            Some(v) if v.len() > max => Err(InvalidSettings::new(
                field,
                format!("is {} bytes; the limit is {max}", v.len()),
            )),
            _ => Ok(()),
        };
        text(
            "prompt.instructions",
            &self.prompt.instructions,
            MAX_INSTRUCTIONS_BYTES,
        )?;
        text(
            "prompt.no_answer",
            &self.prompt.no_answer,
            MAX_NO_ANSWER_BYTES,
        )?;
        if let Some(identity) = &self.identity {
            identity
                .validate()
                .map_err(|(field, why)| InvalidSettings::new(&format!("identity.{field}"), why))?;
        }
        if let Some(days) = self
            .question_retention_days
            .filter(|d| *d > MAX_QUESTION_DAYS)
        {
            let why = format!("{days} is over the limit, {MAX_QUESTION_DAYS}");
            return Err(InvalidSettings::new("question_retention_days", why));
        }
        if let Some(gate) = &self.quality_gate {
            (gate.validate()).map_err(|(field, why)| {
                InvalidSettings::new(&format!("quality_gate.{field}"), why)
            })?;
        }
        Ok(())
    }
}

/// Checks that `value` is an object of the `known` fields only, each of them of the type its
/// field takes (read alone, so the error names it: `prefix` + the field).
fn named(prefix: &str, value: &serde_json::Value, known: &[&str]) -> Result<(), InvalidSettings> {
    let object = value.as_object().ok_or_else(|| {
        let what = if prefix.is_empty() {
            "settings"
        } else {
            "prompt"
        };
        InvalidSettings::new(what, "must be a JSON object")
    })?;
    for (name, field) in object {
        let path = format!("{prefix}{name}");
        if !known.contains(&name.as_str()) {
            let why = format!("unknown field; the fields are {}", known.join(", "));
            return Err(InvalidSettings::new(&path, why));
        }
        let alone = serde_json::json!({ name.as_str(): field });
        let read = match prefix {
            "" if name == "prompt" => Ok(()),
            "" => serde_json::from_value::<TenantSettings>(alone).map(|_| ()),
            _ => serde_json::from_value::<PromptSettings>(alone).map(|_| ()),
        };
        read.map_err(|e| InvalidSettings::new(&path, e))?;
    }
    Ok(())
}

/// Where tenants' settings are kept.
#[async_trait::async_trait]
pub trait SettingsStore: Send + Sync {
    /// The tenant's settings; `None` when it has set none.
    async fn get(&self, tenant: &Tenant) -> Result<Option<StoredSettings>, SettingsError>;
    /// Replaces the tenant's settings: the stored version is one more than the last.
    async fn put(
        &self,
        tenant: &Tenant,
        settings: TenantSettings,
    ) -> Result<StoredSettings, SettingsError>;
}

/// A settings store that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file or table failed; the message says which and why.
    #[error("{0}")]
    Unavailable(String),
}

/// `Option<Fusion>` as its text.
mod fusion_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::fusion::Fusion;

    pub fn serialize<S: Serializer>(value: &Option<Fusion>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(f) => s.serialize_str(&f.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Fusion>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_reads_back_as_written_and_leaves_out_what_is_unset() {
        let json = json!({
            "fusion": "convex:dense=0.7",
            "k": 3,
            "cache_threshold": 0.95,
            "prompt": {"instructions": "You are Ada. Answer in French.", "citations": "none",
                       "answer_without_sources": false}
        });
        let settings = TenantSettings::parse(&json, 256).unwrap();
        assert_eq!(settings.k, Some(3));
        assert_eq!(settings.prompt.citations, Citations::None);
        assert!(!settings.prompt.answer_without_sources);
        assert_eq!(serde_json::to_value(&settings).unwrap(), json);
        let empty = TenantSettings::parse(&json!({}), 256).unwrap();
        assert_eq!(empty, TenantSettings::default());
        assert!(empty.prompt.answer_without_sources);
        assert_eq!(serde_json::to_value(&empty).unwrap(), json!({}));
    }

    #[test]
    fn each_bad_field_is_named() {
        let long = "x".repeat(MAX_INSTRUCTIONS_BYTES + 1);
        for (json, field) in [
            (json!({"colour": "blue"}), "colour"),
            (json!({"prompt": {"persona": "x"}}), "prompt.persona"),
            (json!({"prompt": "be nice"}), "prompt"),
            (json!([1]), "settings"),
            (json!({"k": 0}), "k"),
            (json!({"k": 51}), "k"),
            (json!({"k": "five"}), "k"),
            (json!({"fusion": "rrf:k=0"}), "fusion"),
            (
                json!({"retrieval_deadline_ms": 60_001}),
                "retrieval_deadline_ms",
            ),
            (json!({"cache_threshold": 0.5}), "cache_threshold"),
            (json!({"max_tokens": 257}), "max_tokens"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (
                json!({"prompt": {"instructions": long}}),
                "prompt.instructions",
            ),
            (
                json!({"prompt": {"instructions": "  "}}),
                "prompt.instructions",
            ),
            (
                json!({"prompt": {"citations": "footnotes"}}),
                "prompt.citations",
            ),
            (
                json!({"prompt": {"answer_without_sources": "no"}}),
                "prompt.answer_without_sources",
            ),
            (json!({"identity": {"issuer": "i"}}), "identity"),
            (
                json!({"identity": {"issuer": "i", "audience": "a"}}),
                "identity.jwks_url",
            ),
            (
                json!({"identity": {"issuer": "i", "audience": "a",
                                    "jwks_url": "http://idp.example.com/keys"}}),
                "identity.jwks_url",
            ),
            (
                json!({"identity": {"issuer": "i", "audience": "a",
                                    "public_key": "-----BEGIN PUBLIC KEY-----\nx"}}),
                "identity.algorithm",
            ),
            (
                json!({"identity": {"issuer": "i", "audience": "a",
                                    "secret_arn": "arn:aws:secretsmanager:x", "algorithm": "RS256"}}),
                "identity.algorithm",
            ),
            (
                json!({"identity": {"issuer": "i", "audience": "a", "secret_arn": "my secret"}}),
                "identity.secret_arn",
            ),
            (
                json!({"identity": {"issuer": "i", "audience": "a", "secret_arn": "s",
                                    "jwks_url": "https://idp.example.com/keys"}}),
                "identity.jwks_url",
            ),
            (
                json!({"identity": {"issuer": " ", "audience": "a",
                                    "jwks_url": "https://idp.example.com/keys"}}),
                "identity.issuer",
            ),
            (
                json!({"identity": {"issuer": "i", "audience": "a",
                                    "jwks_url": "https://idp.example.com/keys",
                                    "claims": {"dept": "Dept"}}}),
                "identity.claims",
            ),
        ] {
            let e = TenantSettings::parse(&json, 256).expect_err(&json.to_string());
            assert_eq!(e.field, field, "{json}: {e}");
        }
    }
}
