//! The documentation held to the tree it describes: every link of the README and `docs/`
//! resolves (the file, and the heading within a Markdown page), the README stays a front door
//! (at most 200 lines, linking the architecture page, which links a file of every crate: no
//! more than three hops from the README to the code of any stage), the commands it shows
//! exist, the configuration table lists exactly the `SLUICE_*` variables the code reads, and
//! no user page speaks of issue numbers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` whose name ends with `suffix`, recursively.
fn files(dir: &Path, suffix: &str, into: &mut Vec<PathBuf>) {
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
fn user_docs() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    files(&root().join("docs"), ".md", &mut docs);
    assert!(docs.len() > 5, "docs/ not found");
    docs
}

/// The text outside fenced code blocks, line by line.
fn prose(text: &str) -> Vec<&str> {
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
fn links(text: &str) -> Vec<String> {
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
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

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
    let mut crates = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let entry = entry.expect("a crate folder");
        if entry.path().join("Cargo.toml").exists() {
            crates.push(entry.file_name().to_string_lossy().to_string());
        }
    }
    assert!(crates.len() > 10, "{crates:?}");
    let unlinked: Vec<_> = (crates.iter())
        .filter(|c| {
            let prefix = format!("../crates/{c}/");
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

#[test]
fn the_commands_the_readme_shows_exist() {
    let readme = read(&root().join("README.md"));
    let makefile = read(&root().join("Makefile"));
    let targets: BTreeSet<&str> = (makefile.lines())
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .filter(|t| !t.is_empty() && !t.contains(' ') && !t.starts_with(['.', '#', '\t']))
        .collect();
    // The commands as the binary lists them (clap's help: a `Commands:` block, a line each).
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--help")
        .output()
        .expect("sluice --help");
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    let subcommands: BTreeSet<&str> = (help.lines())
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(subcommands.contains("serve"), "{help}");
    let mut shown = 0;
    let mut fenced = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["make", target, ..] => {
                shown += 1;
                assert!(targets.contains(target), "`make {target}` is no target");
            }
            ["sluice", command, ..] => {
                shown += 1;
                assert!(
                    subcommands.contains(command),
                    "`sluice {command}` is no command"
                );
            }
            _ => {}
        }
    }
    assert!(shown >= 4, "the README shows {shown} commands");
}

/// Every `sluice component …` line of the components page's examples is a command the binary
/// has, with flags it takes: a tenant with only the binary can run them as written.
#[test]
fn the_component_commands_the_docs_show_exist_with_their_flags() {
    let page = read(&root().join("docs/components.md"));
    let mut fenced = false;
    let mut shown = BTreeSet::new();
    for line in page.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let (true, ["sluice", "component", sub, rest @ ..]) = (fenced, words.as_slice()) {
            let flags = rest.iter().take_while(|w| **w != "#");
            for flag in flags.filter(|w| w.starts_with("--")) {
                shown.insert((sub.to_string(), flag.to_string()));
            }
            shown.insert((sub.to_string(), String::new()));
        }
    }
    let subcommands: BTreeSet<&str> = shown.iter().map(|(s, _)| s.as_str()).collect();
    assert!(subcommands.len() >= 9, "{subcommands:?}");
    for sub in subcommands {
        let help = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["component", sub, "--help"])
            .output()
            .expect("sluice component --help");
        assert!(
            help.status.success(),
            "`sluice component {sub}` is no command"
        );
        let help = String::from_utf8_lossy(&help.stdout).to_string();
        for (_, flag) in shown.iter().filter(|(s, f)| s == sub && !f.is_empty()) {
            assert!(
                help.contains(flag.as_str()),
                "`sluice component {sub}` has no {flag}: {help}"
            );
        }
    }
}

/// The questions file the components page shows is one `sluice component test` reads, with
/// the expectations it says.
#[test]
fn the_questions_file_the_components_page_shows_is_read_as_shown() {
    let page = read(&root().join("docs/components.md"));
    let example = (page.split("```jsonl\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("a ```jsonl example on docs/components.md");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("questions.jsonl");
    std::fs::write(&file, example).unwrap();
    let questions = sluice_component::questions(&file).unwrap();
    assert_eq!(questions.len(), example.lines().count());
    let first = &questions[0].expect;
    assert_eq!(first.first.as_deref(), Some("limits-premium"));
    assert!(first.broken(&["limits-premium", "branches"]).is_empty());
    assert_eq!(first.broken(&["branches", "internal-notes"]).len(), 2);
}

/// The `SLUICE_*` names in quotes in the workspace's code, test modules left out, and build
/// scripts (their variables configure the tests and are in docs/testing.md).
fn variables_read() -> BTreeSet<String> {
    let mut sources = Vec::new();
    files(&root().join("crates"), ".rs", &mut sources);
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
