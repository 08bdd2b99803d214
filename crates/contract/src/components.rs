//! A tenant's components as the registry keeps them: versions, their recent calls (costs,
//! failures, log lines) and the storage behind them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Tenant;
use crate::metadata::Metadata;
use crate::stages::{RerankFailure, nearest_rank};

/// Why the tenant's rerank component failed on this request, as `meta.rerank_error` tells a
/// caller that manages the tenant's components: the failure, with the call's context and its
/// candidates (`document-id#chunk`, in the order the component was given them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallFailure {
    /// Its kind and message.
    #[serde(flatten)]
    pub failure: RerankFailure,
    /// The request's `rerank_context`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
    /// The candidates the call was given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
}

/// A failed call remembered for a component version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentFailure {
    /// When, in Unix milliseconds.
    pub at_ms: u64,
    /// The request it failed in (that answer's `meta.request_id`), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// What.
    #[serde(flatten)]
    pub failure: RerankFailure,
    /// Whether the call saw a document with an access list (its message may quote one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restricted: bool,
}

/// A version of a tenant's rerank component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentVersion {
    /// Content hash (SHA-256, hex) of the uploaded bytes: the version.
    pub version: String,
    /// Size of the upload in bytes.
    pub size: usize,
    /// What its uploader called it (`?label=` on the upload), when it was given a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// When it was first uploaded, in Unix milliseconds (`None`: a version stored before
    /// Sluice recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded_ms: Option<u64>,
    /// Whether this version runs for the tenant's requests.
    pub active: bool,
    /// What its recent calls cost, as far as the process answering knows (any version it
    /// has run, before and after a rollback); `None` when it has none on record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<CallCosts>,
    /// Its last failed calls that process saw, newest first (at most
    /// [`ComponentVersion::MAX_FAILURES`]).
    #[serde(default)]
    pub failures: Vec<ComponentFailure>,
}

impl ComponentVersion {
    /// How many failed calls a version remembers.
    pub const MAX_FAILURES: usize = 10;
    /// The longest label, in characters.
    pub const MAX_LABEL_CHARS: usize = 64;

    /// Checks a label: 1 to [`Self::MAX_LABEL_CHARS`] printable characters.
    pub fn check_label(label: &str) -> Result<(), String> {
        let n = label.chars().count();
        if n == 0 || n > Self::MAX_LABEL_CHARS {
            return Err(format!(
                "a label has 1 to {} characters; this one has {n}",
                Self::MAX_LABEL_CHARS
            ));
        }
        if label.chars().any(char::is_control) {
            return Err("a label has no control characters".into());
        }
        Ok(())
    }
}

/// A version as the storage records it: what the upload was, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredVersion {
    /// The version (content hash).
    pub version: String,
    /// Size of the upload in bytes.
    pub size: usize,
    /// When it was first uploaded, in Unix milliseconds (0: not recorded).
    #[serde(default)]
    pub uploaded_ms: u64,
    /// Its label, when the upload named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// How much a `log` line says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn`.
    Warn,
    /// `error`.
    Error,
}

/// A line a component wrote with the host's `log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Its level.
    pub level: LogLevel,
    /// Its text (cut at the call's log budget).
    pub message: String,
}

/// One call of a component version as its log keeps it: a call that wrote a line or failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentCall {
    /// When, in Unix milliseconds.
    pub at_ms: u64,
    /// The request it ran for (that answer's `meta.request_id`), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// What it logged, in order.
    #[serde(default)]
    pub lines: Vec<LogLine>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RerankFailure>,
    /// A failed call's input, for `sluice component replay` (`None` for calls that did not
    /// fail, and for callers that may not read every document the call saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<CallInput>,
    /// Whether the call saw a document with an access list (its lines, failure and input may
    /// quote one): shown whole only to a caller that may read such documents
    /// ([`crate::access::TextAccess::reads_record`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restricted: bool,
}

impl ComponentCall {
    /// How many calls a version's log keeps (newest first).
    pub const MAX_CALLS: usize = 50;

