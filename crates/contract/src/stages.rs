//! The traits each pipeline stage's adapter implements, and the values that pass between them.

use crate::Tenant;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::error::{EmbedError, LlmError, StoreError};
use crate::filter::Filter;
use crate::fusion::Fusion;
use crate::metadata::Metadata;

/// Largest `k` a request may ask for (and fewest candidates a rerank component is given).
pub const MAX_K: usize = 50;

/// More bytes per counted token than any text gives (WordPiece's pieces of long words give
/// about 10; a run too long for it is counted a token per byte): `bytes / MAX_BYTES_PER_TOKEN`
/// is a floor of a text's count, known without counting. Text whose floor is over a budget is
/// refused uncounted, so counting costs at most the budget's worth of bytes.
pub const MAX_BYTES_PER_TOKEN: usize = 16;

/// Turns text into unit-length vectors, in-process (loaded once at start).
///
/// Calls are CPU-bound and synchronous; the pipeline runs them on the blocking pool.
pub trait Embedder: Send + Sync {
    /// Identifier of the model, reported in `meta` and `done`.
    fn model_id(&self) -> &str;
    /// Dimension of the vectors.
    fn dim(&self) -> usize;
    /// Embeds each text (mean pooling over tokens, L2-normalised).
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Number of model tokens in `text` (without special tokens). Used by the chunker and,
    /// as an estimate of LLM tokens, by the prompt budget. Never fewer than
    /// `text.len() / MAX_BYTES_PER_TOKEN`.
    fn count_tokens(&self, text: &str) -> usize;
}

/// One chunk of a document, ready to be stored.
#[derive(Debug, Clone)]
pub struct StoredChunk {
    /// Position of the chunk in its document, from 0.
    pub index: usize,
    /// The chunk's text.
    pub text: String,
    /// Its length in embedding-model tokens, counted once here so that prompt assembly
    /// does not tokenise retrieved text again.
    pub tokens: usize,
    /// Its dense embedding.
    pub vector: Vec<f32>,
    /// Where in its document it lies.
    pub place: Place,
    /// What retrieval reads before the text (the dense vector was embedded from both, and
    /// BM25 indexes both): the document's title and the chunk's section path, so that a
    /// chunk that never names its subject is still found by it. Empty: the text alone.
    /// Never part of the text a prompt quotes.
    pub header: String,
}

impl StoredChunk {
    /// The text retrieval indexes: [`header`](Self::header), then the text.
    pub fn indexed_text(&self) -> std::borrow::Cow<'_, str> {
        indexed_text(&self.header, &self.text)
    }
}

/// `header`, a blank line, then `text`; `text` alone when `header` is empty. What the embedder
/// and BM25 read of a chunk ([`StoredChunk::indexed_text`]).
pub fn indexed_text<'a>(header: &str, text: &'a str) -> std::borrow::Cow<'a, str> {
    if header.is_empty() {
        std::borrow::Cow::Borrowed(text)
    } else {
        std::borrow::Cow::Owned(format!("{header}\n\n{text}"))
    }
}

/// Where in its document a chunk lies, for citations that point into it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    /// The headings above it, outermost first, joined by ` › ` (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub section: String,
    /// The first and the last page it is on, from 1 (documents with pages: PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<[u32; 2]>,
}

/// What the store keeps about a document besides its chunks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentInfo {
    /// Document id, unique within a tenant; re-ingesting it replaces its chunks.
    pub id: String,
    /// Human-readable title.
    pub title: String,
    /// Where it came from (file path, URL, or whatever the client sent).
    pub source: String,
    /// What the document says about itself; every chunk carries it, filters read it.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
    /// The upload it was read from (an S3 object's key, `<tenant>/<name>`), when it came
    /// from one: deleting that object deletes the documents it made. Listings show it;
    /// retrieved hits leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The format it was converted from (`pdf`, `html`, `docx`, `markdown`, `text`), when
    /// it came from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Digest of what was ingested and how it was cut and embedded (the ingest's): a document
    /// sent again with the same digest is left as it is. Listings show it; retrieved hits
    /// may leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// A document as a listing shows it: what the store keeps about it and its chunks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDocument {
    /// Id, title, source, metadata and origin.
    #[serde(flatten)]
    pub document: DocumentInfo,
    /// How many chunks it was cut into (`None` for a document stored before Sluice recorded
    /// it: ingest it again to fill it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<usize>,
    /// When it was last written (RFC 3339, UTC; `None` as for `chunks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingested_at: Option<String>,
}

