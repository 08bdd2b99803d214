//! The example components of `components/`, built from Rust source by
//! `scripts/build-components.sh` (run by `make test`), in the real sandbox.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_sandbox::{Candidate, HostServices, Limits, Sandbox};

struct WordCount;

impl HostServices for WordCount {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Err(format!("no model in this test ({} texts)", texts.len()))
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.split_whitespace().count() as u32
    }
}

fn candidate(id: &str, text: &str, rank: usize) -> Candidate {
    Candidate {
        id: id.into(),
        title: id.into(),
        text: text.into(),
        score: 1.0 / (61.0 + rank as f32),
    }
}

#[test]
fn keyword_boost_lifts_the_candidate_that_contains_the_query_words() {
    let sandbox = Sandbox::new(Limits::default(), Arc::new(WordCount)).unwrap();
    let component = sandbox
        .compile(&sluice_sandbox::built_component("keyword-boost").unwrap())
        .expect("the example component uploads");
    let candidates = vec![
        candidate("weather", "Sunny with light wind in the afternoon.", 0),
        candidate("savings", "Interest is paid monthly on savings.", 1),
        candidate("transfers", "A SWIFT transfer costs a flat fee of $25.", 2),
    ];
    let order = sandbox
        .rerank(&component, "swift transfer fee", &candidates)
        .unwrap();
    assert_eq!(
        order[0], 2,
        "the candidate with the query words comes first: {order:?}"
    );
    // Without matching words the fused order is kept.
    let order = sandbox.rerank(&component, "zebra", &candidates).unwrap();
    assert_eq!(order, vec![0, 1, 2]);
}

#[test]
fn mmr_moves_a_near_duplicate_below_a_different_source() {
    let sandbox = Sandbox::new(Limits::default(), Arc::new(WordCount)).unwrap();
    let component = sandbox
        .compile(&sluice_sandbox::built_component("mmr").unwrap())
        .expect("the example component uploads");
    let candidates = vec![
        candidate("limits", "Premium accounts withdraw up to $1,000 a day.", 0),
        candidate(
            "limits-copy",
            "Premium accounts withdraw up to $1,000 a day.",
            1,
        ),
        candidate("travel", "Tell the bank before you travel abroad.", 2),
    ];
    // The host's vectors: both copies close to the query, the other source a little less
    // close but different from them. WordCount's own embed refuses, so these must be used.
    let known = HashMap::from([
        ("daily limit".to_string(), vec![1.0, 0.0, 0.0]),
        (candidates[0].text.clone(), vec![0.8, 0.6, 0.0]),
        (candidates[2].text.clone(), vec![0.7, -0.714, 0.0]),
    ]);
    let order = sandbox
        .rerank_with(&component, "daily limit", &candidates, known)
        .unwrap();
    assert_eq!(order, vec![0, 2, 1]);
    // Texts the host has no vector for go to the host model, which here refuses: a component error.
    let err = sandbox
        .rerank(&component, "daily limit", &candidates)
        .unwrap_err();
    assert!(err.to_string().contains("no model in this test"), "{err}");
}
