//! The repository's documentation as its tests read it: the README and the pages under
//! `docs/`, their prose apart from code blocks, their links and headings' anchors. The tests
//! (`tests/docs.rs`) hold the pages to the tree; the CLI's `tests/commands.rs` holds the
//! commands they show to the binary.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A file's text; a panic that names it if it cannot be read.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` whose name ends with `suffix`, recursively.
pub fn files(dir: &Path, suffix: &str, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, suffix, into);
        } else if path.to_string_lossy().ends_with(suffix) {
            into.push(path);
        }
    }
}

/// The README and every page under `docs/`.
pub fn user_docs() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    files(&root().join("docs"), ".md", &mut docs);
    assert!(docs.len() > 5, "docs/ not found");
    docs
}

/// The text outside fenced code blocks, line by line.
pub fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The targets of the Markdown links `[text](target)` outside code blocks and code spans.
pub fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        // Code spans hold examples, not links: drop them.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            found.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page's headings.
pub fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}
