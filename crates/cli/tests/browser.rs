//! The web page at `/` in a real browser: `sluice serve` in front of the synthetic upstream
//! (a benchmark fixture streaming 16 tokens at 20 per second, so that the answer is visibly
//! in flight for most of a second), driven by Chromium through playwright-core
//! (`crates/cli/tests/browser/ask.cjs`). Both come from `scripts/setup.sh browser`.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;
use sluice_tests::sluice_home;

/// playwright-core's `node_modules` and Chromium, as `scripts/setup.sh browser` installs them.
fn browser() -> (PathBuf, &'static str) {
    let modules = sluice_home().join("browser/node_modules");
    assert!(
        modules.join("playwright-core").is_dir(),
        "{} has no playwright-core: run `scripts/setup.sh browser`",
        modules.display()
    );
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("Chromium is not installed: run `scripts/setup.sh browser`");
    (modules, chromium)
}

#[test]
fn ask_in_the_browser_and_watch_the_answer_stream_in() {
    sluice_testkit::needs!(Llm, Model, Browser);
    let (modules, chromium) = browser();

    let upstream = fixture(20, 16);
    // A website to keep in sync, on 127.0.0.1 (which the server is told it may fetch).
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the site");
    let site = runtime.block_on(sluice_testkit::site::Site::serve());
    let article = sluice_testkit::site::Page::article;
    site.put(
        "/help/",
        article("Help", "Help for every account holder.", &["fees"]),
    );
    site.put(
        "/help/fees",
        article("Fees", "Sending money abroad costs one percent.", &[]),
    );
    let server = serve_with(&[
        ("SLUICE_LLM_URL", &upstream.url),
        ("SLUICE_FETCH_ALLOW", "127.0.0.1/32"),
        ("SLUICE_SYNC_HOST_RATE", "1000"),
    ]);

    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&out_dir).expect("output folder");
    let screenshot = out_dir.join("answer.png");
    let _ = std::fs::remove_file(&screenshot);
    // A PDF beside the samples: the page takes the formats the server converts.
    let handbook = out_dir.join("handbook.pdf");
    let page: &[(f32, &str)] = &[(16.0, "Handbook"), (10.0, "Branches open at nine.")];
    let pdf = sluice_testkit::files::pdf(&[page], Default::default());
    std::fs::write(&handbook, pdf).expect("the PDF is written");
    let mut uploads = ["lost-card.md", "password-reset.md", "support.jsonl"]
        .map(|f| samples().join(f).display().to_string())
        .to_vec();
    uploads.push(handbook.display().to_string());
    let uploads = uploads.join(":");
    // A page for HR alone, uploaded with an access list, and two users' tokens.
    let hr_file = out_dir.join("staff-bonus.md");
    let memo = "# Staff bonus\n\nThe staff bonus is paid in March to every member of staff.\n";
    std::fs::write(&hr_file, memo).expect("the HR page is written");
    let identity = sluice_testkit::users::identity(false).to_string();
    let script = sluice_tests::repo().join("crates/cli/tests/browser/ask.cjs");
    let out = output_within(
        Command::new("node")
            .arg(&script)
            .env("NODE_PATH", &modules)
            .env("CHROMIUM", chromium)
            .env("SLUICE_URL", &server.url)
            .env("UPLOAD_FILES", &uploads)
            .env("IDENTITY", &identity)
            .env("HR_FILE", &hr_file)
            .env("HR_TOKEN", sluice_testkit::users::token("bob", &["hr"]))
            .env(
                "SALES_TOKEN",
                sluice_testkit::users::token("erin", &["sales"]),
            )
            .env("SITE_URL", site.url("/help/"))
            .env("SCREENSHOT", &screenshot),
        Duration::from_secs(120),
    );
    drop(upstream);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the script's summary is not JSON ({e}): {stdout}"));

    assert_eq!(seen["title"], "Sluice");
    // The website source: saved, synced (its two pages added), listed with its schedule.
    let sources = &seen["sources"];
    assert!(
        sources["status"]
            .as_str()
            .unwrap_or("")
            .ends_with(": done."),
        "{sources}"
    );
    assert!(
        sources["report"]
            .as_str()
            .unwrap_or("")
            .starts_with("2 added, 0 changed, 0 unchanged, 0 deleted, 0 failed"),
        "{sources}"
    );
    let listed = sources["listed"].as_str().unwrap_or("");
    assert!(
        listed.starts_with(&format!(
            "site\t{}\tevery 60 min\tlast: done, 2 added",
            site.url("/help/")
        )),
        "{listed}"
    );
    assert_eq!(seen["problems"], serde_json::json!([]), "no script errors");
    // Every upload, question and settings change carried its body's SHA-256, as an edge in
    // front of a function URL needs.
    let posts = seen["hashed"].as_array().unwrap();
    for path in ["/v1/documents", "/v1/answer"] {
        assert!(
            posts.iter().any(|p| p["path"] == path),
            "no POST to {path}: {posts:?}"
        );
    }
    assert!(
        posts
            .iter()
            .all(|p| p["ok"] == true && p["bytes"].as_u64() > Some(0)),
        "{posts:?}"
    );
    assert!(
        seen["uploaded"]
            .as_str()
            .is_some_and(|s| s.starts_with("Added 4 file(s)")),
        "{}",
        seen["uploaded"]
    );

    // Tokens were on the page while the answer was still streaming …
    let early = &seen["early"];
    assert!(!early["answer"].as_str().unwrap_or("").is_empty());
    assert_eq!(early["total"], "–", "the answer had not ended yet");
    assert_eq!(early["busy"], "true");
    let done = &seen["done"];
    let (first, last) = (
        early["answer"].as_str().unwrap_or(""),
        done["answer"].as_str().unwrap_or(""),
    );
    assert!(
        last.len() > first.len() && last.starts_with(first),
        "{first:?} then {last:?}"
    );
    // … the fixture's 16 tokens in the end, with the client-measured TTFT and total.
    assert_eq!(done["tokens"], "16");
    assert_eq!(last.split_whitespace().count(), 16, "{last}");
    for key in ["ttft", "total"] {
        let shown = done[key].as_str().unwrap_or("");
        let ms: f64 = shown
            .strip_suffix(" ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} shows {shown:?}"));
        assert!(ms > 0.0 && ms < 30_000.0, "{key} {ms}");
    }
    assert_eq!(done["busy"], "false");
    assert_eq!(done["status"], "Done.");
    // The evidence before the answer: the extract above it, the highlights in the cards.
    let extract = done["extract"].as_str().unwrap_or("");
    let highlights: Vec<&str> = (done["highlights"].as_array().expect("highlights").iter())
        .filter_map(Value::as_str)
        .collect();
    assert!(
        highlights.iter().any(|h| extract.starts_with(h)),
        "the extract {extract:?} is one of the highlights {highlights:?}"
    );
    // The fixture's tokens (` t0 t1 …`) are facts no source states: each is marked once the
    // verdict arrives, and the verdict's line says the sentence is unsupported.
    let marked: Vec<&str> = (done["marked"].as_array().expect("marks").iter())
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(marked, (0..16).map(|i| format!("t{i}")).collect::<Vec<_>>());
    assert!(
        done["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("0 of 1 sentences supported")),
        "{}",
        done["verdict"]
    );
    // The sources, with the uploaded lost-card page among them and a snippet each.
    let sources = done["sources"].as_array().expect("sources");
    assert!(!sources.is_empty());
    assert!(
        sources.iter().any(|s| s
            .as_str()
            .is_some_and(|t| t.contains("Lost or stolen cards"))),
        "{sources:?}"
    );
    let stages: Vec<&str> = done["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for stage in ["embed", "retrieve", "prompt", "llm_ttft", "ttft", "total"] {
        assert!(stages.contains(&stage), "{stage} missing from {stages:?}");
    }
    // With a metadata filter: bad JSON refused in the page, then only the documents whose
    // front matter passes it, their metadata shown.
    assert!(
        seen["badFilter"]
            .as_str()
            .is_some_and(|e| e.starts_with("The filter is not JSON")),
        "{}",
        seen["badFilter"]
    );
    let filtered = &seen["filtered"];
    assert_eq!(filtered["error"], "");
    let sources = filtered["sources"].as_array().expect("sources");
    assert!(!sources.is_empty());
    for source in sources {
        assert!(
            source
                .as_str()
                .is_some_and(|t| t.contains("Resetting your online banking password")),
            "{sources:?}"
        );
    }
    let shown = filtered["metadata"].as_array().expect("metadata");
    assert_eq!(shown.len(), sources.len());
    for metadata in shown {
        assert_eq!(metadata, "topic: accounts · updated_at: 2024-11-20");
    }
    // Sources only: the filtered question's sources again, and no answer written.
    let searched = &seen["searched"];
    assert_eq!(searched["sources"], filtered["sources"], "{searched}");
    assert_eq!(searched["answer"], "", "{searched}");
    assert!(posts.iter().any(|p| p["path"] == "/v1/search"), "{posts:?}");
    // The documents section: the uploads listed (support.jsonl's several, the two pages),
    // one deleted through its button, gone when listed again, the rest kept.
    let documents = &seen["documents"];
    let ids = |key: &str| -> Vec<String> {
        let mut v: Vec<String> = (documents[key].as_array().expect("ids").iter())
            .map(|id| id.as_str().unwrap_or_default().to_string())
            .collect();
        v.sort();
        v
    };
    let (listed, after) = (ids("listed"), ids("after"));
    assert!(listed.len() >= 5, "{listed:?}");
    assert!(
        listed.iter().any(|id| id.ends_with("handbook.pdf")),
        "{listed:?}"
    );
    let deleted = documents["deleted"].as_str().expect("a deleted id");
    assert!(deleted.ends_with("lost-card.md"), "{deleted}");
    let kept: Vec<String> = listed.iter().filter(|id| *id != deleted).cloned().collect();
    assert_eq!(after, kept);
    // The settings section: none at first, saved as version 1 (the PUT carrying its hash),
    // an unknown field refused and named by the server, version 1 still what is stored.
    let settings = &seen["settings"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    assert_eq!(
        text(&settings["before"]["status"]),
        "None set: the deployment's defaults apply."
    );
    assert_eq!(text(&settings["saved"]), "Saved as version 1.");
    let refused = text(&settings["refused"]);
    assert!(
        refused.contains("tone") && refused.contains("invalid_settings"),
        "{refused}"
    );
    assert!(
        text(&settings["after"]["status"]).starts_with("Version 1, saved "),
        "{settings}"
    );
    let stored: Value = serde_json::from_str(&text(&settings["after"]["json"])).expect("JSON");
    assert_eq!(stored["prompt"]["instructions"], "You are Vega.");
    assert!(
        posts
            .iter()
            .any(|p| p["method"] == "PUT" && p["path"] == "/v1/settings"),
        "{posts:?}"
    );
    // The quality section: the answer rated down (with the page it should have come from), the
    // rating listed with its question, a set stored and run to its report, its figures shown.
    let quality = &seen["quality"];
    assert!(
        text(&quality["rated"]).starts_with("Rated down:"),
        "{quality}"
    );
    assert!(
        text(&quality["ratings"])
            .contains("down\tWhat should I do if I lose my card?\tlost-card.md"),
        "{quality}"
    );
    assert_eq!(quality["stored"], 200, "{quality}");
    assert!(
        text(&quality["run"]).contains("finished, 1 of 1 questions"),
        "{quality}"
    );
    assert!(
        text(&quality["figures"]).starts_with("recall 1.000"),
        "{quality}"
    );
    // End users: the HR page is listed for a user of HR and hidden from one of sales, whose
    // answer does not cite it; the token went with every question and listing made while it
    // was set, and with no write.
    let users = &seen["users"];
    assert_eq!(text(&users["identitySaved"]), "Saved as version 2.");
    let listed_as = |who: &str| -> Vec<String> {
        (users[who].as_array().expect("ids").iter())
            .map(text)
            .collect()
    };
    let is_memo = |id: &String| id.ends_with("staff-bonus.md");
    assert!(listed_as("asHr").iter().any(is_memo), "{users}");
    assert!(!listed_as("asSales").iter().any(is_memo), "{users}");
    assert!(
        !listed_as("asSales").is_empty(),
        "the open documents are listed"
    );
    let cited = users["salesSources"].as_array().expect("sources");
    assert!(!cited.is_empty(), "{users}");
    assert!(
        cited.iter().all(|s| !text(s).contains("Staff bonus")),
        "{cited:?}"
    );
    let bad = text(&users["badToken"]);
    assert!(
        bad.contains("User token field") && bad.contains("invalid_user_token"),
        "the page names its own field: {bad}"
    );
    let sent = users["sent"].as_array().expect("requests");
    let carried = |method: &str, path: &str| {
        (sent.iter())
            .filter(|r| r["method"] == method && r["path"] == path)
            .map(|r| r["user"] == true)
            .collect::<Vec<bool>>()
    };
    assert!(carried("GET", "/v1/documents").contains(&true), "{sent:?}");
    assert!(carried("POST", "/v1/answer").contains(&true), "{sent:?}");
    // A rating is an end user's own (with the token while one is set); every other write is
    // the tenant's.
    assert!(
        sent.iter()
            .filter(|r| r["method"] != "GET"
                && r["path"] != "/v1/answer"
                && r["path"] != "/v1/feedback")
            .all(|r| r["user"] == false),
        "{sent:?}"
    );
    let png = std::fs::read(&screenshot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    eprintln!("screenshot: {}", screenshot.display());
}

#[test]
fn no_web_page_can_drive_the_server() {
    sluice_testkit::needs!(Llm, Model, Browser);
    let (modules, chromium) = browser();
    let upstream = fixture(200, 8);
    let server = serve_with(&[("SLUICE_LLM_URL", &upstream.url)]);
    let script = sluice_tests::repo().join("crates/cli/tests/browser/cross_site.cjs");
    let out = output_within(
        Command::new("node")
            .arg(&script)
            .env("NODE_PATH", &modules)
            .env("CHROMIUM", chromium)
            .env("SLUICE_URL", &server.url),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the script's summary is not JSON ({e}): {stdout}"));

    // The form was posted and both fetches were sent; none was served.
    let cross = &seen["crossSite"];
    assert_eq!(cross["form"], "posted", "{seen}");
    assert!(
        cross["read"] == "blocked"
            || cross["read"]
                .as_str()
                .is_some_and(|t| t.contains("cross_origin")),
        "{seen}"
    );
    // The rebinding page: the server refused its name, for the page and for the API.
    assert_eq!(seen["landing"], 403, "{seen}");
    assert_eq!(seen["rebound"]["status"], 403, "{seen}");
    assert!(
        seen["rebound"]["body"]
            .as_str()
            .is_some_and(|b| b.contains("forbidden_host")),
        "{seen}"
    );
    // Nothing written, nothing answered: the server's own count of what it did.
    let (_, metrics) = get_as_host(server.port(), "127.0.0.1", "/metrics");
    for line in metrics.lines() {
        if line.starts_with("sluice_http_requests_total{") && line.contains("/v1/") {
            assert!(
                line.contains("status=\"403\""),
                "a /v1 request was served: {line}"
            );
        }
    }
    assert!(
        metrics.contains("route=\"/v1/documents\",status=\"403\""),
        "the form reached the server and was refused: {metrics}"
    );
    assert!(
        !metrics.contains("sluice_answers_total{"),
        "an answer was started: {metrics}"
    );
}
