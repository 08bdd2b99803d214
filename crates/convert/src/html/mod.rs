//! HTML to sections: the page decoded by its charset, parsed by html5ever (through
//! dom_query), its depth checked; then what is never content (scripts, styles, navigation,
//! headers, footers, asides, forms; by element, ARIA role and the usual class names) is
//! removed, and the main element (or the one article, or the body) is written as Markdown by
//! dom_query, whose headings [`crate::markdown`] turns into sections.
//!
//! A Readability-style extractor (dom_smoothie) was measured against this walk on Debian's
//! HTML documentation and kept less of the main text (docs/ingestion.md has the figures):
//! on pages of many sections it keeps the best-scoring block and drops the rest.

use encoding_rs::Encoding;

use sluice_contract::cancel::Cancel;

mod tree;

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
    // Nesting, text and the request are checked while the tree is built (tree.rs says why).
    let document = tree::parse(&html, limits, budget.left(), cancel)?;
    let title = {
        let t = document.select("head title").text();
        let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
        (!t.is_empty()).then_some(t)
    };
    document.select(NEVER_CONTENT).remove();
    cancel.check().map_err(|s| stopped(s, limits))?;
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

pub(crate) fn too_deep(depth: usize, limits: &ConvertLimits) -> ConvertError {
    ConvertError::TooLarge(format!(
        "its elements nest more than {} deep (SLUICE_MAX_HTML_DEPTH); {depth} levels were read before it was refused",
        limits.max_html_depth
    ))
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

    fn parse(html: &str, text_left: usize) -> Result<(), ConvertError> {
        tree::parse(html, &ConvertLimits::default(), text_left, &Cancel::new()).map(|_| ())
    }

    /// The depth the refusal says was read.
    fn read(e: &ConvertError) -> usize {
        (e.to_string().split(' '))
            .find_map(|w| w.parse().ok().filter(|&n| n > 256))
            .unwrap_or_else(|| panic!("{e}"))
    }

    #[test]
    fn nesting_past_the_cap_is_refused_while_the_tree_is_built() {
        let deep = "<div>".repeat(400) + "x";
        let e = convert(
            deep.as_bytes(),
            &ConvertLimits::default(),
            &mut TextBudget::new(1 << 20),
            &Cancel::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("SLUICE_MAX_HTML_DEPTH"), "{e}");
        // Whatever the tree builder nests: lists whose items it leaves open (an `<li>` closes
        // an open `<li>` only within its list), formatting elements it reopens after each
        // paragraph, tables in cells, elements it closes implicitly. Each is refused within a
        // chunk of the cap, not after the whole page was built.
        let shapes = [
            "<ul><li>".repeat(100_000),
            "<ol><li><p>".repeat(100_000),
            (1..100_000)
                .map(|i| format!("<p><b id={i}>x</p>"))
                .collect(),
            "<table><tr><td>".repeat(100_000),
            "<dl><dd><div>".repeat(100_000),
            "<a><font><i>".repeat(100_000),
        ];
        for page in &shapes {
            let e = parse(page, 1 << 30).unwrap_err();
            assert!(e.to_string().contains("SLUICE_MAX_HTML_DEPTH"), "{e}");
            assert!(read(&e) <= 256 + tree::PARSE_CHUNK, "{}: {e}", &page[..40]);
        }
        // Text is counted as it comes.
        let e = parse(&"x".repeat(200_000), 100_000).unwrap_err();
        assert!(e.to_string().contains("SLUICE_MAX_TEXT_BYTES"), "{e}");
    }

    #[test]
    fn sloppy_but_shallow_pages_are_read() {
        let ok = |html: &str| parse(html, 1 << 24).unwrap();
        // Paragraphs and list items that close each other, void elements (written
        // self-closing or not: `<span/>` is no void element, and nests as browsers nest it).
        ok(&"<p>para".repeat(1000));
        ok(&format!(
            "<ul>{}</ul>",
            "<li>item<br><img src=x>".repeat(1000)
        ));
        ok(&"<br/><img src=x />".repeat(1000));
        // Tags inside scripts and styles are text.
        ok(&format!(
            "<script>{}</script><p>x",
            "var s = '<div>';".repeat(1000)
        ));
        ok(&format!("<style>{}</style>", "<div>".repeat(1000)));
        // Closed elements do not add up; nor do table rows, cells or formatting closed in turn.
        ok(&"<div><section>x</section></div>".repeat(1000));
        ok(&format!("<table>{}</table>", "<tr><td>a<td>b".repeat(1000)));
        ok(&"<b>bold</b><i>it</i>".repeat(1000));
    }

    #[test]
    fn a_cancelled_parse_stops() {
        let cancel = Cancel::new();
        cancel.cancel();
        let e = tree::parse("<p>x</p>", &ConvertLimits::default(), 1 << 20, &cancel)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, ConvertError::Cancelled), "{e}");
    }
}
