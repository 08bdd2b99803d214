//! `sluice bench` and `/metrics` as a user runs them: `sluice serve` in front of the
//! synthetic upstream (`sluice fixture llm`, a benchmark fixture), both child processes.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn number(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn bench_writes_reports_whose_numbers_add_up() {
    sluice_testkit::needs!(Llm, Model);
    let upstream = fixture(200, 16);
    let server = serve_with(&[("SLUICE_LLM_URL", &upstream.url)]);
    ingest(&server);
    let out_dir = tempfile::tempdir().expect("temp dir");
    let out = output_within(
        sluice()
            .args(["bench", "run", "--url", &server.url, "--load", "sweep"])
            .args(["--levels", "4", "--requests", "12", "--warmup-s", "0.5"])
            .args(["--compare-llm", &upstream.url])
            .arg("--out")
            .arg(out_dir.path()),
        Duration::from_secs(180),
    );
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    assert!(
        log.contains("synchronous") && log.contains("concurrent 4"),
        "{log}"
    );

    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("report.json")).expect("report.json"),
    )
    .expect("JSON report");
    let levels = report["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2, "synchronous, then concurrency 4");
    for level in levels {
        let m = &level["sluice"];
        assert_eq!(m["requests"], 12, "{m}");
        assert_eq!(number(&m["ok"]) + number(&m["errors"]), 12.0);
        assert_eq!(m["errors"], 0, "{:?}", m["error_kinds"]);
        // The fixture sends 16 tokens per answer.
        assert_eq!(number(&m["tokens"]["mean"]), 16.0);
        assert!(number(&m["ttft_ms"]["p50"]) <= number(&m["e2e_ms"]["p50"]));
        assert!(number(&m["ttft_ms"]["max"]) <= number(&m["e2e_ms"]["max"]));
        // 16 tokens at 200/s: 5 ms apart on average (single gaps vary when a late tick of
        // the fixture sends two at once, but their sum cannot be shorter).
        let itl = number(&m["itl_ms"]["mean"]);
        assert!((4.0..50.0).contains(&itl), "ITL mean {itl}");
        assert!(number(&m["output_tokens_per_s"]) > 0.0);
        // Every sample: first token before the end.
        for s in level["samples"].as_array().expect("samples") {
            assert!(number(&s["ttft_ms"]) <= number(&s["e2e_ms"]), "{s}");
        }
        // The server's own stage timings, one per answer.
        assert_eq!(level["stages"]["embed_ms"]["count"], 12);
        assert!(number(&level["stages"]["pipeline_ms"]["p50"]) > 0.0);
        // The same prompts straight to the fixture: Sluice adds its pipeline on top.
        assert_eq!(level["direct"]["requests"], 12);
        assert_eq!(level["direct"]["errors"], 0);
        assert!(number(&level["added_ttft_ms"]["p50"]) > 0.0, "{level}");
        // `sluice serve` exposes its memory on /metrics.
        assert!(number(&level["server_peak_rss_mb"]) > 10.0);
    }

    let csv = std::fs::read_to_string(out_dir.path().join("report.csv")).expect("report.csv");
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert_eq!(
        rows[0].split(',').count(),
        rows[1].split(',').count(),
        "{csv}"
    );
    assert!(rows[2].starts_with("concurrent 4,4,12,12,0,"), "{csv}");
    let html = std::fs::read_to_string(out_dir.path().join("report.html")).expect("report.html");
    assert_eq!(html.matches("<svg").count(), 3, "three plots");
    for title in [
        "TTFT distribution",
        "Latency against load",
        "Server time to first token by stage",
    ] {
        assert!(html.contains(title), "{title}");
    }
    assert!(!html.contains("<script"), "the report needs no script");

    // The cost page from that report.
    let page = out_dir.path().join("cost.md");
    let out = output_within(
        sluice()
            .args(["bench", "cost", "--report"])
            .arg(out_dir.path().join("report.json"))
            .args(["--gpu-per-hour", "2.0", "--gpu-tokens-per-s", "1500"])
            .arg("--out")
            .arg(&page),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("managed instances"), "{}", text(&out));
    let page = std::fs::read_to_string(&page).expect("cost page");
    assert!(page.contains("| **total** |"), "{page}");
    // Both deployments side by side, with the managed fleet's assumptions written out.
    assert!(
        page.contains("Lambda Managed Instances, $ per 1,000 answers"),
        "{page}"
    );
    assert!(page.contains("**3 instances** (at least 3)"), "{page}");
    assert!(
        page.contains("concurrent 4"),
        "the last level is priced: {page}"
    );

    // A level that is not in the report is named as such.
    let out = output_within(
        sluice()
            .args(["bench", "cost", "--report"])
            .arg(out_dir.path().join("report.json"))
            .args(["--level", "poisson 9/s"])
            .args(["--gpu-per-hour", "2", "--gpu-tokens-per-s", "1500"])
            .arg("--out")
            .arg(out_dir.path().join("x.md")),
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("concurrent 4"), "{}", text(&out));
}

#[test]
fn bench_refuses_bad_levels_before_sending_anything() {
    let out = output_within(
        sluice().args([
            "bench",
            "run",
            "--url",
            "http://127.0.0.1:9",
            "--levels",
            "2.5",
        ]),
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("whole number"), "{}", text(&out));
}

