//! HTML to sections: the page decoded by its charset, parsed by html5ever (through
//! dom_query), its depth checked; then what is never content (scripts, styles, navigation,
//! headers, footers, asides, forms; by element, ARIA role and the usual class names) is
//! removed, and the main element (or the one article, or the body) is written as Markdown by
//! dom_query, whose headings [`crate::markdown`] turns into sections.
//!
//! A Readability-style extractor (dom_smoothie) was measured against this walk on Debian's
//! HTML documentation and kept less of the main text (docs/ingestion.md has the figures):
//! on pages of many sections it keeps the best-scoring block and drops the rest.

use dom_query::Document;
use encoding_rs::Encoding;

use std::cell::{Cell, RefCell};

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
    states::RawKind,
};
use sluice_contract::cancel::Cancel;

use crate::markdown;
use crate::{ConvertError, ConvertLimits, Converted, TextBudget, stopped};

/// Elements that are never the page's content.
const NEVER_CONTENT: &str = "head, script, style, noscript, template, nav, header, footer, aside, \
    form, iframe, svg, [role=navigation], [role=banner], [role=contentinfo], [role=complementary], \
    [aria-hidden=true], .navheader, .navfooter, .breadcrumb, .breadcrumbs, .sidebar, .skip-link";

pub fn convert(
    bytes: &[u8],
    limits: &ConvertLimits,
    budget: &mut TextBudget,
    cancel: &Cancel,
) -> Result<Converted, ConvertError> {
    let html = decode(bytes);
    // Checked while tokenising, before the tree is built: html5ever's tree builder walks its
    // stack of open elements on every tag, so a page nested 100,000 deep costs it minutes
    // (quadratic); the tokenizer is linear and stops at the cap.
    prescan(&html, limits, budget.left(), cancel)?;
    let document = Document::from(html.as_str());
    let depth = depth(&document);
    if depth > limits.max_html_depth {
        return Err(too_deep(depth, limits));
    }
    let title = {
        let t = document.select("head title").text();
        let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        (!t.is_empty()).then_some(t)
    };
    document.select(NEVER_CONTENT).remove();
    // The page's one main element or article when it marks one, else its body.
    let main = (["main", "[role=main]", "article", "body"].iter())
        .map(|selector| document.select(selector))
        .find(|found| found.length() == 1)
        .and_then(|found| found.nodes().first().map(|node| node.md(None)));
    let markdown = main.unwrap_or_else(|| document.md(None));
    let mut converted = markdown::convert(&markdown, budget)?;
    // The page's <title> over Readability's guess or the first heading.
    if title.is_some() {
        converted.title = title;
    }
    Ok(converted)
}

/// The page as text: by its byte order mark, else the charset its `<meta>` declares in the
/// first 1024 bytes (as browsers look), else UTF-8 (and windows-1252, what browsers fall back
/// to, when it is not UTF-8).
fn decode(bytes: &[u8]) -> String {
    let declared = meta_charset(&bytes[..bytes.len().min(1024)]);
    let encoding = match (Encoding::for_bom(bytes), declared) {
        (Some((bom, _)), _) => bom,
        (None, Some(e)) => e,
        (None, None) if std::str::from_utf8(bytes).is_ok() => encoding_rs::UTF_8,
        (None, None) => encoding_rs::WINDOWS_1252,
    };
    encoding.decode(bytes).0.into_owned()
}

/// The encoding a `<meta charset=…>` or `<meta http-equiv content="…; charset=…">` names.
fn meta_charset(head: &[u8]) -> Option<&'static Encoding> {
    let head = String::from_utf8_lossy(head).to_ascii_lowercase();
    let at = head.find("charset=")? + "charset=".len();
    let label: String = head[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        .collect();
    // A page that says UTF-16 in ASCII bytes is not UTF-16 (the HTML standard's rule).
    Encoding::for_label(label.as_bytes()).map(|e| e.output_encoding())
}

/// Input fed to the tokenizer between two checks of the caps and of `cancel`.
const PRESCAN_CHUNK: usize = 64 << 10;

/// Elements that never hold others (no end tag).
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr", "param", "keygen",
];

/// Elements whose end tag is optional: a start tag of one closes an open one of its kind
/// (`<p>a<p>b`, `<li>`…), as the tree builder would, so that sloppy pages are not counted as
/// deep.
const SELF_CLOSING_SIBLINGS: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot", "rt",
    "rp",
];

