//! The document path, beside the answer path: parse (or convert: `sluice-convert`), validate,
//! chunk, embed, replace in the store, and bump the tenant's corpus version once per ingest
//! (which is what retires the tenant's cached answers). It needs the embedder and the store,
//! never the LLM.

use crate::Tenant;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_contract::cancel::{Cancel, Stopped};
use sluice_convert::ConvertError;
pub use sluice_convert::{ConvertLimits, Format, Section};

use crate::chunk::chunk_sections;
use crate::config::IngestConfig;
use crate::error::{EmbedError, IngestError};
use crate::filter::Filter;
use crate::metadata::{MetaValue, Metadata};
use crate::stages::{
    DocumentInfo, DocumentPage, Embedder, Page, Selection, Store, StoredChunk, StoredDocument,
    indexed_text,
};

/// Longest accepted document id.
pub const MAX_ID_CHARS: usize = 256;

/// A document as clients send it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// Unique within the tenant; sending it again replaces the earlier version.
    pub id: String,
    /// Title shown with citations; the id when absent.
    #[serde(default)]
    pub title: Option<String>,
    /// The text (`content` is accepted as another name for it); may be left out when
    /// `sections` hold it.
    #[serde(default, alias = "content")]
    pub text: String,
    /// The text in sections, with their heading paths and pages: what a converted file
    /// (PDF, HTML, Word, Markdown) holds. A section is cut only when it does not fit a
    /// chunk; whole sections share one while they fit (`SLUICE_PACK_SECTIONS`), which cites
    /// the path they share.
    /// When present, `text` is not chunked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sections: Vec<Section>,
    /// The format it was converted from, as listings show it (`pdf`, `html`, `docx`,
    /// `markdown`, `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Where it came from; the id when absent.
    #[serde(default)]
    pub source: Option<String>,
    /// What the document says about itself ([`Metadata`]): checked by [`validate`], stored
    /// with every chunk, read by filters.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestReport {
    /// Documents written (each replacing any earlier version).
    pub documents: usize,
    /// Chunks written.
    pub chunks: usize,
    /// The tenant's corpus version after this ingest.
    pub corpus_version: u64,
    /// Documents an earlier version of the same upload made that this one no longer holds,
    /// deleted ([`Ingest::ingest_from`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub removed: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What a listing page holds unless the request says, and the most it may ask for.
pub const DEFAULT_PAGE: usize = 100;
/// See [`DEFAULT_PAGE`].
pub const MAX_PAGE: usize = 1000;
/// Most documents one deletion by filter removes; its answer says whether more match (send
/// it again for the next ones).
pub const MAX_DELETE: usize = 1000;

/// What a deletion did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeleteReport {
    /// Documents removed (every chunk of each).
    pub deleted: usize,
    /// Whether more documents match than one deletion removes ([`MAX_DELETE`]).
    pub more: bool,
    /// The tenant's corpus version after it: a deletion bumps it, so that no cached answer
    /// built on a removed document is served again.
    pub corpus_version: u64,
}

/// Texts embedded between two checks of whether the ingest may go on: big enough to keep the
/// embedder's threads busy, small enough that a stop is heard within a second or so.
const EMBED_BATCH: usize = 32;

/// Why an ingest stopped before it wrote anything: past `timeout` (a refusal that says what to
/// do), or its request ended (nobody reads that one).
fn stopped(why: Stopped, timeout: std::time::Duration) -> IngestError {
    match why {
        Stopped::TimedOut => IngestError::TooLarge(format!(
            "these documents took longer than {timeout:?} to chunk and embed (SLUICE_INGEST_TIMEOUT_MS); nothing was stored: send fewer per request"
        )),
        Stopped::Cancelled => {
            IngestError::Invalid("the request ended before the ingest did".into())
        }
    }
}