    /// The call as a caller that may not read every document it saw is shown it: when it
    /// happened and how it ended, no line, message or input (any of them can quote the text
    /// of a document outside that caller's filter).
    pub fn redacted(&self) -> Self {
        Self {
            at_ms: self.at_ms,
            request_id: self.request_id.clone(),
            lines: (self.lines.iter())
                .map(|l| LogLine {
                    level: l.level,
                    message: RerankFailure::REDACTED.into(),
                })
                .collect(),
            failure: self.failure.as_ref().map(RerankFailure::redacted),
            input: None,
            restricted: self.restricted,
        }
    }
}

/// What a component was given in a call, as its log keeps a failed one: enough to run the
/// call again (`sluice component replay`). A prompt component's call keeps its question as
/// the query and its sources as the candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallInput {
    /// The query (the retrieval text).
    pub query: String,
    /// The request's `rerank_context`.
    #[serde(default)]
    pub context: BTreeMap<String, String>,
    /// The candidates in the order the component was given them.
    pub candidates: Vec<InputCandidate>,
    /// Whether texts were cut to keep the record within [`CallInput::MAX_TEXT_BYTES`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

impl CallInput {
    /// The most bytes of candidate text a kept input holds: past it, each text is cut to an
    /// equal share (a replay then runs on shorter texts, and says so).
    pub const MAX_TEXT_BYTES: usize = 64 << 10;
}

/// A candidate as a kept input holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputCandidate {
    /// Its document's id.
    pub id: String,
    /// Its document's title.
    #[serde(default)]
    pub title: String,
    /// Its chunk's position in the document.
    #[serde(default)]
    pub chunk: usize,
    /// Its fused score.
    pub score: f32,
    /// Its text (see [`CallInput::cut`]).
    pub text: String,
    /// Its document's metadata.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

/// What a component version's recent calls cost: the median and 99th percentile of the fuel
/// and wall time of the last [`CallCosts::WINDOW`] calls (failed ones included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCosts {
    /// Calls the figures are over.
    pub calls: usize,
    /// Median fuel per call.
    pub fuel_p50: u64,
    /// 99th percentile of fuel per call.
    pub fuel_p99: u64,
    /// Median wall time per call, in microseconds.
    pub wall_us_p50: u64,
    /// 99th percentile of wall time per call, in microseconds.
    pub wall_us_p99: u64,
}

impl CallCosts {
    /// How many recent calls are kept.
    pub const WINDOW: usize = 1024;

    /// The figures of `(fuel, wall µs)` samples; `None` for none.
    pub fn of(samples: impl Iterator<Item = (u64, u64)>) -> Option<Self> {
        let (mut fuel, mut wall): (Vec<u64>, Vec<u64>) = samples.unzip();
        if fuel.is_empty() {
            return None;
        }
        fuel.sort_unstable();
        wall.sort_unstable();
        Some(Self {
            calls: fuel.len(),
            fuel_p50: nearest_rank(&fuel, 0.5),
            fuel_p99: nearest_rank(&fuel, 0.99),
            wall_us_p50: nearest_rank(&wall, 0.5),
            wall_us_p99: nearest_rank(&wall, 0.99),
        })
    }
}

/// Why a component operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentError {
    /// The upload is not an acceptable component; the message says why (400).
    #[error("{0}")]
    Invalid(String),
    /// The upload is over the size limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// The upload's code is too big to compile within the limits (422).
    #[error("{0}")]
    TooComplex(String),
    /// Its request ended (the client left) before the upload was stored: nothing was.
    #[error("the upload's request ended before it was stored; nothing was stored")]
    Abandoned,
    /// No such version for this tenant (404).
    #[error("{0}")]
    NotFound(String),
    /// A prefix that several of the tenant's versions begin with (400).
    #[error("{0}")]
    Ambiguous(String),
    /// The version is the active one: it cannot be deleted (409).
    #[error("{0}")]
    Active(String),
    /// Storage failed (500).
    #[error("component storage: {0}")]
    Storage(String),
}

impl crate::codes::ErrorCode for ComponentError {
    fn code(&self) -> crate::codes::Code {
        use crate::codes::Code;
        match self {
            // An abandoned upload has nobody left to read it.
            ComponentError::Invalid(_) | ComponentError::Abandoned => Code::InvalidComponent,
            ComponentError::TooLarge(_) => Code::BodyTooLarge,
            ComponentError::TooComplex(_) => Code::ComponentTooComplex,
            ComponentError::NotFound(_) => Code::UnknownVersion,
            ComponentError::Ambiguous(_) => Code::AmbiguousVersion,
            ComponentError::Active(_) => Code::VersionActive,
            ComponentError::Storage(_) => Code::StorageFailed,
        }
    }
}

