//! The example components of `components/`, built from Rust source by
//! `scripts/build-components.sh` (run by `make test`), in the real sandbox.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use sluice_rerank::{
    Call, Candidate, ContextEntry, Date, HostServices, MetaField, MetaValue, Sandbox, WORLD_0_1,
    WORLD_0_2,
};

mod common;
use common::roomy;

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
        chunk: 0,
        metadata: Vec::new(),
    }
}

#[test]
fn keyword_boost_lifts_the_candidate_that_contains_the_query_words() {
    sluice_testkit::needs!(Components);
    let sandbox = Sandbox::new(roomy(), Arc::new(WordCount)).unwrap();
    let component = sandbox
        .compile(&sluice_rerank::built_component("keyword-boost").unwrap())
        .expect("the example component uploads");
    assert_eq!(component.world(), WORLD_0_1, "built for 0.1 on purpose");
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
    sluice_testkit::needs!(Components);
    let sandbox = Sandbox::new(roomy(), Arc::new(WordCount)).unwrap();
    let component = sandbox
        .compile(&sluice_rerank::built_component("mmr").unwrap())
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
    let call = Call {
        query: "daily limit",
        context: &[],
        candidates: &candidates,
    };
    let ranked = sandbox.rerank_costed(&component, &call, known).0.unwrap();
    let order: Vec<usize> = ranked.iter().map(|&(i, _)| i).collect();
    assert_eq!(order, vec![0, 2, 1]);
    // Texts the host has no vector for go to the host model, which here refuses: a component error.
    let err = sandbox
        .rerank(&component, "daily limit", &candidates)
        .unwrap_err();
    assert!(err.to_string().contains("no model in this test"), "{err}");
}

fn with_meta(mut c: Candidate, fields: Vec<(&str, MetaValue)>) -> Candidate {
    c.metadata = fields
        .into_iter()
        .map(|(key, value)| MetaField {
            key: key.into(),
            value,
        })
        .collect();
    c
}

fn date(text: &str, seconds: f64) -> MetaValue {
    MetaValue::Date(Date {
        text: text.into(),
        seconds,
    })
}

fn plan(value: &str) -> Vec<ContextEntry> {
    vec![ContextEntry {
        key: "plan".into(),
        value: value.into(),
    }]
}

#[test]
fn policy_drops_what_the_plan_may_not_see_and_lifts_recent_documents() {
    sluice_testkit::needs!(Components);
    let sandbox = Sandbox::new(roomy(), Arc::new(WordCount)).unwrap();
    let component = sandbox
        .compile(&sluice_rerank::built_component("policy").unwrap())
        .expect("the example component uploads");
    assert_eq!(component.world(), WORLD_0_2);
    let day = 86_400.0;
    let candidates = vec![
        // Best fused, but for enterprise customers only.
        with_meta(
            candidate("enterprise-sla", "Uptime credits.", 0),
            vec![("audience", MetaValue::Strings(vec!["enterprise".into()]))],
        ),
        // Old, for everyone.
        with_meta(
            candidate("old-limits", "ComponentLimits as of 2023.", 1),
            vec![("updated_at", date("2023-01-01", 0.0))],
        ),
        // Two years newer, one rank lower: recency lifts it above the old one.
        with_meta(
            candidate("new-limits", "ComponentLimits as of 2025.", 2),
            vec![
                ("audience", MetaValue::Text("pro".into())),
                ("updated_at", date("2025-01-01", 730.0 * day)),
            ],
        ),
        candidate("plain", "No metadata at all.", 3),
    ];
    let run = |context: &[ContextEntry]| {
        let call = Call {
            query: "limits",
            context,
            candidates: &candidates,
        };
        let ranked = sandbox
            .rerank_costed(&component, &call, HashMap::new())
            .0
            .unwrap();
        ranked.into_iter().map(|(i, _)| i).collect::<Vec<usize>>()
    };
    assert_eq!(
        run(&plan("pro")),
        vec![2, 1, 3],
        "enterprise-sla dropped, new-limits first"
    );
    assert_eq!(
        run(&plan("enterprise")),
        vec![0, 1, 3],
        "new-limits is for pro only"
    );
    assert_eq!(run(&[]), vec![1, 3], "no plan: only what is for everyone");
    // A context the component cannot read is its error, not a silent default.
    let bad = [ContextEntry {
        key: "half_life_days".into(),
        value: "soon".into(),
    }];
    let call = Call {
        query: "limits",
        context: &bad,
        candidates: &candidates,
    };
    let err = sandbox
        .rerank_costed(&component, &call, HashMap::new())
        .0
        .unwrap_err();
    assert!(err.to_string().contains("half_life_days"), "{err}");
}