/// Reads documents from a file's bytes; `name` (a path) picks the format by its extension
/// and becomes the id and source of a converted file (and its title when the file names
/// none). Conversion runs within `limits` ([`sluice_convert::convert_contained`]).
pub fn parse_file(
    name: &str,
    bytes: &[u8],
    limits: &ConvertLimits,
) -> Result<Vec<Document>, IngestError> {
    let format = Format::from_name(name).ok_or_else(|| {
        IngestError::Unsupported(format!(
            "{name}: unsupported file type (use {})",
            Format::EXTENSIONS
        ))
    })?;
    parse_as(format, name, bytes, limits)
}

/// [`parse_file`] of a file whose format is known otherwise (a `Content-Type`).
pub fn parse_as(
    format: Format,
    name: &str,
    bytes: &[u8],
    limits: &ConvertLimits,
) -> Result<Vec<Document>, IngestError> {
    parse_until(format, name, bytes, limits, &Cancel::new())
}

/// [`parse_as`], whose conversion stops once `cancel` says so.
pub fn parse_until(
    format: Format,
    name: &str,
    bytes: &[u8],
    limits: &ConvertLimits,
    cancel: &Cancel,
) -> Result<Vec<Document>, IngestError> {
    let utf8 = || {
        std::str::from_utf8(bytes)
            .map_err(|e| IngestError::Invalid(format!("{name}: not UTF-8 text ({e})")))
    };
    let stem = name.rsplit('/').next().unwrap_or(name);
    let stem = stem.rsplit_once('.').map_or(stem, |(s, _)| s).to_string();
    let document = |title: Option<String>, text: String, sections, metadata| Document {
        id: name.to_string(),
        title: Some(title.unwrap_or_else(|| stem.clone())),
        text,
        sections,
        source: Some(name.to_string()),
        metadata,
        format: Some(format.name().to_string()),
    };
    match format {
        Format::Text => Ok(vec![document(
            None,
            utf8()?.to_string(),
            Vec::new(),
            serde_json::Map::new(),
        )]),
        Format::Markdown => {
            let (mut metadata, body) = front_matter(name, utf8()?)?;
            let converted = sluice_convert::convert_until(format, body.as_bytes(), limits, cancel)
                .map_err(|e| convert_error(name, e))?;
            let title = match metadata.remove("title") {
                Some(serde_json::Value::String(t)) => Some(t),
                Some(other) => {
                    return Err(IngestError::Invalid(format!(
                        "{name}: the front matter's title is not a string ({other})"
                    )));
                }
                None => converted.title,
            };
            Ok(vec![document(
                title,
                String::new(),
                converted.sections,
                metadata,
            )])
        }
        Format::Html | Format::Pdf | Format::Docx => {
            let converted =
                sluice_convert::convert_contained(format, bytes.to_vec(), limits, cancel)
                    .map_err(|e| convert_error(name, e))?;
            Ok(vec![document(
                converted.title,
                String::new(),
                converted.sections,
                serde_json::Map::new(),
            )])
        }
        Format::Json => {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum JsonFile {
                Many(Vec<Document>),
                Wrapped { documents: Vec<Document> },
                One(Document),
            }
            let parsed: JsonFile = serde_json::from_str(utf8()?).map_err(|e| {
                IngestError::Invalid(format!(
                    "{name}: expected a document {{\"id\",\"text\",\"title\"?,\"source\"?,\"metadata\"?}}, a list of them, \
                     or {{\"documents\": [...]}} ({e})"
                ))
            })?;
            Ok(match parsed {
                JsonFile::Many(d) | JsonFile::Wrapped { documents: d } => d,
                JsonFile::One(d) => vec![d],
            })
        }
        Format::Jsonl => utf8()?
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .map_err(|e| IngestError::Invalid(format!("{name} line {}: {e}", i + 1)))
            })
            .collect(),
    }
}

/// [`parse_as`] off the async threads (a conversion is CPU work and may take seconds): what
/// the server and the ingest function run on an upload. The conversion ends with this
/// future: dropped (its client left), it stops at its next check.
pub async fn parse_upload(
    format: Format,
    name: String,
    bytes: Vec<u8>,
    limits: ConvertLimits,
) -> Result<Vec<Document>, IngestError> {
    let failed = format!("{name}: the conversion failed");
    let cancel = Cancel::new();
    let _stop_when_dropped = cancel.on_drop();
    tokio::task::spawn_blocking(move || parse_until(format, &name, &bytes, &limits, &cancel))
        .await
        .map_err(|e| IngestError::Unreadable(format!("{failed} ({e})")))?
}