/// Fewest hex digits of a hash that name a version.
pub const MIN_PREFIX: usize = 4;

/// The version `asked` names among a tenant's `versions`, as people name them: its whole hash,
/// a prefix of it that no other version shares (at least [`MIN_PREFIX`] hex digits), or a
/// label — the latest upload that carries it. A prefix two versions begin with is
/// [`ComponentError::Ambiguous`], naming them; nothing, [`ComponentError::NotFound`].
pub fn resolve<'a>(
    versions: &'a [ComponentVersion],
    asked: &str,
) -> Result<&'a ComponentVersion, ComponentError> {
    if let Some(exact) = versions.iter().find(|v| v.version == asked) {
        return Ok(exact);
    }
    let hex = asked.len() >= MIN_PREFIX && asked.bytes().all(|b| b.is_ascii_hexdigit());
    let prefix = asked.to_ascii_lowercase();
    let begin: Vec<&ComponentVersion> = match hex {
        true => (versions.iter())
            .filter(|v| v.version.starts_with(&prefix))
            .collect(),
        false => Vec::new(),
    };
    match begin.as_slice() {
        [one] => return Ok(one),
        [] => {}
        many => {
            let named: Vec<&str> = many
                .iter()
                .map(|v| &v.version[..12.min(v.version.len())])
                .collect();
            return Err(ComponentError::Ambiguous(format!(
                "{asked:?} begins {} versions ({}…); give more of the hash",
                many.len(),
                named.join("…, ")
            )));
        }
    }
    (versions.iter())
        .filter(|v| v.label.as_deref() == Some(asked))
        .max_by_key(|v| v.uploaded_ms.unwrap_or(0))
        .ok_or_else(|| {
            ComponentError::NotFound(format!(
                "no version {asked:?} of this tenant's (name one by its hash, {MIN_PREFIX} or \
                 more of its first hex digits, or its label)"
            ))
        })
}

/// Tenant-scoped registry of rerank components: upload, activate, list, deactivate.
pub trait Components: Send + Sync {
    /// Validates, compiles and stores `bytes` for `tenant`; returns the version (not active
    /// yet). Nothing is stored once `cancel` says the request has ended.
    /// `label` names it (checked by [`ComponentVersion::check_label`]; uploading the same
    /// bytes again keeps the first upload's label and time).
    fn upload(
        &self,
        tenant: &Tenant,
        bytes: &[u8],
        label: Option<&str>,
        cancel: &crate::cancel::Cancel,
    ) -> Result<ComponentVersion, ComponentError>;
    /// Makes `version` the tenant's active component (an older one: a rollback).
    fn activate(&self, tenant: &Tenant, version: &str) -> Result<ComponentVersion, ComponentError>;
    /// The tenant's versions, oldest first.
    fn list(&self, tenant: &Tenant) -> Result<Vec<ComponentVersion>, ComponentError>;
    /// Returns the tenant to the built-in default (versions are kept).
    fn deactivate(&self, tenant: &Tenant) -> Result<(), ComponentError>;
    /// The version's last calls that logged a line or failed, newest first (at most
    /// [`ComponentCall::MAX_CALLS`]), with a failed call's input.
    fn logs(&self, tenant: &Tenant, version: &str) -> Result<Vec<ComponentCall>, ComponentError>;
    /// Deletes an inactive version: its record, its bytes, its artefact and its logs.
    fn delete(&self, tenant: &Tenant, version: &str) -> Result<(), ComponentError>;
}

