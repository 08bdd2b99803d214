//! `sluice component`, a tenant's local loop, as a user runs it: `new` writes a crate that
//! `scripts/build-components.sh` builds into a 0.2 component; `bench` measures it; `test`
//! runs the example `policy` component on questions over a corpus folder with the real model
//! (orders side by side, what was dropped, cost per call) and exits non-zero for a component
//! that fails on real requests.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn repo() -> PathBuf {
    sluice_tests::repo()
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = sluice().args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        text(&out),
    )
}

#[test]
fn a_new_component_builds_and_is_measured() {
    sluice_testkit::needs!(Components);
    // A copy of the components workspace (its manifest, lock file and SDK, and the WIT the
    // SDK reads), so that the repository's own is not touched.
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("components");
    std::fs::create_dir_all(ws.join("sdk/src")).unwrap();
    for file in [
        "Cargo.toml",
        "Cargo.lock",
        "sdk/Cargo.toml",
        "sdk/src/lib.rs",
    ] {
        std::fs::copy(repo().join("components").join(file), ws.join(file)).unwrap();
    }
    std::fs::create_dir_all(tmp.path().join("wit/rerank-0.2")).unwrap();
    std::fs::copy(
        repo().join("wit/rerank-0.2/rerank.wit"),
        tmp.path().join("wit/rerank-0.2/rerank.wit"),
    )
    .unwrap();
    let dir = ws.to_str().unwrap();

    let (ok, stdout, all) = run(&["component", "new", "my-rules", "--dir", dir]);
    assert!(ok, "{all}");
    assert!(stdout.contains("my-rules"), "{stdout}");
    assert!(ws.join("my-rules/src/lib.rs").is_file());
    // Refused with the reason: it exists; a bad name; not the components workspace.
    let (ok, _, all) = run(&["component", "new", "my-rules", "--dir", dir]);
    assert!(!ok && all.contains("already exists"), "{all}");
    let (ok, _, all) = run(&["component", "new", "My_Rules", "--dir", dir]);
    assert!(!ok && all.contains("not a crate name"), "{all}");
    let (ok, _, all) = run(&[
        "component",
        "new",
        "x",
        "--dir",
        tmp.path().to_str().unwrap(),
    ]);
    assert!(!ok && all.contains("not the components workspace"), "{all}");

    let out_dir = tmp.path().join("built");
    let built = Command::new(repo().join("scripts/build-components.sh"))
        .arg(ws.join("my-rules"))
        .env("SLUICE_COMPONENTS_DIR", &out_dir)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    let wasm = out_dir.join("my-rules.component.wasm");
    assert!(wasm.is_file(), "{}", text(&built));

    let (ok, stdout, all) = run(&["component", "bench", wasm.to_str().unwrap(), "--runs", "20"]);
    assert!(ok, "{all}");
    assert!(stdout.contains("sluice:rerank/reranker@0.2.0"), "{stdout}");
    // What the synthetic set holds is said, with the context it runs under.
    assert!(
        stdout.contains("synthetic set: query")
            && stdout.contains("audience")
            && stdout.contains("context plan=pro"),
        "{stdout}"
    );
    for line in [
        "instantiate + empty call",
        "10 candidates",
        "50 candidates",
        "200 candidates",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.contains(line))
            .unwrap_or_else(|| panic!("{line}: {stdout}"));
        assert!(
            row.contains("p50") && row.contains("p99") && row.contains("fuel"),
            "{row}"
        );
        assert!(!row.contains("FAILED"), "{row}");
    }
}

