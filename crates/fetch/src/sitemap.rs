//! A sitemap (sitemaps.org): the pages a site lists (`<urlset>`), or the sitemaps an index
//! lists (`<sitemapindex>`); gzipped ones inflated under the same cap as plain ones.

use std::io::Read;

use quick_xml::Reader;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;

/// The most of a sitemap read, inflated (the protocol's own limit is 50 MB and 50,000 URLs).
pub const MAX_SITEMAP_BYTES: usize = 50 << 20;

/// The most URLs read from one sitemap.
pub const MAX_SITEMAP_URLS: usize = 50_000;

/// What a sitemap lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sitemap {
    /// Pages (`<urlset>`).
    Pages(Vec<String>),
    /// Other sitemaps (`<sitemapindex>`).
    Index(Vec<String>),
}

/// A sitemap that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SitemapError {
    /// Larger than [`MAX_SITEMAP_BYTES`] once inflated.
    #[error("it is over {MAX_SITEMAP_BYTES} bytes inflated")]
    TooLarge,
    /// Not gzip, or not XML, or neither `<urlset>` nor `<sitemapindex>`.
    #[error("it is not a sitemap ({0})")]
    Invalid(String),
}

/// The sitemap in `bytes` (gzipped or not).
pub fn parse(bytes: &[u8]) -> Result<Sitemap, SitemapError> {
    let inflated;
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        // Inflated through a reader that stops one byte past the cap: a small file that
        // inflates without end is cut there, never held whole.
        let mut out = Vec::new();
        let mut gz = flate2::read::GzDecoder::new(bytes).take(MAX_SITEMAP_BYTES as u64 + 1);
        gz.read_to_end(&mut out)
            .map_err(|e| SitemapError::Invalid(format!("gzip: {e}")))?;
        if out.len() > MAX_SITEMAP_BYTES {
            return Err(SitemapError::TooLarge);
        }
        inflated = out;
        &inflated[..]
    } else if bytes.len() > MAX_SITEMAP_BYTES {
        return Err(SitemapError::TooLarge);
    } else {
        bytes
    };
    let text = String::from_utf8_lossy(bytes);
    let mut reader = Reader::from_str(&text);
    let (mut root, mut in_loc) = (None::<String>, false);
    let (mut locs, mut loc) = (Vec::new(), String::new());
    loop {
        let event = reader
            .read_event()
            .map_err(|e| SitemapError::Invalid(e.to_string()))?;
        match event {
            Event::Start(e) => {
                let name = e.local_name().into_inner().to_ascii_lowercase();
                if root.is_none() {
                    root = Some(name.clone());
                }
                in_loc = name == "loc";
                loc.clear();
            }
            Event::Text(t) if in_loc => loc.push_str(&t.xml10_content()),
            Event::CData(t) if in_loc => loc.push_str(&t),
            Event::GeneralRef(r) if in_loc => {
                let named = resolve_predefined_entity(&r).map(str::to_string);
                let char_ref = r.resolve_char_ref().ok().flatten().map(String::from);
                loc.push_str(&named.or(char_ref).unwrap_or_default());
            }
            Event::End(e) if in_loc && e.local_name().into_inner().eq_ignore_ascii_case("loc") => {
                in_loc = false;
                let url = loc.trim();
                if !url.is_empty() && locs.len() < MAX_SITEMAP_URLS {
                    locs.push(url.to_string());
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    match root.as_deref() {
        Some("urlset") => Ok(Sitemap::Pages(locs)),
        Some("sitemapindex") => Ok(Sitemap::Index(locs)),
        other => Err(SitemapError::Invalid(format!(
            "its root is {}, not urlset or sitemapindex",
            other.map_or("missing".into(), |r| format!("<{r}>"))
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn pages_and_indexes_are_read_with_their_entities() {
        let pages = r#"<?xml version="1.0" encoding="UTF-8"?>
            <urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
              <url><loc>https://docs.example.com/a?x=1&amp;y=2</loc><lastmod>2026-01-01</lastmod></url>
              <url><loc> https://docs.example.com/b </loc></url>
              <url><loc><![CDATA[https://docs.example.com/c]]></loc></url>
            </urlset>"#;
        assert_eq!(
            parse(pages.as_bytes()).unwrap(),
            Sitemap::Pages(vec![
                "https://docs.example.com/a?x=1&y=2".into(),
                "https://docs.example.com/b".into(),
                "https://docs.example.com/c".into(),
            ])
        );
        let index =
            "<sitemapindex><sitemap><loc>https://e.com/s1.xml</loc></sitemap></sitemapindex>";
        assert_eq!(
            parse(index.as_bytes()).unwrap(),
            Sitemap::Index(vec!["https://e.com/s1.xml".into()])
        );
        assert!(matches!(
            parse(b"<html></html>"),
            Err(SitemapError::Invalid(_))
        ));
    }

    #[test]
    fn a_gzipped_sitemap_is_inflated_under_its_cap() {
        let gz = |text: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            e.write_all(text).unwrap();
            e.finish().unwrap()
        };
        let small = gz(b"<urlset><url><loc>https://e.com/a</loc></url></urlset>");
        assert_eq!(
            parse(&small).unwrap(),
            Sitemap::Pages(vec!["https://e.com/a".into()])
        );
        // A few hundred kilobytes that inflate past the cap: refused, and never held whole.
        let bomb = gz(&vec![b' '; MAX_SITEMAP_BYTES + 10]);
        assert!(bomb.len() < MAX_SITEMAP_BYTES / 100);
        assert_eq!(parse(&bomb), Err(SitemapError::TooLarge));
    }
}