/// What the tokenizer has seen: the open elements (an upper bound of the tree's nesting) and
/// the text so far.
#[derive(Default)]
struct Nesting {
    open: RefCell<Vec<String>>,
    deepest: Cell<usize>,
    text: Cell<usize>,
}

impl TokenSink for Nesting {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        match token {
            Token::TagToken(tag) => {
                let name: &str = &tag.name;
                let mut open = self.open.borrow_mut();
                match tag.kind {
                    TagKind::StartTag if tag.self_closing || VOID.contains(&name) => {}
                    TagKind::StartTag => {
                        if SELF_CLOSING_SIBLINGS.contains(&name)
                            && let Some(at) = open.iter().rposition(|n| n == name)
                        {
                            open.truncate(at);
                        }
                        open.push(name.to_string());
                        self.deepest.set(self.deepest.get().max(open.len()));
                        // Their content is text, not tags (as the tree builder tells the
                        // tokenizer), so that `<script>` holding "<div>" counts nothing.
                        let raw = match name {
                            "script" => Some(RawKind::ScriptData),
                            "style" | "xmp" | "iframe" | "noembed" | "noframes" => {
                                Some(RawKind::Rawtext)
                            }
                            "textarea" | "title" => Some(RawKind::Rcdata),
                            _ => None,
                        };
                        if let Some(raw) = raw {
                            open.pop();
                            return TokenSinkResult::RawData(raw);
                        }
                    }
                    TagKind::EndTag => {
                        if let Some(at) = open.iter().rposition(|n| n == name) {
                            open.truncate(at);
                        }
                    }
                }
            }
            Token::CharacterTokens(text) => self.text.set(self.text.get() + text.len()),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

/// Tokenises the page (linear time) and refuses it as soon as its elements nest deeper than
/// `SLUICE_MAX_HTML_DEPTH` or its text passes `text_left` bytes, or when `cancel` says so.
fn prescan(
    html: &str,
    limits: &ConvertLimits,
    text_left: usize,
    cancel: &Cancel,
) -> Result<(), ConvertError> {
    let tokenizer = Tokenizer::new(Nesting::default(), TokenizerOpts::default());
    let queue = BufferQueue::default();
    let mut rest = html;
    while !rest.is_empty() {
        let mut at = rest.len().min(PRESCAN_CHUNK);
        while !rest.is_char_boundary(at) {
            at += 1;
        }
        let (chunk, after) = rest.split_at(at);
        rest = after;
        queue.push_back(StrTendril::from_slice(chunk));
        let _ = tokenizer.feed(&queue);
        let sink = &tokenizer.sink;
        if sink.deepest.get() > limits.max_html_depth {
            return Err(too_deep(sink.deepest.get(), limits));
        }
        if sink.text.get() > text_left {
            return Err(TextBudget::new(text_left).exceeded());
        }
        cancel.check().map_err(|s| stopped(s, limits))?;
    }
    tokenizer.end();
    Ok(())
}

fn too_deep(depth: usize, limits: &ConvertLimits) -> ConvertError {
    ConvertError::TooLarge(format!(
        "its elements nest more than {} deep (SLUICE_MAX_HTML_DEPTH); {depth} levels were read before it was refused",
        limits.max_html_depth
    ))
}

/// How deep the elements nest, walked without recursion.
fn depth(document: &Document) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(document.root(), 0usize)];
    while let Some((node, d)) = stack.pop() {
        deepest = deepest.max(d);
        for child in node.children_it(false) {
            if child.is_element() {
                stack.push((child, d + 1));
            }
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert_html(html: &[u8]) -> Converted {
        convert(
            html,
            &ConvertLimits::default(),
            &mut TextBudget::new(1 << 20),
            &Cancel::new(),
        )
        .unwrap()
    }

    const PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>Card help</title>
<style>.x{color:red}</style><script>var tracking = 1;</script></head><body>
<nav><a href="/">Home</a> <a href="/cards">Cards</a> <a href="/loans">Loans</a></nav>
<article><h1>Cards</h1><p>Everything about your debit and credit cards, how to use them
abroad, and what to do when something goes wrong with one of them.</p>
<h2>Lost or stolen</h2><p>Freeze the card in the app at once, then call us on the number on
the back of any other card. We send a replacement within five working days &amp; cancel the old one.</p>
<ul><li>Freeze in the app</li><li>Call us</li></ul>
<h2>Fees</h2><table><tr><th>Card</th><th>Fee</th></tr><tr><td>Debit</td><td>none</td></tr></table>
<p>Withdrawals abroad cost nothing in the euro zone and two percent elsewhere in the world.</p>
</article><footer>© Bank plc · Privacy · Cookies</footer></body></html>"#;

    #[test]
    fn main_content_in_sections_with_the_title() {
        let c = convert_html(PAGE.as_bytes());
        assert_eq!(c.title.as_deref(), Some("Card help"));
        let all = c.text();
        for gone in ["tracking", "color:red", "Privacy", "Home"] {
            assert!(!all.contains(gone), "{gone:?} kept: {all}");
        }
        let lost = (c.sections.iter())
            .find(|s| s.path.last().map(String::as_str) == Some("Lost or stolen"))
            .unwrap_or_else(|| panic!("no section: {:?}", c.sections));
        assert!(
            lost.text.contains("five working days & cancel"),
            "{}",
            lost.text
        );
        assert!(lost.text.contains("Freeze in the app"), "{}", lost.text);
        let fees = c
            .sections
            .iter()
            .find(|s| s.path.ends_with(&["Fees".into()]));
        let fees = fees.unwrap_or_else(|| panic!("no fees: {:?}", c.sections));
        assert!(
            fees.text.contains("Debit") && fees.text.contains("none"),
            "{}",
            fees.text
        );
    }

    #[test]
    fn the_declared_charset_is_honoured() {
        let mut page = b"<html><head><meta charset=\"iso-8859-1\"><title>Caf\xe9</title></head><body><p>cr\xe8me br\xfbl\xe9e</p></body></html>".to_vec();
        let c = convert_html(&page);
        assert_eq!(c.title.as_deref(), Some("Café"));
        assert!(c.text().contains("crème brûlée"), "{}", c.text());
        // Undeclared and not UTF-8: windows-1252, as browsers read it.
        page = b"<p>na\xefve</p>".to_vec();
        assert!(convert_html(&page).text().contains("naïve"));
    }

    fn refusal(html: &str) -> ConvertError {
        let limits = ConvertLimits::default();
        prescan(html, &limits, 1 << 20, &Cancel::new()).unwrap_err()
    }

    #[test]
    fn nesting_past_the_cap_is_refused_while_tokenising() {
        let deep = "<div>".repeat(400) + "x";
        let e = convert(
            deep.as_bytes(),
            &ConvertLimits::default(),
            &mut TextBudget::new(1 << 20),
            &Cancel::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("SLUICE_MAX_HTML_DEPTH"), "{e}");
        // Refused in the first chunk fed to the tokenizer, not after reading a million tags.
        let e = refusal(&"<div>".repeat(1_000_000));
        let read: usize = (e.to_string().split(' '))
            .find_map(|w| w.parse().ok().filter(|&n| n > 256))
            .unwrap_or_else(|| panic!("{e}"));
        assert!(read <= PRESCAN_CHUNK / "<div>".len(), "{read} levels: {e}");
        // Text is counted as it comes.
        let e = prescan(
            &"x".repeat(200_000),
            &ConvertLimits::default(),
            100_000,
            &Cancel::new(),
        );
        assert!(e.unwrap_err().to_string().contains("SLUICE_MAX_TEXT_BYTES"));
    }

    #[test]
    fn sloppy_but_shallow_pages_pass_the_prescan() {
        let limits = ConvertLimits::default();
        let ok = |html: &str| prescan(html, &limits, 1 << 24, &Cancel::new());
        // Paragraphs and list items that close each other, void elements, self-closing tags.
        ok(&"<p>para".repeat(1000)).unwrap();
        ok(&format!(
            "<ul>{}</ul>",
            "<li>item<br><img src=x>".repeat(1000)
        ))
        .unwrap();
        ok(&"<span/>".repeat(1000)).unwrap();
        // Tags inside scripts and styles are text.
        ok(&format!(
            "<script>{}</script><p>x",
            "var s = '<div>';".repeat(1000)
        ))
        .unwrap();
        ok(&format!("<style>{}</style>", "<div>".repeat(1000))).unwrap();
        // Closed elements do not add up.
        ok(&"<div><section>x</section></div>".repeat(1000)).unwrap();
    }

    #[test]
    fn a_cancelled_prescan_stops() {
        let cancel = Cancel::new();
        cancel.cancel();
        let e = prescan("<p>x</p>", &ConvertLimits::default(), 1 << 20, &cancel).unwrap_err();
        assert!(matches!(e, ConvertError::Cancelled), "{e}");
    }
}
