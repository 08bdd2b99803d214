//! Soak: a bounded load held for minutes against `sluice serve` in front of the synthetic
//! upstream (a benchmark fixture): 32 streams open at all times, 32-token answers at 10
//! tokens/s, in rounds of 150 recorded requests (`sluice bench run` with the same level
//! repeated). After each round the server's RSS and open file descriptors are read from its
//! `/metrics`; they must stay flat, and nothing may fail. `make test` runs the short form (3
//! rounds, about a minute); `make soak` the long one (`SLUICE_SOAK_ROUNDS`, default 14 there).

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

#[test]
fn a_steady_load_leaves_no_errors_and_flat_memory_and_descriptors() {
    sluice_testkit::needs!(Llm, Model);
    let rounds: usize = std::env::var("SLUICE_SOAK_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(3);
    let upstream = fixture(10, 32);
    let server = serve_with(&[
        ("SLUICE_LLM_URL", &upstream.url),
        ("SLUICE_MAX_TOKENS", "32"),
        ("SLUICE_CACHE", "off"),
        // Nothing may fail or degrade; a deadline late answers could miss on a busy machine
        // would make `degraded` measure the machine instead (speed is `make load`'s).
        ("SLUICE_RETRIEVAL_DEADLINE_MS", "30000"),
    ]);
    ingest(&server);
    let out_dir = tempfile::tempdir().expect("temp dir");
    let levels = vec!["32"; rounds].join(",");
    let started = std::time::Instant::now();
    let out = output_within(
        sluice()
            .args(["bench", "run", "--url", &server.url, "--load", "concurrent"])
            .args(["--levels", &levels, "--requests", "150", "--warmup-s", "3"])
            .arg("--out")
            .arg(out_dir.path()),
        Duration::from_secs(60 * rounds as u64),
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("report.json")).expect("report.json"),
    )
    .expect("JSON report");
    let levels = report["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), rounds);
    let figure = |l: &Value, key: &str| l[key].as_f64().unwrap_or(f64::NAN);
    let mut requests = 0;
    for (i, l) in levels.iter().enumerate() {
        let m = &l["sluice"];
        assert_eq!(m["errors"], 0, "round {i}: {:?}", m["error_kinds"]);
        assert_eq!(m["requests"], 150, "round {i}");
        assert_eq!(l["degraded"], 0, "round {i}: degraded answers");
        requests += 150;
    }
    // From the end of the first round (allocator and pools warmed up) to the end.
    let (first, last) = (&levels[0], &levels[rounds - 1]);
    let (rss0, rss1) = (
        figure(first, "server_rss_mb"),
        figure(last, "server_rss_mb"),
    );
    let (fds0, fds1) = (
        figure(first, "server_open_fds"),
        figure(last, "server_open_fds"),
    );
    eprintln!(
        "soak: {:.0} s, {rounds} rounds of 32 streams, {requests} answers, 0 errors; RSS {rss0:.1} → {rss1:.1} MB; open fds {fds0:.0} → {fds1:.0}",
        started.elapsed().as_secs_f64()
    );
    assert!(rss0 > 10.0, "RSS read from /metrics: {rss0}");
    assert!(
        rss1 - rss0 <= (rss0 * 0.05).max(8.0),
        "RSS grew from {rss0:.1} to {rss1:.1} MB"
    );
    assert!(fds0 > 0.0, "open fds read from /metrics: {fds0}");
    // A leak grows with the answers (hundreds a round); what does not is the sockets open at
    // the moment of each snapshot — 32 streams' client and upstream connections, some still
    // closing or idle in a pool — which vary by a few with the machine's load.
    assert!(
        fds1 <= fds0 + 8.0,
        "open file descriptors grew from {fds0} to {fds1}"
    );
}