/// The value of the series `line_prefix` (name and labels) in an OpenMetrics text, 0 when it
/// is absent.
fn series(text: &str, line_prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn metrics_list_every_series_and_they_move_with_requests() {
    sluice_testkit::needs!(Llm, Model);
    let upstream = fixture(500, 8);
    // The fixture's tokens (` t0 t1 …`) are no source's words: with the grounding check on
    // they would never be cached, and a cache hit is one of the series watched here.
    let server = serve_with(&[
        ("SLUICE_LLM_URL", &upstream.url),
        ("SLUICE_CACHE", "memory"),
        ("SLUICE_GROUNDING", "off"),
    ]);
    ingest(&server);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let scrape = || {
        runtime.block_on(async {
            let r = client
                .get(format!("{}/metrics", server.url))
                .send()
                .await
                .expect("GET /metrics");
            assert_eq!(r.status(), 200);
            assert!(
                r.headers()["content-type"]
                    .to_str()
                    .is_ok_and(|c| c.starts_with("application/openmetrics-text"))
            );
            r.text().await.expect("body")
        })
    };
    let before = scrape();
    let ask = |args: &[&str]| {
        let out = output_within(
            sluice().args(["ask", "--url", &server.url]).args(args),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "{}", text(&out));
    };
    ask(&["How do I reset my password?"]);
    // The same question again: a cache hit.
    ask(&["How do I reset my password?"]);
    // No time for retrieval: degraded.
    ask(&[
        "--deadline-ms",
        "0",
        "--no-cache",
        "What is the card limit?",
    ]);
    // The upstream gone: an error event.
    drop(upstream);
    let failed = output_within(
        sluice().args(["ask", "--url", &server.url, "--no-cache", "Anyone there?"]),
        Duration::from_secs(60),
    );
    assert!(!failed.status.success());
    assert!(
        text(&failed).contains("llm_unavailable"),
        "{}",
        text(&failed)
    );
    let after = scrape();

    let moved = |prefix: &str, by: f64| {
        let (b, a) = (series(&before, prefix), series(&after, prefix));
        assert_eq!(a - b, by, "{prefix}: {b} → {a}\n{after}");
    };
    moved("sluice_answers_total{ending=\"done\"}", 2.0);
    moved("sluice_answers_total{ending=\"cached\"}", 1.0);
    moved("sluice_answers_total{ending=\"error\"}", 1.0);
    moved("sluice_answer_errors_total{code=\"llm_unavailable\"}", 1.0);
    moved("sluice_cache_lookups_total{result=\"hit\"}", 1.0);
    moved("sluice_cache_lookups_total{result=\"miss\"}", 1.0);
    moved("sluice_cache_lookups_total{result=\"bypass\"}", 2.0);
    moved(
        "sluice_degraded_answers_total{reason=\"retrieval_timeout\"}",
        1.0,
    );
    moved("sluice_tokens_total{source=\"llm\"}", 16.0);
    moved("sluice_tokens_total{source=\"cache\"}", 8.0);
    moved("sluice_stage_duration_seconds_count{stage=\"embed\"}", 2.0);
    moved("sluice_stage_duration_seconds_count{stage=\"ttft\"}", 3.0);
    moved(
        "sluice_http_requests_total{route=\"/v1/answer\",status=\"200\"}",
        4.0,
    );
    assert_eq!(series(&after, "sluice_active_streams"), 0.0);
    assert!(series(&after, "sluice_process_resident_memory_bytes") > 1e7);
    for help in [
        "# TYPE sluice_http_requests counter",
        "# TYPE sluice_answer_errors counter",
        "# TYPE sluice_stage_duration_seconds histogram",
        "# TYPE sluice_active_streams gauge",
    ] {
        assert!(after.contains(help), "{help}");
    }

    // Every series the Grafana dashboard queries is one the server exposes.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(sluice_tests::repo().join("infra/grafana/sluice.json"))
            .expect("infra/grafana/sluice.json"),
    )
    .expect("dashboard JSON");
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("sluice_"))
            {
                queried += 1;
                assert!(
                    after.lines().any(|l| l.starts_with(name)),
                    "the dashboard's {name} (panel {}) is not in /metrics",
                    panel["title"]
                );
            }
        }
    }
    assert!(queried >= 10, "{queried} series queried");

    // A stream open while scraping is counted as active.
    let held = fixture(2, 8);
    let slow = serve_with(&[("SLUICE_LLM_URL", &held.url)]);
    let open = runtime.spawn({
        let url = slow.url.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{url}/v1/answer"))
                .json(&serde_json::json!({"query": "hello"}))
                .timeout(Duration::from_secs(30))
                .send()
                .await
        }
    });
    let mut active = 0.0;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let text = runtime.block_on(async {
            client
                .get(format!("{}/metrics", slow.url))
                .send()
                .await
                .expect("GET /metrics")
                .text()
                .await
                .expect("body")
        });
        active = series(&text, "sluice_active_streams");
        if active > 0.0 {
            break;
        }
    }
    assert_eq!(active, 1.0, "one answer stream is open");
    open.abort();
}
