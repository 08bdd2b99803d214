//! Changes tried before they go live: a candidate — a component version not yet active, a
//! settings draft — run beside the live configuration on a set, question by question; and a
//! tenant's quality gate, which runs its set before every activation and settings change and
//! refuses one that does worse (409 `quality_regression`, nothing changed): a component that
//! reverses the order is refused, one that improves a labelled set is activated, a change of
//! `k` is compared.

use std::sync::{Arc, Mutex};

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::Tenant;
use sluice_contract::cancel::Cancel;
use sluice_contract::components::{ComponentCall, ComponentError, ComponentVersion, Components};
use sluice_testkit::{ScriptedReranker, Verdict};

use crate::kit::{App, Kit, Reply, Stream, UNCHECKED};

/// The scripted registry's stored versions, as listed.
fn stored(version: &str, active: bool) -> ComponentVersion {
    ComponentVersion {
        version: version.into(),
        size: 1,
        label: None,
        uploaded_ms: None,
        active,
        cost: None,
        failures: vec![],
    }
}

/// A registry that activates the two stored versions, and remembers which.
#[derive(Default)]
struct Activations(Mutex<Vec<String>>);

impl Components for Activations {
    fn upload(
        &self,
        _: &Tenant,
        _: &[u8],
        _: Option<&str>,
        _: &Cancel,
    ) -> Result<ComponentVersion, ComponentError> {
        Err(ComponentError::Invalid("not in this test".into()))
    }
    fn activate(&self, _: &Tenant, version: &str) -> Result<ComponentVersion, ComponentError> {
        self.0.lock().unwrap().push(version.to_string());
        Ok(stored(version, true))
    }
    fn list(&self, _: &Tenant) -> Result<Vec<ComponentVersion>, ComponentError> {
        Ok(["reverse", "better"].map(|v| stored(v, false)).into())
    }
    fn deactivate(&self, _: &Tenant) -> Result<(), ComponentError> {
        Ok(())
    }
    fn logs(&self, _: &Tenant, _: &str) -> Result<Vec<ComponentCall>, ComponentError> {
        Ok(vec![])
    }
    fn delete(&self, _: &Tenant, _: &str) -> Result<(), ComponentError> {
        Ok(())
    }
}

const ACME: [(&str, &str); 1] = [("x-sluice-tenant", "acme")];

/// The kit's documents, no active component, two stored versions — one that reverses the
/// fused order, one that puts `atm-limits` first — and two sets: `help` (each question's own
/// page expected, and first) and `labels` (questions the tenant labelled `atm-limits` for).
async fn app(activations: Arc<Activations>) -> App {
    app_over(Kit::new(UNCHECKED), activations).await
}

/// [`app`] from `kit` (its settings and records stores, which another process may share).
async fn app_over(mut kit: Kit, activations: Arc<Activations>) -> App {
    let reranker = ScriptedReranker::new(Verdict::Reverse)
        .none_active()
        .stored("reverse", Verdict::Reverse)
        .stored("better", Verdict::Prefer("atm-limits".into()));
    kit.parts.reranker = Some(Arc::new(reranker));
    kit.parts.components = Some(activations);
    let app = kit.app();
    app.ingest("acme").await;
    let help = json!({"questions": [
        {"id": "card", "question": "How long does a replacement card take to arrive?",
         "documents": ["lost-card"], "first": "lost-card"},
        {"id": "atm", "question": "What is the daily ATM withdrawal limit?", "documents": ["atm-limits"]},
        {"id": "mortgage", "question": "Can I overpay my fixed-rate mortgage?", "documents": ["mortgage"]},
    ]});
    let labels = json!({"questions": [
        {"id": "card", "question": "How long does a replacement card take to arrive?", "documents": ["atm-limits"]},
        {"id": "mortgage", "question": "Can I overpay my fixed-rate mortgage?", "documents": ["atm-limits"]},
        {"id": "atm", "question": "What is the daily ATM withdrawal limit?", "documents": ["atm-limits"]},
    ]});
    for (name, set) in [("help", help), ("labels", labels)] {
        let path = format!("/v1/evals/sets/{name}");
        let put = app.send(Method::PUT, &path, &ACME, set.to_string()).await;
        assert_eq!(put.status, 200, "{}", put.raw);
    }
    app
}

