//! PDF to sections. lopdf parses the file (and decrypts one whose user password is empty);
//! pdf-extract interprets each page's content stream and hands every glyph, with its
//! position and font size, to [`Lines`] (its `OutputDev` extension point), which puts glyphs
//! together into lines in content order. Then:
//!
//! - headings come from the PDF's outline (bookmarks), each found on its page; a PDF
//!   without one gets headings from font sizes (short lines set well above the body size);
//! - lines that recur at the top or bottom of most pages (running headers, footers, page
//!   numbers) are dropped;
//! - words hyphenated at a line's end are joined ([`Walk::push`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

mod streams;

use pdf_extract::{MediaBox, OutputDev, OutputError, Transform};

use sluice_contract::cancel::Cancel;

use crate::markdown::Walk;
use crate::{ConvertError, ConvertLimits, Converted, TextBudget, stopped};

/// Lines at each end of a page looked at for running headers and footers.
const EDGE_LINES: usize = 2;

/// A line of a page: its text and its font size (the largest on it).
#[derive(Debug, Clone, PartialEq)]
struct Line {
    text: String,
    size: f64,
    /// Whether a gap above it (more than a line's height) starts a paragraph.
    gap_above: bool,
}

pub fn convert(
    bytes: &[u8],
    limits: &ConvertLimits,
    budget: &mut TextBudget,
    cancel: &Cancel,
) -> Result<Converted, ConvertError> {
    let document = streams::load(bytes, limits, cancel)?;
    let numbers: Vec<u32> = document.get_pages().into_keys().collect();
    let pages = numbers.len();
    if pages > limits.max_pdf_pages {
        return Err(ConvertError::TooLarge(format!(
            "{pages} pages; the limit is {} (SLUICE_MAX_PDF_PAGES)",
            limits.max_pdf_pages
        )));
    }
    let (pages_text, failed) = read_pages(&document, &numbers, limits, budget, cancel)?;
    if let Some(e) = failed
        && pages_text.iter().all(Vec::is_empty)
    {
        return Err(ConvertError::Malformed(format!(
            "its pages cannot be read ({e:?})"
        )));
    }
    if pages_text
        .iter()
        .flatten()
        .all(|l| l.text.trim().is_empty())
    {
        return Err(ConvertError::NoTextLayer { pages });
    }
    let outline = outline(&document);
    let title = (document.trailer.get(b"Info").ok())
        .and_then(|info| document.dereference(info).ok())
        .and_then(|(_, info)| info.as_dict().ok().cloned())
        .and_then(|info| info.get(b"Title").ok().cloned())
        .and_then(|t| lopdf::decode_text_string(&t).ok())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let running = running_lines(&pages_text);
    let sizes = heading_sizes(&pages_text);
    let mut walk = Walk::new(Some(1));
    let mut unlimited = TextBudget::new(usize::MAX);
    for (index, page) in pages_text.iter().enumerate() {
        let number = index as u32 + 1;
        walk.page(number);
        let mut marks: Vec<&(usize, String, u32)> =
            outline.iter().filter(|(_, _, p)| *p == number).collect();
        for line in page {
            if running.contains(&shape(&line.text)) && is_edge(page, line) {
                continue;
            }
            let level = match &outline[..] {
                [] => sizes
                    .get(&size_key(line.size))
                    .copied()
                    .filter(|_| heading_like(&line.text)),
                _ => {
                    let at = marks
                        .iter()
                        .position(|(_, title, _)| same_words(title, &line.text));
                    at.map(|at| marks.remove(at).0 as u8)
                }
            };
            match level {
                Some(level) => walk.heading(level.clamp(1, 6), &line.text),
                None => {
                    if line.gap_above {
                        walk.end("\n\n");
                    } else {
                        walk.soft_break();
                    }
                    // Charged while the glyphs came in.
                    walk.push(&line.text, &mut unlimited)?;
                }
            }
        }
        walk.end("\n\n");
    }
    let mut converted = walk.finish();
    if title.is_some() {
        converted.title = title;
    }
    Ok(converted)
}

/// Most outline entries (or name-tree nodes) walked before lopdf reads them, and the deepest
/// nesting.
const MAX_OUTLINE_NODES: usize = 10_000;
const MAX_OUTLINE_DEPTH: usize = 64;