/// Which of a tenant's documents a listing or a deletion is about: those that pass every
/// part that is set.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selection<'a> {
    /// Only these ids (`Some(&[])` selects nothing).
    pub ids: Option<&'a [String]>,
    /// Only the documents read from this upload ([`DocumentInfo::origin`]).
    pub origin: Option<&'a str>,
    /// Only documents whose metadata passes it.
    pub filter: Option<&'a Filter>,
}

impl Selection<'_> {
    /// Whether `document` is picked: the meaning every store implements.
    pub fn matches(&self, document: &DocumentInfo) -> bool {
        self.ids.is_none_or(|ids| ids.contains(&document.id))
            && self
                .origin
                .is_none_or(|o| document.origin.as_deref() == Some(o))
            && self.filter.is_none_or(|f| f.matches(&document.metadata))
    }
}

/// One page of a listing: at most `limit` documents, from where `cursor` (a previous page's
/// [`DocumentPage::next`]) left off.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// Most documents on the page.
    pub limit: usize,
    /// Where the previous page ended; `None` for the first page.
    pub cursor: Option<&'a str>,
}

/// A page of documents, in the store's order (stable from page to page).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DocumentPage {
    /// The documents.
    pub documents: Vec<StoredDocument>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

/// One retrieved chunk with its fused score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The document the chunk belongs to.
    pub document: DocumentInfo,
    /// Chunk position in the document.
    pub chunk: usize,
    /// The chunk text.
    pub text: String,
    /// Its length in embedding-model tokens, as stored at ingest.
    pub tokens: usize,
    /// Its dense embedding, when the store returns it (lent to rerank components so that
    /// `host.embed` of a candidate's text needs no model run).
    pub vector: Vec<f32>,
    /// Fused score (see [`crate::fusion`]): higher is better.
    pub score: f32,
    /// Where in its document the chunk lies.
    pub place: Place,
}

impl Hit {
    /// The order of a retrieved list: higher score first, equal scores by document id and
    /// then chunk, so equal scores never come back in a store's arbitrary order.
    pub fn rank_order(a: &Hit, b: &Hit) -> std::cmp::Ordering {
        (b.score.total_cmp(&a.score))
            .then_with(|| a.document.id.cmp(&b.document.id))
            .then_with(|| a.chunk.cmp(&b.chunk))
    }

    /// What fusion knows a chunk by: its document and position, in an order that ranks equal
    /// scores by document id (a store's own record ids would rank them at random).
    pub fn fusion_key(document: &str, chunk: usize) -> String {
        format!("{document}\u{1f}{chunk}")
    }

    /// Two rankings of hits (each with its retriever's score) fused by `fusion`: the best
    /// `limit`, each with its fused score. A chunk is known by its document and position.
    pub fn fuse(fusion: &Fusion, dense: Vec<Hit>, bm25: Vec<Hit>, limit: usize) -> Vec<Hit> {
        let ranking = |hits: Vec<Hit>| -> crate::fusion::Ranking<Hit> {
            (hits.into_iter())
                .map(|h| (Hit::fusion_key(&h.document.id, h.chunk), h.score, h))
                .collect()
        };
        (fusion
            .fuse(ranking(dense), ranking(bm25), limit)
            .into_iter())
        .map(|(score, hit)| Hit { score, ..hit })
        .collect()
    }
}

