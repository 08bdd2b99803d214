//! What lets a reader check an answer against its sources: each source's evidence sentences
//! ([`Highlight`]) and the best of them ([`Extract`]) in `meta`, before the first token; and
//! after the last, a verdict on every sentence of the answer ([`Grounding`], in `done`).
//!
//! Every span is in characters (Unicode scalar values, not bytes or UTF-16 units), `start`
//! inclusive, `end` exclusive: of the source's chunk text for a highlight and an evidence
//! span, of the answer's text (its tokens joined) for a sentence and a fact.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A sentence of a source's chunk that answers the question, with the text itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Highlight {
    /// First character, in the chunk's text.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The sentence.
    pub text: String,
    /// How much of the question's weighted words the sentence holds, 0 to 1.
    pub score: f32,
}

/// The single best evidence sentence over all sources: an extractive answer a page can show
/// before the LLM's first token (`meta.extract`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extract {
    /// The source it is from, numbered from 1 as the prompt cites it.
    pub source: usize,
    /// First character, in that source's chunk text.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The sentence.
    pub text: String,
    /// As [`Highlight::score`].
    pub score: f32,
}

/// What the grounding check does with a tenant's answers (`SLUICE_GROUNDING`, and the
/// tenant's `grounding` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroundingMode {
    /// No verdict; answers are cached as they are.
    Off,
    /// A verdict in `done` (the default); an answer it finds unsupported is not cached.
    #[default]
    Annotate,
    /// As `annotate`, and an answer with an unsupported sentence carries `ungrounded` in
    /// `done.degraded`; the non-streaming routes refuse it (422 `ungrounded`).
    Strict,
}

impl GroundingMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            GroundingMode::Off => "off",
            GroundingMode::Annotate => "annotate",
            GroundingMode::Strict => "strict",
        }
    }
}

impl fmt::Display for GroundingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for GroundingMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(GroundingMode::Off),
            "annotate" => Ok(GroundingMode::Annotate),
            "strict" => Ok(GroundingMode::Strict),
            other => Err(format!(
                "{other:?} is not a grounding mode (off, annotate or strict)"
            )),
        }
    }
}

/// The verdict on an answer: each sentence checked against the sources (`done.grounding`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grounding {
    /// The mean of the sentences' scores, 0 to 1 (1 for an answer with nothing to check).
    pub score: f32,
    /// How many sentences no source supports.
    pub unsupported: usize,
    /// Every sentence of the answer, in order.
    pub sentences: Vec<SentenceCheck>,
}

impl Grounding {
    /// Whether every sentence is supported.
    pub fn grounded(&self) -> bool {
        self.unsupported == 0
    }

    /// `answer` (the text the verdict is on) with each unsupported fact between `open` and
    /// `close` (character offsets). Facts that overlap or touch are marked as one, and a span
    /// that is empty or runs past the answer is cut to it: every `open` has its `close`.
    pub fn marked(&self, answer: &str, open: &str, close: &str) -> String {
        let length = answer.chars().count();
        let mut spans: Vec<(usize, usize)> = (self.sentences.iter())
            .flat_map(|s| &s.unsupported_facts)
            .map(|f| (f.start.min(length), f.end.min(length)))
            .filter(|(start, end)| start < end)
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let mut out = String::with_capacity(answer.len() + merged.len() * 8);
        let mut spans = merged.into_iter().peekable();
        for (i, c) in answer.chars().enumerate() {
            if spans.peek().is_some_and(|&(start, _)| start == i) {
                out.push_str(open);
            }
            out.push(c);
            if spans.peek().is_some_and(|&(_, end)| end == i + 1) {
                out.push_str(close);
                spans.next();
            }
        }
        out
    }

    /// One line for people: how many sentences the sources support, and the score.
    pub fn summary(&self) -> String {
        let total = self.sentences.len();
        format!(
            "grounding: {} of {total} sentences supported by the sources, score {:.2}",
            total - self.unsupported,
            self.score
        )
    }
}

