//! A text as the grounding check reads it: paragraphs of sentences, sentences of clauses,
//! clauses of [`Term`]s — each with its span in characters — and what each term is: a content
//! word, a fact, or neither.

use std::collections::HashSet;
use std::ops::Range;

use sluice_contract::grounding::FactKind;

use super::segment::{blank_citations, clauses, is_heading, sentences, trim_marker};
use super::visible::visible;
use crate::language::words::{NOT, STOP, stem};
use crate::language::words_in;

/// Function words beyond the guard's ([`STOP`]): what a question or an answer says them with
/// changes nothing a source must state (pronouns, question words, conjunctions, the
/// prepositions an answer rewords freely).
const FUNCTION: &[&str] = &[
    "you",
    "your",
    "yours",
    "yourself",
    "they",
    "them",
    "their",
    "theirs",
    "he",
    "him",
    "his",
    "she",
    "her",
    "hers",
    "who",
    "whom",
    "whose",
    "what",
    "which",
    "when",
    "where",
    "why",
    "how",
    "if",
    "or",
    "but",
    "in",
    "into",
    "from",
    "within",
    "up",
    "out",
    "any",
    "some",
    "these",
    "those",
    "yes",
    "ok",
    "okay",
    "sure",
    "both",
    "either",
    "via",
    "per",
    "after",
    "before",
    "until",
    "while",
    "ones",
    "still",
    "only",
    "more",
    "most",
    "much",
    "many",
    "very",
    "again",
    "other",
    "another",
    "such",
    "same",
    "long",
    "take",
    "takes",
    "need",
    "needs",
    "use",
    "let",
    "lets",
    "make",
    "makes",
    "made",
    "know",
    "say",
    "says",
    "said",
    "according",
    "source",
    "sources",
    "document",
    "documents",
    "mention",
    "mentions",
    "mentioned",
    "state",
    "states",
    "stated",
];

/// Words after a number that make it an amount.
const MONEY: &[&str] = &[
    "dollar", "dollars", "usd", "eur", "euro", "euros", "pound", "pounds", "gbp", "cent", "cents",
    "percent", "pence",
];
/// Words after a number that make it a duration.
const SPANS_OF_TIME: &[&str] = &[
    "second", "seconds", "minute", "minutes", "hour", "hours", "day", "days", "week", "weeks",
    "month", "months", "year", "years", "business", "working", "calendar",
];
/// Words that are dates by themselves.
const CALENDAR: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// Words after which "no" or "not" bounds a number instead of negating ("no more than one").
const BOUNDS: &[&str] = &[
    "more", "less", "fewer", "later", "earlier", "longer", "over", "under",
];

/// A word of a clause, read.
#[derive(Debug, Clone)]
pub(super) struct Term {
    /// What identical words share: the stem (numbers as their value).
    pub key: String,
    /// The canonical word (for the lexicon).
    pub text: String,
    /// Characters of the passage it was read from.
    pub span: Range<usize>,
    /// Counted when a passage is matched against it.
    pub content: bool,
    /// What kind of fact it is, if it is one.
    pub fact: Option<FactKind>,
}

/// A clause: a sentence, or the part of one between `;`, a dash, or a comma and a
/// conjunction ("…five business days; express delivery in two costs $15").
#[derive(Debug, Clone)]
pub(super) struct Clause {
    pub span: Range<usize>,
    pub terms: Vec<Term>,
    /// The sentence it belongs to (index into [`Passage::sentences`]).
    pub sentence: usize,
    /// The keys of its content words.
    pub keys: HashSet<String>,
    /// The keys of the content words before it in its paragraph (and the heading above).
    pub context: HashSet<String>,
}

impl Clause {
    /// Its facts.
    pub fn facts(&self) -> impl Iterator<Item = &Term> {
        self.terms.iter().filter(|t| t.fact.is_some())
    }

    /// How many times it says "not" (or "no", "never", "can't", …): "is not met, … is not
    /// charged" is not "is not met, … is charged".
    pub fn negations(&self) -> usize {
        (self.terms.iter())
            .filter(|t| t.fact == Some(FactKind::Negation))
            .count()
    }
}

/// A sentence: its span, its clauses (in [`Passage::clauses`]) and the sources it cites.
#[derive(Debug, Clone)]
pub(super) struct Sentence {
    pub span: Range<usize>,
    pub clauses: Range<usize>,
    /// `[n]` markers in it, in order, without repeats.
    pub cites: Vec<usize>,
    /// A Markdown heading line: context for what follows, never evidence itself.
    pub heading: bool,
}

/// A text read into sentences and clauses.
#[derive(Debug, Clone)]
pub(super) struct Passage {
    pub chars: Vec<char>,
    pub sentences: Vec<Sentence>,
    pub clauses: Vec<Clause>,
}

