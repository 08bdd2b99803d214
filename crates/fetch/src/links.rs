//! What a crawl reads from an HTML page besides its text: the pages it links to (`<a href>`,
//! read against the page's `<base href>` or its own URL, fragments dropped) and what its
//! `<meta name="robots">` asks (`noindex`: not kept; `nofollow`: its links not followed).

use url::Url;

/// The most links read from one page.
pub const MAX_LINKS: usize = 10_000;

/// What a page says to a crawler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageLinks {
    /// The http(s) URLs it links to, absolute, without fragments, each once, in page order.
    pub links: Vec<String>,
    /// `<meta name="robots" content="noindex">` (or `none`).
    pub noindex: bool,
    /// `<meta name="robots" content="nofollow">` (or `none`).
    pub nofollow: bool,
}

/// The links of the HTML page `html` fetched from `url`.
pub fn links(html: &str, url: &str) -> PageLinks {
    let Ok(page) = Url::parse(url) else {
        return PageLinks::default();
    };
    let document = dom_query::Document::from(html);
    let mut said = PageLinks::default();
    for meta in document.select("meta[name]").iter() {
        let name = meta.attr("name").unwrap_or_default().to_ascii_lowercase();
        if name == "robots" || name == super::robots::AGENT {
            let content = meta
                .attr("content")
                .unwrap_or_default()
                .to_ascii_lowercase();
            for word in content.split(',').map(str::trim) {
                said.noindex |= word == "noindex" || word == "none";
                said.nofollow |= word == "nofollow" || word == "none";
            }
        }
    }
    let base = (document.select("base[href]").iter().next())
        .and_then(|b| page.join(&b.attr("href").unwrap_or_default()).ok())
        .unwrap_or(page);
    let mut seen = std::collections::HashSet::new();
    for anchor in document.select("a[href]").iter() {
        if said.links.len() >= MAX_LINKS {
            break;
        }
        let href = anchor.attr("href").unwrap_or_default();
        let Ok(mut link) = base.join(href.trim()) else {
            continue;
        };
        if !matches!(link.scheme(), "http" | "https") {
            continue;
        }
        link.set_fragment(None);
        if seen.insert(link.to_string()) {
            said.links.push(link.into());
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_absolute_without_fragments_each_once() {
        let html = r#"<html><head><base href="/docs/"></head><body>
            <a href="guide">g</a> <a href="guide#install">again</a>
            <a href="https://other.example/x">out</a> <a href="mailto:a@b.c">mail</a>
            <a href="javascript:void(0)">js</a> <a href="/top?a=1">top</a></body></html>"#;
        let said = links(html, "https://docs.example.com/index.html");
        assert_eq!(
            said.links,
            [
                "https://docs.example.com/docs/guide",
                "https://other.example/x",
                "https://docs.example.com/top?a=1"
            ]
        );
        assert!(!said.noindex && !said.nofollow);
    }

    #[test]
    fn meta_robots_is_read() {
        let html = r#"<meta name="ROBOTS" content="noindex, nofollow"><a href="/x">x</a>"#;
        let said = links(html, "https://e.com/");
        assert!(said.noindex && said.nofollow);
        let none = links(r#"<meta name="robots" content="none">"#, "https://e.com/");
        assert!(none.noindex && none.nofollow);
    }
}
