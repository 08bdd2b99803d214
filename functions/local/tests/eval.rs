//! `sluice eval retrieval` end to end on a slice of τ²-bench banking_knowledge: the first 8
//! tasks, over 150 of the 698 documents (those the tasks require, then others), with every
//! method; the numbers are far above a random ranking's. (The full run is in the README.)

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

#[test]
fn the_retrieval_eval_runs_on_a_slice_and_beats_random_by_far() {
    let out = tempfile::tempdir().unwrap();
    let run = output_within(
        sluice()
            .args([
                "eval",
                "retrieval",
                "--limit",
                "8",
                "--documents",
                "150",
                "--out",
            ])
            .arg(out.path()),
        Duration::from_secs(600),
    );
    assert!(run.status.success(), "{}", text(&run));
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["tasks"], 8);
    assert_eq!(report["documents"], 150);
    let random = report["random_recall_at_10"].as_f64().unwrap();
    assert!((random - 10.0 / 150.0).abs() < 1e-9, "{random}");
    let rows = report["results"].as_array().unwrap();
    let methods: Vec<&str> = rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "dense, first window",
            "dense",
            "bm25",
            "hybrid, first window",
            "hybrid",
            "hybrid + keyword-boost",
            "hybrid + mmr"
        ]
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
        assert!(
            r10 > 3.0 * random,
            "{} is not far above random ({random}): {row}",
            row["method"]
        );
    }
    let table = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(table.contains("| hybrid |"), "{table}");
}
