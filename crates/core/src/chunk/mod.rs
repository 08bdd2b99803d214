//! Token-aware chunking: sentences packed into chunks of at most `max_tokens`, with the
//! last sentences of one chunk (up to `overlap_tokens`) repeated at the start of the next,
//! so that a fact near a boundary is retrievable from either side.

use sluice_contract::document::Section;
use sluice_contract::stages::Place;

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
mod tests;