/// What a search asks the store for.
#[derive(Debug, Clone, Copy)]
pub struct Search<'a> {
    /// The query's text, for BM25.
    pub query: &'a str,
    /// The query's embedding, for the dense half.
    pub vector: &'a [f32],
    /// How many chunks come back.
    pub k: usize,
    /// Only chunks of documents whose metadata passes it; `None` for all of the tenant's.
    pub filter: Option<&'a Filter>,
    /// How the two rankings are fused (the tenant's setting).
    pub fusion: Fusion,
}

impl<'a> Search<'a> {
    /// The `k` best chunks for `query` and `vector`, unfiltered, by the default fusion.
    pub fn new(query: &'a str, vector: &'a [f32], k: usize) -> Self {
        Self {
            query,
            vector,
            k,
            filter: None,
            fusion: Fusion::default(),
        }
    }

    /// Only chunks of documents that pass `filter` (none: all).
    pub fn filter(self, filter: Option<&'a Filter>) -> Self {
        Self { filter, ..self }
    }

    /// Fused by `fusion`.
    pub fn fusion(self, fusion: Fusion) -> Self {
        Self { fusion, ..self }
    }
}

/// A vector store holding every tenant's chunks: hybrid (dense + BM25) search, filtered by
/// tenant, and per-document replacement.
#[async_trait]
pub trait Store: Send + Sync {
    /// The `search.k` best chunks of `tenant`, by its text (BM25) and vector (dense), fused
    /// by `search.fusion`, best first. With a filter, only chunks of documents whose metadata
    /// passes it, applied inside the store's query (both halves of the hybrid search), so
    /// that `k` of them come back whenever `k` exist.
    async fn search(&self, tenant: &Tenant, search: &Search<'_>) -> Result<Vec<Hit>, StoreError>;
    /// Replaces every chunk of `document` for `tenant` with `chunks`, recording their number
    /// and the time with the document ([`StoredDocument`]).
    async fn replace_document(
        &self,
        tenant: &Tenant,
        document: &DocumentInfo,
        chunks: Vec<StoredChunk>,
    ) -> Result<(), StoreError>;
    /// A page of the tenant's documents that `selection` picks. A cursor this store did not
    /// hand out is [`StoreError::Invalid`].
    async fn documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
        page: Page<'_>,
    ) -> Result<DocumentPage, StoreError>;
    /// Removes every chunk of the tenant's documents that `selection` picks (the caller
    /// bumps the corpus version).
    async fn delete_documents(
        &self,
        tenant: &Tenant,
        selection: &Selection<'_>,
    ) -> Result<(), StoreError>;
    /// Raises the tenant's corpus version above every one before and returns it (every ingest
    /// calls this once): by one on an in-process store; to the time in milliseconds (at least
    /// one more) on a remote one, so that a version is never handed out twice even when a
    /// memo of the last one was lost.
    async fn bump_corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError>;
    /// The tenant's current corpus version (0 before the first ingest).
    async fn corpus_version(&self, tenant: &Tenant) -> Result<u64, StoreError>;
    /// Number of chunks stored for `tenant`.
    async fn count(&self, tenant: &Tenant) -> Result<usize, StoreError>;
    /// How long a write (an ingest, a deletion) may take to show in this store's reads: zero
    /// for a store that reads its own writes (Qdrant, Qdrant Edge); Pinecone's serverless
    /// indexes are eventually consistent. Answers are not cached that long after a tenant's
    /// corpus version changes, so none is cached from documents already deleted.
    fn lag(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// How long other processes may go on using a tenant's corpus version after it changed:
    /// a remote store's processes remember a version for a second rather than read it on
    /// every request (which would put a store round trip before every in-process cache hit).
    /// A write that removed documents returns only after this long, so that once it has
    /// answered no process serves a cached answer made before it. Zero for a store no other
    /// process shares (Qdrant Edge).
    fn version_memo(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// A tenant's active rerank component, resolved for one request: what the pipeline runs,
/// and the version its cached answers remember.
pub trait ActiveComponent: Send + Sync {
    /// The version (content hash): a new one makes cached answers stale.
    fn version(&self) -> &str;
    /// The new order of the input's hits (indices, best first; a hit the component dropped
    /// is left out), and what the call cost. An `Err` order says why the component failed;
    /// the pipeline then keeps the fused order. CPU-bound and synchronous: the pipeline runs
    /// it on the blocking pool, inside the retrieval deadline.
    fn rerank(&self, input: &RerankInput<'_>) -> RerankCall;
}

/// What a rerank component is given.
#[derive(Debug, Clone, Copy)]
pub struct RerankInput<'a> {
    /// What retrieval read (the pipeline's `AnswerRequest::retrieval_text`).
    pub query: &'a str,
    /// The query's embedding, lent to the component with the hits' vectors (empty: none).
    pub query_vector: &'a [f32],
    /// The candidates, best fused score first.
    pub hits: &'a [Hit],
    /// What the caller sent as `rerank_context`.
    pub context: &'a RerankContext,
    /// The request's id (its `meta.request_id`; empty: none), kept with the call's log.
    pub request_id: &'a str,
}

/// What one rerank call gave, and what it cost (a failed call burns fuel too: it is billed).
#[derive(Debug, Clone, PartialEq)]
pub struct RerankCall {
    /// The new order, best first, without the hits the component dropped: each kept
    /// candidate's index with the score the component gave it; or why the component failed.
    pub order: Result<Vec<(usize, f32)>, RerankFailure>,
    /// Fuel consumed (about one per WebAssembly instruction).
    pub fuel: u64,
    /// Wall time of the call inside the sandbox (instantiation, the component's work and
    /// its host calls).
    pub wall: std::time::Duration,
}

/// Tokens counted for each message of a prompt beside its text: the chat template's role
/// markers. The built-in assembly and the check of a prompt component's messages count alike.
pub const MESSAGE_OVERHEAD_TOKENS: usize = 8;

/// A tenant's active prompt-assembly component, resolved for one request.
pub trait ActivePrompt: Send + Sync {
    /// The version (content hash): a new one makes cached answers stale.
    fn version(&self) -> &str;
    /// The messages the component assembles for `input`, checked (roles, the user's last,
    /// the bytes and the token budget), and what the call cost. An `Err` says why it failed;
    /// the pipeline then sends the built-in messages. CPU-bound and synchronous: the pipeline
    /// runs it on the blocking pool, inside the retrieval deadline.
    fn assemble(&self, input: &PromptInput<'_>) -> PromptCall;
}

/// What a prompt component is given: everything the built-in assembly used, and its result.
#[derive(Debug, Clone, Copy)]
pub struct PromptInput<'a> {
    /// The question.
    pub question: &'a str,
    /// The sources the built-in prompt kept, in citation order (`[1]` first).
    pub sources: &'a [Hit],
    /// What the caller sent as `rerank_context` (the request's context for components).
    pub context: &'a RerankContext,
    /// The tenant's prompt settings.
    pub settings: &'a crate::tenant_settings::PromptSettings,
    /// The most tokens the messages may take, [`MESSAGE_OVERHEAD_TOKENS`] per message included.
    pub budget: usize,
    /// The built-in messages for the same input: the system message, the conversation's kept
    /// turns, the user's message with the sources and the question.
    pub built_in: &'a [ChatMessage],
    /// The request's id (its `meta.request_id`; empty: none), kept with the call's log.
    pub request_id: &'a str,
}

/// A prompt component's messages, checked, with their tokens as the check counted them
/// against the budget ([`MESSAGE_OVERHEAD_TOKENS`] a message included): what the prompt
/// is charged, with no second count.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// The messages to send.
    pub messages: Vec<ChatMessage>,
    /// Their tokens.
    pub tokens: usize,
}

/// What one prompt-assembly call gave, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptCall {
    /// The messages to send, or why the component failed.
    pub assembled: Result<Assembled, RerankFailure>,
    /// Fuel consumed.
    pub fuel: u64,
    /// Wall time of the call inside the sandbox.
    pub wall: std::time::Duration,
}

/// Most entries of a request's `rerank_context`.
pub const MAX_CONTEXT_ENTRIES: usize = 16;
/// Longest `rerank_context` value, in characters.
pub const MAX_CONTEXT_VALUE_CHARS: usize = 256;
/// Most bytes of a whole `rerank_context` (keys and values).
pub const MAX_CONTEXT_BYTES: usize = 2048;

/// The request context a caller sends for the tenant's rerank component (`rerank_context`:
/// `{"plan": "pro", "locale": "de-DE"}`): string keys (as metadata keys: ASCII letters,
/// digits and `_`) to string values, validated and capped, sorted by key. The component reads
/// it; Sluice gives it no meaning of its own. It shapes the answer, so cached answers are
/// keyed by it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RerankContext(std::collections::BTreeMap<String, String>);

impl RerankContext {
    /// Validates a JSON object of strings; the error names the entry and what is wrong.
    pub fn parse(value: &serde_json::Value) -> Result<Self, String> {
        let object = value
            .as_object()
            .ok_or("must be an object of string values")?;
        if object.len() > MAX_CONTEXT_ENTRIES {
            return Err(format!(
                "{} entries; at most {MAX_CONTEXT_ENTRIES} are allowed",
                object.len()
            ));
        }
        let mut entries = std::collections::BTreeMap::new();
        let mut bytes = 0;
        for (key, value) in object {
            crate::metadata::check_key(key)?;
            let value = value
                .as_str()
                .ok_or_else(|| format!("{key:?}: the value must be a string"))?;
            if value.chars().count() > MAX_CONTEXT_VALUE_CHARS {
                return Err(format!(
                    "{key:?}: a value longer than {MAX_CONTEXT_VALUE_CHARS} characters"
                ));
            }
            bytes += key.len() + value.len();
            entries.insert(key.clone(), value.to_string());
        }
        if bytes > MAX_CONTEXT_BYTES {
            return Err(format!(
                "{bytes} bytes of keys and values; at most {MAX_CONTEXT_BYTES} are allowed"
            ));
        }
        Ok(Self(entries))
    }