/// A conversion's failure as an ingest error naming the file.
fn convert_error(name: &str, e: ConvertError) -> IngestError {
    let message = format!("{name}: {e}");
    match e {
        ConvertError::NoTextLayer { .. } => IngestError::NoTextLayer(message),
        ConvertError::Encrypted => IngestError::Encrypted(message),
        ConvertError::TooLarge(_) => IngestError::TooLarge(message),
        ConvertError::Malformed(_) => IngestError::Invalid(message),
        ConvertError::Crashed { detail } => {
            // The parser's words are the operator's; the client reads the error's sentence.
            tracing::warn!(file = name, %detail, "a parser failed on an upload");
            IngestError::Unreadable(message)
        }
        ConvertError::TimedOut(_) | ConvertError::Cancelled => IngestError::Unreadable(message),
    }
}

/// A Markdown file's YAML front matter (between a first line `---` and the next `---`) and
/// the text after it: the front matter's `title` titles the document, its other keys are the
/// document's metadata. A file without front matter has no metadata.
fn front_matter<'a>(
    name: &str,
    text: &'a str,
) -> Result<(serde_json::Map<String, serde_json::Value>, &'a str), IngestError> {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Ok((serde_json::Map::new(), text));
    };
    let Some((yaml, body)) = rest
        .split_once("\n---\n")
        .or_else(|| rest.split_once("\r\n---\r\n"))
        .or_else(|| rest.strip_suffix("\n---").map(|y| (y, "")))
    else {
        return Err(IngestError::Invalid(format!(
            "{name}: the front matter opened by the first line `---` is never closed"
        )));
    };
    let metadata = if yaml.trim().is_empty() {
        serde_json::Map::new()
    } else {
        serde_saphyr::from_str(yaml).map_err(|e| {
            IngestError::Invalid(format!(
                "{name}: the front matter is not a YAML mapping of metadata ({e})"
            ))
        })?
    };
    Ok((metadata, body))
}

/// Checks a batch before anything is written: ids present, short and unique, text present.
pub fn validate(documents: &[Document]) -> Result<(), IngestError> {
    if documents.is_empty() {
        return Err(IngestError::Invalid("no documents to ingest".into()));
    }
    let mut seen = HashSet::new();
    for (i, d) in documents.iter().enumerate() {
        if d.id.trim().is_empty() {
            return Err(IngestError::Invalid(format!(
                "document {i}: \"id\" is empty"
            )));
        }
        if d.id.chars().count() > MAX_ID_CHARS {
            return Err(IngestError::Invalid(format!(
                "document {i}: \"id\" is longer than {MAX_ID_CHARS} characters"
            )));
        }
        if d.text.trim().is_empty() && d.sections.iter().all(|s| s.text.trim().is_empty()) {
            return Err(IngestError::Invalid(format!(
                "document {:?}: \"text\" is empty",
                d.id
            )));
        }
        Metadata::from_json(&d.metadata)
            .map_err(|e| IngestError::Invalid(format!("document {:?}: metadata: {e}", d.id)))?;
        if !seen.insert(d.id.as_str()) {
            return Err(IngestError::Invalid(format!(
                "document id {:?} appears twice",
                d.id
            )));
        }
    }
    Ok(())
}

/// Writes documents into the store: what `POST /v1/documents` and `sluice ingest` run.
pub struct Ingest {
    /// Chunk size and the per-request limits.
    pub config: IngestConfig,
    /// Chunk embeddings (and the token counts chunking goes by).
    pub embedder: Arc<dyn Embedder>,
    /// Where the chunks go.
    pub store: Arc<dyn Store>,
}

impl Ingest {
    /// The document path over `embedder` and `store`.
    pub fn new(config: IngestConfig, embedder: Arc<dyn Embedder>, store: Arc<dyn Store>) -> Self {
        Self {
            config,
            embedder,
            store,
        }
    }

