//! Where a text's sentences and clauses are: citation markers read and blanked, sentence
//! ends (punctuation, blank lines, headings, list items, a statement a line), and the cuts
//! inside a sentence. Spans are in characters; what the words in them are is [`super::passage`].

use std::ops::Range;

/// `chars` with every citation marker (`[3]`, `[1, 2]`) turned into spaces, and where each
/// number was.
pub(super) fn blank_citations(chars: &[char]) -> (Vec<char>, Vec<(usize, usize)>) {
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
pub(super) fn sentences(chars: &[char]) -> Vec<(Range<usize>, bool)> {
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

pub(super) fn is_heading(chars: &[char]) -> bool {
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
pub(super) fn trim_marker(chars: &[char], span: Range<usize>) -> Range<usize> {
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
pub(super) fn clauses(chars: &[char], span: Range<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = span.start;
    let mut i = span.start;
    // The word starting at `at`, within the span (none past its end: a comma that ends the
    // span may be followed by the next sentence's space).
    let word_at = |at: usize| -> String {
        chars[at.min(span.end)..span.end]
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