    /// Whether the caller sent none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The entries as a map (what a component's records keep).
    pub fn to_map(&self) -> std::collections::BTreeMap<String, String> {
        self.0.clone()
    }
}

/// Finds each tenant's active components: rerank and prompt assembly.
#[async_trait]
pub trait Reranker: Send + Sync {
    /// The tenant's active component, `None` for the built-in default (fused order).
    ///
    /// Answers from memory while what the process knows of the tenant is fresh. Once it is
    /// due to be checked again, the check (and the fetch and compile of a changed version)
    /// runs in the background and is waited for until `by` at most: past that, the version
    /// known so far serves. Only a tenant this process has not seen yet has nothing to fall
    /// back on: the caller bounds that wait (the pipeline, by its deadline), and the load
    /// goes on in the background so that a later request finds it.
    async fn active(
        &self,
        tenant: &Tenant,
        by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActiveComponent>>, String>;

    /// The tenant's active prompt-assembly component, `None` for the built-in assembly; read
    /// as [`Reranker::active`] reads the rerank component. A deployment without prompt
    /// components has none.
    async fn active_prompt(
        &self,
        tenant: &Tenant,
        by: tokio::time::Instant,
    ) -> Result<Option<Arc<dyn ActivePrompt>>, String> {
        let _ = (tenant, by);
        Ok(None)
    }

    /// The tenant's stored rerank component `version`, active or not: what an evaluation
    /// tries before it goes live. A deployment that keeps no versions has none.
    async fn version(
        &self,
        tenant: &Tenant,
        version: &str,
    ) -> Result<Arc<dyn ActiveComponent>, String> {
        let _ = tenant;
        Err(format!(
            "this deployment keeps no component version {version:?}"
        ))
    }

    /// The tenant's stored prompt component `version`, as [`Reranker::version`].
    async fn prompt_version(
        &self,
        tenant: &Tenant,
        version: &str,
    ) -> Result<Arc<dyn ActivePrompt>, String> {
        let _ = tenant;
        Err(format!(
            "this deployment keeps no component version {version:?}"
        ))
    }
}

/// Checks what a rerank component returned — `(index, score)` for each candidate it keeps
/// and the indices of those it `dropped`, out of `n` — and turns it into an order of the kept
/// ones with their scores, best first, stable on ties. Every index in range and in exactly one of the two
/// lists, every score finite; otherwise the message says what is wrong (the pipeline then
/// keeps the fused order). Component output is untrusted input: this is fuzzed (`fuzz/`).
pub fn rerank_order(
    scored: &[(u32, f32)],
    dropped: &[u32],
    n: usize,
) -> Result<Vec<(usize, f32)>, String> {
    // Checked first, so that a huge output is refused before anything is allocated for it.
    if scored.len() + dropped.len() != n {
        return Err(match dropped.len() {
            0 => format!("{} scores for {n} candidates", scored.len()),
            d => format!("{} scores and {d} dropped for {n} candidates", scored.len()),
        });
    }
    let mut scores = vec![None; n];
    let mut gone = vec![false; n];
    for &(index, score) in scored {
        let i = index as usize;
        if i >= n {
            return Err(format!("index {i} out of range for {n} candidates"));
        }
        if !score.is_finite() {
            return Err(format!("score {score} for index {i} is not finite"));
        }
        if scores[i].replace(score).is_some() {
            return Err(format!("index {i} scored twice"));
        }
    }
    for &index in dropped {
        let i = index as usize;
        if i >= n {
            return Err(format!("dropped index {i} out of range for {n} candidates"));
        }
        if scores[i].is_some() {
            return Err(format!("index {i} both scored and dropped"));
        }
        if std::mem::replace(&mut gone[i], true) {
            return Err(format!("index {i} dropped twice"));
        }
    }
    // n entries, none twice, all in range: every kept slot is filled.
    let score = |i: usize| scores[i].unwrap_or(f32::MIN);
    let mut order: Vec<usize> = (0..n).filter(|&i| !gone[i]).collect();
    order.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
    Ok(order.into_iter().map(|i| (i, score(i))).collect())
}

/// What kind of failure ended a call of a tenant's component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The component trapped (`unreachable`, a bad memory access, a panic the SDK did not
    /// report).
    Trap,
    /// It panicked: the message is the panic's own, with its location in the source, as the
    /// SDK's panic hook reported it before the trap.
    Panic,
    /// It ran out of fuel.
    Fuel,
    /// Its deadline (CPU time) passed (or the request's retrieval deadline, while it ran).
    Deadline,
    /// It tried to grow its memory past the limit.
    Memory,
    /// It returned a list that does not score or drop each candidate exactly once.
    InvalidOutput,
    /// It returned an error of its own (the message is its string).
    ComponentError,
    /// The call's input was over the limits (too many candidates).
    Input,
    /// Its host calls went past the call's host budget.
    HostBudget,
}

impl FailureKind {
    /// The name the API spells.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Trap => "trap",
            FailureKind::Panic => "panic",
            FailureKind::Fuel => "fuel",
            FailureKind::Deadline => "deadline",
            FailureKind::Memory => "memory",
            FailureKind::InvalidOutput => "invalid_output",
            FailureKind::ComponentError => "component_error",
            FailureKind::Input => "input",
            FailureKind::HostBudget => "host_budget",
        }
    }
}

