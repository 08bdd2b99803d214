//! Retrieved chunks and the request's context as a component is given them.

use sluice_contract::metadata::{MetaValue as Value, Metadata};

use crate::{Candidate, ContextEntry, Date, MetaField, MetaValue};

/// document's metadata sorted by key.
pub fn candidates(hits: &[sluice_contract::stages::Hit], max_text_bytes: usize) -> Vec<Candidate> {
    (hits.iter())
        .map(|h| Candidate {
            id: h.document.id.clone(),
            title: h.document.title.clone(),
            text: truncate(&h.text, max_text_bytes).to_string(),
            score: h.score,
            chunk: u32::try_from(h.chunk).unwrap_or(u32::MAX),
            metadata: metadata(&h.document.metadata),
        })
        .collect()
}

/// A request's `rerank_context` as a component is given it.
pub fn context_entries(context: &sluice_contract::stages::RerankContext) -> Vec<ContextEntry> {
    (context.iter())
        .map(|(key, value)| ContextEntry {
            key: key.to_string(),
            value: value.to_string(),
        })
        .collect()
}

/// A document's metadata as a 0.2 component reads it, sorted by key.
fn metadata(metadata: &Metadata) -> Vec<MetaField> {
    metadata
        .iter()
        .map(|(key, value)| MetaField {
            key: key.to_string(),
            value: match value {
                Value::Text(t) => MetaValue::Text(t.clone()),
                Value::Number(n) => MetaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
                Value::Bool(b) => MetaValue::Boolean(*b),
                Value::Date { text, seconds } => MetaValue::Date(Date {
                    text: text.clone(),
                    seconds: *seconds,
                }),
                Value::List(items) => MetaValue::Strings(items.clone()),
            },
        })
        .collect()
}
/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