/// The contexts a component declares are its upload check: the smoke run runs under each of
/// them besides its own, so a rule that fails for one kind of caller is refused with that
/// context named; a declaration that is no list of contexts is refused as such.
#[test]
fn the_upload_check_runs_under_every_context_the_component_declares() {
    sluice_testkit::needs!(Components);
    use sluice_rerank::{RerankError, UploadError, contexts::declare};
    let sandbox = Sandbox::new(roomy(), Arc::new(WordCount)).unwrap();
    let policy = sluice_rerank::built_component("policy").unwrap();
    // Accepted as it is, and under contexts it handles.
    sandbox.compile(&policy).unwrap();
    let fine = [json!({"plan": "pro"}), json!({"half_life_days": "30"})];
    sandbox.compile(&declare(&policy, &fine).unwrap()).unwrap();
    // Refused under one it fails on, with that context and the component's own reason.
    let failing = [json!({"plan": "pro"}), json!({"half_life_days": "soon"})];
    let e = sandbox
        .compile(&declare(&policy, &failing).unwrap())
        .err()
        .expect("refused");
    assert!(
        matches!(&e, UploadError::SmokeRun { context, error: RerankError::Guest(m) }
            if context.contains(r#"{"half_life_days":"soon"}"#) && m.contains("half_life_days")),
        "{e}"
    );
    // Not contexts: refused by `declare`, and by the upload when written by other means.
    assert!(declare(&policy, &[json!("premium")]).is_err());
    let too_many = vec![json!({"plan": "x"}); sluice_rerank::contexts::MAX_CONTEXTS + 1];
    assert!(declare(&policy, &too_many).unwrap_err().contains("at most"));
    let mut forged = policy.clone();
    let name = sluice_rerank::contexts::SECTION.as_bytes();
    let payload = br#"["premium"]"#;
    forged.extend([0, (1 + name.len() + payload.len()) as u8, name.len() as u8]);
    forged.extend_from_slice(name);
    forged.extend_from_slice(payload);
    let e = sandbox.compile(&forged).err().expect("refused");
    assert!(e.to_string().contains("sluice:contexts section"), "{e}");
}

#[test]
fn a_components_kind_is_read_from_what_it_exports_without_compiling_it() {
    sluice_testkit::needs!(Components);
    for (name, kind) in [
        ("keyword-boost", "rerank"),
        ("mmr", "rerank"),
        ("template", "rerank"),
        ("prompt-template", "prompt"),
        ("prompt-hostile", "prompt"),
    ] {
        let bytes = sluice_rerank::built_component(name).unwrap();
        assert_eq!(sluice_rerank::kind_of(&bytes), Some(kind), "{name}");
    }
    // The text format too; a core module, or not wasm at all, is no component.
    let reverse = include_str!("reverse.wat");
    assert_eq!(sluice_rerank::kind_of(reverse.as_bytes()), Some("rerank"));
    assert_eq!(sluice_rerank::kind_of(b"(module)"), None);
    assert_eq!(sluice_rerank::kind_of(b"not wasm"), None);
}
