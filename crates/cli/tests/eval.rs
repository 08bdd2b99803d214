//! `sluice eval retrieval` and `sluice eval tune` end to end on slices of τ²-bench
//! banking_knowledge (the first 8 or 6 tasks, over 150 or 80 of the 698 documents: those the
//! tasks require, then others): every method on the held-out half, far above a random
//! ranking; tuning's choice written as the line the server reads; the held-out tasks, run as
//! an evaluation set through `sluice serve`, score as the evaluation says. (The full run is in
//! the README.)

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
fn the_retrieval_eval_beats_random_by_far_and_a_run_of_its_set_through_the_api_agrees() {
    sluice_testkit::needs!(Llm, Model, Eval);
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
    fusion.parse::<sluice_contract::fusion::Fusion>().unwrap();
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

    // The held-out tasks, written as an evaluation set, run through `sluice serve`'s API on the
    // same documents give the figures the evaluation reports for them: one scoring code.
    let server = serve_with(&[
        ("SLUICE_EMBED_THREADS", "2"),
        // Every question is scored, not cut off by a busy machine.
        ("SLUICE_RETRIEVAL_DEADLINE_MS", "60000"),
    ]);
    let corpus = out.path().join("documents.json");
    let cli = |args: &[&str]| {
        let mut command = sluice();
        command.args(args).args(["--url", &server.url]);
        let run = output_within(&mut command, Duration::from_secs(600));
        assert!(run.status.success(), "{args:?}: {}", text(&run));
        String::from_utf8(run.stdout).unwrap()
    };
    cli(&["ingest", corpus.to_str().unwrap()]);
    let set = out.path().join("set.json");
    cli(&["eval", "sets", "put", "tau2", set.to_str().unwrap()]);
    let k = report["as_run"]["k"].to_string();
    let ran: Value =
        serde_json::from_str(&cli(&["eval", "run", "--set", "tau2", "-k", &k, "--json"])).unwrap();
    assert_eq!(ran["status"], "finished", "{ran}");
    assert_eq!(ran["total"], report["held_out_tasks"], "{ran}");
    for q in ran["questions"].as_array().unwrap() {
        assert!(q.get("degraded").is_none(), "{q}");
    }
    let expected = &report["as_run"]["figures"];
    for figure in ["recall", "mrr"] {
        assert_eq!(ran["figures"][figure], expected[figure], "{figure}: {ran}");
    }
    let recall = expected["recall"]["value"].as_f64().unwrap();
    assert!(recall > 3.0 * random, "{expected}");
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
    let tenants = sluice_contract::fusion::FusionConfig::parse_tenants(value).unwrap();
    let t = |n: &str| sluice_contract::Tenant::new(n).unwrap();
    assert_eq!(tenants[&t("acme")], fusion.parse().unwrap());
    assert_eq!(
        tenants[&t("globex")],
        sluice_contract::fusion::Fusion::Convex { dense: 0.9 }
    );
    assert!(said.contains(value), "{said}");
}

#[test]
fn the_page_eval_cites_the_page_an_answer_is_on_and_refuses_a_label_on_no_page() {
    use sluice_testkit::files::{PdfOptions, PdfPage, pdf};
    sluice_testkit::needs!(Model);
    let data = tempfile::tempdir().unwrap();
    // Two PDFs, a heading on each page (so that each page is a section of its own), and the
    // reference text beside each: its pages split by form feeds, as pdftotext writes them.
    let files: [(&str, &[PdfPage]); 2] = [
        (
            "cards.pdf",
            &[
                &[(16.0, "Fees"), (10.0, "Debit cards are free to hold.")],
                &[
                    (16.0, "Stolen cards"),
                    (
                        10.0,
                        "A stolen card is frozen at once and replaced in five days.",
                    ),
                ],
                &[(16.0, "Limits"), (10.0, "Card limits are set in the app.")],
            ],
        ),
        (
            "loans.pdf",
            &[
                &[(16.0, "Rates"), (10.0, "Loan rates depend on the term.")],
                &[
                    (16.0, "Repayment"),
                    (10.0, "Early repayment of a loan costs nothing."),
                ],
            ],
        ),
    ];
    for (name, pages) in files {
        std::fs::write(data.path().join(name), pdf(pages, PdfOptions::default())).unwrap();
        let reference: Vec<String> = (pages.iter())
            .map(|lines| lines.iter().map(|(_, l)| *l).collect::<Vec<_>>().join("\n"))
            .collect();
        std::fs::write(
            data.path().join(format!("{name}.ref.txt")),
            reference.join("\u{c}"),
        )
        .unwrap();
    }
    let questions = data.path().join("questions.jsonl");
    std::fs::write(
        &questions,
        "{\"question\": \"How long does replacing a stolen card take?\", \"answer\": \"replaced in  five\\ndays\"}\n\
         {\"question\": \"Does paying a loan back early cost anything?\", \"answer\": \"early repayment of a loan costs nothing\"}\n",
    )
    .unwrap();
    let (data_dir, questions_file) = (
        data.path().to_str().unwrap().to_string(),
        questions.to_str().unwrap().to_string(),
    );
    // One heading path per chunk: each page a chunk of its own (packed, each file's short
    // pages would be one chunk).
    let (_out, _, report) = eval(
        &[("SLUICE_PACK_SECTIONS", "false")],
        &["pages", "--data", &data_dir, "--questions", &questions_file],
    );
    assert_eq!(report["files"], 2, "{report}");
    assert_eq!(report["pages"], 5);
    let results = report["results"].as_array().unwrap();
    // Each answer is found on its one page, spacing and case aside.
    assert_eq!(
        results[0]["answer_pages"],
        serde_json::json!([{"file": "cards.pdf", "page": 2}])
    );
    assert_eq!(
        results[1]["answer_pages"],
        serde_json::json!([{"file": "loans.pdf", "page": 2}])
    );
    for r in results {
        assert_eq!(r["cited"].as_array().unwrap().len(), 3, "{r}");
        assert!(r["right_file"].as_bool().unwrap(), "{r}");
    }
    assert_eq!(report["hit_at_3"], 1.0, "{report}");

    // A label whose answer no page holds is refused, naming the question.
    std::fs::write(
        &questions,
        "{\"question\": \"Are there branches?\", \"answer\": \"branch opening hours\"}\n",
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = output_within(
        sluice()
            .args([
                "eval",
                "pages",
                "--data",
                &data_dir,
                "--questions",
                &questions_file,
            ])
            .arg("--out")
            .arg(out.path()),
        Duration::from_secs(120),
    );
    assert!(!run.status.success());
    assert!(text(&run).contains("Are there branches?"), "{}", text(&run));
}