async fn settings(app: &App, settings: Value) -> Reply {
    app.send(Method::PUT, "/v1/settings", &ACME, settings.to_string())
        .await
}

async fn activate(app: &App, version: &str) -> Reply {
    let body = json!({ "version": version }).to_string();
    app.send(Method::POST, "/v1/components/rerank/activate", &ACME, body)
        .await
}

#[tokio::test]
async fn a_candidate_is_run_beside_the_live_configuration_question_by_question() {
    let app = app(Arc::default()).await;
    let asked = json!({"set": "help", "candidate": {"settings": {"k": 1}}});
    let reply = app
        .send(Method::POST, "/v1/evals/runs", &ACME, asked.to_string())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let (name, report) = Stream::parse(&reply.raw).events.pop().expect("events");
    assert_eq!(name, "report");
    assert_eq!(report["candidate"], json!({"settings": {"k": 1}}));
    assert_eq!(report["live"]["recall"]["value"], 1.0, "{report}");
    assert_eq!(
        report["figures"]["recall"]["value"], 1.0,
        "the page stays first"
    );
    assert_eq!(
        report["versus"]["recall"],
        json!({"value": 0.0, "ci": [0.0, 0.0], "n": 3})
    );
    let card = &report["questions"][0];
    assert_eq!(card["sources"], json!(["lost-card"]), "{card}");
    assert_eq!(
        card["changed"]["removed"].as_array().map(Vec::len),
        Some(2),
        "{card}"
    );

    let reversed = json!({"set": "help", "candidate": {"rerank": "reverse"}});
    let reply = app
        .send(Method::POST, "/v1/evals/runs", &ACME, reversed.to_string())
        .await;
    let (_, report) = Stream::parse(&reply.raw).events.pop().expect("events");
    assert!(
        report["versus"]["mrr"]["value"].as_f64().unwrap() < 0.0,
        "{report}"
    );
    assert_eq!(
        report["versus"]["recall"]["value"], 0.0,
        "the same sources, reversed"
    );

    for (candidate, status, code) in [
        (json!({"rerank": "no-such-version"}), 404, "unknown_version"),
        (json!({"settings": {"k": 0}}), 400, "invalid_settings"),
        (json!({}), 400, "invalid_eval_set"),
    ] {
        let asked = json!({"set": "help", "candidate": candidate});
        let reply = app
            .send(Method::POST, "/v1/evals/runs", &ACME, asked.to_string())
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{candidate}: {}",
            reply.raw
        );
    }
}

