//! The document path, beside the answer path: validate, leave out what the tenant already
//! holds as sent, chunk, embed, replace in the store, and bump the tenant's corpus version
//! once per ingest that wrote or removed anything. It needs the embedder and the store, never the LLM. Files become
//! documents before they come here (`sluice-convert`); what clients send and get back is the
//! contract's ([`sluice_contract::document`]).
//!
//! - this file: [`Ingest`] and its write path (scope checks, chunking, embedding in batches
//!   that hear a stop, the replace, stale documents of an upload removed);
//! - [`manage`]: listing, looking up and deleting documents.

mod manage;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sluice_contract::Tenant;
use sluice_contract::cancel::{Cancel, Stopped};
use sluice_contract::document::{Document, IngestReport, MAX_DELETE, MAX_PAGE, Section, validate};
use sluice_contract::error::{EmbedError, IngestError, StoreError};
use sluice_contract::filter::Filter;
use sluice_contract::metadata::{MetaValue, Metadata};
use sluice_contract::stages::{
    DocumentInfo, Embedder, Page, Selection, Store, StoredChunk, StoredDocument, indexed_text,
};

use crate::chunk::chunk_sections;
use crate::config::IngestConfig;

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
    /// of the tenant's that `scope` hides; else the tenant's documents with their ids (what
    /// [`changed`](Self::changed) compares with, read once).
    async fn check_scope(
        &self,
        tenant: &Tenant,
        scope: &Filter,
        documents: &[Document],
    ) -> Result<Vec<StoredDocument>, IngestError> {
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
        let (all, seen) = tokio::try_join!(
            self.stored(tenant, &ids, None),
            self.stored(tenant, &ids, Some(scope)),
        )?;
        let seen: HashSet<&str> = seen.iter().map(|d| d.document.id.as_str()).collect();
        if let Some(hidden) = (all.iter())
            .map(|d| &d.document.id)
            .find(|id| !seen.contains(id.as_str()))
        {
            return Err(IngestError::HiddenId(format!(
                "no document {hidden:?} that this key may replace: a key bound to a filter \
                 writes new ids and those of documents it can read"
            )));
        }
        Ok(all)
    }

    /// The tenant's documents among `ids` that `filter` passes (all of them without one),
    /// read a page of [`MAX_PAGE`] ids at a time.
    async fn stored(
        &self,
        tenant: &Tenant,
        ids: &[String],
        filter: Option<&Filter>,
    ) -> Result<Vec<StoredDocument>, StoreError> {
        let mut stored = Vec::new();
        for ids in ids.chunks(MAX_PAGE) {
            let selection = Selection {
                ids: Some(ids),
                filter,
                ..Selection::default()
            };
            let page = Page {
                limit: MAX_PAGE,
                cursor: None,
            };
            stored.extend(
                self.store
                    .documents(tenant, &selection, page)
                    .await?
                    .documents,
            );
        }
        Ok(stored)
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
        let held = match scope {
            Some(scope) => Some(self.check_scope(tenant, scope, &documents).await?),
            None => None,
        };
        let count = documents.len();
        // Every id sent stays the upload's, written or unchanged.
        let ids: HashSet<String> = documents.iter().map(|d| d.id.clone()).collect();
        let documents = self.changed(tenant, documents, origin, held).await;
        let unchanged = count - documents.len();
        let embedder = Arc::clone(&self.embedder);
        let (size, overlap) = (self.config.chunk_tokens, self.config.chunk_overlap_tokens);
        let (headers, pack) = (self.config.context_header, self.config.pack_sections);
        // Chunking counts tokens: CPU work, off the async threads.
        let chunking = cancel.clone();
        let chunked = tokio::task::spawn_blocking(move || {
            let counter = |t: &str| embedder.count_tokens(t);
            documents
                .into_iter()
                .map(|(mut doc, digest)| {
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
                    Ok(((doc, digest), chunks))
                })
                .collect::<Result<Vec<_>, IngestError>>()
        })
        .await
        .map_err(|e| EmbedError::Inference(e.to_string()))??;
        let total: usize = chunked.iter().map(|(_, c)| c.len()).sum();
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
        let written = chunked.len();
        for ((doc, digest), chunks) in chunked {
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
                digest: Some(digest),
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
        // Nothing written and nothing removed: the corpus is as it was, and so is its version
        // (and every cached answer made under it).
        let corpus_version = match written + removed {
            0 => self.store.corpus_version(tenant).await?,
            _ => self.publish(tenant, removed > 0).await?,
        };
        Ok(IngestReport {
            documents: count,
            unchanged,
            chunks: total,
            corpus_version,
            removed,
        })
    }

    /// `documents` with the digest each is stored under, less those the tenant already holds
    /// under that digest: the same text, title, source, metadata, format and upload, to be
    /// cut and embedded as this ingest would (its chunking settings and embedding model).
    /// `held`: the tenant's documents with these ids, when they were read already.
    async fn changed(
        &self,
        tenant: &Tenant,
        documents: Vec<Document>,
        origin: Option<&str>,
        held: Option<Vec<StoredDocument>>,
    ) -> Vec<(Document, String)> {
        let config = &self.config;
        let how = format!(
            "{} {} {} {} {}",
            self.embedder.model_id(),
            config.chunk_tokens,
            config.chunk_overlap_tokens,
            config.context_header,
            config.pack_sections
        );
        // What a source said of the version it read (its ETag, say) is not what was read: a
        // page whose validator changed and whose text did not is not embedded again.
        let digest = |d: &Document| {
            let what = match d
                .metadata
                .contains_key(sluice_contract::sources::VERSION_KEY)
            {
                true => {
                    let mut d = d.clone();
                    d.metadata.remove(sluice_contract::sources::VERSION_KEY);
                    serde_json::json!([d, origin, how])
                }
                false => serde_json::json!([d, origin, how]),
            };
            sluice_contract::sha256_hex(what.to_string().as_bytes())
        };
        let held = match held {
            Some(held) => held,
            None => {
                let ids: Vec<String> = documents.iter().map(|d| d.id.clone()).collect();
                // Leaving out what is unchanged only saves work: when the store cannot say
                // what it holds, everything is written, as it was before digests.
                self.stored(tenant, &ids, None).await.unwrap_or_else(|e| {
                    tracing::warn!(%tenant, error = %e, "the stored documents could not be listed; every document sent is written");
                    Vec::new()
                })
            }
        };
        let held: HashMap<String, String> = (held.into_iter())
            .filter_map(|d| Some((d.document.id, d.document.digest?)))
            .collect();
        (documents.into_iter())
            .map(|d| {
                let digest = digest(&d);
                (d, digest)
            })
            .filter(|(d, digest)| held.get(&d.id) != Some(digest))
            .collect()
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
