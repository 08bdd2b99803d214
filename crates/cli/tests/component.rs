//! `sluice component`, a tenant's local loop, as a user runs it: in an empty folder outside
//! the repository, `new` writes a workspace of its own (the SDK and the WIT from the binary)
//! that `build` makes a 0.2 component; `test` and `bench` run it on the tenant's documents and
//! contexts; uploaded to `sluice serve`, it changes premium callers' answers. A prompt
//! component goes the same way (`new --kind prompt`) and writes the messages answers are sent.
//! `test`
//! runs the example `policy` component on questions over a corpus folder with the real model
//! (orders side by side, what was dropped, cost per call) and exits non-zero for a component
//! that fails on real requests.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// What a tenant writes: premium callers see the documents meant for them first.
const PREMIUM_BOOST: &str = r#"use sluice_rerank_sdk::{Candidate, Context, Guest, Ranking, context, export_reranker, scores};

struct PremiumBoost;

impl Guest for PremiumBoost {
    fn rerank(_query: String, ctx: Context, candidates: Vec<Candidate>) -> Result<Ranking, String> {
        let premium = context(&ctx, "plan") == Some("premium");
        Ok(scores(candidates.iter().map(|c: &Candidate| {
            let for_premium = c.strings("audience").is_some_and(|a| a.iter().any(|x| x == "premium"));
            if premium && for_premium { c.score + 1.0 } else { c.score }
        })))
    }
}

export_reranker!(PremiumBoost);
"#;

/// A rule with a bug on one path: for premium callers it expects one audience per document,
/// and a document with a list of them makes it panic.
const PANICS_FOR_PREMIUM: &str = r#"use sluice_rerank_sdk::{Candidate, Context, Guest, Ranking, context, export_reranker, scores};

struct Strict;

impl Guest for Strict {
    fn rerank(_query: String, ctx: Context, candidates: Vec<Candidate>) -> Result<Ranking, String> {
        let premium = context(&ctx, "plan") == Some("premium");
        Ok(scores(candidates.iter().map(|c: &Candidate| {
            if !premium {
                return c.score;
            }
            let audience = c.text_meta("audience").expect("every document has one audience");
            if audience == "premium" { c.score + 1.0 } else { c.score }
        })))
    }
}

export_reranker!(Strict);
"#;

/// `sluice ARGS` in `dir` as a tenant runs it: (succeeded, stdout, everything it printed).
fn run_in(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = sluice()
        .args(args)
        .current_dir(dir)
        // Shares the standard library built for the target with the other builds.
        .env(
            "CARGO_TARGET_DIR",
            sluice_testkit::services::sluice_home().join("components-target"),
        )
        .env("SLUICE_DATA_DIR", dir.join("data"))
        // The default limits, the 5 ms deadline included: it is CPU time, so a correct
        // component passes on the loaded machine this runs on.
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.success(), stdout, text(&out))
}

/// The first row of a `component test` block: (fused first, component's first).
fn firsts(block: &str) -> (String, String) {
    let row = (block.lines())
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no first row: {block}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    (cells[1].to_string(), cells[3].to_string())
}