    /// Ingests `documents` for `tenant`: each replaces any earlier document with its id.
    ///
    /// The whole batch is checked and chunked before anything is written, so that a batch
    /// over `SLUICE_MAX_DOCUMENTS` or `SLUICE_MAX_CHUNKS` changes nothing.
    pub async fn ingest(
        &self,
        tenant: &Tenant,
        documents: Vec<Document>,
    ) -> Result<IngestReport, IngestError> {
        self.ingest_within(tenant, None, documents).await
    }

    /// [`ingest`](Self::ingest) for a key bound to `scope`: every document must pass it
    /// ([`IngestError::OutsideScope`]), and an id the tenant holds outside it cannot be
    /// written ([`IngestError::HiddenId`]) — so a bound key neither plants documents where
    /// other keys read nor replaces theirs. Both are checked for the whole batch before
    /// anything is embedded or written.
    pub async fn ingest_within(
        &self,
        tenant: &Tenant,
        scope: Option<&Filter>,
        documents: Vec<Document>,
    ) -> Result<IngestReport, IngestError> {
        self.write(tenant, documents, None, scope).await
    }

    /// Refuses `documents` unless each passes `scope` and none takes the id of a document
    /// of the tenant's that `scope` hides.
    async fn check_scope(
        &self,
        tenant: &Tenant,
        scope: &Filter,
        documents: &[Document],
    ) -> Result<(), IngestError> {
        for d in documents {
            let metadata = Metadata::from_json(&d.metadata).map_err(IngestError::Invalid)?;
            if !inside(scope, &metadata) {
                return Err(IngestError::OutsideScope(format!(
                    "document {:?}: its metadata does not pass this key's filter {} (each item of \
                     a list must); a key bound to a filter writes only inside it",
                    d.id,
                    scope.to_json()
                )));
            }
        }
        let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
        for ids in ids.chunks(MAX_PAGE) {
            let page = Page {
                limit: MAX_PAGE,
                cursor: None,
            };
            let every = Selection {
                ids: Some(ids),
                ..Selection::default()
            };
            let visible = Selection {
                filter: Some(scope),
                ..every
            };
            let (all, seen) = tokio::try_join!(
                self.store.documents(tenant, &every, page),
                self.store.documents(tenant, &visible, page),
            )?;
            let seen: HashSet<String> = seen.documents.into_iter().map(|d| d.document.id).collect();
            if let Some(hidden) = (all.documents.into_iter())
                .map(|d| d.document.id)
                .find(|id| !seen.contains(id))
            {
                return Err(IngestError::HiddenId(format!(
                    "no document {hidden:?} that this key may replace: a key bound to a filter \
                     writes new ids and those of documents it can read"
                )));
            }
        }
        Ok(())
    }

    /// [`ingest`](Self::ingest) of the documents read from the upload `origin` (an S3
    /// object's key): each remembers it, and [`delete_origin`](Self::delete_origin) removes
    /// them when the upload is deleted. The documents an earlier version of the upload made
    /// that this one no longer holds are deleted, so that the upload's documents are what
    /// the object holds now.
    pub async fn ingest_from(
        &self,
        tenant: &Tenant,
        documents: Vec<Document>,
        origin: Option<&str>,
    ) -> Result<IngestReport, IngestError> {
        self.write(tenant, documents, origin, None).await
    }

