use super::*;
use serde_json::json;
use sluice_contract::evals::EvalSet;

fn question(v: serde_json::Value) -> EvalQuestion {
    let set = EvalSet::parse(&json!({ "questions": [v] })).expect("valid set");
    set.questions.into_iter().next().expect("one question")
}

fn sources(ids: &[&str]) -> Outcome {
    Outcome {
        sources: ids.iter().map(|s| s.to_string()).collect(),
        ..Outcome::default()
    }
}

#[test]
fn recall_counts_each_expected_id_or_glob_once_and_the_rank_is_the_first_expected_source() {
    let q = question(json!({
        "question": "q", "documents": ["cards/*", "atm-limits"], "first": "cards/*"
    }));
    let r = score(
        &q,
        sources(&["mortgage", "cards/lost", "cards/stolen", "cards/lost"]),
    );
    assert_eq!(
        r.sources,
        ["mortgage", "cards/lost", "cards/stolen"],
        "each document once"
    );
    assert_eq!(
        r.recall,
        Some(0.5),
        "the glob counts once, atm-limits is missing"
    );
    assert_eq!(r.reciprocal_rank, Some(0.5));
    assert_eq!(r.first_source, Some(false));
    let best = score(&q, sources(&["cards/lost", "atm-limits"]));
    assert_eq!((best.recall, best.reciprocal_rank), (Some(1.0), Some(1.0)));
    assert_eq!(best.first_source, Some(true));
    let none = score(&q, sources(&[]));
    assert_eq!((none.recall, none.reciprocal_rank), (Some(0.0), Some(0.0)));
    let unlabelled = score(&question(json!({"question": "q"})), sources(&["a"]));
    assert_eq!((unlabelled.recall, unlabelled.first_source), (None, None));
}

#[test]
fn a_fact_is_stated_when_its_canonical_words_come_together_in_the_answer() {
    let q = question(json!({
        "question": "q", "facts": ["5 working days", "500 pounds", "premium"]
    }));
    let outcome = Outcome {
        answer: Some("A new card arrives within five working days [1]. Premium only.".into()),
        ..Outcome::default()
    };
    let r = score(&q, outcome);
    assert_eq!(r.facts_found, ["5 working days", "premium"]);
    assert_eq!(r.facts_missing, ["500 pounds"]);
    let retrieval_only = score(&q, Outcome::default());
    assert!(retrieval_only.facts_found.is_empty() && retrieval_only.facts_missing.is_empty());
}

fn result(id: &str, recall: f64, sources: &[&str]) -> QuestionResult {
    QuestionResult {
        id: id.into(),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        recall: Some(recall),
        reciprocal_rank: Some(recall),
        ..QuestionResult::default()
    }
}

#[test]
fn figures_are_means_over_the_questions_they_apply_to_with_an_interval_around_them() {
    let mut results: Vec<QuestionResult> = (0..20)
        .map(|i| result(&format!("q{i}"), (i % 2) as f64, &["a"]))
        .collect();
    results.push(QuestionResult {
        id: "unlabelled".into(),
        ..QuestionResult::default()
    });
    let f = figures(&results, 7);
    let recall = f.recall.expect("recall");
    assert_eq!((recall.value, recall.n), (0.5, 20));
    assert!(recall.ci[0] < 0.5 && 0.5 < recall.ci[1], "{:?}", recall.ci);
    assert_eq!(figures(&results, 7), f, "the same seed, the same intervals");
    assert!(f.grounded.is_none() && f.first_source.is_none());
}

#[test]
fn stage_percentiles_are_nearest_rank_over_the_questions_that_ran_the_stage() {
    let results: Vec<QuestionResult> = (1..=100)
        .map(|ms| QuestionResult {
            timings: Timings {
                embed_ms: Some(ms as f64),
                rerank_ms: (ms > 98).then_some(1.0),
                ..Timings::default()
            },
            ..QuestionResult::default()
        })
        .collect();
    let f = figures(&results, 1);
    assert_eq!(f.stages["embed_ms"], [50.0, 99.0]);
    assert_eq!(f.stages["rerank_ms"], [1.0, 1.0]);
    assert!(!f.stages.contains_key("rerank_fuel"), "fuel is not a time");
}

#[test]
fn a_comparison_pairs_questions_by_id_and_says_what_changed_for_each() {
    let before = vec![
        result("a", 1.0, &["x", "y"]),
        result("b", 1.0, &["x", "y"]),
        result("gone", 1.0, &["x"]),
    ];
    let mut now = vec![
        result("a", 0.0, &["y", "z"]),
        result("b", 1.0, &["y", "x"]),
        result("new", 0.0, &["x"]),
    ];
    let differences = compare(&before, &mut now, 3);
    let recall = differences["recall"];
    assert_eq!((recall.value, recall.n), (-0.5, 2), "a and b only");
    let a = now[0].changed.as_ref().expect("a changed");
    assert_eq!(
        (a.added.as_slice(), a.removed.as_slice()),
        (&["z".to_string()][..], &["x".to_string()][..])
    );
    assert_eq!(a.recall, Some(-1.0));
    let b = now[1].changed.as_ref().expect("b reordered");
    assert!(b.reordered && b.added.is_empty() && b.recall.is_none());
    assert!(
        now[2].changed.is_none(),
        "a question the other run did not ask"
    );
}

#[test]
fn the_metrics_are_the_evaluations_own() {
    let ranked: Vec<String> = ["a", "b", "c"].map(String::from).into();
    let required: Vec<String> = ["c", "z"].map(String::from).into();
    assert_eq!(recall_at(&ranked, &required, 3), 0.5);
    assert_eq!(recall_at(&ranked, &required, 2), 0.0);
    assert!((reciprocal_rank(&ranked, &required) - 1.0 / 3.0).abs() < 1e-12);
    assert!(ndcg_at(&ranked, &required, 10) > 0.0 && ndcg_at(&ranked, &required, 2) == 0.0);
}

#[test]
fn a_gate_refuses_a_drop_past_its_limit_only_when_it_is_beyond_the_noise() {
    let gate: QualityGate =
        serde_json::from_value(json!({"set": "s", "max_drop": {"mrr": 0.1, "recall": 0.0}}))
            .unwrap();
    let figure = |value: f64, ci: [f64; 2]| Figure { value, ci, n: 20 };
    let versus =
        |recall, mrr| BTreeMap::from([("recall".to_string(), recall), ("mrr".to_string(), mrr)]);
    // A clear drop of recall; MRR within its limit.
    let refused = regressions(
        &gate,
        &versus(figure(-0.3, [-0.5, -0.1]), figure(-0.05, [-0.1, -0.01])),
    );
    assert_eq!(
        refused
            .iter()
            .map(|r| r.figure.as_str())
            .collect::<Vec<_>>(),
        ["recall"]
    );
    // A drop whose interval reaches zero is noise.
    assert!(
        regressions(
            &gate,
            &versus(figure(-0.2, [-0.5, 0.05]), figure(0.0, [0.0, 0.0]))
        )
        .is_empty()
    );
    // Better, or no figure at all, passes.
    assert!(
        regressions(
            &gate,
            &versus(figure(0.2, [0.1, 0.3]), figure(0.1, [0.0, 0.2]))
        )
        .is_empty()
    );
    assert!(regressions(&gate, &BTreeMap::new()).is_empty());
}