#[test]
fn a_component_workspace_made_anywhere_is_built_tested_benchmarked_and_changes_answers() {
    sluice_testkit::needs!(Components, Llm, Model);
    // An empty folder outside the repository, and nothing read from the repository: the SDK
    // and the WIT come from the binary.
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_in(tmp.path(), args);
    let (ok, stdout, all) = run(&["component", "new", "premium-boost"]);
    assert!(ok, "{all}");
    assert!(stdout.contains("sluice component build"), "{stdout}");
    let crate_dir = tmp.path().join("premium-boost");
    for file in [
        "Cargo.toml",
        "src/lib.rs",
        "vendor/sluice-rerank-sdk/Cargo.toml",
        "vendor/sluice-rerank-sdk/src/lib.rs",
        "wit/rerank-0.2/rerank.wit",
    ] {
        assert!(crate_dir.join(file).is_file(), "{file}");
    }
    // Refused with the reason: it exists; a bad name.
    let (ok, _, all) = run(&["component", "new", "premium-boost"]);
    assert!(!ok && all.contains("already exists"), "{all}");
    let (ok, _, all) = run(&["component", "new", "Premium_Boost"]);
    assert!(!ok && all.contains("not a crate name"), "{all}");
    // The tenant's own documents and questions.
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("limits.jsonl"),
        [
            r#"{"id": "limits-standard", "title": "Standard card limits", "text": "What is the daily card limit? The daily card limit is one thousand dollars a day.", "metadata": {"audience": ["standard"]}}"#,
            r#"{"id": "limits-premium", "title": "Premium card limits", "text": "Premium accounts may spend up to five thousand dollars abroad.", "metadata": {"audience": "premium"}}"#,
            r#"{"id": "branches", "title": "Branch hours", "text": "Branches open at nine and close at five on weekdays.", "metadata": {"audience": ["standard", "premium"]}}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let queries = tmp.path().join("questions.jsonl");
    std::fs::write(
        &queries,
        "{\"query\": \"what is the daily card limit\", \"rerank_context\": {\"plan\": \"premium\"}, \"k\": 3, \
           \"expect\": {\"first\": \"limits-premium\", \"absent\": [\"internal-*\"]}}\n\
         what is the daily card limit\n",
    )
    .unwrap();
    let (q, d) = (queries.to_str().unwrap(), docs.to_str().unwrap());
    // As written, the template builds, and keeps the fused order: the question's expectation
    // (premium documents first for premium callers) fails with what it got; then the rule.
    let (ok, stdout, all) = run(&["component", "build", "premium-boost"]);
    assert!(ok, "{all}");
    let template = stdout.trim().to_string();
    let (ok, tested, all) = run(&[
        "component",
        "test",
        &template,
        "--queries",
        q,
        "--corpus",
        d,
    ]);
    assert!(
        !ok && all.contains("1 of 2 questions' expectations failed"),
        "{all}"
    );
    assert!(
        tested.contains("EXPECTATION FAILED: expected \"limits-premium\" first, got \""),
        "{tested}"
    );
    std::fs::write(crate_dir.join("src/lib.rs"), PREMIUM_BOOST).unwrap();
    let (ok, stdout_after, all) = run(&["component", "build", "premium-boost"]);
    assert!(ok, "{all}");
    assert_eq!(stdout, stdout_after, "the same place");
    let wasm = PathBuf::from(stdout_after.trim());
    assert!(
        wasm.is_file()
            && wasm
                .to_string_lossy()
                .ends_with("premium-boost.component.wasm"),
        "{stdout_after}"
    );
    let wasm = wasm.to_str().unwrap();

    let (ok, stdout, all) = run(&["component", "test", wasm, "--queries", q, "--corpus", d]);
    assert!(ok, "the rule meets the expectation: {all}");
    assert!(!stdout.contains("EXPECTATION FAILED"), "{stdout}");
    // A snapshot of the orders: written once, the same on the next run (the fused order and
    // the component's are deterministic), and a changed order fails with both.
    let snap = tmp.path().join("orders.snap");
    let snap = snap.to_str().unwrap();
    let test_snap = || {
        run(&[
            "component",
            "test",
            wasm,
            "--queries",
            q,
            "--corpus",
            d,
            "--snapshot",
            snap,
        ])
    };
    let (ok, written, all) = test_snap();
    assert!(ok && written.contains("snapshot written"), "{all}");
    let (ok, again, all) = test_snap();
    assert!(ok && !again.contains("SNAPSHOT CHANGED"), "{all}");
    let saved = std::fs::read_to_string(snap).unwrap();
    assert!(
        saved.contains(r#"{"plan":"premium"} → limits-premium#0"#),
        "{saved}"
    );
    std::fs::write(snap, saved.replace("→ limits-premium#0", "→ branches#0")).unwrap();
    let (ok, changed, all) = test_snap();
    assert!(
        !ok && all.contains("1 orders differ from the snapshot"),
        "{all}"
    );
    assert!(
        changed.contains("SNAPSHOT CHANGED:\n  was: ") && changed.contains("branches#0"),
        "{changed}"
    );
    let block = |marker: &str| -> String {
        (stdout.split("\n\n"))
            .find(|b| b.contains(marker))
            .unwrap_or_else(|| panic!("{marker}: {stdout}"))
            .to_string()
    };
    let (fused, component) = firsts(&block("[plan=premium]"));
    assert_ne!(fused, "limits-premium#0", "the premise: {stdout}");
    assert_eq!(component, "limits-premium#0", "{stdout}");
    let (fused, component) = firsts(&block("what is the daily card limit\n  "));
    assert_eq!(fused, component, "no plan, no change: {stdout}");
    // Without --corpus and no local store here: said, and no store is made.
    let (ok, _, all) = run(&["component", "test", wasm, "--queries", q]);
    assert!(!ok && all.contains("no local store at"), "{all}");
    assert!(!tmp.path().join("data").exists(), "{all}");
    let (ok, stdout, all) = run(&[
        "component",
        "bench",
        wasm,
        "--runs",
        "5",
        "--queries",
        q,
        "--corpus",
        d,
        "--context",
        r#"{"plan": "premium"}"#,
    ]);
    assert!(ok, "{all}");
    assert_eq!(
        stdout.matches("context plan=premium").count(),
        2,
        "{stdout}"
    );
    let (ok, stdout, all) = run(&["component", "bench", wasm, "--runs", "20"]);
    assert!(ok, "{all}");
    for line in [
        "instantiate + empty call",
        "10 candidates",
        "50 candidates",
        "200 candidates",
    ] {
        let row = (stdout.lines())
            .find(|l| l.contains(line))
            .unwrap_or_else(|| panic!("{line}: {stdout}"));
        assert!(
            row.contains("p50") && row.contains("fuel") && !row.contains("failed"),
            "{row}"
        );
    }

    // On a server: ingested, uploaded, activated; premium callers' answers change.
    let server = serve();
    let (ok, _, all) = run(&["ingest", "--url", &server.url, d]);
    assert!(ok, "{all}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(upload_and_activate(&server.url, "rerank", wasm));
    let first_source = |extra: &[&str]| {
        let mut args = vec!["ask", "--url", server.url.as_str(), "-k", "3"];
        args.extend_from_slice(extra);
        args.push("what is the daily card limit");
        let (ok, stdout, all) = run(&args);
        assert!(ok, "{all}");
        stdout
            .lines()
            // The first source line, not a `[1]` of the model's prose.
            .find(|l| l.starts_with("[1] ") && l.contains(") score "))
            .unwrap_or_else(|| panic!("no sources: {stdout}"))
            .to_string()
    };
    assert!(
        first_source(&["--rerank-context", r#"{"plan": "premium"}"#])
            .contains("Premium card limits")
    );
    assert!(!first_source(&[]).contains("Premium card limits"));

    // A bug on one path: the panic's message and its line in the source, locally and on the
    // server (in the answer's meta and the versions listing), not offsets into the binary.
    std::fs::write(crate_dir.join("src/lib.rs"), PANICS_FOR_PREMIUM).unwrap();
    let (ok, _, all) = run(&["component", "build", "premium-boost"]);
    assert!(ok, "{all}");
    let (line, column) = (PANICS_FOR_PREMIUM.lines().enumerate())
        .find_map(|(i, l)| l.find("expect(").map(|c| (i + 1, c + 1)))
        .unwrap();
    let said = format!("panicked at src/lib.rs:{line}:{column}: every document has one audience");
    // The crate declares the callers its rule treats differently (the template's premium and
    // free plans): the upload check runs under each — `test`'s local one and the server's —
    // and refuses the bug with the context and where the panic is.
    let why = format!("smoke run under the declared context {{\"plan\":\"premium\"}}: {said}");
    let (ok, _, all) = run(&["component", "test", wasm, "--queries", q, "--corpus", d]);
    assert!(!ok && all.contains(&why), "{all}");
    let url = server.url.as_str();
    let refused = run(&["component", "upload", wasm, "--url", url]);
    assert!(!refused.0 && refused.2.contains(&why), "{}", refused.2);
    // A crate that does not declare them is let through, and fails live premium traffic.
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let declared = "contexts = [{ plan = \"free\" }, { plan = \"premium\" }]";
    assert!(manifest.contains(declared), "{manifest}");
    let manifest = manifest.replace(declared, "contexts = [{ plan = \"free\" }]");
    std::fs::write(crate_dir.join("Cargo.toml"), manifest).unwrap();
    let (ok, _, all) = run(&["component", "build", "premium-boost"]);
    assert!(ok, "{all}");
    // Locally, the failing call: `test` fails and prints the panic's message and place.
    let (ok, stdout, all) = run(&["component", "test", wasm, "--queries", q, "--corpus", d]);
    assert!(!ok, "a failing call fails the test: {all}");
    let failed = format!("FAILED (the answer keeps the fused order, rerank_failed): panic: {said}");
    assert!(stdout.contains(&failed), "{stdout}");
    let (ok, uploaded, all) = run(&[
        "component",
        "upload",
        wasm,
        "--label",
        "strict audiences",
        "--activate",
        "--url",
        url,
    ]);
    assert!(
        ok && uploaded.contains("(active)  \"strict audiences\""),
        "{all}"
    );
    let version = uploaded.split_whitespace().next().unwrap().to_string();
    let request_id = runtime.block_on(async {
        let body = serde_json::json!({"query": "what is the daily card limit",
            "rerank_context": {"plan": "premium"}, "cache": "bypass"});
        let answer = sluice_tests::answer_at(&server.url, None, &body).await;
        let meta = &answer.first("meta").data;
        let failure = &meta["rerank_error"];
        assert_eq!(failure["kind"], "panic", "{failure}");
        assert_eq!(failure["message"], said, "{failure}");
        assert_eq!(failure["context"], serde_json::json!({"plan": "premium"}));
        let candidates = failure["candidates"].as_array().unwrap();
        assert!(candidates.contains(&"limits-premium#0".into()), "{failure}");
        meta["request_id"].as_str().unwrap().to_string()
    });
    // Stored in the background: the listing and the version's log have it within moments,
    // with the request it failed in.
    let until = |args: &[&str], holds: &dyn Fn(&str) -> bool| {
        for _ in 0..100 {
            let (ok, stdout, all) = run(args);
            assert!(ok, "{all}");
            if holds(&stdout) {
                return stdout;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("never: {args:?}");
    };
    let listed = until(&["component", "versions", "--url", url], &|out| {
        out.contains("panic:")
    });
    assert!(
        listed.contains("recent failures; last ") && listed.contains(&said),
        "{listed}"
    );
    let logs = until(&["component", "logs", &version, "--url", url], &|out| {
        out.contains("FAILED")
    });
    assert!(logs.contains(&format!("request {request_id}")), "{logs}");
    assert!(logs.contains(&format!("FAILED panic: {said}")), "{logs}");
    // The failing call runs again on the local build: it still fails here, the same way.
    let (ok, replayed, all) = run(&["component", "replay", &version, wasm, "--url", url]);
    assert!(
        !ok && all.contains("1 of 1 replayed calls still fail"),
        "{all}"
    );
    assert!(replayed.contains("[plan=premium]"), "{replayed}");
    assert!(
        replayed.contains(&format!("here:  FAILED panic: {said}")),
        "{replayed}"
    );
    // Fixed, it passes on the same input.
    std::fs::write(crate_dir.join("src/lib.rs"), PREMIUM_BOOST).unwrap();
    let (ok, _, all) = run(&["component", "build", "premium-boost"]);
    assert!(ok, "{all}");
    let (ok, replayed, all) = run(&["component", "replay", &version, wasm, "--url", url]);
    assert!(ok, "{all}");
    assert!(
        replayed.contains("here:  ok: limits-premium#0"),
        "{replayed}"
    );
}

/// `dev` is the loop on every save: it builds the crate, uploads it (labelled `dev`) and
/// activates it; a save that breaks the build says why and uploads nothing; the next good
/// save is a new active version, and the older dev version past `--keep` is deleted. Versions
/// are named by a prefix or a label; `deactivate` stops the component.
#[test]
fn dev_builds_uploads_and_activates_on_every_save() {
    sluice_testkit::needs!(Components, Llm, Model);
    let tmp = tempfile::tempdir().unwrap();
    let (ok, _, all) = run_in(tmp.path(), &["component", "new", "live"]);
    assert!(ok, "{all}");
    let crate_dir = tmp.path().join("live");
    let server = serve();
    let mut child = sluice()
        .args([
            "component",
            "dev",
            "live",
            "--keep",
            "1",
            "--url",
            &server.url,
        ])
        .current_dir(tmp.path())
        .env(
            "CARGO_TARGET_DIR",
            sluice_testkit::services::sluice_home().join("components-target"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _stop = Stop(child);
    let (send, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = send.send(line);
        }
    });
    // The lines up to the next `watching …`, that round's report.
    let round = || {
        let mut said = Vec::new();
        loop {
            let line = (lines.recv_timeout(std::time::Duration::from_secs(600)))
                .unwrap_or_else(|_| panic!("no end of the round: {said:?}"));
            if line.starts_with("watching ") {
                return said.join("\n");
            }
            said.push(line);
        }
    };
    let first = round();
    assert!(
        first.contains("activated ") && first.contains("(active)  \"dev\""),
        "{first}"
    );
    // A save that does not build: said, nothing uploaded.
    std::fs::write(crate_dir.join("src/lib.rs"), "this is not rust").unwrap();
    let broken = round();
    assert!(
        broken.contains("not uploaded: cargo build failed"),
        "{broken}"
    );
    std::fs::write(crate_dir.join("src/lib.rs"), PREMIUM_BOOST).unwrap();
    let second = round();
    assert!(second.contains("activated "), "{second}");
    let version = |said: &str| {
        let line = said.lines().find(|l| l.starts_with("activated ")).unwrap();
        line.split_whitespace().nth(1).unwrap().to_string()
    };
    assert_ne!(version(&first), version(&second));
    let (ok, listed, all) = run_in(tmp.path(), &["component", "versions", "--url", &server.url]);
    assert!(ok, "{all}");
    assert!(
        listed.contains(&format!("{}  (active)", version(&second))),
        "{listed}"
    );
    // `--keep 1`: the first dev version went when the second came.
    assert!(second.contains("deleted 1 older dev version"), "{second}");
    assert!(!listed.contains(&version(&first)), "{listed}");
    // Versions named by a prefix and by their label; deactivated by its own command.
    let prefix = &version(&second)[..8];
    let (ok, logs, all) = run_in(
        tmp.path(),
        &["component", "logs", prefix, "--url", &server.url],
    );
    assert!(ok, "{logs}{all}");
    let (ok, _, all) = run_in(
        tmp.path(),
        &["component", "activate", "dev", "--url", &server.url],
    );
    assert!(ok, "{all}");
    // A stored version tried beside the live one on a set, from the command line: the report
    // names the version it tried by its hash.
    let set = tmp.path().join("set.json");
    std::fs::write(
        &set,
        r#"{"questions": [{"question": "what is the daily card limit"}]}"#,
    )
    .unwrap();
    let url = ["--url", server.url.as_str()];
    let put = ["eval", "sets", "put", "s", set.to_str().unwrap()];
    let (ok, _, all) = run_in(tmp.path(), &[&put[..], &url].concat());
    assert!(ok, "{all}");
    let asked = [
        "eval",
        "run",
        "--set",
        "s",
        "--candidate",
        "rerank=dev",
        "--json",
    ];
    let (ok, report, all) = run_in(tmp.path(), &[&asked[..], &url].concat());
    assert!(ok, "{all}");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let tried = report["candidate"]["rerank"].as_str().unwrap_or_default();
    assert!(tried.len() == 64 && tried.starts_with(prefix), "{report}");
    assert!(
        report.get("live").is_some(),
        "beside the live one: {report}"
    );
    let (ok, said, all) = run_in(
        tmp.path(),
        &["component", "deactivate", "--url", &server.url],
    );
    assert!(ok && said.contains("deactivated"), "{said}{all}");
    let (_, listed, _) = run_in(tmp.path(), &["component", "versions", "--url", &server.url]);
    assert!(!listed.contains("(active)"), "{listed}");
}

/// A prompt component from the template, through the same loop: `new --kind prompt` writes
/// it, `build` makes it, `test` prints the messages it assembles (the caller's locale first),
/// `bench` measures it on a synthetic input of 0, 5 and 20 sources; uploaded to `sluice serve`'s prompt route
/// and activated, it writes the messages an answer is sent (`include_prompt` shows them).
#[test]
fn a_prompt_component_made_by_the_loop_changes_the_messages_an_answer_is_sent() {
    sluice_testkit::needs!(Components, Llm, Model);
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_in(tmp.path(), args);
    let (ok, _, all) = run(&["component", "new", "my-prompt", "--kind", "prompt"]);
    assert!(ok, "{all}");
    assert!(tmp.path().join("my-prompt/wit/prompt/prompt.wit").is_file());
    let (ok, stdout, all) = run(&["component", "build", "my-prompt"]);
    assert!(ok, "{all}");
    let wasm = stdout.trim().to_string();
    let (docs, _) = corpus(tmp.path());
    let queries = tmp.path().join("prompt-questions.jsonl");
    std::fs::write(
        &queries,
        "{\"query\": \"what is the daily card limit\", \"rerank_context\": {\"locale\": \"fr\"}}\n",
    )
    .unwrap();
    let (q, d) = (queries.to_str().unwrap(), docs.to_str().unwrap());
    let (ok, stdout, all) = run(&["component", "test", &wasm, "--queries", q, "--corpus", d]);
    assert!(ok, "{all}");
    let first = stdout.find("[system]\n    Answer in the language of the locale fr.");
    let rules = stdout.find("[system]\n    Answer using only the numbered sources");
    assert!(first.is_some() && first < rules, "{stdout}");
    assert!(
        stdout.contains("[user]") && stdout.contains("1 calls, 0 failed"),
        "{stdout}"
    );
    let (ok, stdout, all) = run(&["component", "bench", &wasm, "--runs", "5"]);
    assert!(ok, "{all}");
    for n in ["0 sources", "5 sources", "20 sources"] {
        let row = (stdout.lines().find(|l| l.contains(n))).unwrap_or_else(|| panic!("{stdout}"));
        assert!(
            row.contains("p99") && row.contains("fuel") && !row.contains("failed"),
            "{row}"
        );
    }

    let server = serve();
    let (ok, _, all) = run(&["ingest", "--url", &server.url, d]);
    assert!(ok, "{all}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // The rerank route takes only rerank components.
        let wrong = (reqwest::Client::new().put(format!("{}/v1/components/rerank", server.url)))
            .header("content-type", "application/wasm")
            .body(std::fs::read(&wasm).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 400);
        // The command reads the kind from the component: no --prompt needed.
        let (ok, said, all) = run(&["component", "upload", &wasm, "--activate", "--url", &server.url]);
        assert!(ok && said.contains("(active)"), "{said}{all}");
        let listed = reqwest::get(format!("{}/v1/components/prompt", server.url)).await.unwrap();
        let listed: serde_json::Value = listed.json().await.unwrap();
        assert!(listed["active"].is_string(), "on the prompt route: {listed}");
        let ask = |context: serde_json::Value| {
            serde_json::json!({"query": "what is the daily card limit", "include_prompt": true, "rerank_context": context})
        };
        let french = sluice_tests::answer_at(&server.url, None, &ask(serde_json::json!({"locale": "fr"}))).await;
        french.assert_well_formed();
        let meta = &french.first("meta").data;
        assert_eq!(meta["degraded"], serde_json::json!([]), "{meta}");
        let messages = &meta["prompt"]["messages"];
        assert_eq!(
            messages[0]["content"], "Answer in the language of the locale fr.",
            "{messages}"
        );
        let plain = sluice_tests::answer_at(&server.url, None, &ask(serde_json::json!({}))).await;
        let messages = &plain.first("meta").data["prompt"]["messages"];
        assert!(
            (messages[0]["content"].as_str().unwrap_or_default())
                .starts_with("Answer using only the numbered sources"),
            "{messages}"
        );
    });
}

/// Uploads the component in `wasm` to the server's `kind` route and activates it.
async fn upload_and_activate(server: &str, kind: &str, wasm: &str) {
    let http = reqwest::Client::new();
    let uploaded: serde_json::Value = (http.put(format!("{server}/v1/components/{kind}")))
        .header("content-type", "application/wasm")
        .body(std::fs::read(wasm).unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let version = uploaded["version"].as_str().expect("a version").to_string();
    let activated = (http.post(format!("{server}/v1/components/{kind}/activate")))
        .json(&serde_json::json!({ "version": version }))
        .send()
        .await
        .unwrap();
    assert_eq!(activated.status(), 200);
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
    std::fs::write(&policy, sluice_rerank::built_component("policy").unwrap()).unwrap();
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
    let trapping = include_str!("../../rerank/tests/keep.wat").replace(
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
    // Its benchmark counts the failed calls, and fails past the stated share of them.
    let out = sluice()
        .args(["component", "bench", bad.to_str().unwrap(), "--runs", "5"])
        .env("SLUICE_DATA_DIR", tmp.path().join("data"))
        .output()
        .unwrap();
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("failed 5 of 5 (100.0 %)"), "{all}");
    assert!(
        all.contains("more than 1 % of a row's calls failed"),
        "{all}"
    );
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
            line.contains("fuel p50") && !line.contains("failed"),
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
