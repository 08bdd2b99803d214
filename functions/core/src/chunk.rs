//! Token-aware chunking: sentences packed into chunks of at most `max_tokens`, with the
//! last sentences of one chunk (up to `overlap_tokens`) repeated at the start of the next,
//! so that a fact near a boundary is retrievable from either side.

use sluice_contract::stages::Place;
use sluice_convert::Section;

/// A chunk and its length in model tokens (the sum of its sentences' counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextChunk {
    /// The chunk's text.
    pub text: String,
    /// Its length in model tokens.
    pub tokens: usize,
}

/// Splits `text` into chunks. `count` gives the number of model tokens in a piece of text.
///
/// A sentence longer than `max_tokens` is cut between words. Every word of the input
/// appears in at least one chunk, in order.
pub fn chunk_text(
    text: &str,
    max_tokens: usize,
    overlap_tokens: usize,
    count: &dyn Fn(&str) -> usize,
) -> Vec<TextChunk> {
    let pieces = pieces(text, None, max_tokens, count);
    pack(pieces, max_tokens, overlap_tokens)
        .into_iter()
        .map(|(chunk, _)| chunk)
        .collect()
}

/// Splits a document's sections into chunks as [`chunk_text`] splits text, a run of
/// sections under one heading path at a time: no chunk holds text of two paths, and each
/// records its path and the pages its sentences came from.
pub fn chunk_sections(
    sections: &[Section],
    max_tokens: usize,
    overlap_tokens: usize,
    count: &dyn Fn(&str) -> usize,
) -> Vec<(TextChunk, Place)> {
    let mut out = Vec::new();
    for run in sections.chunk_by(|a, b| a.path == b.path) {
        let pieces: Vec<Piece> = (run.iter())
            .flat_map(|s| pieces(&s.text, s.page, max_tokens, count))
            .collect();
        let section = run[0].path.join(" › ");
        for (chunk, pages) in pack(pieces, max_tokens, overlap_tokens) {
            let place = Place {
                section: section.clone(),
                pages,
            };
            out.push((chunk, place));
        }
    }
    out
}

/// A sentence (or a cut of a long one), its token count and its page.
type Piece = (String, usize, Option<u32>);

/// The sentences of `text`, each on `page`, long ones cut to `max_tokens`.
fn pieces(
    text: &str,
    page: Option<u32>,
    max_tokens: usize,
    count: &dyn Fn(&str) -> usize,
) -> Vec<Piece> {
    let max_tokens = max_tokens.max(1);
    let mut pieces = Vec::new();
    for sentence in sentences(text) {
        let n = count(sentence);
        if n <= max_tokens {
            pieces.push((sentence.to_string(), n, page));
        } else {
            let cuts = split_long(sentence, max_tokens, count);
            pieces.extend(cuts.into_iter().map(|(s, n)| (s, n, page)));
        }
    }
    pieces
}

/// Packs pieces into chunks of at most `max_tokens`, the last pieces of one (up to
/// `overlap_tokens`) repeated at the start of the next; each with the first and last page
/// of its pieces.
fn pack(
    pieces: Vec<Piece>,
    max_tokens: usize,
    overlap_tokens: usize,
) -> Vec<(TextChunk, Option<[u32; 2]>)> {
    let max_tokens = max_tokens.max(1);
    let mut chunks = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut used = 0;
    for (piece, n, page) in pieces {
        if used + n > max_tokens && !current.is_empty() {
            chunks.push(join(&current, used));
            // Carry the tail of this chunk over as overlap.
            let mut carried = Vec::new();
            let mut carried_tokens = 0;
            for (s, m, p) in current.iter().rev() {
                if carried_tokens + m > overlap_tokens || carried_tokens + m + n > max_tokens {
                    break;
                }
                carried_tokens += m;
                carried.push((s.clone(), *m, *p));
            }
            carried.reverse();
            current = carried;
            used = carried_tokens;
        }
        used += n;
        current.push((piece, n, page));
    }
    if !current.is_empty() {
        chunks.push(join(&current, used));
    }
    chunks
}

