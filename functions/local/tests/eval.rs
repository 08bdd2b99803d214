//! `sluice eval retrieval` and `sluice eval tune` end to end on slices of τ²-bench
//! banking_knowledge (the first 8 or 6 tasks, over 150 or 80 of the 698 documents: those the
//! tasks require, then others): every method on the held-out half, far above a random
//! ranking; tuning's choice written as the line the server reads. (The full run is in the
//! README.)

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

/// Runs `sluice eval ARGS --out DIR` (with `env` set) and reads its report.json: the folder,
/// the run's output and the report.
fn eval(env: &[(&str, &str)], args: &[&str]) -> (tempfile::TempDir, String, Value) {
    let out = tempfile::tempdir().unwrap();
    let mut command = sluice();
    command.envs(env.iter().copied()).arg("eval").args(args);
    let run = output_within(
        command.arg("--out").arg(out.path()),
        Duration::from_secs(600),
    );
    assert!(run.status.success(), "{}", text(&run));
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    (out, text(&run), report)
}

#[test]
fn the_retrieval_eval_runs_on_a_slice_and_beats_random_by_far() {
    sluice_testkit::needs!(Model, Eval);
    let (out, _, report) = eval(
        &[("SLUICE_EMBED_THREADS", "2")],
        &["retrieval", "--limit", "8", "--documents", "150"],
    );
    assert_eq!(report["tasks"], 8);
    // How long the ingest took, and on how many threads its chunks were embedded.
    assert!(report["ingest_seconds"].as_f64().unwrap() > 0.0, "{report}");
    assert_eq!(report["embed_threads"], 2);
    assert_eq!(report["tuning_tasks"], 4);
    assert_eq!(report["held_out_tasks"], 4);
    assert_eq!(report["documents"], 150);
    let random = report["random_recall_at_10"].as_f64().unwrap();
    assert!((random - 10.0 / 150.0).abs() < 1e-9, "{random}");
    // What tuning chose is a setting the server reads, and one of the settings it tried.
    let tuned = &report["tuned"];
    let fusion = tuned["fusion"].as_str().unwrap();
    fusion.parse::<sluice_core::fusion::Fusion>().unwrap();
    let tried = tuned["tried"].as_array().unwrap();
    assert_eq!(tried.len() as u64, tuned["settings"].as_u64().unwrap());
    assert!(tried.iter().any(|t| t[0] == fusion));
    let rows = report["results"].as_array().unwrap();
    let methods: Vec<&str> = rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "dense, first window",
            "dense",
            "bm25",
            "hybrid, first window",
            "hybrid rrf",
            "hybrid weighted rrf",
            "hybrid convex",
            "hybrid tuned",
            "hybrid + keyword-boost",
            "hybrid + mmr"
        ]
    );
    let row = |m: &str| rows.iter().find(|r| r["method"] == m).unwrap();
    assert_eq!(row("hybrid tuned")["fusion"], fusion);
    assert_eq!(row("hybrid rrf")["fusion"], "rrf:k=60:dense=1:bm25=1");
    assert!(
        row("hybrid convex")["fusion"]
            .as_str()
            .unwrap()
            .starts_with("convex:")
    );
    for row in rows {
        for metric in [
            "recall_at_5",
            "recall_at_10",
            "recall_at_20",
            "ndcg_at_10",
            "mrr",
        ] {
            let v = row[metric].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{row}");
        }
        let r5 = row["recall_at_5"].as_f64().unwrap();
        let r10 = row["recall_at_10"].as_f64().unwrap();
        let r20 = row["recall_at_20"].as_f64().unwrap();
        assert!(r5 <= r10 && r10 <= r20, "recall grows with k: {row}");
        let ci = row["recall_at_10_ci"].as_array().unwrap();
        let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
        assert!(lo <= r10 && r10 <= hi, "the interval holds the mean: {row}");
        assert!(
            r10 > 3.0 * random,
            "{} is not far above random ({random}): {row}",
            row["method"]
        );
    }
    let table = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(table.contains("| hybrid tuned |"), "{table}");
}

#[test]
fn tune_writes_the_tenants_setting_keeping_the_others() {
    sluice_testkit::needs!(Model, Eval);
    let (out, said, report) = eval(
        &[("SLUICE_FUSION_TENANTS", "globex=convex:dense=0.9")],
        &[
            "tune",
            "--tenant",
            "acme",
            "--limit",
            "6",
            "--documents",
            "80",
            "--metric",
            "ndcg@10",
        ],
    );
    assert_eq!(report["tuned"]["metric"], "ndcg@10");
    let fusion = report["tuned"]["fusion"].as_str().unwrap();
    let env = std::fs::read_to_string(out.path().join("fusion.env")).unwrap();
    let value = env.trim().strip_prefix("SLUICE_FUSION_TENANTS=").unwrap();
    // What the server reads back: acme's tuned rule, globex's kept.
    let tenants = sluice_core::fusion::FusionConfig::parse_tenants(value).unwrap();
    let t = |n: &str| sluice_core::Tenant::new(n).unwrap();
    assert_eq!(tenants[&t("acme")], fusion.parse().unwrap());
    assert_eq!(
        tenants[&t("globex")],
        sluice_core::fusion::Fusion::Convex { dense: 0.9 }
    );
    assert!(said.contains(value), "{said}");
}