/// The outline's entries as (level from 1, title, page from 1); none when the outline is not
/// a finite tree.
fn outline(document: &lopdf::Document) -> Vec<(usize, String, u32)> {
    // lopdf reads the outline and the named destinations recursively with no guard: an entry
    // whose `First` leads back to itself (a crafted file) recursed until the converting
    // thread's stack overflowed and took the process with it. Walk both trees first.
    if !finite_trees(document) {
        return Vec::new();
    }
    let Ok(toc) = document.get_toc() else {
        return Vec::new();
    };
    (toc.toc.into_iter())
        .map(|t| (t.level.max(1), t.title.trim().to_string(), t.page as u32))
        .filter(|(_, title, page)| !title.is_empty() && *page > 0)
        .collect()
}

/// Whether the outline (its entries' `First` and `Next`) and the named-destination trees
/// (`Kids`) that `get_toc` reads are trees: no object reached twice, at most
/// [`MAX_OUTLINE_NODES`] nodes, nested at most [`MAX_OUTLINE_DEPTH`] deep.
fn finite_trees(document: &lopdf::Document) -> bool {
    use lopdf::Object;
    let Ok(catalog) = document.catalog() else {
        return true;
    };
    let mut roots: Vec<(&Object, usize)> = Vec::new();
    for key in [&b"Outlines"[..], b"Dests"] {
        if let Ok(root) = catalog.get(key) {
            roots.push((root, 0));
        }
    }
    if let Ok(names) = catalog.get(b"Names").and_then(|n| document.dereference(n))
        && let Ok(dests) = names.1.as_dict().and_then(|n| n.get(b"Dests"))
    {
        roots.push((dests, 0));
    }
    let mut seen = std::collections::HashSet::new();
    let (mut stack, mut nodes) = (roots, 0);
    while let Some((object, depth)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_OUTLINE_NODES || depth > MAX_OUTLINE_DEPTH {
            return false;
        }
        let Ok((id, object)) = document.dereference(object) else {
            continue;
        };
        if let Some(id) = id
            && !seen.insert(id)
        {
            return false;
        }
        let Ok(node) = object.as_dict() else {
            continue;
        };
        if let Ok(first) = node.get(b"First") {
            stack.push((first, depth + 1));
        }
        if let Ok(next) = node.get(b"Next") {
            stack.push((next, depth));
        }
        if let Ok(Object::Array(kids)) = node
            .get(b"Kids")
            .and_then(|k| document.dereference(k))
            .map(|k| k.1)
        {
            stack.extend(kids.iter().map(|kid| (kid, depth + 1)));
        }
    }
    true
}

/// Whether two texts are the same words (an outline title and the line that sets it, which
/// may differ in spacing, or carry the section number only in the line).
fn same_words(title: &str, line: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.split_whitespace()
            .map(|w| w.to_lowercase())
            .filter(|w| !w.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .collect()
    };
    let (title, line) = (words(title), words(line));
    !title.is_empty() && title == line
}

/// A font size rounded to half a point, as a map key.
fn size_key(size: f64) -> i64 {
    (size * 2.0).round() as i64
}

/// Font sizes set in headings, with their levels: the body size is the one most text is set
/// in; a size at least 20 % above it, used on short lines, is a heading size; the largest is
/// level 1.
fn heading_sizes(pages: &[Vec<Line>]) -> HashMap<i64, u8> {
    let mut chars: HashMap<i64, usize> = HashMap::new();
    for line in pages.iter().flatten() {
        *chars.entry(size_key(line.size)).or_default() += line.text.chars().count();
    }
    let Some((&body, _)) = chars.iter().max_by_key(|(size, n)| (**n, -**size)) else {
        return HashMap::new();
    };
    let mut sizes: Vec<i64> = (pages.iter().flatten())
        .filter(|l| size_key(l.size) as f64 >= body as f64 * 1.2 && heading_like(&l.text))
        .map(|l| size_key(l.size))
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes.dedup();
    sizes.into_iter().take(6).zip(1..).collect()
}

/// Short, with letters, not a sentence: what a heading looks like.
fn heading_like(text: &str) -> bool {
    let words = text.split_whitespace().count();
    (1..=14).contains(&words) && text.chars().any(char::is_alphabetic) && !text.ends_with('.')
}

