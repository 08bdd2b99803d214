//! The commands the pages show exist: every `make` target and `sluice` command in the README's
//! examples, and every `sluice component` command and flag on the components page, as the
//! binary's help lists them — a reader with only the binary can run them as written.

use std::collections::BTreeSet;

use sluice_docs::{read, root};

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

#[test]
fn ingest_says_every_format_it_reads() {
    for args in [&["--help"][..], &["ingest", "--help"]] {
        let help = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .output()
            .expect("sluice --help");
        let help = String::from_utf8_lossy(&help.stdout).to_string();
        let formats = sluice_convert::Format::EXTENSIONS.replace(" or ", ", ");
        for extension in formats.split(", ") {
            assert!(
                help.contains(extension),
                "{args:?} lacks {extension}: {help}"
            );
        }
    }
}
