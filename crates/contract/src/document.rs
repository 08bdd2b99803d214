//! Documents as clients send them, and what writing or deleting them reports: the wire
//! types of `/v1/documents` that the engine, the converters and clients share.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::IngestError;
use crate::metadata::Metadata;

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

impl Document {
    /// Gives the document the access list `text` writes ([`crate::access::access_list`]'s
    /// form: principals separated by commas, nothing for no end user).
    pub fn set_access(&mut self, text: &str) {
        let list = crate::access::access_list(text);
        self.metadata.insert(crate::access::ACCESS_KEY.into(), list);
    }
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestReport {
    /// Documents sent (each replacing any earlier version, unless it is unchanged).
    pub documents: usize,
    /// Of those, documents the tenant already held exactly as sent (and cut and embedded as
    /// this ingest would): nothing of them was embedded or written.
    #[serde(default)]
    pub unchanged: usize,
    /// Chunks written.
    pub chunks: usize,
    /// The tenant's corpus version after this ingest (moved only when something was written
    /// or removed).
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

/// A run of a document's text under one heading path (and, in a PDF, on one page): what a
/// converted file holds, and what chunks and citations keep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// The headings above it, outermost first (empty before the first heading).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// The page it is on, from 1 (PDF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// Its text.
    pub text: String,
}

/// Files made documents — PDF, HTML, Word, Markdown, text, JSON (`sluice-convert`) — handed by
/// the composition root to the processes that ingest, so that the others (the answer and
/// registry functions) link no file parser.
#[async_trait::async_trait]
pub trait Converter: Send + Sync {
    /// Whether a `Content-Type` names a file format read here, other than JSON and plain text
    /// (which a client sends documents as).
    fn reads_media_type(&self, media_type: &str) -> bool;

    /// The documents of a file whose format its `name`'s extension names, else its
    /// `media_type`; without a name, its content names it (the same file sent again replaces
    /// the same documents). [`IngestError::Unsupported`] for a type not read here. The
    /// conversion runs off the async threads and stops when this future is dropped.
    async fn convert(
        &self,
        name: Option<String>,
        media_type: Option<&str>,
        bytes: Vec<u8>,
    ) -> Result<Vec<Document>, IngestError>;
}

#[cfg(test)]
mod tests {
    use super::*;

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
