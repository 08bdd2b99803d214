//! The documentation held to the tree it describes: every link of the README and `docs/`
//! resolves (the file, and the heading within a Markdown page), the README stays a front door
//! (at most 200 lines, linking the architecture page, which links a file of every crate: no
//! more than three hops from the README to the code of any stage), the CLI stays thin, the
//! configuration table lists exactly the `SLUICE_*` variables the code reads, and no user page
//! speaks of issue numbers. (That the commands the pages show exist is checked against the
//! binary, in the CLI's `tests/commands.rs`.)

use std::collections::BTreeSet;
use std::path::Path;

use sluice_docs::{anchors, files, links, read, root, user_docs};

#[test]
fn every_link_of_the_readme_and_docs_resolves_to_a_file_and_heading() {
    let mut broken = Vec::new();
    for doc in user_docs() {
        let text = read(&doc);
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = match path {
                "" => doc.clone(),
                p => doc.parent().unwrap_or(Path::new(".")).join(p),
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", doc.display()));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&target)).contains(anchor)
            {
                broken.push(format!("{}: {link} (no such heading)", doc.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_a_front_door_three_hops_from_the_code_of_every_crate() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(lines <= 200, "the README has {lines} lines (200 at most)");
    assert!(
        links(&readme).iter().any(|l| l == "docs/architecture.md"),
        "the README links docs/architecture.md"
    );
    let architecture = links(&read(&root().join("docs/architecture.md")));
    // The libraries, and the Lambda functions over them.
    let mut crates = Vec::new();
    for folder in ["crates", "functions"] {
        for entry in std::fs::read_dir(root().join(folder)).expect("a folder of crates") {
            let entry = entry.expect("a crate folder");
            if entry.path().join("Cargo.toml").exists() {
                let name = entry.file_name().to_string_lossy().to_string();
                crates.push(format!("{folder}/{name}"));
            }
        }
    }
    assert!(crates.len() > 10, "{crates:?}");
    let unlinked: Vec<_> = (crates.iter())
        .filter(|c| {
            let prefix = format!("../{c}/");
            !architecture.iter().any(|l| l.starts_with(&prefix))
        })
        .collect();
    assert!(
        unlinked.is_empty(),
        "docs/architecture.md links no file of {unlinked:?}"
    );
}

/// The CLI holds arguments, dispatch and output; the work is in the crates it names.
#[test]
fn the_cli_is_thin() {
    let mut lines = 0;
    for entry in std::fs::read_dir(root().join("crates/cli/src")).expect("crates/cli/src") {
        let path = entry.expect("a file").path();
        if path.extension().is_some_and(|e| e == "rs") {
            lines += read(&path).lines().count();
        }
    }
    assert!(
        lines <= 1500,
        "crates/cli/src has {lines} lines of Rust (1,500 at most)"
    );
}
/// The `SLUICE_*` names in quotes in the workspace's code, test modules left out, and build
/// scripts (their variables configure the tests and are in docs/testing.md).
fn variables_read() -> BTreeSet<String> {
    let mut sources = Vec::new();
    files(&root().join("crates"), ".rs", &mut sources);
    files(&root().join("functions"), ".rs", &mut sources);
    let mut names = BTreeSet::new();
    for source in sources {
        let path = source.to_string_lossy();
        if path.contains("/tests/")
            || path.ends_with("/tests.rs")
            || path.contains("/testkit/")
            || path.contains("/benches/")
            || path.ends_with("build.rs")
        {
            continue;
        }
        let text = read(&source);
        // Inline test modules come last in a file.
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for piece in code.split("\"SLUICE_").skip(1) {
            let name: String = (piece.chars())
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() && piece[name.len()..].starts_with('"') {
                names.insert(format!("SLUICE_{name}"));
            }
        }
    }
    names
}

/// The variables named in the first column of the configuration table.
fn variables_documented() -> BTreeSet<String> {
    let doc = read(&root().join("docs/configuration.md"));
    let mut names = BTreeSet::new();
    for row in doc.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap_or_default();
        for name in first.split('`').skip(1).step_by(2) {
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn the_configuration_table_lists_exactly_the_variables_the_code_reads() {
    let read = variables_read();
    let documented = variables_documented();
    assert!(read.len() > 40, "{read:?}");
    let undocumented: Vec<_> = read.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "read but not in docs/configuration.md: {undocumented:?}"
    );
    let unread: Vec<_> = (documented.iter())
        .filter(|n| n.starts_with("SLUICE_") && !read.contains(*n))
        .collect();
    assert!(unread.is_empty(), "documented but never read: {unread:?}");
}

#[test]
fn no_user_page_speaks_of_issue_numbers() {
    for doc in user_docs() {
        let text = read(&doc).to_lowercase();
        for word in ["issue ", "issues "] {
            for (at, _) in text.match_indices(word) {
                let next = text[at + word.len()..].chars().next();
                assert!(
                    !next.is_some_and(|c| c.is_ascii_digit() || c == '#'),
                    "{} mentions an issue number: …{}…",
                    doc.display(),
                    text[at..].chars().take(20).collect::<String>()
                );
            }
        }
    }
}
