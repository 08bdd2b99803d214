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

/// A chunk of a document's sections: its text, where it lies, and the header retrieval
/// reads before it ([`StoredChunk::header`](sluice_contract::stages::StoredChunk::header)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedChunk {
    /// The text and its token count.
    pub chunk: TextChunk,
    /// Its section path and pages.
    pub place: Place,
    /// The contextual header ([`context_header`]); empty when none is asked for.
    pub header: String,
}

/// Splits a document's sections into chunks, a run of sections under one heading path at a
/// time: a run that fits in a chunk is never cut, and one longer than a chunk is cut as
/// [`chunk_text`] cuts text, into chunks of its own. So no chunk straddles two paths, unless
/// `pack_runs`: then runs that fit share a chunk with the runs around them while they fit
/// too, each under its own heading line (chunks as large as plain text makes, for corpora of
/// short sections). Each chunk records the pages its sentences came from and its section
/// path: the run's, or the path the runs it holds share.
///
/// With a `title`, each chunk gets the [`context_header`] of the title and its path, and
/// the document's longest header (at most a quarter of `max_tokens`) is taken from every
/// chunk's budget, so that the embedder reads header and text as one window.
pub fn chunk_sections(
    sections: &[Section],
    title: Option<&str>,
    pack_runs: bool,
    max_tokens: usize,
    overlap_tokens: usize,
    count: &dyn Fn(&str) -> usize,
) -> Vec<PlacedChunk> {
    let runs: Vec<&[Section]> = sections.chunk_by(|a, b| a.path == b.path).collect();
    let header =
        |path: &[String]| title.map_or_else(String::new, |t| context_header(t, &path.join(" › ")));
    let reserve = (runs.iter())
        .map(|run| count(&header(&run[0].path)))
        .max()
        .unwrap_or(0)
        .min(max_tokens / 4);
    let budget = max_tokens - reserve;
    let mut out = Vec::new();
    let mut group = Group::default();
    for run in runs {
        let path = &run[0].path;
        let pieces: Vec<Piece> = (run.iter())
            .flat_map(|s| pieces(&s.text, s.page, budget, count))
            .collect();
        // Its heading line, should it share a chunk, is counted whether or not it will.
        let heading = path.last().map_or(0, |h| count(h));
        let tokens = pieces.iter().map(|(_, n, _)| n).sum::<usize>() + heading;
        if tokens <= budget {
            if !pack_runs || group.tokens + tokens > budget {
                out.extend(group.flush(&header));
            }
            group.tokens += tokens;
            group.runs.push((path.clone(), pieces, heading));
        } else {
            out.extend(group.flush(&header));
            for (chunk, pages) in pack(pieces, budget, overlap_tokens) {
                out.push(PlacedChunk {
                    chunk,
                    place: Place {
                        section: path.join(" › "),
                        pages,
                    },
                    header: header(path),
                });
            }
        }
    }
    out.extend(group.flush(&header));
    out
}

/// Whole runs of sections gathered into one chunk: each run's heading path, sentences and
/// the tokens of its heading line; and the tokens of all (headings counted).
#[derive(Default)]
struct Group {
    runs: Vec<(Vec<String>, Vec<Piece>, usize)>,
    tokens: usize,
}

impl Group {
    /// The chunk of the runs gathered (none when there are none), and an empty group. Its
    /// path is the one the runs share; a run whose path goes beyond it is led by its heading.
    fn flush(&mut self, header: &dyn Fn(&[String]) -> String) -> Option<PlacedChunk> {
        let runs = std::mem::take(&mut self.runs);
        self.tokens = 0;
        let first = &runs.first()?.0;
        let shared = (runs.iter()).fold(first.len(), |n, (path, _, _)| {
            n.min(path.iter().zip(first).take_while(|(a, b)| a == b).count())
        });
        let path = first[..shared].to_vec();
        let alone = runs.len() == 1;
        let mut texts = Vec::with_capacity(runs.len());
        let mut pieces = Vec::new();
        let mut tokens = 0;
        for (run_path, run_pieces, heading_tokens) in runs {
            let sentences: Vec<&str> = run_pieces.iter().map(|(s, _, _)| s.as_str()).collect();
            let text = sentences.join(" ");
            tokens += run_pieces.iter().map(|(_, n, _)| n).sum::<usize>();
            texts.push(match run_path.last() {
                Some(heading) if !alone && run_path.len() > shared => {
                    tokens += heading_tokens;
                    format!("{heading}\n{text}")
                }
                _ => text,
            });
            pieces.extend(run_pieces);
        }
        let chunk = TextChunk {
            text: texts.join("\n\n"),
            tokens,
        };
        Some(PlacedChunk {
            chunk,
            place: Place {
                section: path.join(" › "),
                pages: pages_of(&pieces),
            },
            header: header(&path),
        })
    }
}