/// Where the component registry keeps tenants' components: uploads and compiled artefacts
/// (bytes), versions and the active one. Called on blocking threads (the registry's
/// callers run it on tokio's blocking pool), so an implementation may wait on the network.
pub trait ComponentStorage: Send + Sync {
    /// The bytes stored under `key` (`<tenant>/<file>`), `None` when there are none.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ComponentError>;
    /// Stores `bytes` under `key`, replacing what was there; never half-written.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<(), ComponentError>;
    /// Removes what is stored under `key` (nothing there: done).
    fn remove(&self, key: &str) -> Result<(), ComponentError>;
    /// The tenant's uploads, oldest first.
    fn versions(&self, tenant: &Tenant) -> Result<Vec<StoredVersion>, ComponentError>;
    /// Records an upload (already stored with [`put`](Self::put)); again is a no-op (the
    /// first upload's time and label stand).
    fn add_version(&self, tenant: &Tenant, version: &StoredVersion) -> Result<(), ComponentError>;
    /// Forgets an upload's record (no record: done).
    fn remove_version(&self, tenant: &Tenant, version: &str) -> Result<(), ComponentError>;
    /// The tenant's active version, `None` for the built-in default.
    fn active(&self, tenant: &Tenant) -> Result<Option<String>, ComponentError>;
    /// Sets (or with `None` clears) the tenant's active version.
    fn set_active(&self, tenant: &Tenant, version: Option<&str>) -> Result<(), ComponentError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(hash: &str, label: Option<&str>, at: u64) -> ComponentVersion {
        ComponentVersion {
            version: hash.into(),
            size: 1,
            label: label.map(Into::into),
            uploaded_ms: Some(at),
            active: false,
            cost: None,
            failures: Vec::new(),
        }
    }

    #[test]
    fn a_version_is_named_by_its_hash_a_unique_prefix_or_its_latest_label() {
        let versions = [
            version("ab12cd34", Some("dev"), 1),
            version("ab12ef56", Some("dev"), 3),
            version("9f00aa11", Some("v2"), 2),
            version("beef0000", None, 4),
        ];
        let named = |asked: &str| resolve(&versions, asked).map(|v| v.version.clone());
        assert_eq!(named("ab12ef56").unwrap(), "ab12ef56");
        assert_eq!(named("9f00").unwrap(), "9f00aa11");
        assert_eq!(named("9F00A").unwrap(), "9f00aa11", "hex in either case");
        assert_eq!(named("dev").unwrap(), "ab12ef56", "the latest of its label");
        assert_eq!(named("v2").unwrap(), "9f00aa11");
        let both = named("ab12").unwrap_err();
        assert!(matches!(both, ComponentError::Ambiguous(_)), "{both}");
        assert!(both.to_string().contains("ab12cd34") && both.to_string().contains("ab12ef56"));
        // Too short to be a prefix, and no such label.
        for nothing in ["9f0", "beefy", "", "zz"] {
            assert!(
                matches!(named(nothing), Err(ComponentError::NotFound(_))),
                "{nothing}"
            );
        }
    }

    #[test]
    fn call_costs_are_nearest_rank_percentiles() {
        assert_eq!(CallCosts::of(std::iter::empty()), None);
        let costs = CallCosts::of((1..=100).map(|i| (i * 10, 101 - i))).unwrap();
        assert_eq!(
            (
                costs.calls,
                costs.fuel_p50,
                costs.fuel_p99,
                costs.wall_us_p50,
                costs.wall_us_p99
            ),
            (100, 500, 990, 50, 99)
        );
        let one = CallCosts::of([(7, 3)].into_iter()).unwrap();
        assert_eq!((one.fuel_p50, one.fuel_p99, one.wall_us_p99), (7, 7, 3));
    }

    #[test]
    fn a_label_is_short_printable_text() {
        assert!(ComponentVersion::check_label("premium first, v2").is_ok());
        let long = "x".repeat(ComponentVersion::MAX_LABEL_CHARS + 1);
        for bad in ["", long.as_str(), "two\nlines"] {
            assert!(ComponentVersion::check_label(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_redacted_call_keeps_when_and_how_but_no_text() {
        let call = ComponentCall {
            at_ms: 5,
            request_id: Some("r".into()),
            lines: vec![LogLine {
                level: LogLevel::Warn,
                message: "secret".into(),
            }],
            failure: Some(RerankFailure::new(
                crate::stages::FailureKind::Panic,
                "secret",
            )),
            input: Some(CallInput {
                query: "secret".into(),
                context: BTreeMap::new(),
                candidates: vec![],
                cut: false,
            }),
            restricted: true,
        };
        let shown = serde_json::to_string(&call.redacted()).unwrap();
        assert!(!shown.contains("secret"), "{shown}");
        for kept in [
            "\"at_ms\":5",
            "\"request_id\":\"r\"",
            "\"warn\"",
            "\"panic\"",
        ] {
            assert!(shown.contains(kept), "{kept} in {shown}");
        }
    }
}
