//! A text as the grounding check reads it: paragraphs of sentences, sentences of clauses,
//! clauses of [`Term`]s — each with its span in characters — and what each term is: a content
//! word, a fact, or neither.

use std::collections::HashSet;
use std::ops::Range;

use sluice_contract::grounding::FactKind;

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
    /// Reads `text`.
    pub fn read(text: &str) -> Self {
        let chars: Vec<char> = text.chars().collect();
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
        passage
    }

    /// Characters `span` of the text.
    pub fn text(&self, span: &Range<usize>) -> String {
        self.chars[span.clone()].iter().collect()
    }
}

/// `chars` with every citation marker (`[3]`, `[1, 2]`) turned into spaces, and where each
/// number was.
fn blank_citations(chars: &[char]) -> (Vec<char>, Vec<(usize, usize)>) {
    let mut plain = chars.to_vec();
    let mut marks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '['
            && let Some(len) = chars[i + 1..].iter().take(13).position(|&c| c == ']')
            && len > 0
            && len <= 12
        {
            let inside: String = chars[i + 1..i + 1 + len].iter().collect();
            let numbers: Option<Vec<usize>> = inside
                .split(',')
                .map(|n| n.trim().parse::<usize>().ok())
                .collect();
            if let Some(numbers) = numbers {
                marks.extend(numbers.into_iter().map(|n| (i, n)));
                plain[i..=i + 1 + len].iter_mut().for_each(|c| *c = ' ');
                i += len + 2;
                continue;
            }
        }
        i += 1;
    }
    (plain, marks)
}

/// Abbreviations whose full stop ends no sentence.
const ABBREVIATIONS: &[&str] = &[
    "e.g", "i.e", "etc", "vs", "mr", "mrs", "ms", "dr", "no", "st", "approx", "incl", "inc", "ltd",
    "co", "jr", "sr",
];

/// The sentences of `chars`, trimmed, each with whether it starts a paragraph: a sentence ends
/// at `.`, `!` or `?` before a space or the end (not after an abbreviation or an initial), at
/// a blank line, at the end of a heading line, before a list item and before a line that
/// starts with a capital (a statement a line, as in `Notice period: 5 days`); a line break
/// before a lowercase word (hard-wrapped text) does not end it.
fn sentences(chars: &[char]) -> Vec<(Range<usize>, bool)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut paragraph = true;
    let push =
        |out: &mut Vec<(Range<usize>, bool)>, from: usize, to: usize, paragraph: &mut bool| {
            let (mut a, mut b) = (from, to);
            while a < b && chars[a].is_whitespace() {
                a += 1;
            }
            while b > a && chars[b - 1].is_whitespace() {
                b -= 1;
            }
            if b > a && chars[a..b].iter().any(|c| c.is_alphanumeric()) {
                out.push((a..b, *paragraph));
                *paragraph = false;
            }
        };
    let (mut i, mut line_start) = (0, 0);
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            let this_line: String = chars[line_start..i].iter().collect();
            line_start = i + 1;
            let rest = &chars[i + 1..];
            let next_line: String = rest.iter().take_while(|&&c| c != '\n').collect();
            let blank_next = next_line.trim().is_empty();
            let capital = next_line.trim_start().starts_with(char::is_uppercase);
            if blank_next
                || is_heading_line(&this_line)
                || starts_item(&next_line)
                || is_heading_line(&next_line)
                || capital
            {
                push(&mut out, start, i, &mut paragraph);
                start = i + 1;
                if blank_next || is_heading_line(&this_line) || is_heading_line(&next_line) {
                    paragraph = true;
                }
            }
        } else if matches!(c, '.' | '!' | '?') {
            let next = chars.get(i + 1).copied();
            let ends = match next {
                None => true,
                Some(n) => n.is_whitespace() || matches!(n, '"' | '\u{201d}' | ')' | '*'),
            };
            let word: String = chars[..i]
                .iter()
                .rev()
                .take_while(|c| c.is_alphanumeric() || **c == '.')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let abbreviation = c == '.'
                && (ABBREVIATIONS.contains(&word.to_lowercase().as_str())
                    || (word.chars().count() == 1 && word.chars().all(char::is_uppercase)));
            if ends && !abbreviation {
                let mut end = i + 1;
                while end < chars.len() && matches!(chars[end], '"' | '\u{201d}' | ')' | '*') {
                    end += 1;
                }
                push(&mut out, start, end, &mut paragraph);
                start = end;
                i = end;
                continue;
            }
        }
        i += 1;
    }
    push(&mut out, start, chars.len(), &mut paragraph);
    out
}

fn is_heading_line(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

fn is_heading(chars: &[char]) -> bool {
    chars.first() == Some(&'#')
}

/// Whether a line starts a list item (`- `, `* `, `• `, `1. `, `2) `).
fn starts_item(line: &str) -> bool {
    let line = line.trim_start();
    if line.starts_with("- ") || line.starts_with("* ") || line.starts_with("• ") {
        return true;
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && (line[digits..].starts_with(". ") || line[digits..].starts_with(") "))
}

/// `span` without a heading's `#`s or a list item's marker in front.
fn trim_marker(chars: &[char], span: Range<usize>) -> Range<usize> {
    let mut a = span.start;
    while a < span.end && matches!(chars[a], '#' | '-' | '*' | '•' | '>') {
        a += 1;
    }
    let digits = chars[a..span.end]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if digits > 0
        && matches!(chars.get(a + digits), Some('.' | ')'))
        && chars.get(a + digits + 1) == Some(&' ')
    {
        a += digits + 1;
    }
    while a < span.end && chars[a].is_whitespace() {
        a += 1;
    }
    a..span.end
}

/// Conjunctions that start a clause of their own after a comma.
const JOINS: &[&str] = &[
    "but", "while", "whereas", "or", "and", "although", "though", "except",
];

/// The clauses of a sentence: split at `;`, at a dash between spaces, and before a comma and
/// one of [`JOINS`] (or before "but" and "whereas" without one).
fn clauses(chars: &[char], span: Range<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = span.start;
    let mut i = span.start;
    let word_at = |at: usize| -> String {
        chars[at..span.end]
            .iter()
            .take_while(|c| c.is_alphabetic())
            .collect::<String>()
            .to_lowercase()
    };
    while i < span.end {
        let c = chars[i];
        let cut = match c {
            ';' => Some(i + 1),
            '\u{2014}' | '\u{2013}' if i > 0 && chars[i - 1] == ' ' => Some(i + 1),
            ',' if chars.get(i + 1) == Some(&' ') && JOINS.contains(&word_at(i + 2).as_str()) => {
                Some(i + 1)
            }
            ' ' if matches!(word_at(i + 1).as_str(), "but" | "whereas") => Some(i),
            _ => None,
        };
        if let Some(next) = cut {
            push_clause(chars, &mut out, start, i);
            start = next;
        }
        i += 1;
    }
    push_clause(chars, &mut out, start, span.end);
    out
}

fn push_clause(chars: &[char], out: &mut Vec<Range<usize>>, from: usize, to: usize) {
    let (mut a, mut b) = (from, to);
    while a < b && chars[a].is_whitespace() {
        a += 1;
    }
    while b > a && (chars[b - 1].is_whitespace() || matches!(chars[b - 1], ',' | ';')) {
        b -= 1;
    }
    if chars[a..b].iter().any(|c| c.is_alphanumeric()) {
        out.push(a..b);
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