/// The header retrieval reads before a chunk: its document's `title` and its `section`
/// path, `Title › Part › Section` (the path alone when it already begins with the title, as a
/// Markdown file's first heading often does).
pub fn context_header(title: &str, section: &str) -> String {
    let title = title.trim();
    if title.is_empty() || section == title || section.starts_with(&format!("{title} › ")) {
        section.to_string()
    } else if section.is_empty() {
        title.to_string()
    } else {
        format!("{title} › {section}")
    }
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
    (TextChunk { text, tokens }, pages_of(pieces))
}

/// The first and the last page of `pieces` (none when none has a page).
fn pages_of(pieces: &[Piece]) -> Option<[u32; 2]> {
    let pages = pieces.iter().filter_map(|(_, _, p)| *p);
    pages.clone().min().zip(pages.max()).map(|(a, b)| [a, b])
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

/// Cuts an over-long sentence between words into pieces of at most `max_tokens`; a word
/// longer than that on its own (a run without spaces: a hash, base64, or a hostile
/// document's one-megabyte "word") is cut inside itself.
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
        if n > max_tokens {
            if !words.is_empty() {
                out.push((words.join(" "), used));
                words.clear();
                used = 0;
            }
            // A token is at least a byte to any tokenizer the count stands for, so a cut of
            // `max_tokens` bytes is within the budget.
            out.extend(cut_bytes(word, max_tokens).map(|cut| (cut.to_string(), count(cut).max(1))));
            continue;
        }
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

/// `word` in consecutive cuts of at most `max_bytes` bytes (at least a character each).
fn cut_bytes(word: &str, max_bytes: usize) -> impl Iterator<Item = &str> {
    let mut rest = word;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut at = rest.len().min(max_bytes.max(1));
        while !rest.is_char_boundary(at) {
            at -= 1;
        }
        if at == 0 {
            at = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (cut, after) = rest.split_at(at);
        rest = after;
        Some(cut)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    /// A section without a page.
    fn section(path: &[&str], text: &str) -> Section {
        Section {
            path: path.iter().map(|p| p.to_string()).collect(),
            page: None,
            text: text.into(),
        }
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

    /// A run without spaces counts (as the embedder counts it) up to a token per byte; such a
    /// run past the chunk size is cut inside itself, so that no chunk is over the budget and
    /// none is a megabyte that the prompt would send whole.
    #[test]
    fn a_word_longer_than_a_chunk_is_cut_inside_itself() {
        let bytes_when_long = |s: &str| -> usize {
            (s.split_whitespace())
                .map(|w| if w.len() > 100 { w.len() } else { 1 })
                .sum()
        };
        let text = format!("Before it. {} After it.", "x".repeat(10_000));
        let chunks = chunk_text(&text, 256, 32, &bytes_when_long);
        for c in &chunks {
            assert!(c.tokens <= 256, "{} tokens", c.tokens);
            assert!(c.text.len() <= 256 + 64, "{} bytes", c.text.len());
        }
        let kept: usize = chunks.iter().map(|c| c.text.matches('x').count()).sum();
        assert!(kept >= 10_000, "every byte is kept (with overlaps): {kept}");
        // Cut at character boundaries.
        let accents = "é".repeat(100);
        let wide: Vec<&str> = cut_bytes(&accents, 7).collect();
        assert!(wide.iter().all(|c| c.len() <= 7 && !c.is_empty()));
        assert_eq!(wide.concat(), accents);
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
            page: Some(page),
            ..section(path, text)
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
        let chunks = chunk_sections(&sections, None, false, 9, 0, &words);
        let summary: Vec<(String, &str, Option<[u32; 2]>)> = (chunks.iter())
            .map(|c| {
                (
                    c.chunk.text.clone(),
                    c.place.section.as_str(),
                    c.place.pages,
                )
            })
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
        assert_eq!(
            chunk_sections(&plain, None, false, 8, 0, &words)[0]
                .place
                .pages,
            None
        );
        assert!(chunks.iter().all(|c| c.header.is_empty()));
    }

    #[test]
    fn a_title_heads_every_chunk_with_its_path_and_takes_its_tokens_from_the_budget() {
        let sections = [
            section(&[], "Read this first."),
            section(&["Cards", "Lost"], "Call us now. We send new cards."),
        ];
        let chunks = chunk_sections(&sections, Some("Policies"), false, 8, 0, &words);
        let summary: Vec<(&str, &str)> = (chunks.iter())
            .map(|c| (c.header.as_str(), c.chunk.text.as_str()))
            .collect();
        // "Policies › Cards › Lost" counts 5 words, capped at a quarter of 8: the text's
        // budget is 6, and the two sentences (3 + 4 words) no longer share a chunk.
        assert_eq!(
            summary,
            [
                ("Policies", "Read this first."),
                ("Policies › Cards › Lost", "Call us now."),
                ("Policies › Cards › Lost", "We send new cards."),
            ]
        );
        // Without a title the two sentences share one chunk of 8 (and the first section has
        // its own).
        let untitled = chunk_sections(&sections, None, false, 8, 0, &words);
        assert_eq!(untitled.len(), 2);
        assert_eq!(untitled[1].chunk.text, "Call us now. We send new cards.");
    }

    #[test]
    fn packed_small_sections_share_a_chunk_whole_each_under_its_heading() {
        let sections = [
            section(&[], "Intro text here."),
            section(&["Fees"], "Fees are low."),
            section(&["Fees", "Cards"], "Cards cost nothing."),
            section(&["Loans"], "Loans cost interest here."),
        ];
        // The longest header, "Guide › Fees › Cards", takes its 5 words' cap of a quarter of
        // 16 from every chunk: the text's budget is 12.
        let chunks = chunk_sections(&sections, Some("Guide"), true, 16, 0, &words);
        let summary: Vec<(&str, &str, &str)> = (chunks.iter())
            .map(|c| {
                (
                    c.chunk.text.as_str(),
                    c.place.section.as_str(),
                    c.header.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                // Three runs fit in 12 words with their heading lines (11); the fourth does
                // not, and is not cut: it starts the next chunk. The first chunk's path is
                // what its runs share (nothing here).
                (
                    "Intro text here.\n\nFees\nFees are low.\n\nCards\nCards cost nothing.",
                    "",
                    "Guide"
                ),
                ("Loans cost interest here.", "Loans", "Guide › Loans"),
            ]
        );
        for c in &chunks {
            assert_eq!(c.chunk.tokens, words(&c.chunk.text), "{c:?}");
        }
        // Not packed, each section is a chunk of its own, citing its own path.
        let apart = chunk_sections(&sections, Some("Guide"), false, 16, 0, &words);
        let paths: Vec<&str> = apart.iter().map(|c| c.place.section.as_str()).collect();
        assert_eq!(paths, ["", "Fees", "Fees › Cards", "Loans"]);
        assert_eq!(apart[1].chunk.text, "Fees are low.");
        // Runs under one parent share its path.
        let nested = [
            section(&["Fees", "Cards"], "Cards cost nothing."),
            section(&["Fees", "Loans"], "Loans cost more."),
        ];
        let chunks = chunk_sections(&nested, None, true, 12, 0, &words);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].place.section, "Fees");
        assert_eq!(
            chunks[0].chunk.text,
            "Cards\nCards cost nothing.\n\nLoans\nLoans cost more."
        );
    }

    #[test]
    fn a_header_names_the_title_once() {
        assert_eq!(
            context_header("Guide", "Install › Linux"),
            "Guide › Install › Linux"
        );
        assert_eq!(
            context_header("Guide", "Guide › Install"),
            "Guide › Install"
        );
        assert_eq!(context_header("Guide", "Guide"), "Guide");
        assert_eq!(context_header("Guide", ""), "Guide");
        assert_eq!(context_header(" ", "Install"), "Install");
    }
}