/// Why a call of a tenant's component failed: what the tenant is shown (in `meta` and in the
/// component listing), as well as the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RerankFailure {
    /// The kind.
    pub kind: FailureKind,
    /// What happened, at most [`RerankFailure::MAX_CHARS`] characters (the component's own
    /// error string for `component_error`).
    pub message: String,
}

impl RerankFailure {
    /// The longest message kept: a component's error string is its author's to choose, and a
    /// panic's message with its location (a path, a line, a column) must fit.
    pub const MAX_CHARS: usize = 1024;

    /// A failure of `kind`, its message cut to [`Self::MAX_CHARS`] characters.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        let message: String = message.into();
        let message = match message.char_indices().nth(Self::MAX_CHARS) {
            Some((cut, _)) => format!("{}…", &message[..cut]),
            None => message,
        };
        Self { kind, message }
    }

    /// The failure as a caller that may not read every document the failing call saw is
    /// shown it: its kind, and no message (a component's message can quote any candidate's
    /// text, and the call may have been another key's, over documents outside this caller's
    /// filter).
    pub fn redacted(&self) -> Self {
        Self {
            kind: self.kind,
            message: Self::REDACTED.into(),
        }
    }

    /// The message of a [`redacted`](Self::redacted) failure.
    pub const REDACTED: &'static str =
        "hidden from keys bound to a filter: the failing call may have seen documents outside it";
}

