//! The answer cache's storage: what an entry holds and what a backend does with entries (an
//! in-process map for `sluice serve`, a DynamoDB table on Lambda). Which entry may answer a
//! question — the matching rules, the guard, the scope — is `sluice-core`'s.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::Tenant;
use crate::error::CacheError;
use crate::stages::{Hit, SourceDoc};

/// Locality-sensitive hashing bands: an entry's vector falls in one bucket per band
/// ([`CacheEntry::buckets`]), and a backend finds candidates by any band's bucket (the
/// DynamoDB table has one index per band).
pub const BANDS: usize = 10;

/// The answer as it was streamed, replayed token by token on a hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAnswer {
    /// The token events' texts, in order.
    pub tokens: Vec<String>,
    /// The sources shown in `meta`.
    pub sources: Vec<SourceDoc>,
    /// As in the original `done`.
    pub finish_reason: String,
    /// As in the original `done`.
    pub token_count: u64,
    /// As in the original `done`.
    pub token_count_source: String,
    /// As in the original `meta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<crate::grounding::Extract>,
    /// As in the original `done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding: Option<crate::grounding::Grounding>,
    /// What each of `sources` was when the answer was made, in the same order: once the
    /// tenant's corpus has changed, the answer serves a question only if retrieval for it
    /// returns exactly these. Empty in an entry made before Sluice recorded them (which then
    /// serves only under the corpus version it was made under).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cited: Vec<Cited>,
}

impl CachedAnswer {
    /// An answer of one token, `text`, finished with `stop` and built from no source: what
    /// tests and measurements store when only the question it answers matters.
    pub fn one_token(text: impl Into<String>) -> Self {
        Self {
            tokens: vec![text.into()],
            sources: Vec::new(),
            finish_reason: "stop".into(),
            token_count: 1,
            token_count_source: "usage".into(),
            extract: None,
            grounding: None,
            cited: Vec::new(),
        }
    }

    /// The answer's identity: hex SHA-256 of its text (its tokens, joined). Every entry that
    /// holds this answer — under the question that made it, and the copies made for other
    /// keys or end users — has the same.
    pub fn digest(&self) -> String {
        crate::sha256_hex(self.tokens.concat().as_bytes())
    }

    /// Whether the sources a request's retrieval gave now are the ones this answer was built
    /// from: the same chunks, with the same content, in the same order.
    pub fn built_from(&self, now: &[Cited]) -> bool {
        self.cited.len() == self.sources.len() && self.cited == now
    }
}

/// One source of a cached answer as it was in the prompt: its document and chunk, and a
/// digest of everything of it the prompt quoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cited {
    /// The document's id.
    pub id: String,
    /// The chunk's position in it.
    pub chunk: usize,
    /// Hex SHA-256 of the chunk's text, section and pages and of its document's title,
    /// source and metadata: an edit of any of them is another source.
    pub digest: String,
}

impl Cited {
    /// `hit` as an answer built from it records it.
    pub fn of(hit: &Hit) -> Self {
        let quoted = serde_json::json!([
            hit.text,
            hit.place,
            hit.document.title,
            hit.document.source,
            hit.document.metadata,
        ]);
        Self {
            id: hit.document.id.clone(),
            chunk: hit.chunk,
            digest: crate::sha256_hex(quoted.to_string().as_bytes()),
        }
    }
}