    /// What every ingest runs: the batch checked (and, for a key bound to `scope`, held to it
    /// before any store is asked beyond that), chunked, embedded and written.
    async fn write(
        &self,
        tenant: &Tenant,
        documents: Vec<Document>,
        origin: Option<&str>,
        scope: Option<&Filter>,
    ) -> Result<IngestReport, IngestError> {
        validate(&documents)?;
        // The request's work ends with it: past its time budget, or when this future is
        // dropped (the client left), the chunking and embedding stop at their next batch and
        // nothing is stored (every write comes after them).
        let timeout = self.config.timeout;
        let cancel = Cancel::new().with_deadline(std::time::Instant::now() + timeout);
        let _stop_when_dropped = cancel.on_drop();
        let limit = self.config.max_documents;
        if documents.len() > limit {
            return Err(IngestError::TooLarge(format!(
                "{} documents in one request; the limit is {limit} (SLUICE_MAX_DOCUMENTS)",
                documents.len()
            )));
        }
        if let Some(scope) = scope {
            self.check_scope(tenant, scope, &documents).await?;
        }
        let count = documents.len();
        let embedder = Arc::clone(&self.embedder);
        let (size, overlap) = (self.config.chunk_tokens, self.config.chunk_overlap_tokens);
        let (headers, pack) = (self.config.context_header, self.config.pack_sections);
        // Chunking counts tokens: CPU work, off the async threads.
        let chunking = cancel.clone();
        let chunked = tokio::task::spawn_blocking(move || {
            let counter = |t: &str| embedder.count_tokens(t);
            documents
                .into_iter()
                .map(|mut doc| {
                    chunking.check().map_err(|why| stopped(why, timeout))?;
                    if doc.sections.is_empty() {
                        let text = std::mem::take(&mut doc.text);
                        doc.sections = vec![Section {
                            path: Vec::new(),
                            page: None,
                            text,
                        }];
                    }
                    // A header names what the document is called: its title, not an id.
                    let title = (doc.title.as_deref()).filter(|t| headers && !t.trim().is_empty());
                    let chunks =
                        chunk_sections(&doc.sections, title, pack, size, overlap, &counter);
                    Ok((doc, chunks))
                })
                .collect::<Result<Vec<_>, IngestError>>()
        })
        .await
        .map_err(|e| EmbedError::Inference(e.to_string()))??;
        let total: usize = chunked.iter().map(|(_, c)| c.len()).sum();
        let ids: HashSet<String> = chunked.iter().map(|(d, _)| d.id.clone()).collect();
        let limit = self.config.max_chunks;
        if total > limit {
            return Err(IngestError::TooLarge(format!(
                "these documents make {total} chunks; the limit is {limit} per request (SLUICE_MAX_CHUNKS)"
            )));
        }
        // The request's chunks embedded together in batches of EMBED_BATCH, each of which the
        // embedder may spread over the cores it is given (a document is often one or two
        // chunks), then each document replaced in the store with its own.
        let embedder = Arc::clone(&self.embedder);
        let embedding = cancel.clone();
        let (chunked, vectors) = tokio::task::spawn_blocking(move || {
            let texts: Vec<Cow<str>> = (chunked.iter())
                .flat_map(|(_, chunks)| {
                    (chunks.iter()).map(|c| indexed_text(&c.header, &c.chunk.text))
                })
                .collect();
            let texts: Vec<&str> = texts.iter().map(|t| t.as_ref()).collect();
            let embed_all = || -> Result<Vec<Vec<f32>>, IngestError> {
                let mut vectors = Vec::with_capacity(texts.len());
                for batch in texts.chunks(EMBED_BATCH) {
                    embedding.check().map_err(|why| stopped(why, timeout))?;
                    vectors.extend(embedder.embed(batch)?);
                }
                Ok(vectors)
            };
            let vectors = embed_all();
            (chunked, vectors)
        })
        .await
        .map_err(|e| EmbedError::Inference(e.to_string()))?;
        let mut vectors = vectors?.into_iter();
        for (doc, chunks) in chunked {
            // Checked by `validate` above.
            let metadata = Metadata::from_json(&doc.metadata).map_err(IngestError::Invalid)?;
            let info = DocumentInfo {
                metadata,
                title: doc
                    .title
                    .filter(|t| !t.trim().is_empty())
                    .unwrap_or_else(|| doc.id.clone()),
                source: doc
                    .source
                    .filter(|s| !s.trim().is_empty())
                    .unwrap_or_else(|| doc.id.clone()),
                id: doc.id,
                origin: origin.map(str::to_string),
                format: doc.format,
            };
            let mut stored = Vec::with_capacity(chunks.len());
            for (index, c) in chunks.into_iter().enumerate() {
                let vector = vectors.next().ok_or_else(|| {
                    EmbedError::Inference("the embedder returned fewer vectors than texts".into())
                })?;
                stored.push(StoredChunk {
                    index,
                    text: c.chunk.text,
                    tokens: c.chunk.tokens,
                    vector,
                    place: c.place,
                    header: c.header,
                });
            }
            self.store.replace_document(tenant, &info, stored).await?;
        }
        let removed = match origin {
            Some(origin) => self.remove_stale(tenant, origin, &ids).await?,
            None => 0,
        };
        let corpus_version = self.publish(tenant, removed > 0).await?;
        Ok(IngestReport {
            documents: count,
            chunks: total,
            corpus_version,
            removed,
        })
    }

