//! The `sluice` command as a user runs it: `serve` in a child process, then `ingest`, `ask`
//! and `doctor` against it, with the real model and the local LLM (SLUICE_TEST_LLM_URL).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// `sluice documents` against a server holding the samples.
fn documents_are_listed_read_and_deleted(url: &str) {
    let run = |args: &[&str]| {
        let out = sluice()
            .arg("documents")
            .args(args)
            .args(["--url", url])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            text(&out),
        )
    };
    let (ok, stdout, all) = run(&["list"]);
    assert!(ok, "{all}");
    assert_eq!(
        stdout.lines().count(),
        1 + 9,
        "a header and the 9 documents: {stdout}"
    );
    assert!(all.contains("9 documents"), "{all}");
    let lost = r#"{"topic": "cards", "updated_at": {"$gte": "2025-06-01"}}"#;
    let (ok, stdout, all) = run(&["list", "--json", "--filter", lost]);
    assert!(ok, "{all}");
    let cards: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(cards.len(), 1, "{stdout}");
    let id = cards[0]["id"].as_str().unwrap().to_string();
    assert!(id.ends_with("lost-card.md"), "{id}");
    let (ok, stdout, all) = run(&["get", &id]);
    assert!(ok, "{all}");
    let got: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(got["chunks"].as_u64().unwrap() >= 1, "{got}");
    // A deletion of many needs --yes; the refusal deletes nothing.
    let (ok, _, all) = run(&["delete", "--filter", lost]);
    assert!(!ok && all.contains("--yes"), "{all}");
    let (ok, stdout, all) = run(&["delete", "--filter", lost, "--yes"]);
    assert!(ok && stdout.contains("deleted 1 documents"), "{all}");
    let (ok, _, all) = run(&["get", &id]);
    assert!(!ok && all.contains("unknown_document"), "{all}");
    let (_, listed, _) = run(&["list", "--json"]);
    let other = serde_json::from_str::<serde_json::Value>(listed.lines().next().unwrap()).unwrap();
    let (ok, stdout, all) = run(&["delete", other["id"].as_str().unwrap()]);
    assert!(ok && stdout.contains("deleted"), "{all}");
    let (_, stdout, _) = run(&["list"]);
    assert_eq!(stdout.lines().count(), 1 + 7, "{stdout}");
}

