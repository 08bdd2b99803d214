//! Markdown to sections, by pulldown-cmark's CommonMark events (so that a `#` in a code block
//! is code, not a heading). It is also the last step of HTML and Word: both become Markdown
//! first, so that one walk decides what a section is for all three.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::{ConvertError, Converted, Section, TextBudget};

/// Headings as the section structure: each section's text is what follows a heading up to
/// the next, as plain text (emphasis and links dropped, list items and table rows one a
/// line). The first level-1 heading titles the document.
pub fn convert(text: &str, budget: &mut TextBudget) -> Result<Converted, ConvertError> {
    let mut walk = Walk::new(None);
    walk.feed(text, budget)?;
    Ok(walk.finish())
}

/// A walk through Markdown text that may come in parts (a PDF's pages): the heading path
/// carries from one part to the next, and each section records the part's page.
pub(crate) struct Walk {
    title: Option<String>,
    /// The open headings, outermost first, with their levels.
    path: Vec<(u8, String)>,
    /// A soft line break not yet written.
    soft_break: bool,
    page: Option<u32>,
    sections: Vec<Section>,
    text: String,
}

impl Walk {
    pub(crate) fn new(page: Option<u32>) -> Self {
        Self {
            title: None,
            path: Vec::new(),
            soft_break: false,
            page,
            sections: Vec::new(),
            text: String::new(),
        }
    }

    /// Starts a new page: what came before it is a section of the page before.
    pub(crate) fn page(&mut self, page: u32) {
        self.flush();
        self.page = Some(page);
    }

    /// Ends the current section (kept when it holds text).
    fn flush(&mut self) {
        let text = std::mem::take(&mut self.text);
        let text = text.trim();
        if !text.is_empty() {
            self.sections.push(Section {
                path: self.path.iter().map(|(_, h)| h.clone()).collect(),
                page: self.page,
                text: text.to_string(),
            });
        }
    }

    /// A heading of `level` (1 outermost): ends the current section and opens one under it.
    pub(crate) fn heading(&mut self, level: u8, text: &str) {
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            return;
        }
        self.flush();
        if level == 1 && self.title.is_none() {
            self.title = Some(text.clone());
        }
        self.path.retain(|(l, _)| *l < level);
        self.path.push((level, text));
    }

    /// Text of the current section; after a soft line break, a word hyphenated at the line's
    /// end is joined again (`hyphen-` `ated`), any other line end becomes a space.
    pub(crate) fn push(&mut self, text: &str, budget: &mut TextBudget) -> Result<(), ConvertError> {
        budget.take(text.len())?;
        push_joined(&mut self.text, &mut self.soft_break, text);
        Ok(())
    }

    /// A line break inside a paragraph: a space, or nothing inside a hyphenated word.
    pub(crate) fn soft_break(&mut self) {
        self.soft_break = true;
    }

    /// Ends a paragraph (or a line of a list or a table, with `"\n"`).
    pub(crate) fn end(&mut self, separator: &str) {
        self.soft_break = false;
        self.text.push_str(separator);
    }

    pub(crate) fn feed(
        &mut self,
        markdown: &str,
        budget: &mut TextBudget,
    ) -> Result<(), ConvertError> {
        let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
        // A heading's text while it is read, and its level.
        let mut heading: Option<(u8, String, bool)> = None;
        let mut first_cell = true;
        for event in Parser::new_ext(markdown, options) {
            match event {
                Event::Start(Tag::Heading { level, .. }) => {
                    heading = Some((level as u8, String::new(), false))
                }
                Event::End(TagEnd::Heading(_)) => {
                    if let Some((level, text, _)) = heading.take() {
                        self.heading(level, &text);
                    }
                }
                Event::Text(t) | Event::Code(t) => match &mut heading {
                    Some((_, h, soft)) => {
                        budget.take(t.len())?;
                        push_joined(h, soft, &t);
                    }
                    None => self.push(&t, budget)?,
                },
                Event::SoftBreak => match &mut heading {
                    Some((_, _, soft)) => *soft = true,
                    None => self.soft_break(),
                },
                Event::HardBreak => self.end("\n"),
                Event::Start(Tag::Item) => self.end("- "),
                Event::Start(Tag::TableRow | Tag::TableHead) => first_cell = true,
                Event::Start(Tag::TableCell) if !std::mem::take(&mut first_cell) => self.end(" | "),
                Event::End(TagEnd::Item | TagEnd::TableRow | TagEnd::TableHead) => self.end("\n"),
                Event::End(
                    TagEnd::Paragraph
                    | TagEnd::CodeBlock
                    | TagEnd::BlockQuote(_)
                    | TagEnd::List(_)
                    | TagEnd::Table,
                ) => self.end("\n\n"),
                _ => {}
            }
        }
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Converted {
        self.flush();
        Converted {
            title: self.title,
            sections: self.sections,
        }
    }
}

/// Appends `text` to `out` after a pending soft line break: nothing between the halves of
/// a word hyphenated at the line's end (a letter and `-`, then a lower-case letter), else a
/// space.
fn push_joined(out: &mut String, soft_break: &mut bool, text: &str) {
    if std::mem::take(soft_break) && !out.is_empty() {
        let hyphenated = out.ends_with('-')
            && out[..out.len() - 1].ends_with(char::is_alphabetic)
            && text.starts_with(char::is_lowercase);
        if hyphenated {
            out.pop();
        } else if !out.ends_with(char::is_whitespace) {
            out.push(' ');
        }
    }
    out.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections(md: &str) -> Vec<(String, String)> {
        let c = convert(md, &mut TextBudget::new(1 << 20)).unwrap();
        c.sections
            .into_iter()
            .map(|s| (s.path.join(" › "), s.text))
            .collect()
    }

    #[test]
    fn headings_make_the_section_path() {
        let md = "intro\n\n# Cards\n\nAbout cards.\n\n## Lost or stolen\n\nCall us.\n\n## Fees\n\nNone.\n\n# Loans\n\n### Rates\n\nLow.";
        assert_eq!(
            sections(md),
            [
                ("", "intro"),
                ("Cards", "About cards."),
                ("Cards › Lost or stolen", "Call us."),
                ("Cards › Fees", "None."),
                ("Loans › Rates", "Low."),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let c = convert(md, &mut TextBudget::new(1 << 20)).unwrap();
        assert_eq!(c.title.as_deref(), Some("Cards"));
    }

    #[test]
    fn markup_goes_and_lists_tables_and_code_stay_readable() {
        let md = "# T\n\nSome *emphasis* and a [link](http://x).\nA hyphen-\nated word and well-\nKnown.\n\n- one\n- two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\n# not a heading\n```\n";
        let s = sections(md);
        assert_eq!(s.len(), 1);
        let text = &s[0].1;
        assert!(text.contains("Some emphasis and a link."), "{text}");
        assert!(
            text.contains("A hyphenated word and well- Known."),
            "{text}"
        );
        assert!(text.contains("- one\n- two"), "{text}");
        assert!(text.contains("a | b\n1 | 2"), "{text}");
        assert!(text.contains("# not a heading"), "{text}");
    }

    #[test]
    fn the_text_budget_is_a_cap() {
        let e = convert(&"word ".repeat(1000), &mut TextBudget::new(100)).unwrap_err();
        assert!(matches!(e, ConvertError::TooLarge(_)), "{e}");
    }
}
