//! Evidence before the first token: in each source, the sentences that best answer the
//! question (`highlights`), and the best of all (`meta.extract`).

use std::collections::HashSet;

use sluice_contract::grounding::{Extract, Highlight};

use super::Sources;
use super::passage::Passage;
use crate::language::lexicon::Lexicon;

/// The highlights of a source: at most this many sentences.
pub const HIGHLIGHTS_PER_SOURCE: usize = 2;
/// A sentence holding less of the question's weighted words is no highlight.
pub const MIN_HIGHLIGHT: f32 = 0.25;
/// The extract must hold at least this much of them.
pub const MIN_EXTRACT: f32 = 0.4;

/// The evidence of an answer's sources for its question.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// Per source, in the order given, its highlights, best first.
    pub highlights: Vec<Vec<Highlight>>,
    /// The best sentence of all, if one holds enough of the question.
    pub extract: Option<Extract>,
}

/// The sentences of `sources` (chunk texts, numbered from 1 in this order) that best answer
/// `question`, scored by the weighted share of the question's content words each holds.
pub fn evidence(question: &str, sources: &[&str], lexicon: &Lexicon) -> Evidence {
    let asked = Passage::read(question);
    let terms: Vec<_> = (asked.clauses.iter())
        .flat_map(|c| c.terms.iter().filter(|t| t.content))
        .collect();
    let keys: HashSet<&str> = terms.iter().map(|t| t.key.as_str()).collect();
    let mut read = Sources::read(sources, lexicon);
    read.learn(&terms);
    let mut best: Option<Extract> = None;
    let mut highlights = Vec::with_capacity(sources.len());
    for (n, passage) in read.passages.iter().enumerate() {
        let mut scored: Vec<Highlight> = Vec::new();
        for sentence in (passage.sentences.iter()).filter(|s| !s.heading && !s.clauses.is_empty()) {
            // The sentence's clauses as one: their words, after the context of the first.
            let clauses = &passage.clauses[sentence.clauses.clone()];
            let own: HashSet<String> = (clauses.iter())
                .flat_map(|c| c.keys.iter().cloned())
                .collect();
            let score = read.coverage_by(&own, &clauses[0].context, keys.iter().copied());
            if score >= MIN_HIGHLIGHT && !keys.is_empty() {
                scored.push(Highlight {
                    start: sentence.span.start,
                    end: sentence.span.end,
                    text: passage.text(&sentence.span),
                    score: rounded(score),
                });
            }
        }
        // Best first; of equal scores the earlier sentence.
        scored.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.start.cmp(&b.start)));
        scored.truncate(HIGHLIGHTS_PER_SOURCE);
        if let Some(top) = scored.first()
            && top.score >= MIN_EXTRACT
            && best.as_ref().is_none_or(|b| top.score > b.score)
        {
            best = Some(Extract {
                source: n + 1,
                start: top.start,
                end: top.end,
                text: top.text.clone(),
                score: top.score,
            });
        }
        highlights.push(scored);
    }
    Evidence {
        highlights,
        extract: best,
    }
}

/// A score to three decimals, as the wire shows it.
pub(super) fn rounded(score: f32) -> f32 {
    (score * 1000.0).round() / 1000.0
}