fn join(pieces: &[Piece], tokens: usize) -> (TextChunk, Option<[u32; 2]>) {
    let text = pieces
        .iter()
        .map(|(s, _, _)| s.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let pages = pieces.iter().filter_map(|(_, _, p)| *p);
    let pages = pages.clone().min().zip(pages.max()).map(|(a, b)| [a, b]);
    (TextChunk { text, tokens }, pages)
}

/// Sentences: text up to `.`, `!` or `?` followed by white space, or up to a blank line.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let end_of_sentence = matches!(c, '.' | '!' | '?') && next.is_none_or(char::is_whitespace);
        let paragraph = c == '\n' && next == Some('\n');
        if end_of_sentence || paragraph {
            let end = i + c.len_utf8();
            let s = text[start..end].trim();
            if !s.is_empty() {
                out.push(s);
            }
            start = end;
        }
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// Cuts an over-long sentence between words into pieces of at most `max_tokens`.
fn split_long(
    sentence: &str,
    max_tokens: usize,
    count: &dyn Fn(&str) -> usize,
) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    let mut used = 0;
    for word in sentence.split_whitespace() {
        let n = count(word).max(1);
        if used + n > max_tokens && !words.is_empty() {
            out.push((words.join(" "), used));
            words.clear();
            used = 0;
        }
        words.push(word);
        used += n;
    }
    if !words.is_empty() {
        out.push((words.join(" "), used));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    /// The chunks' texts, after checking that each reported count is the text's count.
    fn texts(text: &str, max: usize, overlap: usize) -> Vec<String> {
        let chunks = chunk_text(text, max, overlap, &words);
        for c in &chunks {
            assert_eq!(c.tokens, words(&c.text), "{c:?}");
        }
        chunks.into_iter().map(|c| c.text).collect()
    }

    #[test]
    fn short_text_is_one_chunk() {
        let chunks = texts("One sentence. Another one!", 50, 5);
        assert_eq!(chunks, vec!["One sentence. Another one!"]);
    }

    #[test]
    fn empty_text_gives_no_chunks() {
        assert!(texts("  \n\n ", 50, 5).is_empty());
    }

    #[test]
    fn chunks_respect_the_budget_and_overlap_at_sentence_boundaries() {
        let text = (0..40)
            .map(|i| format!("Sentence number {i} is here."))
            .collect::<Vec<_>>()
            .join(" ");
        let chunks = texts(&text, 20, 5);
        assert!(chunks.len() > 5, "{chunks:?}");
        for c in &chunks {
            assert!(words(c) <= 20, "{c}");
            assert!(
                c.ends_with('.'),
                "chunk should end at a sentence boundary: {c}"
            );
        }
        // Each chunk after the first starts with the last sentence of the previous one.
        for pair in chunks.windows(2) {
            let last_sentence = pair[0].rsplit_once(" Sentence").map(|(_, s)| s).unwrap();
            assert!(
                pair[1].starts_with(&format!("Sentence{last_sentence}").trim().to_string()),
                "{pair:?}"
            );
        }
        // Nothing lost: every sentence is in some chunk.
        for i in 0..40 {
            let s = format!("Sentence number {i} is here.");
            assert!(chunks.iter().any(|c| c.contains(&s)), "lost {s}");
        }
    }

    #[test]
    fn a_sentence_longer_than_the_budget_is_cut_between_words() {
        let text = (0..95)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let chunks = texts(&text, 30, 0);
        assert_eq!(chunks.len(), 4);
        assert!(chunks.iter().all(|c| words(c) <= 30));
        assert_eq!(chunks.join(" "), text);
    }

    #[test]
    fn paragraph_breaks_and_decimals() {
        let s = sentences("Title line\n\nPrice is 3.50 dollars. Next? Yes");
        assert_eq!(
            s,
            vec!["Title line", "Price is 3.50 dollars.", "Next?", "Yes"]
        );
    }

    #[test]
    fn sections_chunk_apart_with_their_path_and_pages() {
        let section = |path: &[&str], page: u32, text: &str| Section {
            path: path.iter().map(|p| p.to_string()).collect(),
            page: Some(page),
            text: text.into(),
        };
        let sections = [
            section(&["Cards"], 1, "Cards are free. They work abroad."),
            section(&["Cards", "Lost"], 1, "Call us at once."),
            // The same path over a page break: one run, chunks that span the pages.
            section(
                &["Cards", "Lost"],
                2,
                "We send a new card. It takes five days.",
            ),
            section(&["Loans"], 3, "Loans cost interest."),
        ];
        let chunks = chunk_sections(&sections, 9, 0, &words);
        let summary: Vec<(String, &str, Option<[u32; 2]>)> = (chunks.iter())
            .map(|(c, p)| (c.text.clone(), p.section.as_str(), p.pages))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "Cards are free. They work abroad.".into(),
                    "Cards",
                    Some([1, 1])
                ),
                (
                    "Call us at once. We send a new card.".into(),
                    "Cards › Lost",
                    Some([1, 2])
                ),
                ("It takes five days.".into(), "Cards › Lost", Some([2, 2])),
                ("Loans cost interest.".into(), "Loans", Some([3, 3])),
            ]
        );
        // Text without pages has none.
        let plain = [Section {
            path: vec!["A".into()],
            page: None,
            text: "x y.".into(),
        }];
        assert_eq!(chunk_sections(&plain, 8, 0, &words)[0].1.pages, None);
    }
}