    /// Deletes the documents of the upload `origin` whose ids are not in `kept`; how many.
    async fn remove_stale(
        &self,
        tenant: &Tenant,
        origin: &str,
        kept: &HashSet<String>,
    ) -> Result<usize, IngestError> {
        let from_origin = Selection {
            origin: Some(origin),
            ..Selection::default()
        };
        let mut stale = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = Page {
                limit: MAX_PAGE,
                cursor: cursor.as_deref(),
            };
            let found = self.store.documents(tenant, &from_origin, page).await?;
            stale.extend(
                (found.documents.into_iter())
                    .map(|d| d.document.id)
                    .filter(|id| !kept.contains(id)),
            );
            match found.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        for ids in stale.chunks(MAX_DELETE) {
            let selection = Selection {
                ids: Some(ids),
                ..from_origin
            };
            self.store.delete_documents(tenant, &selection).await?;
        }
        Ok(stale.len())
    }
}

/// Whether `metadata` lies inside `scope` label by label: it passes, and so does each version
/// of it with a list cut to one of its items — so that a list cannot carry another key's label
/// (`{"team": ["a", "b"]}` under `{"team": "a"}`) past the filter beside one of the key's own.
fn inside(scope: &Filter, metadata: &Metadata) -> bool {
    scope.matches(metadata)
        && metadata.iter().all(|(key, value)| match value {
            MetaValue::List(items) => items.iter().all(|item| {
                scope.matches(&metadata.with(key, MetaValue::List(vec![item.clone()])))
            }),
            _ => true,
        })
}