/// One sentence of the answer, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentenceCheck {
    /// First character, in the answer.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The sources it cites (`[n]`), as numbered in the prompt.
    pub cites: Vec<usize>,
    /// Whether a passage of one source states what it says.
    pub supported: bool,
    /// How well the best passage covers it, 0 to 1 (its words weighted by how rare they are
    /// in the sources, times the share of its facts the passage states).
    pub score: f32,
    /// The passage it rests on (when supported), or the closest one (when not); absent when
    /// no source comes near it or it states nothing to check ("I don't know.").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,
    /// Its facts the passage does not state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported_facts: Vec<Fact>,
}

/// A passage of a source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The source, numbered from 1.
    pub source: usize,
    /// First character, in the source's chunk text.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The passage.
    pub text: String,
}

/// A fact of an answer's sentence: a word or run of words whose change changes what it says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// What kind of fact.
    pub kind: FactKind,
    /// First character, in the answer.
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The fact as the answer writes it.
    pub text: String,
}

/// The kinds of [`Fact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactKind {
    /// A number with no unit the check knows.
    Number,
    /// Money or a share: `$15`, `25 dollars`, `3%`.
    Amount,
    /// A year, a month or a day of the week.
    Date,
    /// A time of day: `9:30`, `5 pm`.
    Time,
    /// A number of days, weeks, months, years, hours or minutes.
    Duration,
    /// A capitalised word inside a sentence: a product, place, person or brand.
    Name,
    /// A negation one side has and the other has not.
    Negation,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_facts_are_marked_where_they_stand() {
        let fact = |start, end| Fact {
            kind: FactKind::Number,
            start,
            end,
            text: String::new(),
        };
        let verdict = Grounding {
            score: 0.5,
            unsupported: 1,
            sentences: vec![SentenceCheck {
                start: 0,
                end: 21,
                cites: vec![1],
                supported: false,
                score: 0.5,
                evidence: None,
                unsupported_facts: vec![fact(13, 15), fact(0, 3)],
            }],
        };
        assert_eq!(
            verdict.marked("Une carte en 10 jours.", "[", "]"),
            "[Une] carte en [10] jours."
        );
        assert_eq!(
            verdict.summary(),
            "grounding: 0 of 1 sentences supported by the sources, score 0.50"
        );
    }

    #[test]
    fn every_mark_is_closed_whatever_the_facts_spans() {
        let answer = "Une carte arrive en 10 jours ouvrés.";
        let length = answer.chars().count();
        let fact = |start, end| Fact {
            kind: FactKind::Number,
            start,
            end,
            text: String::new(),
        };
        let cases = [
            (
                vec![(4, 9), (6, 12)],
                "Une [carte ar]rive en 10 jours ouvrés.",
            ),
            (
                vec![(4, 9), (4, 5)],
                "Une [carte] arrive en 10 jours ouvrés.",
            ),
            (
                vec![(4, 9), (9, 16)],
                "Une [carte arrive] en 10 jours ouvrés.",
            ),
            (
                vec![(20, 20), (29, 99)],
                "Une carte arrive en 10 jours [ouvrés.]",
            ),
            (vec![(40, 50)], "Une carte arrive en 10 jours ouvrés."),
        ];
        for (spans, marked) in cases {
            let verdict = Grounding {
                score: 0.0,
                unsupported: 1,
                sentences: vec![SentenceCheck {
                    start: 0,
                    end: length,
                    cites: vec![],
                    supported: false,
                    score: 0.0,
                    evidence: None,
                    unsupported_facts: spans.iter().map(|&(a, b)| fact(a, b)).collect(),
                }],
            };
            let out = verdict.marked(answer, "[", "]");
            assert_eq!(out, marked, "{spans:?}");
            assert_eq!(
                out.matches('[').count(),
                out.matches(']').count(),
                "{spans:?}"
            );
        }
    }
}