impl Passage {
    /// Reads `text` as [`visible`] shows it; every span is in `text` as written.
    pub fn read(text: &str) -> Self {
        let written: Vec<char> = text.chars().collect();
        let (chars, origin) = visible(&written);
        // Citation markers are read as cites and blanked, so that their digits are no facts.
        let (plain, marks) = blank_citations(&chars);
        let mut passage = Passage {
            chars,
            sentences: Vec::new(),
            clauses: Vec::new(),
        };
        let mut context: HashSet<String> = HashSet::new();
        let mut heading_keys: HashSet<String> = HashSet::new();
        for (span, paragraph_start) in sentences(&plain) {
            if paragraph_start {
                context = heading_keys.clone();
            }
            let heading = is_heading(&plain[span.clone()]);
            let first = passage.clauses.len();
            let index = passage.sentences.len();
            let body = trim_marker(&plain, span.clone());
            for clause in clauses(&plain, body) {
                let text: String = plain[clause.clone()].iter().collect();
                let terms = terms(&text, clause.start, &plain);
                let keys: HashSet<String> = (terms.iter().filter(|t| t.content))
                    .map(|t| t.key.clone())
                    .collect();
                let before = context.clone();
                context.extend(keys.iter().cloned());
                passage.clauses.push(Clause {
                    span: clause,
                    terms,
                    sentence: index,
                    keys,
                    context: before,
                });
            }
            if heading {
                heading_keys = (passage.clauses[first..].iter())
                    .flat_map(|c| c.keys.iter().cloned())
                    .collect();
                context = heading_keys.clone();
            }
            let cites = marks
                .iter()
                .filter(|(at, _)| span.contains(at))
                .map(|(_, n)| *n)
                .fold(Vec::new(), |mut cites, n| {
                    if !cites.contains(&n) {
                        cites.push(n);
                    }
                    cites
                });
            passage.sentences.push(Sentence {
                span,
                clauses: first..passage.clauses.len(),
                cites,
                heading,
            });
        }
        // Back to the places of the text as written.
        let at = |span: &Range<usize>| origin[span.start]..origin[span.end];
        for sentence in &mut passage.sentences {
            sentence.span = at(&sentence.span);
        }
        for clause in &mut passage.clauses {
            clause.span = at(&clause.span);
            for term in &mut clause.terms {
                term.span = at(&term.span);
            }
        }
        passage.chars = written;
        passage
    }

    /// Characters `span` of the text.
    pub fn text(&self, span: &Range<usize>) -> String {
        self.chars[span.clone()].iter().collect()
    }
}

/// The terms of a clause whose text is `text`, starting at character `offset` of `chars`.
fn terms(text: &str, offset: usize, chars: &[char]) -> Vec<Term> {
    let words = words_in(text);
    let mut out: Vec<Term> = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let span = word.span.start + offset..word.span.end + offset;
        let next = words.get(i + 1).map(|w| w.text.as_str());
        let written: String = chars[span.clone()].iter().collect();
        let digits = word.text.bytes().any(|b| b.is_ascii_digit());
        let function = STOP.contains(&word.text.as_str()) || FUNCTION.contains(&word.text.as_str());
        // The characters around it: a currency sign before, a percent sign after.
        let sign = span.start.checked_sub(1).and_then(|p| chars.get(p));
        let sign = matches!(sign, Some('$' | '€' | '£'));
        let percent = chars.get(span.end) == Some(&'%');
        // "no more than", "not later than": a bound, not a negation.
        let bound = next.is_some_and(|n| BOUNDS.contains(&n));
        let fact = if word.text == NOT {
            (!bound).then_some(FactKind::Negation)
        } else if digits {
            let unit = next.is_some_and(|n| SPANS_OF_TIME.contains(&n));
            // "one" is a number only when it counts something ("one business day").
            let counts = unit || !written.eq_ignore_ascii_case("one");
            if !counts {
                None
            } else if sign || percent || next.is_some_and(|n| MONEY.contains(&n)) {
                Some(FactKind::Amount)
            } else if word.text.contains(':') || next.is_some_and(|n| matches!(n, "am" | "pm")) {
                Some(FactKind::Time)
            } else if unit {
                Some(FactKind::Duration)
            } else if word.text.len() == 4
                && (1900..=2100).contains(&word.text.parse::<u32>().unwrap_or(0))
            {
                Some(FactKind::Date)
            } else {
                Some(FactKind::Number)
            }
        } else if CALENDAR.contains(&word.text.as_str())
            // "may" the verb is no month.
            && (word.text != "may" || written.starts_with('M'))
        {
            Some(FactKind::Date)
        } else if i > 0
            && written.chars().next().is_some_and(char::is_uppercase)
            && written != "I"
            && !function
        {
            Some(FactKind::Name)
        } else {
            None
        };
        let content = !digits && word.text != NOT && !function && fact != Some(FactKind::Date);
        // An amount is shown with its sign: "$15", "3%".
        let span = match fact {
            Some(FactKind::Amount) => {
                span.start - usize::from(sign)..span.end + usize::from(percent)
            }
            _ => span,
        };
        out.push(Term {
            key: stem(&word.text),
            text: word.text.clone(),
            span,
            content,
            fact,
        });
    }
    out
}