/// A corpus of four documents with audiences, and questions with and without a plan.
fn corpus(dir: &Path) -> (PathBuf, PathBuf) {
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let line = |id: &str, audience: &str| {
        format!(
            "{{\"id\": \"{id}\", \"title\": \"Card limits\", \"text\": \"Card limits ({id}): the daily card limit is one thousand dollars.\", \"metadata\": {{\"audience\": {audience}}}}}\n"
        )
    };
    let jsonl = [
        line("limits-pro", r#"["pro"]"#),
        line("limits-enterprise", r#"["enterprise"]"#),
        line("limits-all", r#"["free", "pro", "enterprise"]"#),
        line("limits-free", r#""free""#),
    ]
    .concat();
    std::fs::write(docs.join("limits.jsonl"), jsonl).unwrap();
    let queries = dir.join("questions.jsonl");
    std::fs::write(
        &queries,
        "# a comment\n\
         {\"query\": \"what is the daily card limit\", \"rerank_context\": {\"plan\": \"pro\"}, \"k\": 4}\n\
         what is the daily card limit\n",
    )
    .unwrap();
    (docs, queries)
}

#[test]
fn a_component_is_tested_on_questions_over_a_corpus_without_a_server() {
    sluice_testkit::needs!(Components);
    let tmp = tempfile::tempdir().unwrap();
    let (docs, queries) = corpus(tmp.path());
    let policy = tmp.path().join("policy.component.wasm");
    std::fs::write(&policy, sluice_sandbox::built_component("policy").unwrap()).unwrap();
    let args = |file: &str| {
        vec![
            "component".to_string(),
            "test".into(),
            file.into(),
            "--queries".into(),
            queries.to_str().unwrap().into(),
            "--corpus".into(),
            docs.to_str().unwrap().into(),
        ]
    };
    let out = sluice()
        .args(args(policy.to_str().unwrap()))
        .env("SLUICE_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
    let (stdout, all) = (String::from_utf8_lossy(&out.stdout).to_string(), text(&out));
    assert!(out.status.success(), "{all}");
    assert!(all.contains("sluice:rerank/reranker@0.2.0"), "{all}");
    // The pro question: the enterprise and free-only pages dropped, both named.
    let pro = stdout
        .split("\n\n")
        .find(|b| b.contains("[plan=pro]"))
        .expect(&stdout);
    assert!(pro.contains("fused") && pro.contains("component"), "{pro}");
    // Each list with its own scores: a row holds the fused pick and its fused score, then
    // the component's pick and the score the component gave it (two kept here).
    let rows: Vec<&str> = (pro.lines())
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 4, "{pro}");
    let decimals = |row: &str| {
        (row.split_whitespace())
            .filter(|w| w.contains('.') && w.parse::<f64>().is_ok())
            .count()
    };
    assert!(rows[..2].iter().all(|r| decimals(r) == 2), "{pro}");
    assert!(rows[2..].iter().all(|r| decimals(r) == 1), "{pro}");
    let dropped = pro.lines().find(|l| l.contains("dropped:")).expect(pro);
    assert!(
        dropped.contains("limits-enterprise#0") && dropped.contains("limits-free#0"),
        "{dropped}"
    );
    assert!(
        !dropped.contains("limits-pro") && !dropped.contains("limits-all"),
        "{dropped}"
    );
    // Without a plan only documents without an audience are kept: here none.
    let plain = stdout
        .split("\n\n")
        .find(|b| b.starts_with("what is the daily card limit\n"))
        .expect(&stdout);
    let dropped = plain.lines().find(|l| l.contains("dropped:")).expect(plain);
    assert_eq!(dropped.matches('#').count(), 4, "{dropped}");
    assert!(stdout.contains("2 calls, 0 failed; fuel p50"), "{stdout}");

    // A component that passes its smoke run and traps on real requests: reported, exit 1.
    let trapping = include_str!("../../sandbox/tests/keep.wat").replace(
        "(call $rank (local.get $n)) ;; misbehaviour",
        "(unreachable)",
    );
    let bad = tmp.path().join("trapping.wat");
    std::fs::write(&bad, trapping).unwrap();
    let out = sluice()
        .args(args(bad.to_str().unwrap()))
        .env("SLUICE_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("FAILED") && all.contains("unreachable"),
        "{all}"
    );
    assert!(all.contains("2 of 2 calls failed"), "{all}");
    // The benchmark on the same questions and corpus: a row per question, under its own
    // context, or under --context for all.
    let bench = |extra: &[&str]| {
        let out = sluice()
            .args([
                "component",
                "bench",
                policy.to_str().unwrap(),
                "--runs",
                "5",
            ])
            .args([
                "--queries",
                queries.to_str().unwrap(),
                "--corpus",
                docs.to_str().unwrap(),
            ])
            .args(extra)
            .env("SLUICE_DATA_DIR", tmp.path().join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let own = bench(&[]);
    assert!(
        own.contains("what is the daily card limit — 4 candidates, context plan=pro"),
        "{own}"
    );
    assert!(own.contains("context none"), "{own}");
    for row in ["q1 (4 candidates)", "q2 ("] {
        let line = own
            .lines()
            .find(|l| l.contains(row))
            .unwrap_or_else(|| panic!("{row}: {own}"));
        assert!(
            line.contains("fuel p50") && !line.contains("FAILED"),
            "{line}"
        );
    }
    let forced = bench(&["--context", r#"{"plan": "enterprise"}"#]);
    assert_eq!(
        forced.matches("context plan=enterprise").count(),
        2,
        "{forced}"
    );
    // A context that is not one is refused, saying why.
    let out = sluice()
        .args([
            "component",
            "bench",
            policy.to_str().unwrap(),
            "--context",
            r#"{"plan": 3}"#,
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success() && text(&out).contains("--context"),
        "{}",
        text(&out)
    );
}