/// The documents side of administration: list, look up and delete. `scope` is the caller's
/// key-bound filter (every call is confined to the documents it passes, so that a key never
/// sees or removes what it could not retrieve); a request's own filter is ANDed with it by
/// the caller ([`Filter::and`]).
impl Ingest {
    /// A page of the tenant's documents that pass `filter`, from `cursor` on, at most `limit`
    /// (1 to [`MAX_PAGE`]).
    pub async fn list(
        &self,
        tenant: &Tenant,
        filter: Option<&Filter>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<DocumentPage, IngestError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(IngestError::Invalid(format!(
                "limit must be from 1 to {MAX_PAGE}, not {limit}"
            )));
        }
        let selection = Selection {
            filter,
            ..Selection::default()
        };
        let page = Page { limit, cursor };
        Ok(self.store.documents(tenant, &selection, page).await?)
    }

    /// The tenant's document `id`, when it exists and passes `scope`.
    pub async fn get(
        &self,
        tenant: &Tenant,
        scope: Option<&Filter>,
        id: &str,
    ) -> Result<Option<StoredDocument>, IngestError> {
        let ids = [id.to_string()];
        let selection = Selection {
            ids: Some(&ids),
            filter: scope,
            ..Selection::default()
        };
        let page = Page {
            limit: 1,
            cursor: None,
        };
        let found = self.store.documents(tenant, &selection, page).await?;
        Ok(found.documents.into_iter().next())
    }

    /// Deletes the tenant's document `id` (every chunk of it), when it exists and passes
    /// `scope`; `None` when there is no such document.
    pub async fn delete(
        &self,
        tenant: &Tenant,
        scope: Option<&Filter>,
        id: &str,
    ) -> Result<Option<DeleteReport>, IngestError> {
        let ids = [id.to_string()];
        let selection = Selection {
            ids: Some(&ids),
            filter: scope,
            ..Selection::default()
        };
        let report = self.delete_selected(tenant, selection).await?;
        Ok((report.deleted > 0).then_some(report))
    }

    /// Deletes up to [`MAX_DELETE`] of the tenant's documents that pass `filter` (the
    /// request's and the key's, combined; `None`: every document).
    pub async fn delete_matching(
        &self,
        tenant: &Tenant,
        filter: Option<&Filter>,
    ) -> Result<DeleteReport, IngestError> {
        self.delete_selected(
            tenant,
            Selection {
                filter,
                ..Selection::default()
            },
        )
        .await
    }

    /// Deletes the documents read from the upload `origin` ([`ingest_from`](Self::ingest_from)),
    /// up to [`MAX_DELETE`].
    pub async fn delete_origin(
        &self,
        tenant: &Tenant,
        origin: &str,
    ) -> Result<DeleteReport, IngestError> {
        self.delete_selected(
            tenant,
            Selection {
                origin: Some(origin),
                ..Selection::default()
            },
        )
        .await
    }

    /// Finds what `selection` picks (one page of [`MAX_DELETE`]), then deletes those
    /// documents — by id and under the same selection, so that a document changed in between
    /// so as not to match any more is kept — and bumps the corpus version; with nothing
    /// found, neither.
    async fn delete_selected(
        &self,
        tenant: &Tenant,
        selection: Selection<'_>,
    ) -> Result<DeleteReport, IngestError> {
        let page = Page {
            limit: MAX_DELETE,
            cursor: None,
        };
        let found = self.store.documents(tenant, &selection, page).await?;
        let ids: Vec<String> = (found.documents.into_iter())
            .map(|d| d.document.id)
            .collect();
        if ids.is_empty() {
            return Ok(DeleteReport {
                deleted: 0,
                more: false,
                corpus_version: self.store.corpus_version(tenant).await?,
            });
        }
        let picked = Selection {
            ids: Some(&ids),
            ..selection
        };
        self.store.delete_documents(tenant, &picked).await?;
        Ok(DeleteReport {
            deleted: ids.len(),
            more: found.next.is_some(),
            corpus_version: self.publish(tenant, true).await?,
        })
    }

    /// Bumps the tenant's corpus version, so that no cached answer made before the write is
    /// served again. When the write removed documents, returns only once other processes
    /// have let go of the version before it ([`Store::version_memo`]): a client told that a
    /// document is gone never gets an answer built from it out of the cache afterwards.
    async fn publish(&self, tenant: &Tenant, removed: bool) -> Result<u64, IngestError> {
        let version = self.store.bump_corpus_version(tenant).await?;
        if removed {
            tokio::time::sleep(self.store.version_memo()).await;
        }
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_markdown_files_take_their_name_and_heading() {
        let d = parse_file(
            "docs/guide.md",
            b"intro\n# Getting started\nbody",
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(d[0].id, "docs/guide.md");
        assert_eq!(d[0].title.as_deref(), Some("Getting started"));
        let d = parse_file("notes.txt", b"plain", &ConvertLimits::default()).unwrap();
        assert_eq!(d[0].title.as_deref(), Some("notes"));
    }

    #[test]
    fn markdown_front_matter_is_the_title_and_the_metadata() {
        let file = b"---\ntitle: Card policy\nyear: 2025\ngroups: [finance, hr]\nupdated_at: \"2025-03-01T09:00:00Z\"\n---\n# Heading\nbody";
        let d = parse_file("policies/cards.md", file, &ConvertLimits::default()).unwrap();
        assert_eq!(d[0].title.as_deref(), Some("Card policy"));
        // Its text in sections under its headings; the front matter is not text.
        assert_eq!(d[0].sections.len(), 1);
        assert_eq!(d[0].sections[0].path, ["Heading"]);
        assert_eq!(d[0].sections[0].text, "body");
        assert_eq!(
            serde_json::Value::Object(d[0].metadata.clone()),
            serde_json::json!({"year": 2025, "groups": ["finance", "hr"], "updated_at": "2025-03-01T09:00:00Z"})
        );
        assert!(validate(&d).is_ok());
        // Without a title in it, the first heading still titles the document.
        let d = parse_file(
            "a.md",
            b"---\nyear: 2024\n---\n# From the heading\n",
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(d[0].title.as_deref(), Some("From the heading"));
        // Nested values are refused by validation, naming the key.
        let d = parse_file(
            "a.md",
            b"---\nowner:\n  name: x\n---\ntext",
            &ConvertLimits::default(),
        )
        .unwrap();
        assert!(
            validate(&d)
                .unwrap_err()
                .to_string()
                .contains("\"owner\": a nested object")
        );
        // An unclosed or non-mapping front matter is an error naming the file.
        for bad in [&b"---\nyear: 2024\ntext"[..], b"---\n- a list\n---\ntext"] {
            let e = parse_file("bad.md", bad, &ConvertLimits::default())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("bad.md: the front matter"), "{e}");
        }
        // A .txt file's dashes are text.
        let d = parse_file("a.txt", b"---\nyear: 1\n---\n", &ConvertLimits::default()).unwrap();
        assert!(d[0].metadata.is_empty() && d[0].text.starts_with("---"));
    }

    #[test]
    fn json_accepts_one_a_list_or_a_wrapper_and_content_as_text() {
        let one = parse_file(
            "a.json",
            br#"{"id":"1","content":"x"}"#,
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(one[0].text, "x");
        let list = parse_file(
            "a.json",
            br#"[{"id":"1","text":"x"},{"id":"2","text":"y"}]"#,
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(list.len(), 2);
        let wrapped = parse_file(
            "a.json",
            br#"{"documents":[{"id":"1","text":"x"}]}"#,
            &ConvertLimits::default(),
        )
        .unwrap();
        assert_eq!(wrapped[0].id, "1");
    }

    #[test]
    fn jsonl_errors_name_the_line() {
        let err = parse_file(
            "a.jsonl",
            b"{\"id\":\"1\",\"text\":\"x\"}\n\n{\"id\":2}\n",
            &ConvertLimits::default(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("a.jsonl line 3:"), "{err}");
    }

    #[test]
    fn unsupported_and_binary_files_are_refused() {
        assert!(
            parse_file("a.xlsx", b"PK", &ConvertLimits::default())
                .unwrap_err()
                .to_string()
                .contains("unsupported")
        );
        assert!(
            parse_file("a.txt", &[0xff, 0xfe], &ConvertLimits::default())
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }

    #[test]
    fn validation_rejects_empty_duplicate_and_long_ids() {
        let doc = |id: &str, text: &str| Document {
            format: None,
            sections: Vec::new(),
            id: id.into(),
            title: None,
            text: text.into(),
            source: None,
            metadata: serde_json::Map::new(),
        };
        assert!(validate(&[]).is_err());
        assert!(
            validate(&[doc(" ", "x")])
                .unwrap_err()
                .to_string()
                .contains("\"id\" is empty")
        );
        assert!(
            validate(&[doc("a", " ")])
                .unwrap_err()
                .to_string()
                .contains("\"text\" is empty")
        );
        assert!(
            validate(&[doc("a", "x"), doc("a", "y")])
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(validate(&[doc(&"x".repeat(300), "y")]).is_err());
        assert!(validate(&[doc("a", "x"), doc("b", "y")]).is_ok());
        let mut tagged = doc("a", "x");
        tagged.metadata = serde_json::json!({"year": 2025, "groups": ["hr"]})
            .as_object()
            .cloned()
            .unwrap();
        assert!(validate(std::slice::from_ref(&tagged)).is_ok());
        tagged.metadata.insert("bad key".into(), 1.into());
        let e = validate(&[tagged]).unwrap_err().to_string();
        assert!(
            e.starts_with("document \"a\": metadata: \"bad key\" is not a valid key"),
            "{e}"
        );
    }
}