/// `sluice ingest samples/` against the server at `url`: its output, once it succeeded.
fn ingest_samples(url: &str) -> String {
    let out = sluice()
        .args(["ingest", "--url", url])
        .arg(samples())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn serve_ingest_ask_and_doctor() {
    sluice_testkit::needs!(Llm, Model);
    let mut server = serve();
    let first = ingest_samples(&server.url);
    assert!(
        first.contains("ingested 9 documents (0 unchanged) from 7 files"),
        "{first}"
    );
    // Sent again as they are: nothing embedded or written, the corpus version where it was.
    let again = ingest_samples(&server.url);
    let version = |line: &str| {
        line.rsplit("corpus version ")
            .next()
            .map(str::trim)
            .map(String::from)
    };
    assert!(
        again.contains("ingested 9 documents (9 unchanged) from 7 files as 0 chunks"),
        "{again}"
    );
    assert_eq!(version(&again), version(&first), "{first} / {again}");

    let out = sluice()
        .args([
            "ask",
            "--url",
            &server.url,
            "What is the fee for a SWIFT transfer?",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("] International transfers ("),
        "sources listed: {stdout}"
    );
    assert!(
        stdout.contains("client ttft") && stdout.contains("retrieve"),
        "timings printed: {stdout}"
    );

    // The sources alone: the answer's, numbered the same, and the server's JSON with --json.
    let searched = |args: &[&str]| {
        let out = sluice()
            .args(["search", "--url", &server.url])
            .args(args)
            .arg("What is the fee for a SWIFT transfer?")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let listed = searched(&[]);
    let numbered: Vec<&str> = listed.lines().filter(|l| l.starts_with('[')).collect();
    let answered: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(") score "))
        .collect();
    assert_eq!(numbered, answered, "{listed}");
    assert!(
        listed.contains("server ") && listed.contains(" ms"),
        "{listed}"
    );
    let json: serde_json::Value = serde_json::from_str(&searched(&["--json", "-k", "2"])).unwrap();
    assert_eq!(
        json["documents"].as_array().map(Vec::len),
        Some(2),
        "{json}"
    );

    let out = sluice()
        .args(["ask", "--url", &server.url, " "])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("empty_query"), "{}", text(&out));

    // The request's other fields as flags: a filter, the rerank context, the tenant.
    let ask = |args: &[&str]| {
        sluice()
            .args(["ask", "--url", &server.url])
            .args(args)
            .arg("What is the fee for a SWIFT transfer?")
            // A user's mistake is a message, never a backtrace, whatever this says.
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap()
    };
    // The source lines (`[n] title (source) score s`), not the model's own `[n]`s in its prose.
    let sources = |out: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('[') && l.contains(") score "))
            .map(str::to_string)
            .collect()
    };
    let out = ask(&["--filter", r#"{"topic": "cards"}"#]);
    assert!(out.status.success(), "{}", text(&out));
    let cards = sources(&out);
    assert!(!cards.is_empty(), "{}", text(&out));
    assert!(
        cards
            .iter()
            .all(|l| l.contains("lost-card.md") || l.contains("card-limits.md")),
        "only the cards topic's documents: {cards:?}"
    );
    let out = ask(&["--rerank-context", r#"{"plan": "premium"}"#]);
    assert!(out.status.success(), "{}", text(&out));
    // The server's verdict on a context it refuses, and the CLI's on one that is not JSON.
    for (context, said) in [
        (r#"{"plan": 3}"#, "invalid_rerank_context"),
        ("plan=premium", "--rerank-context is not JSON"),
        (r#"["premium"]"#, "--rerank-context must be a JSON object"),
    ] {
        let out = ask(&["--rerank-context", context]);
        assert!(!out.status.success(), "{context}");
        let said_back = text(&out);
        assert!(said_back.contains(said), "{context}: {said_back}");
        assert!(
            !said_back.to_lowercase().contains("backtrace"),
            "{context}: {said_back}"
        );
    }
    let out = ask(&["--filter", "topic=cards"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--filter is not JSON"),
        "{}",
        text(&out)
    );
    // Another tenant (auth off): it has no documents, so no sources.
    let out = ask(&["--tenant", "globex"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(sources(&out).is_empty(), "{}", text(&out));

    // This environment, as `sluice serve` would start with it: no server is asked, and a
    // data folder that does not exist yet is not made.
    let fresh = tempfile::tempdir().unwrap();
    let unmade = fresh.path().join("sluice-data");
    let out = sluice()
        .args(["doctor"])
        .env_remove("SLUICE_URL")
        .env("SLUICE_LLM_URL", llm_url())
        .env("SLUICE_DATA_DIR", &unmade)
        .current_dir(fresh.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    for part in [
        "✓ embedding model",
        "✓ data folder",
        "does not exist yet",
        "✓ LLM",
        "✓ answer cache",
    ] {
        assert!(
            report.contains(part),
            "doctor should report {part:?}: {report}"
        );
    }
    assert!(
        !report.contains("✓ server") && !report.contains("✗ server"),
        "no server asked: {report}"
    );
    assert!(!unmade.exists(), "doctor made {}", unmade.display());
    assert_eq!(
        std::fs::read_dir(fresh.path()).unwrap().count(),
        0,
        "nothing created"
    );
    // The running server's own view, with --url.
    let out = sluice()
        .args(["doctor", "--url", &server.url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    for part in ["✓ server", "✓ model", "✓ store", "✓ llm"] {
        assert!(
            report.contains(part),
            "doctor --url should report {part:?}: {report}"
        );
    }

    documents_are_listed_read_and_deleted(&server.url);

    // SIGTERM: a graceful exit.
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    server.assert_exits_cleanly_within(Duration::from_secs(10));
}

#[test]
fn keys_bound_to_a_filter_answer_only_unless_told_and_reach_the_tenant_only_when_said() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.json");
    let create = |args: &[&str]| {
        sluice()
            .args([
                "keys",
                "create",
                "--tenant",
                "acme",
                "--filter",
                r#"{"team": "a"}"#,
            ])
            .args(args)
            .env("SLUICE_API_KEYS_FILE", &file)
            .output()
            .unwrap()
    };
    let records = || -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&file).unwrap();
        let file: serde_json::Value = serde_json::from_str(&text).unwrap();
        file["keys"].as_array().unwrap().clone()
    };
    // Bound, with no permissions named: answers, nothing else.
    let out = create(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let made = records();
    assert_eq!(made[0]["permissions"], serde_json::json!(["answer"]));
    assert_eq!(
        made[0]["filter"],
        serde_json::json!({"team": {"$eq": "a"}}),
        "stored in canonical form"
    );
    assert!(made[0].get("tenant_wide").is_none());
    // Documents within its filter may be asked for; what reaches the whole tenant needs the
    // flag, which says so.
    let out = create(&["--permissions", "answer,documents,documents:delete,cache"]);
    assert!(out.status.success(), "{}", text(&out));
    for wide in ["components", "usage:keys"] {
        let out = create(&["--permissions", &format!("answer,{wide}")]);
        assert!(!out.status.success());
        assert!(
            text(&out).contains(wide) && text(&out).contains("--tenant-wide"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(records().len(), 2, "nothing stored for a refused key");
    let out = create(&["--permissions", "answer,components", "--tenant-wide"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(records()[2]["tenant_wide"], true);
    // The flag means nothing without a filter, and is refused there.
    let out = sluice()
        .args(["keys", "create", "--tenant", "acme", "--tenant-wide"])
        .env("SLUICE_API_KEYS_FILE", &file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("--filter"), "{}", text(&out));
}

#[test]
fn keys_made_by_the_cli_let_requests_in_and_never_reach_the_log() {
    sluice_testkit::needs!(Llm, Model);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.json");
    let out = sluice()
        .args(["keys", "create", "--tenant", "acme", "--name", "cli test"])
        .env("SLUICE_API_KEYS_FILE", &file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(key.starts_with("sk-sluice-"), "{key}");
    let stored = std::fs::read_to_string(&file).unwrap();
    assert!(
        !stored.contains(&key) && stored.contains("\"acme\""),
        "{stored}"
    );
    for (args, says) in [
        (vec!["--tenant", "a b"], "--tenant"),
        (
            vec!["--tenant", "acme", "--permissions", "answer,root"],
            "\"root\" is not one of",
        ),
    ] {
        let out = sluice()
            .args(["keys", "create"])
            .args(&args)
            .env("SLUICE_API_KEYS_FILE", &file)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }

    let server = serve_with(&[
        ("SLUICE_API_KEYS_FILE", file.to_str().unwrap()),
        ("RUST_LOG", "debug,qdrant_edge=error,h2=info,hyper=info"),
    ]);
    let out = sluice()
        .args(["ingest", "--url", &server.url])
        .arg(samples())
        .env_remove("SLUICE_API_KEY")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("missing_api_key"), "{}", text(&out));
    let out = sluice()
        .args(["ingest", "--url", &server.url])
        .arg(samples())
        .env("SLUICE_API_KEY", &key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = sluice()
        .args([
            "ask",
            "--url",
            &server.url,
            "What is the fee for a SWIFT transfer?",
        ])
        .env("SLUICE_API_KEY", &key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("] International transfers ("));
    // The default permissions include reading the tenant's usage (not every key's).
    assert!(
        stored.contains("\"documents:delete\"") && stored.contains("\"usage\""),
        "{stored}"
    );
    let out = sluice()
        .args(["usage", "--json", "--url", &server.url])
        .env("SLUICE_API_KEY", &key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let usage: serde_json::Value = serde_json::from_slice(&out.stdout).expect("usage JSON");
    assert_eq!(usage["tenant"], "acme");
    assert_eq!(usage["total"]["answers"], 1, "{usage}");
    assert_eq!(usage["total"]["documents"], 9, "{usage}");
    assert!(
        usage["total"]["completion_tokens"].as_u64() > Some(0),
        "{usage}"
    );
    let out = sluice()
        .args(["usage", "--url", &server.url])
        .env("SLUICE_API_KEY", &key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("\ntotal\t1\t"), "{}", text(&out));
    let out = sluice()
        .args(["usage", "--keys", "--url", &server.url])
        .env("SLUICE_API_KEY", &key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("usage:keys"), "{}", text(&out));
    let log = std::fs::read_to_string(server._data.path().join("serve.log")).unwrap();
    assert!(log.contains("auth on"), "{log}");
    assert!(log.contains("acme"), "the tenant is logged: {log}");
    assert!(
        !log.contains('\x1b'),
        "no colour codes in a log that is no terminal: {log}"
    );
    assert!(!log.contains(&key), "the key was logged");
}

#[test]
fn sigterm_lets_open_streams_finish_then_ends_the_rest_with_a_retryable_error() {
    sluice_testkit::needs!(Llm, Model);
    // 20 tokens/s: an 8-token answer ends well inside a 10 s drain; a 200-token one outlasts
    // a 300 ms drain.
    let upstream = fixture(20, 1000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (max_tokens, drain_ms, ending) in [("8", "10000", "done"), ("200", "300", "error")] {
        let mut server = serve_with(&[
            ("SLUICE_LLM_URL", &upstream.url),
            ("SLUICE_MAX_TOKENS", max_tokens),
            ("SLUICE_DRAIN_TIMEOUT_MS", drain_ms),
            ("SLUICE_CACHE", "off"),
        ]);
        let pid = server.child.id().to_string();
        let (stream, after_signal) = runtime.block_on(async {
            let mut r = reqwest::Client::new()
                .post(format!("{}/v1/answer", server.url))
                .json(&serde_json::json!({"query": "tell me about refunds"}))
                .timeout(Duration::from_secs(30))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let mut text = String::new();
            while !text.contains("event: token") {
                let chunk = r.chunk().await.unwrap().expect("a token before the end");
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            assert!(
                Command::new("kill")
                    .args(["-TERM", &pid])
                    .status()
                    .unwrap()
                    .success()
            );
            let signalled = Instant::now();
            while let Some(chunk) = r.chunk().await.unwrap() {
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            (text, signalled.elapsed())
        });
        let events: Vec<&str> = stream
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(events.last(), Some(&ending), "{stream}");
        if ending == "done" {
            assert_eq!(
                events.iter().filter(|e| **e == "token").count(),
                8,
                "{stream}"
            );
        } else {
            let last = stream.trim_end().lines().last().unwrap();
            let error: serde_json::Value =
                serde_json::from_str(last.trim_start_matches("data: ")).unwrap();
            assert_eq!(error["code"], "shutting_down", "{stream}");
            assert_eq!(error["retryable"], true);
            assert!(
                after_signal < Duration::from_millis(2000),
                "ended {after_signal:?} after SIGTERM with a 300 ms drain"
            );
        }
        server.assert_exits_cleanly_within(Duration::from_secs(10));
    }
}

#[test]
fn bad_configuration_stops_start_up_with_a_clear_message() {
    let out = sluice()
        .arg("serve")
        .env("SLUICE_TOP_K", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("SLUICE_TOP_K") && msg.contains("from 1 to 50"),
        "{msg}"
    );
}

#[test]
fn serve_answers_only_requests_for_its_own_host_names() {
    sluice_testkit::needs!(Llm, Model);
    // A DNS-rebinding page reaches the server under the attacker's name: refused, on every
    // route, the page and the metrics included.
    let server = serve();
    let port = server.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.1".to_string(),
    ] {
        assert_eq!(get_as_host(port, &host, "/v1/models").0, 200, "{host}");
    }
    for path in ["/v1/models", "/", "/metrics", "/readyz"] {
        let (status, response) = get_as_host(port, &format!("rebind.example:{port}"), path);
        assert_eq!(status, 403, "{path}: {response}");
        assert!(response.contains("forbidden_host"), "{response}");
    }
    // Other names are the operator's to add.
    let named = serve_with(&[("SLUICE_ALLOWED_HOSTS", "sluice.internal")]);
    let port = named.port();
    assert_eq!(get_as_host(port, "sluice.internal:1", "/v1/models").0, 200);
    assert_eq!(
        get_as_host(port, &format!("127.0.0.1:{port}"), "/v1/models").0,
        403
    );
}

#[test]
fn serve_with_auth_off_refuses_an_address_beyond_loopback_unless_told() {
    sluice_testkit::needs!(Llm);
    let port = free_port();
    let out = output_within(
        sluice()
            .arg("serve")
            .env("SLUICE_ADDR", format!("0.0.0.0:{port}"))
            .env_remove("SLUICE_API_KEYS_FILE")
            .env_remove("SLUICE_API_KEYS_TABLE"),
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains("auth off") && said.contains("SLUICE_ALLOW_UNAUTHENTICATED"),
        "{said}"
    );
    // Told, it serves (and still answers only its loopback names by default).
    let data = tempfile::tempdir().unwrap();
    let mut child = sluice()
        .arg("serve")
        .env("SLUICE_ADDR", format!("0.0.0.0:{port}"))
        .env("SLUICE_ALLOW_UNAUTHENTICATED", "true")
        .env("SLUICE_DATA_DIR", data.path())
        .env("SLUICE_LLM_URL", llm_url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_port(port, "sluice serve on 0.0.0.0");
    let (status, _) = get_as_host(port, &format!("127.0.0.1:{port}"), "/v1/models");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200);
}

/// The tour without a model: the fixture answering from the prompt's sources gives a cited,
/// supported answer, which the cache then answers the same question with.
#[test]
fn the_fixture_answers_from_the_sources_so_an_answer_is_grounded_then_cached() {
    sluice_testkit::needs!(Model);
    let fixture = fixture_with(&["--answers", "sources", "--tokens-per-sec", "500"]);
    let server = serve_with(&[("SLUICE_LLM_URL", fixture.url.as_str())]);
    ingest_samples(&server.url);
    let ask = || {
        let out = sluice()
            .args(["ask", "How long does a replacement card take to arrive?"])
            .args(["--url", &server.url])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = ask();
    assert!(first.contains("[1]"), "cited: {first}");
    assert!(
        first.contains("1 of 1 sentences supported"),
        "grounded: {first}"
    );
    assert!(first.contains("| cache miss |"), "{first}");
    let again = ask();
    assert!(again.contains("| cache hit |"), "{again}");
}

/// `settings edit` reopens a draft the server refuses, with why above it, until it is fixed or
/// given up; settings saved as they were keep their version.
#[test]
fn settings_edit_reopens_a_refused_draft_and_the_same_settings_keep_their_version() {
    sluice_testkit::needs!(Llm, Model);
    let server = serve();
    let dir = tempfile::tempdir().unwrap();
    // An editor that writes the draft its turn names (`$DRAFTS/<n>`, or leaves it as it is
    // when there is none) and keeps what it was shown.
    let editor = dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nn=$(( $(cat \"$DRAFTS/count\" 2>/dev/null || echo 0) + 1 ))\n\
         echo $n > \"$DRAFTS/count\"\ncp \"$1\" \"$DRAFTS/shown-$n\"\n\
         [ -f \"$DRAFTS/$n\" ] && cp \"$DRAFTS/$n\" \"$1\"\nexit 0\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&editor)
        .status()
        .unwrap();
    let edit = |drafts: &[&str]| {
        let turns = tempfile::tempdir().unwrap();
        for (i, d) in drafts.iter().enumerate() {
            std::fs::write(turns.path().join((i + 1).to_string()), d).unwrap();
        }
        let out = sluice()
            .args(["settings", "edit", "--url", &server.url])
            .env("EDITOR", &editor)
            .env("DRAFTS", turns.path())
            .output()
            .unwrap();
        (out, turns)
    };
    let (out, turns) = edit(&[r#"{"k": 0}"#, r#"{"k": 3}"#]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = std::fs::read_to_string(turns.path().join("shown-2")).unwrap();
    assert!(
        shown.starts_with("// not stored:") && shown.contains("invalid_settings"),
        "the second draft says why the first was refused: {shown}"
    );
    assert!(shown.contains(r#"{"k": 0}"#), "and keeps it: {shown}");
    let stored = text(&out);
    assert!(
        stored.contains("\"version\": 1") && stored.contains("\"k\": 3"),
        "{stored}"
    );
    // A refused draft saved again as it was reopened: given up, nothing stored.
    let (out, _) = edit(&[r#"{"k": 0}"#]);
    assert!(!out.status.success());
    assert!(text(&out).contains("nothing stored"), "{}", text(&out));
    // The same settings again: not written, the version kept.
    let same = dir.path().join("same.json");
    std::fs::write(&same, r#"{"k": 3}"#).unwrap();
    let out = sluice()
        .args(["settings", "set"])
        .arg(&same)
        .args(["--url", &server.url])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(
        said.contains("\"unchanged\": true") && said.contains("\"version\": 1"),
        "{said}"
    );
}

#[test]
fn doctor_names_what_is_missing() {
    let port = free_port();
    let data = tempfile::tempdir().unwrap();
    // A server that is not there.
    let out = sluice()
        .args(["doctor", "--url", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let report = text(&out);
    assert!(
        report.contains("✗ server") && report.contains("sluice serve"),
        "{report}"
    );
    // This environment's missing parts.
    let out = sluice()
        .args(["doctor"])
        .env_remove("SLUICE_URL")
        .env("SLUICE_MODEL_DIR", "/nonexistent/model")
        .env("SLUICE_LLM_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("SLUICE_DATA_DIR", data.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let report = text(&out);
    assert!(
        report.contains("✗ embedding model") && report.contains("SLUICE_MODEL_DIR"),
        "{report}"
    );
    // Fixes that work from the binary alone, in plain lines.
    assert!(
        report.contains("✗ LLM") && report.contains("sluice fixture llm"),
        "{report}"
    );
    assert!(
        !report.contains("make ") && !report.contains("scripts/"),
        "{report}"
    );
    assert!(!report.contains("Settings {"), "no debug dump: {report}");
    // SLUICE_URL is where other commands send requests, not a reason for doctor to ask a
    // server: without --url it checks this environment.
    let out = sluice()
        .args(["doctor"])
        .env("SLUICE_URL", format!("http://127.0.0.1:{port}"))
        .env("SLUICE_MODEL_DIR", "/nonexistent/model")
        .env("SLUICE_LLM_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("SLUICE_DATA_DIR", data.path())
        .output()
        .unwrap();
    let report = text(&out);
    let asked = report.contains("✓ server") || report.contains("✗ server");
    assert!(report.contains("✗ embedding model") && !asked, "{report}");
    // An empty --url is said to be one, not sent.
    let out = sluice().args(["doctor", "--url", ""]).output().unwrap();
    assert!(!out.status.success());
    let report = text(&out);
    assert!(
        report.contains("--url needs a server's address") && !report.contains("builder"),
        "{report}"
    );
}

#[test]
fn ingest_reports_a_bad_file_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("broken.jsonl");
    std::fs::write(&bad, "{\"id\": \"a\", \"text\": \"ok\"}\nnot json\n").unwrap();
    let out = sluice()
        .args(["ingest", "--url", "http://127.0.0.1:9"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("broken.jsonl line 2"), "{}", text(&out));
}

/// A DynamoDB emulator of this test's own (moto_server, from SLUICE_TEST_MOTO_SERVER, which
/// `make test` sets), so that the test can kill it.
struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cache table that cannot be reached at start does not stop the server: it starts, says
/// so in its log, and answers (every lookup a miss) — where a missing table stops it (below).
#[test]
fn a_cache_table_unreachable_at_start_only_warns() {
    sluice_testkit::needs!(Llm, Model);
    // Port 9 (discard): nothing listens there on the test machines.
    let server = serve_with(&[
        ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:9"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("SLUICE_CACHE", "dynamodb"),
        ("SLUICE_CACHE_TABLE", "sluice-unreachable"),
    ]);
    let out = sluice()
        .args(["ask", "--url", &server.url, "How do I reset my password?"])
        .output()
        .unwrap();
    let log = || std::fs::read_to_string(server._data.path().join("serve.log")).unwrap();
    assert!(
        out.status.success(),
        "{}\nserve.log:\n{}",
        text(&out),
        log()
    );
    assert!(text(&out).contains("| cache miss |"), "{}", text(&out));
    assert!(log().contains("DynamoDB unreachable at start"), "{}", log());
}

#[test]
fn answers_keep_streaming_when_dynamodb_dies() {
    sluice_testkit::needs!(Llm, Aws, Model);
    let moto = std::env::var("SLUICE_TEST_MOTO_SERVER").expect(
        "SLUICE_TEST_MOTO_SERVER is not set: run the tests with `make test`, which installs moto",
    );
    let port = free_port();
    let moto = Moto(
        Command::new(moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port, "moto_server");
    warm_up_moto(port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let aws = [
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("SLUICE_CACHE", "dynamodb"),
        ("SLUICE_CACHE_TABLE", "sluice-cli"),
        // The demo model's answers are often unsupported by the samples, and the grounding
        // check would keep them out of the cache: it is off here.
        ("SLUICE_GROUNDING", "off"),
    ];

    // Without the table, start-up stops and says what to do.
    let out = output_within(sluice().arg("serve").envs(aws), Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(
        text(&out).contains("sluice cache create-table"),
        "{}",
        text(&out)
    );
    for expected in [
        "table sluice-cli created",
        "table sluice-cli already exists",
    ] {
        let out = sluice()
            .args(["cache", "create-table"])
            .envs(aws)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        assert!(text(&out).contains(expected), "{}", text(&out));
    }

    let server = serve_with(&aws);
    ingest_samples(&server.url);
    let ask = |q: &str| {
        let out = sluice()
            .args(["ask", "--url", &server.url, q])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let question = "What is the fee for a SWIFT transfer?";
    assert!(ask(question).contains("| cache miss |"));
    let started = Instant::now();
    while !ask(question).contains("| cache hit |") {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never a cache hit"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // This environment's cache table, as `sluice serve` would use it.
    let out = sluice()
        .args(["doctor"])
        .env_remove("SLUICE_URL")
        .envs(aws)
        .env("SLUICE_LLM_URL", llm_url())
        .output()
        .unwrap();
    assert!(
        text(&out).contains("✓ answer cache: DynamoDB table sluice-cli is ready"),
        "{}",
        text(&out)
    );

    // The emulator dies: the same question and a new one still get whole answers.
    drop(moto);
    for q in [question, "How do I reset my password?"] {
        let out = ask(q);
        assert!(out.contains("| cache miss |"), "{out}");
        assert!(out.contains("tokens"), "{out}");
    }
}

#[test]
fn model_prepare_writes_the_fast_loading_graph_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let model = sluice_testkit::services::model_dir();
    for file in ["model.onnx", "tokenizer.json", "word_embeddings.f32"] {
        std::os::unix::fs::symlink(model.join(file), dir.path().join(file)).unwrap();
    }
    let out = sluice()
        .args(["model", "prepare", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let written = dir.path().join("model.nnef.tar");
    assert!(text(&out).contains(&written.display().to_string()));
    // The encoder's weights (the word embedding table is a file of its own).
    assert!(std::fs::metadata(&written).unwrap().len() > 40 << 20);

    // A folder without a model: the error names the file.
    let empty = tempfile::tempdir().unwrap();
    let out = sluice()
        .args(["model", "prepare", "--dir"])
        .arg(empty.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("model.onnx"), "{}", text(&out));
}

/// Behind CloudFront with origin access control (here its stand-in: a POST whose
/// `x-amz-content-sha256` is not its body's SHA-256 is refused, `Authorization` is dropped),
/// `ingest`, `ask` and `documents delete` work as they do against the server itself.
#[test]
fn ingest_and_ask_through_an_edge_that_signs_for_a_function_url() {
    sluice_testkit::needs!(Llm, Model);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.json");
    let out = sluice()
        .args(["keys", "create", "--tenant", "acme"])
        .env("SLUICE_API_KEYS_FILE", &file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let server = serve_with(&[("SLUICE_API_KEYS_FILE", file.to_str().unwrap())]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let edge = runtime.block_on(sluice_tests::proxy::signing_edge(&server.url));
    // The control: the stand-in does refuse a body without its hash.
    let refused = runtime.block_on(async {
        sluice_tests::http()
            .post(format!("{edge}/v1/answer"))
            .header("x-api-key", &key)
            .json(&serde_json::json!({"query": "hello"}))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(refused.as_u16(), 403);

    let run = |args: &[&str]| {
        let out = sluice()
            .args(args)
            .args(["--url", &edge])
            .env("SLUICE_API_KEY", &key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["ingest", samples().to_str().unwrap()]);
    let answer = run(&["ask", "What is the fee for a SWIFT transfer?"]);
    assert!(answer.contains("] International transfers ("), "{answer}");
    // A deletion's body (a filter) is hashed too.
    let deleted = run(&[
        "documents",
        "delete",
        "--filter",
        r#"{"topic": "cards", "updated_at": {"$gte": "2025-06-01"}}"#,
        "--yes",
    ]);
    assert!(deleted.contains("deleted 1 documents"), "{deleted}");
}

/// `sluice sources` against a running server: a website stored from `--site` with a schedule,
/// synced (each page on standard error as it goes, then the report), listed, synced again
/// with nothing changed, and deleted with the documents synced from it.
#[test]
fn sources_are_put_synced_listed_and_deleted_from_the_cli() {
    sluice_testkit::needs!(Llm, Model);
    use sluice_testkit::site::{Page, Site};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(Site::serve());
    site.put(
        "/help/",
        Page::article("Help", "Help for every account holder.", &["cards"]),
    );
    site.put(
        "/help/cards",
        Page::article("Cards", "A lost card is blocked at once.", &[]),
    );
    let server = serve_with(&[
        ("SLUICE_FETCH_ALLOW", "127.0.0.1/32"),
        ("SLUICE_SYNC_HOST_RATE", "1000"),
    ]);
    let run = |args: &[&str]| {
        let out = output_within(
            sluice().args(args).arg("--url").arg(&server.url),
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        (stdout, String::from_utf8_lossy(&out.stderr).to_string())
    };
    let help = site.url("/help/");
    let (stored, _) = run(&["sources", "put", "help", "--site", &help, "--every", "60"]);
    assert!(stored.contains("\"every_minutes\": 60"), "{stored}");
    let (report, progress) = run(&["sources", "sync", "help"]);
    assert!(
        report.contains(" done: 2 added, 0 changed, 0 unchanged, 0 deleted, 0 failed"),
        "{report}"
    );
    assert!(
        progress.contains(&format!("added     {}", site.url("/help/cards"))),
        "{progress}"
    );
    let (listed, _) = run(&["sources", "list"]);
    assert!(
        listed.starts_with(&format!("help\twebsite {help}\tevery 60 min\tsync-")),
        "{listed}"
    );
    let (again, _) = run(&["sources", "sync", "help"]);
    assert!(
        again.contains(" done: 0 added, 0 changed, 2 unchanged"),
        "{again}"
    );
    let (deleted, _) = run(&["sources", "delete", "help"]);
    assert!(deleted.contains("\"documents\": 2"), "{deleted}");
    drop(runtime);
}