/// What an entry was made under; it answers a request only when all of it is the same — but
/// for the corpus version and the end user's access: an answer made under an earlier corpus
/// version, or for an end user who may see other documents, answers only if this request's
/// retrieval returns exactly the sources it was built from ([`CachedAnswer::built_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The tenant's corpus version when the answer was made (ingest bumps it).
    pub corpus_version: u64,
    /// The LLM that wrote the answer.
    pub llm_model: String,
    /// The model of the stored query vector (vectors of two models do not compare).
    pub embed_model: String,
    /// [`crate::prompt::PROMPT_VERSION`] when the answer was made.
    pub prompt_version: u32,
    /// Sources asked for.
    pub k: usize,
    /// The tenant's active rerank component (`None`: the built-in fused order).
    pub rerank: Option<String>,
    /// Digest of what else shaped the answer — the effective metadata filter, the
    /// conversation, a smaller `max_tokens` ([`crate::pipeline::AnswerRequest::variant`]);
    /// `None` for none: an answer built from one filter's documents, or for one conversation,
    /// never answers another.
    pub variant: Option<String>,
    /// Digest of the filter of the key the answer was made for
    /// ([`crate::pipeline::AnswerRequest::binding`]; `None`: a key bound to none). It also
    /// keeps one key's answers from another's, and lets a bound key forget its own.
    pub binding: Option<String>,
    /// Digest of the end user's access filter ([`crate::access::access_filter`]; `None`: no
    /// end user). Answers are keyed by it, so each set of principals finds its own at once;
    /// one made for another set answers only through its sources, which this request's
    /// retrieval, under this user's access, must return — so users who share groups share
    /// answers, and nothing one may not see reaches the other.
    pub access: Option<String>,
}

impl Scope {
    /// Whether `other` is the same scope but perhaps for the corpus version and the end
    /// user's access (what the sources decide).
    pub fn same_but_version_and_access(&self, other: &Scope) -> bool {
        // Every field named, so that a new one cannot be left out of the comparison.
        let Scope {
            corpus_version: _,
            llm_model,
            embed_model,
            prompt_version,
            k,
            rerank,
            variant,
            binding,
            access: _,
        } = self;
        *llm_model == other.llm_model
            && *embed_model == other.embed_model
            && *prompt_version == other.prompt_version
            && *k == other.k
            && *rerank == other.rerank
            && *variant == other.variant
            && *binding == other.binding
    }
}

/// One cached answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheEntry {
    /// Owner; backends make it the leading part of every key.
    pub tenant: Tenant,
    /// Hex SHA-256 of `query`: the exact key.
    pub key: String,
    /// The normalised question (the guard reads it).
    pub query: String,
    /// The question's embedding (backends may store it at lower precision).
    pub vector: Vec<f32>,
    /// Its LSH bucket in each band.
    pub buckets: Vec<u32>,
    /// What the answer was made under.
    pub scope: Scope,
    /// Unix seconds after which the entry is ignored (DynamoDB's `ttl` attribute).
    pub expires_at: u64,
    /// The answer.
    pub answer: CachedAnswer,
}

/// Where entries live. Implementations store and find; the matching rules are in
/// [`SemanticCache`].
#[async_trait]
pub trait CacheStore: Send + Sync {
    /// Short name for logs and `doctor`: `memory`, `dynamodb`.
    fn backend(&self) -> &'static str;
    /// Whether a read costs no network round trip. The pipeline then reads the exact key
    /// before embedding the query (a hit skips the embedding); otherwise it reads the exact
    /// key and the buckets in one parallel round after the embedding.
    fn in_process(&self) -> bool;
    /// The tenant's entry under the exact `key`.
    async fn get(&self, tenant: &Tenant, key: &str) -> Result<Option<CacheEntry>, CacheError>;
    /// The tenant's entries that share a bucket with `buckets` in any band (band `i` is
    /// `buckets[i]`), read in one parallel round.
    async fn candidates(
        &self,
        tenant: &Tenant,
        buckets: &[u32],
    ) -> Result<Vec<CacheEntry>, CacheError>;
    /// Stores `entry`, replacing the tenant's entry with the same key.
    async fn put(&self, entry: &CacheEntry) -> Result<(), CacheError>;
    /// Deletes the entries of `tenant` — those made for keys bound to `binding`
    /// ([`Scope::binding`]) when it is given, else every one; returns how many there were.
    async fn clear(&self, tenant: &Tenant, binding: Option<&str>) -> Result<usize, CacheError>;
    /// Deletes the entries of `tenant` that hold the answer whose [`CachedAnswer::digest`] is
    /// `answer`, whatever their key; returns how many there were.
    async fn forget(&self, tenant: &Tenant, answer: &str) -> Result<usize, CacheError>;
}