/// A line as running headers repeat it: without digits (page numbers), spaces collapsed.
fn shape(line: &str) -> String {
    let words: Vec<String> = (line.split_whitespace())
        .map(|w| w.chars().filter(|c| !c.is_ascii_digit()).collect())
        .collect();
    words.join(" ")
}

/// Whether `line` is one of the first or last lines of `page` that hold text.
fn is_edge(page: &[Line], line: &Line) -> bool {
    edges(page).any(|l| std::ptr::eq(l, line))
}

fn edges(page: &[Line]) -> impl Iterator<Item = &Line> {
    let with_text: Vec<&Line> = page.iter().filter(|l| !l.text.trim().is_empty()).collect();
    let head = with_text
        .iter()
        .take(EDGE_LINES)
        .copied()
        .collect::<Vec<_>>();
    let tail: Vec<&Line> = (with_text.iter().rev().take(EDGE_LINES).copied())
        .filter(|l| !head.iter().any(|h| std::ptr::eq(*h, *l)))
        .collect();
    head.into_iter().chain(tail)
}

/// The shapes of edge lines found on at least half of the pages (and on three or more):
/// running headers and footers.
fn running_lines(pages: &[Vec<Line>]) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for page in pages {
        let mut on_page: Vec<String> = edges(page).map(|l| shape(&l.text)).collect();
        on_page.sort();
        on_page.dedup();
        for s in on_page {
            *seen.entry(s).or_default() += 1;
        }
    }
    let needed = (pages.len() / 2).max(3);
    (seen.into_iter())
        .filter(|(s, n)| *n >= needed && s.chars().count() < 200)
        .map(|(s, _)| s)
        .collect()
}

/// Each page's lines, in page order (`numbers`), read on `threads` threads that take the next
/// page as they finish one (pdf-extract builds every font of a page again on each page, its
/// font cache being per page as font names are: about 40 % of a page's time, and pages
/// share nothing else); and the first error a page's content gave (its
/// lines up to there are kept, and the other pages are read all the same). A panic in a page
/// is resumed here, for the caller's containment.
fn read_pages(
    document: &lopdf::Document,
    numbers: &[u32],
    limits: &ConvertLimits,
    budget: &mut TextBudget,
    cancel: &Cancel,
) -> Result<(Vec<Vec<Line>>, Option<OutputError>), ConvertError> {
    let left = AtomicUsize::new(budget.left());
    let next = AtomicUsize::new(0);
    let threads = limits.threads.clamp(1, numbers.len().max(1));
    let worker = || {
        let mut lines = Lines {
            page: Vec::new(),
            left: &left,
            over: false,
            height: 0.0,
            last: None,
            begins_word: false,
        };
        let (mut read, mut failed) = (Vec::new(), None);
        while let Some(&number) = numbers.get(next.fetch_add(1, Ordering::Relaxed)) {
            // Between pages: a page's cost is bounded by its streams' inflated size.
            if cancel.check().is_err() {
                break;
            }
            let result = pdf_extract::output_doc_page(document, &mut lines, number);
            read.push((number, std::mem::take(&mut lines.page)));
            if lines.over {
                break;
            }
            if let Err(e) = result {
                failed.get_or_insert(e);
            }
        }
        (read, failed, lines.over)
    };
    let done: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads).map(|_| scope.spawn(worker)).collect();
        (workers.into_iter())
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    cancel.check().map_err(|why| stopped(why, limits))?;
    let mut pages: Vec<(u32, Vec<Line>)> = Vec::with_capacity(numbers.len());
    let mut failed = None;
    for (read, error, over) in done {
        if over {
            return Err(budget.exceeded());
        }
        pages.extend(read);
        failed = failed.or(error);
    }
    budget.take(budget.left() - left.into_inner())?;
    pages.sort_by_key(|(number, _)| *number);
    Ok((pages.into_iter().map(|(_, lines)| lines).collect(), failed))
}

/// pdf-extract's glyphs, put together into lines page by page: a glyph that starts a word
/// below the last one (or to its left and lower) starts a line, one that starts a word
/// right of where the last glyph ended is a space away.
struct Lines<'a> {
    /// The lines of the page being read.
    page: Vec<Line>,
    /// Bytes of text the file may still give, shared by the threads reading its pages.
    left: &'a AtomicUsize,
    /// Whether a glyph went over the text cap (the extraction is then stopped).
    over: bool,
    /// The page's height, to turn its bottom-up coordinates top-down.
    height: f64,
    /// Where the last glyph was: its baseline's y and where it ended on x.
    last: Option<(f64, f64)>,
    begins_word: bool,
}