#[tokio::test]
async fn the_quality_gate_refuses_what_does_worse_activates_what_does_better_and_compares_a_change_of_k()
 {
    let activations = Arc::new(Activations::default());
    let app = app(Arc::clone(&activations)).await;
    let missing = settings(&app, json!({"quality_gate": {"set": "none"}})).await;
    assert_eq!(
        (missing.status, missing.code()),
        (400, "invalid_settings"),
        "{}",
        missing.raw
    );
    let gated = settings(&app, json!({"quality_gate": {"set": "help"}})).await;
    assert_eq!(gated.status, 200, "{}", gated.raw);

    // A component that reverses the order: the pages expected first come last.
    let refused = activate(&app, "reverse").await;
    assert_eq!(
        (refused.status, refused.code()),
        (409, "quality_regression"),
        "{}",
        refused.raw
    );
    let details = &refused.body["error"]["details"];
    assert_eq!(details["refused"][0]["figure"], "mrr", "{details}");
    assert!(details["refused"][0]["change"]["ci"][1].as_f64().unwrap() < 0.0);
    assert_eq!(
        details["worst"].as_array().map(Vec::len),
        Some(3),
        "{details}"
    );
    assert_eq!(details["live"]["mrr"]["value"], 1.0);
    assert!(
        activations.0.lock().unwrap().is_empty(),
        "nothing activated"
    );
    let runs = app.send(Method::GET, "/v1/evals/runs", &ACME, "").await;
    assert_eq!(
        runs.body["runs"][0]["id"], details["run"],
        "the gate's run is kept"
    );

    // A gate changed alone is not tried; a component that puts the labelled page first is
    // better on the labelled set, and activated, with the comparison.
    let relabelled = settings(&app, json!({"quality_gate": {"set": "labels"}})).await;
    assert_eq!(relabelled.status, 200, "{}", relabelled.raw);
    assert!(
        relabelled.body.get("quality").is_none(),
        "{}",
        relabelled.raw
    );
    let better = activate(&app, "better").await;
    assert_eq!(better.status, 200, "{}", better.raw);
    assert!(
        better.body["quality"]["versus"]["mrr"]["value"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{}",
        better.raw
    );
    assert_eq!(*activations.0.lock().unwrap(), ["better"]);

    // A change of k, tried on the help set: the pages stay first, so it is saved, with the
    // comparison.
    assert_eq!(
        settings(&app, json!({"quality_gate": {"set": "help"}}))
            .await
            .status,
        200
    );
    let k = settings(&app, json!({"k": 1, "quality_gate": {"set": "help"}})).await;
    assert_eq!(k.status, 200, "{}", k.raw);
    assert_eq!(k.body["settings"]["k"], 1);
    assert_eq!(
        k.body["quality"]["versus"]["recall"]["value"], 0.0,
        "{}",
        k.raw
    );
    assert_eq!(
        k.body["quality"]["versus"]["mrr"]["value"], 0.0,
        "{}",
        k.raw
    );
    // Under the labelled set, k = 1 loses the labelled page for two questions of three: a drop
    // three questions cannot tell from noise (its interval reaches zero), so it is saved, and
    // the comparison says so.
    assert_eq!(
        settings(&app, json!({"k": 5, "quality_gate": {"set": "labels"}}))
            .await
            .status,
        200
    );
    let noisy = settings(&app, json!({"k": 1, "quality_gate": {"set": "labels"}})).await;
    assert_eq!(noisy.status, 200, "{}", noisy.raw);
    let recall = &noisy.body["quality"]["versus"]["recall"];
    assert!(recall["value"].as_f64().unwrap() < 0.0, "{}", noisy.raw);
    assert_eq!(recall["ci"][1], 0.0, "{}", noisy.raw);
    assert_eq!(noisy.body["quality"]["worst"][0]["changed"]["recall"], -1.0);
}

/// A process that serves no answers (the Lambda registry function, which takes activations)
/// cannot run a gate's set: it refuses a gated activation, activating nothing, and says where
/// to try the version; a tenant without a gate activates there as before.
#[tokio::test]
async fn a_process_without_answers_refuses_a_gated_activation_untried() {
    use sluice_contract::tenant_settings::{SettingsStore, TenantSettings};
    let registry = |gate: Option<&str>| {
        let activations = Arc::new(Activations::default());
        let store = Arc::new(sluice_testkit::MemorySettings::default());
        let mut kit = Kit::new(UNCHECKED);
        kit.parts.settings = Some(store.clone());
        kit.parts.components = Some(activations.clone());
        let settings = match gate {
            Some(set) => json!({"quality_gate": {"set": set}}),
            None => json!({"k": 3}),
        };
        let settings = TenantSettings::parse(&settings, 512).unwrap();
        let app = kit.app_with(|s| s.answers = None);
        (app, store, settings, activations)
    };
    let (app, store, gated, activations) = registry(Some("help"));
    store
        .put(&sluice_testkit::tenant("acme"), gated)
        .await
        .unwrap();
    let refused = activate(&app, "reverse").await;
    assert_eq!(
        (refused.status, refused.code()),
        (409, "quality_gate_unavailable"),
        "{}",
        refused.raw
    );
    assert!(
        refused.raw.contains("POST /v1/evals/runs"),
        "{}",
        refused.raw
    );
    assert!(
        activations.0.lock().unwrap().is_empty(),
        "nothing activated"
    );

    let (app, store, plain, activations) = registry(None);
    store
        .put(&sluice_testkit::tenant("acme"), plain)
        .await
        .unwrap();
    let activated = activate(&app, "reverse").await;
    assert_eq!(activated.status, 200, "{}", activated.raw);
    assert_eq!(*activations.0.lock().unwrap(), ["reverse"]);
}

/// Where no set can run (the registry function), a gate's run made where answers are served
/// stands for an activation: when it asked the gate's set, tried that version alone, under the
/// settings in force now — and passed.
#[tokio::test]
async fn a_gate_run_made_where_answers_are_served_stands_for_an_activation_elsewhere() {
    use sluice_contract::tenant_settings::{SettingsStore, TenantSettings};
    let store = Arc::new(sluice_testkit::MemorySettings::default());
    let records = Arc::new(sluice_testkit::MemoryRecords::default());
    let shared = |kit: &mut Kit| {
        kit.parts.settings = Some(store.clone());
        kit.parts.records = Some(records.clone());
    };
    let mut kit = Kit::new(UNCHECKED);
    shared(&mut kit);
    let answering = app_over(kit, Arc::default()).await;
    let activations = Arc::new(Activations::default());
    // The registry reads the settings afresh on every request.
    let fresh = [
        ("SLUICE_GROUNDING", "off"),
        ("SLUICE_SETTINGS_FRESH_MS", "0"),
    ];
    let mut kit = Kit::new(&fresh);
    shared(&mut kit);
    kit.parts.components = Some(activations.clone());
    let registry = kit.app_with(|s| s.answers = None);
    let run = |asked: Value| {
        let answering = &answering;
        async move {
            let reply =
                (answering.send(Method::POST, "/v1/evals/runs", &ACME, asked.to_string())).await;
            let (_, report) = Stream::parse(&reply.raw).events.pop().expect("events");
            report["id"].as_str().expect("a run id").to_string()
        }
    };
    let activate_with = |version: &str, run: &str| {
        let body = json!({ "version": version, "gate_run": run }).to_string();
        registry.send(Method::POST, "/v1/components/rerank/activate", &ACME, body)
    };
    let code = |reply: &Reply| (reply.status, reply.code().to_string());
    let unavailable = (409, "quality_gate_unavailable".to_string());

    assert_eq!(
        settings(&answering, json!({"quality_gate": {"set": "labels"}}))
            .await
            .status,
        200
    );
    let untried = activate(&registry, "better").await;
    assert_eq!(code(&untried), unavailable, "{}", untried.raw);
    assert!(untried.raw.contains("gate_run"), "{}", untried.raw);
    let better = run(json!({"set": "labels", "candidate": {"rerank": "better"}})).await;
    // A run of another version does not stand for this one.
    let other = activate_with("reverse", &better).await;
    assert_eq!(code(&other), unavailable, "{}", other.raw);
    assert!(other.raw.contains("did not try"), "{}", other.raw);
    let activated = activate_with("better", &better).await;
    assert_eq!(activated.status, 200, "{}", activated.raw);
    let mrr = activated.body["quality"]["versus"]["mrr"]["value"]
        .as_f64()
        .unwrap();
    assert!(mrr > 0.0, "{}", activated.raw);
    assert_eq!(*activations.0.lock().unwrap(), ["better"]);

    // Under a gate on the help set: a run of the labels set does not count, a run that does
    // worse is refused as the gate refuses it, and a run made before the settings changed is
    // to be made again.
    assert_eq!(
        settings(&answering, json!({"quality_gate": {"set": "help"}}))
            .await
            .status,
        200
    );
    let stale = activate_with("better", &better).await;
    assert_eq!(code(&stale), unavailable, "{}", stale.raw);
    let reverse = run(json!({"set": "help", "candidate": {"rerank": "reverse"}})).await;
    let worse = activate_with("reverse", &reverse).await;
    assert_eq!(
        (worse.status, worse.code()),
        (409, "quality_regression"),
        "{}",
        worse.raw
    );
    let changed = json!({"quality_gate": {"set": "help"}, "k": 4});
    let changed = TenantSettings::parse(&changed, 512).unwrap();
    store
        .put(&sluice_testkit::tenant("acme"), changed)
        .await
        .unwrap();
    let before = activate_with("reverse", &reverse).await;
    assert_eq!(code(&before), unavailable, "{}", before.raw);
    assert!(before.raw.contains("run it again"), "{}", before.raw);
    assert_eq!(
        *activations.0.lock().unwrap(),
        ["better"],
        "nothing else activated"
    );
}