impl std::fmt::Display for RerankFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

/// The nearest-rank percentile of `sorted` (ascending, not empty): the smallest sample with
/// at least `share` of them at or below it.
pub fn nearest_rank<T: Copy>(sorted: &[T], share: f64) -> T {
    sorted[((sorted.len() as f64 * share).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// A chat message in the OpenAI format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// What the LLM stream yields.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    /// A piece of generated text.
    Token(String),
    /// The end of generation.
    Finish {
        /// `stop`, `length`, …, as the upstream said.
        finish_reason: String,
        /// Completion tokens as counted by the upstream, when it reports usage.
        completion_tokens: Option<u64>,
        /// Prompt tokens as counted by the upstream, when it reports usage.
        prompt_tokens: Option<u64>,
    },
}

/// A stream of LLM events; it ends after [`LlmEvent::Finish`] or an error.
pub type LlmStream = Pin<Box<dyn Stream<Item = Result<LlmEvent, LlmError>> + Send>>;

/// An OpenAI-compatible chat model that streams.
#[async_trait]
pub trait Llm: Send + Sync {
    /// Model name sent upstream and reported in `meta` and `done`.
    fn model_id(&self) -> &str;
    /// Starts a streaming completion. Returns once the upstream accepted the request.
    /// `traceparent` is the W3C trace context to send with it.
    async fn stream(
        &self,
        messages: Vec<ChatMessage>,
        max_tokens: u32,
        traceparent: &str,
    ) -> Result<LlmStream, LlmError>;
    /// Whether the upstream answers at all (for `/readyz` and `doctor`).
    async fn ready(&self) -> Result<(), LlmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rerank_order_is_by_score_and_stable_on_ties() {
        assert_eq!(
            rerank_order(&[(0, 0.1), (1, 0.9), (2, 0.1)], &[], 3).unwrap(),
            vec![(1, 0.9), (0, 0.1), (2, 0.1)]
        );
        assert_eq!(rerank_order(&[], &[], 0).unwrap(), vec![]);
    }

    #[test]
    fn dropped_candidates_leave_the_order_and_may_be_all_of_them() {
        assert_eq!(
            rerank_order(&[(0, 0.1), (2, 0.9)], &[1, 3], 4).unwrap(),
            vec![(2, 0.9), (0, 0.1)]
        );
        assert_eq!(rerank_order(&[], &[1, 0, 2], 3).unwrap(), vec![]);
    }

    #[test]
    fn a_failure_keeps_its_kind_and_at_most_1024_characters_of_message() {
        let long = "é".repeat(1500);
        let failure = RerankFailure::new(FailureKind::ComponentError, long);
        assert_eq!(
            failure.message.chars().count(),
            RerankFailure::MAX_CHARS + 1
        );
        assert!(failure.message.ends_with('…'));
        let short = RerankFailure::new(FailureKind::Trap, "unreachable");
        assert_eq!(short.to_string(), "trap: unreachable");
        assert_eq!(
            serde_json::to_value(&short).unwrap(),
            serde_json::json!({"kind": "trap", "message": "unreachable"})
        );
    }

    #[test]
    fn invalid_rerank_outputs_are_named() {
        let bad = |v: &[(u32, f32)], n| rerank_order(v, &[], n).unwrap_err();
        assert!(bad(&[(0, 1.0)], 2).contains("1 scores for 2"));
        assert!(bad(&[(0, 1.0), (0, 2.0)], 2).contains("scored twice"));
        assert!(bad(&[(0, 1.0), (5, 2.0)], 2).contains("out of range"));
        assert!(bad(&[(0, f32::NAN), (1, 2.0)], 2).contains("not finite"));
        assert!(bad(&[(0, f32::INFINITY), (1, 2.0)], 2).contains("not finite"));
        let dropping = |v: &[(u32, f32)], d: &[u32], n| rerank_order(v, d, n).unwrap_err();
        assert!(dropping(&[(0, 1.0)], &[0], 2).contains("both scored and dropped"));
        assert!(dropping(&[], &[1, 1], 2).contains("dropped twice"));
        assert!(dropping(&[(0, 1.0)], &[7], 2).contains("dropped index 7 out of range"));
        assert!(dropping(&[(0, 1.0)], &[1, 1], 2).contains("1 scores and 2 dropped for 2"));
    }

    #[test]
    fn a_rerank_context_is_a_small_map_of_strings() {
        let ok = RerankContext::parse(&serde_json::json!({"plan": "pro", "locale": "de"})).unwrap();
        assert_eq!(
            ok.iter().collect::<Vec<_>>(),
            [("locale", "de"), ("plan", "pro")]
        );
        let bad = |v: serde_json::Value| RerankContext::parse(&v).unwrap_err();
        assert!(bad(serde_json::json!(["plan"])).contains("object"));
        assert!(
            bad(serde_json::json!({"plan": 3})).contains("\"plan\": the value must be a string")
        );
        assert!(bad(serde_json::json!({"a.b": "x"})).contains("not a valid key"));
        assert!(bad(serde_json::json!({"plan": "x".repeat(257)})).contains("longer than 256"));
        let many: serde_json::Map<_, _> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(bad(many.into()).contains("17 entries"));
        let big: serde_json::Map<_, _> = (0..10)
            .map(|i| (format!("k{i}"), "v".repeat(250).into()))
            .collect();
        assert!(bad(big.into()).contains("bytes of keys and values"));
    }
}

/// A source as shown to the client: it is cited in the answer as `[n]`, n = position + 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceDoc {
    /// Document id.
    pub id: String,
    /// Chunk position inside the document.
    pub chunk: usize,
    /// Fused retrieval score.
    pub score: f32,
    /// The score the tenant's rerank component gave the chunk, when one ranked this answer's
    /// sources (their order is then the component's, so `score` need not descend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    /// Where the document came from.
    pub source: String,
    /// Document title.
    pub title: String,
    /// The first characters of the chunk.
    pub snippet: String,
    /// The document's metadata, when it has any.
    #[serde(default, skip_serializing_if = "crate::metadata::Metadata::is_empty")]
    pub metadata: crate::metadata::Metadata,
    /// The headings above the chunk, joined by ` › ` (documents with headings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The page the chunk starts on (documents with pages: PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// The first and last page, when the chunk runs over more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<[u32; 2]>,
    /// The sentences of the chunk that best answer the question, best first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub highlights: Vec<crate::grounding::Highlight>,
}

impl Place {
    /// The citation fields of a source here: `section`, `page` and, when it runs over
    /// more than one, `pages`.
    pub fn citation(&self) -> (Option<String>, Option<u32>, Option<[u32; 2]>) {
        let section = (!self.section.is_empty()).then(|| self.section.clone());
        let page = self.pages.map(|[from, _]| from);
        let pages = self.pages.filter(|[from, to]| to > from);
        (section, page, pages)
    }
}