impl OutputDev for Lines<'_> {
    fn begin_page(
        &mut self,
        _page: u32,
        media_box: &MediaBox,
        _art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.height = media_box.ury - media_box.lly;
        self.page.clear();
        self.last = None;
        Ok(())
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        glyph: &str,
    ) -> Result<(), OutputError> {
        let spent = (self.left).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(glyph.len())
        });
        if spent.is_err() {
            self.over = true;
            return Err(OutputError::FormatError(std::fmt::Error));
        }
        // Top-down page coordinates of the glyph's origin.
        let (x, y) = (trm.m31, self.height - trm.m32);
        // The font size in page space: the side of the square of the same area as the
        // transformed em square.
        let (sx, sy) = (
            font_size * (trm.m11 + trm.m21),
            font_size * (trm.m12 + trm.m22),
        );
        let size = (sx * sy).abs().sqrt();
        let page = &mut self.page;
        let begins_word = std::mem::take(&mut self.begins_word);
        let new_line = match self.last {
            None => true,
            Some((last_y, last_end)) => {
                let dy = (y - last_y).abs();
                begins_word && (dy > size * 1.5 || (x < last_end && dy > size * 0.5))
            }
        };
        if new_line || page.is_empty() {
            let gap_above = self
                .last
                .is_some_and(|(last_y, _)| (y - last_y).abs() > size * 2.0);
            page.push(Line {
                text: String::new(),
                size,
                gap_above,
            });
        } else if let Some((_, last_end)) = self.last
            && begins_word
            && x > last_end + size * 0.1
            && let Some(line) = page.last_mut()
        {
            line.text.push(' ');
        }
        if let Some(line) = page.last_mut() {
            line.text.push_str(glyph);
            if !glyph.trim().is_empty() {
                line.size = line.size.max(size);
            }
        }
        self.last = Some((y, x + width * size));
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        self.begins_word = true;
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, size: f64) -> Line {
        Line {
            text: text.into(),
            size,
            gap_above: false,
        }
    }

    #[test]
    fn running_headers_and_page_numbers_go() {
        let topics = ["cards", "loans", "fees", "savings", "travel", "fraud"];
        let pages: Vec<Vec<Line>> = (1..=6)
            .map(|n| {
                vec![
                    line("ACME Handbook", 9.0),
                    line(&format!("All about {}.", topics[n - 1]), 10.0),
                    line(&format!("Page {n} of 6"), 9.0),
                ]
            })
            .collect();
        let running = running_lines(&pages);
        assert_eq!(running.len(), 2, "{running:?}");
        assert!(
            running.contains(&shape("ACME Handbook")) && running.contains(&shape("Page 3 of 6"))
        );
        assert!(!running.contains(&shape("All about cards.")));
        // Under three pages, nothing counts as running.
        assert!(running_lines(&pages[..2]).is_empty());
    }

    #[test]
    fn headings_by_font_size() {
        let pages = vec![vec![
            line("Cards", 18.0),
            line("Lost or stolen", 14.0),
            line("Call us at once when a card is lost, day or night.", 10.0),
            line("We send a new one within five days of the call.", 10.0),
            line("A sentence set large but ending with a full stop.", 14.0),
        ]];
        let sizes = heading_sizes(&pages);
        assert_eq!(sizes.get(&size_key(18.0)), Some(&1));
        assert_eq!(sizes.get(&size_key(14.0)), Some(&2));
        assert_eq!(sizes.get(&size_key(10.0)), None);
        assert!(!heading_like(
            "A sentence set large but ending with a full stop."
        ));
    }

    #[test]
    fn outline_titles_match_their_lines() {
        assert!(same_words("Lost or stolen", "3.2  Lost  or Stolen"));
        assert!(!same_words("Lost", "Lost or stolen"));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let e = convert(
            b"%PDF-1.7\ngarbage",
            &ConvertLimits::default(),
            &mut TextBudget::new(1 << 20),
            &Cancel::new(),
        )
        .unwrap_err();
        assert!(matches!(e, ConvertError::Malformed(_)), "{e}");
    }
}
