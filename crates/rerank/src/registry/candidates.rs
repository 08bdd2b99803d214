//! Retrieved chunks and the request's context as a component is given them.

use sluice_contract::components::{CallInput, InputCandidate};
use sluice_contract::metadata::{MetaValue as Value, Metadata};

use crate::{
    Candidate, ContextEntry, Date, Message, MetaField, MetaValue, PromptInput, PromptSettings,
    Source, Turn,
};
use sluice_contract::tenant_settings::Citations;

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

/// What the pipeline gives a prompt component, as the `assembler` world takes it: each
/// source's text cut at `max_text_bytes`, its metadata values as JSON text, the conversation's
/// turns as the built-in messages kept them (those between the system message and the user's
/// last).
pub(crate) fn prompt_input(
    input: &sluice_contract::stages::PromptInput<'_>,
    max_text_bytes: usize,
) -> PromptInput {
    let message = |m: &sluice_contract::stages::ChatMessage| Message {
        role: m.role.clone(),
        content: m.content.clone(),
    };
    let inner = match input.built_in {
        [first, turns @ .., _] if first.role == "system" => turns,
        [turns @ .., _] => turns,
        [] => &[],
    };
    let settings = input.settings;
    PromptInput {
        question: input.question.to_string(),
        turns: (inner.iter())
            .map(|m| Turn {
                role: m.role.clone(),
                content: m.content.clone(),
            })
            .collect(),
        sources: (input.sources.iter().zip(1u32..))
            .map(|(h, number)| {
                let (section, page, _) = h.place.citation();
                Source {
                    number,
                    id: h.document.id.clone(),
                    title: h.document.title.clone(),
                    text: truncate(&h.text, max_text_bytes).to_string(),
                    section: section.unwrap_or_default(),
                    page: page.unwrap_or(0),
                    metadata: (h.document.metadata.iter())
                        .map(|(key, value)| (key.to_string(), value.to_json().to_string()))
                        .collect(),
                }
            })
            .collect(),
        context: (input.context.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        settings: PromptSettings {
            instructions: settings.instructions.clone().unwrap_or_default(),
            no_answer: settings.no_answer.clone().unwrap_or_default(),
            citations: settings.citations == Citations::Numbers,
            answer_without_sources: settings.answer_without_sources,
        },
        budget: u32::try_from(input.budget).unwrap_or(u32::MAX),
        built_in: input.built_in.iter().map(message).collect(),
    }
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
/// A failed call's input as the version's log keeps it: the query, the context and the
/// candidates, their texts cut to an equal share of [`CallInput::MAX_TEXT_BYTES`] when they
/// hold more.
pub(super) fn call_input(
    query: &str,
    context: &sluice_contract::stages::RerankContext,
    hits: &[sluice_contract::stages::Hit],
) -> CallInput {
    let total: usize = hits.iter().map(|h| h.text.len()).sum();
    let share = match total > CallInput::MAX_TEXT_BYTES {
        true => CallInput::MAX_TEXT_BYTES / hits.len().max(1),
        false => usize::MAX,
    };
    CallInput {
        query: query.to_string(),
        context: context.to_map(),
        candidates: (hits.iter())
            .map(|h| InputCandidate {
                id: h.document.id.clone(),
                title: h.document.title.clone(),
                chunk: h.chunk,
                score: h.score,
                text: truncate(&h.text, share).to_string(),
                metadata: h.document.metadata.clone(),
            })
            .collect(),
        cut: share != usize::MAX,
    }
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
