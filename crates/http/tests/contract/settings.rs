//! Each tenant its own settings: `GET`/`PUT /v1/settings` (validated whole, versioned, the
//! `settings` permission, tenant-wide keys only), and answers that follow them — the tenant's
//! instructions first in the system message as sent to the LLM, its `k`, `max_tokens` and
//! refusal — with answers cached under an older version never replayed.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_testkit::MemoryKeys;

use crate::kit::{App, Kit, Reply};

const QUESTION: &str = "How long does a replacement card take?";

async fn put(app: &App, tenant: &str, settings: &Value) -> Reply {
    let headers = [("x-sluice-tenant", tenant)];
    (app.send(Method::PUT, "/v1/settings", &headers, settings.to_string())).await
}

async fn get(app: &App, tenant: &str) -> Value {
    let reply = (app.send(
        Method::GET,
        "/v1/settings",
        &[("x-sluice-tenant", tenant)],
        "",
    ))
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    serde_json::from_str(&reply.raw).unwrap()
}

#[tokio::test]
async fn settings_are_versioned_and_read_back_as_stored() {
    let app = Kit::new(&[]).app();
    let before = get(&app, "acme").await;
    assert_eq!(
        (before["version"].clone(), before["settings"].clone()),
        (json!(0), json!({}))
    );
    let settings = json!({"k": 2, "prompt": {"instructions": "You are Ada."}});
    let reply = put(&app, "acme", &settings).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let stored: Value = serde_json::from_str(&reply.raw).unwrap();
    assert_eq!(
        (stored["version"].clone(), stored["settings"].clone()),
        (json!(1), settings.clone())
    );
    assert_eq!(get(&app, "acme").await["settings"], settings);
    assert_eq!(put(&app, "acme", &json!({})).await.status, 200);
    assert_eq!(get(&app, "acme").await["version"], 2);
    // The same settings again — here with a default spelled out — are not written: the
    // version (and the answers cached under it) stay.
    let same = put(&app, "acme", &json!({"prompt": {"citations": "numbers"}})).await;
    assert_eq!(same.status, 200, "{}", same.raw);
    assert_eq!(
        (same.body["version"].clone(), same.body["unchanged"].clone()),
        (json!(2), json!(true))
    );
    assert_eq!(get(&app, "acme").await["version"], 2);
    let changed = put(&app, "acme", &json!({"prompt": {"citations": "none"}})).await;
    assert_eq!(changed.body["version"], 3, "{}", changed.raw);
    assert!(changed.body.get("unchanged").is_none(), "{}", changed.raw);
    // Another tenant's are its own.
    assert_eq!(get(&app, "globex").await["version"], 0);
}

#[tokio::test]
async fn a_bad_document_is_refused_whole_naming_the_field_and_nothing_is_stored() {
    // A 2,048-token window: the instructions may take a quarter of what is left for the prompt.
    let overrides = [
        ("SLUICE_MAX_TOKENS", "256"),
        ("SLUICE_LLM_CONTEXT_TOKENS", "2048"),
    ];
    let app = Kit::new(&overrides).app();
    let long = "word ".repeat(5_000);
    for (settings, field) in [
        (json!({"k": 51}), "k"),
        (json!({"top_k": 5}), "top_k"),
        (json!({"max_tokens": 257}), "max_tokens"),
        (json!({"cache_threshold": 0.2}), "cache_threshold"),
        (json!({"prompt": {"tone": "warm"}}), "tone"),
        (
            json!({"prompt": {"instructions": long.chars().take(3_999).collect::<String>()}}),
            "prompt.instructions",
        ),
        // A public key that is not a key of its algorithm is refused now, not by the first
        // end user's request; a URL with credentials in it, as it is parsed.
        (
            json!({"identity": {"issuer": "i", "audience": "a", "algorithm": "RS256",
                                "public_key": "-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----"}}),
            "identity.public_key",
        ),
        (
            json!({"identity": {"issuer": "i", "audience": "a", "algorithm": "ES256",
                                "public_key": sluice_testkit::users::key("rsa.pub.pem")}}),
            "identity.public_key",
        ),
        (
            json!({"identity": {"issuer": "i", "audience": "a",
                                "jwks_url": "http://127.0.0.1@10.0.0.1/keys"}}),
            "identity.jwks_url",
        ),
    ] {
        let reply = put(&app, "acme", &settings).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_settings"),
            "{settings}: {}",
            reply.raw
        );
        assert!(reply.raw.contains(field), "{field}: {}", reply.raw);
    }
    assert_eq!(get(&app, "acme").await["version"], 0, "nothing stored");
}

#[tokio::test]
async fn two_tenants_answer_one_question_with_their_own_instructions_and_limits() {
    let kit = Kit::new(&[])
        .ingested("acme")
        .await
        .ingested("globex")
        .await;
    let kit = kit.ingested("initech").await;
    let app = kit.app();
    let french = json!({"k": 2, "max_tokens": 40,
        "prompt": {"instructions": "Tu es Ada, l'assistante de la banque. Réponds en français."}});
    let german = json!({"prompt": {"instructions": "Du bist Max. Antworte auf Deutsch.",
        "citations": "none"}});
    assert_eq!(put(&app, "acme", &french).await.status, 200);
    assert_eq!(put(&app, "globex", &german).await.status, 200);
    let ask = json!({"query": QUESTION, "include_prompt": true});
    let acme = app.answer_as("acme", &ask).await;
    let globex = app.answer_as("globex", &ask).await;
    let plain = app.answer_as("initech", &ask).await;
    assert_eq!(plain.meta()["k"], 5);
    assert_eq!(acme.meta()["k"], 2, "the tenant's k");
    assert_eq!(globex.meta()["k"], 5, "the deployment's k");

    // As sent to the LLM: each tenant's instructions first, Sluice's rules after them.
    let calls = app.llm.calls();
    assert_eq!(calls.len(), 3);
    let system = |i: usize| calls[i].messages[0].content.clone();
    assert!(system(0).starts_with("Tu es Ada"), "{}", system(0));
    assert!(system(0).contains("[n]"), "{}", system(0));
    assert!(system(1).starts_with("Du bist Max"), "{}", system(1));
    assert!(!system(1).contains("[n]") && system(1).contains("Do not put source numbers"));
    assert!(
        system(2).starts_with("Answer using only the numbered sources"),
        "{}",
        system(2)
    );
    assert!(
        !system(2).contains("Sluice"),
        "no tenant is told it is Sluice: {}",
        system(2)
    );
    let deployment = app.server.answers.as_ref().unwrap().config.max_tokens;
    assert_eq!(
        (calls[0].max_tokens, calls[1].max_tokens),
        (40, deployment),
        "the tenant's max_tokens, else the deployment's"
    );
    // `include_prompt` shows the same.
    assert_eq!(
        acme.meta()["prompt"]["messages"][0]["content"],
        json!(system(0))
    );
    assert_eq!(acme.meta()["prompt"]["max_tokens"], 40);
}

#[tokio::test]
async fn an_answer_cached_under_old_settings_is_not_replayed() {
    let app = Kit::new(&[]).ingested("default").await.app();
    let ask = json!({"query": QUESTION});
    assert_eq!(app.answer(&ask).await.meta()["cache"], "miss");
    assert_eq!(app.answer(&ask).await.meta()["cache"], "hit");
    let changed = json!({"prompt": {"instructions": "Answer like a pirate."}});
    assert_eq!(put(&app, "default", &changed).await.status, 200);
    assert_eq!(
        app.answer(&ask).await.meta()["cache"],
        "miss",
        "a new version"
    );
    assert_eq!(app.answer(&ask).await.meta()["cache"], "hit");
    // The same settings saved again are no new version: the cached answer still holds.
    assert_eq!(put(&app, "default", &changed).await.status, 200);
    assert_eq!(
        app.answer(&ask).await.meta()["cache"],
        "hit",
        "the same version"
    );
    let other = json!({"prompt": {"instructions": "Answer like a poet."}});
    assert_eq!(put(&app, "default", &other).await.status, 200);
    assert_eq!(
        app.answer(&ask).await.meta()["cache"],
        "miss",
        "a new version"
    );
}

#[tokio::test]
async fn a_tenant_that_does_not_answer_without_sources_gets_its_refusal_and_no_llm_call() {
    let app = Kit::new(&[]).app();
    let refuse = json!({"prompt": {"answer_without_sources": false, "no_answer": "Désolée."}});
    assert_eq!(put(&app, "acme", &refuse).await.status, 200);
    let answer = app.answer_as("acme", &json!({"query": QUESTION})).await;
    answer.assert_well_formed();
    assert_eq!(answer.text(), "Désolée.");
    assert_eq!(answer.first("done")["finish_reason"], "no_sources");
    assert!(app.llm.calls().is_empty(), "the LLM was not asked");
    // With documents, the same tenant is answered by the LLM.
    app.ingest("acme").await;
    let answer = app.answer_as("acme", &json!({"query": QUESTION})).await;
    assert_eq!(answer.first("done")["finish_reason"], "stop");
    assert_eq!(app.llm.calls().len(), 1);
}

#[tokio::test]
async fn only_a_tenant_wide_key_with_the_settings_permission_reads_or_changes_them() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add("acme", &[Permission::Settings]);
    let reader = keys.add("acme", &[Permission::Answer, Permission::Usage]);
    let team = Filter::parse(&json!({"team": "a"})).unwrap();
    let bound = keys.add_filtered(
        "acme",
        &[Permission::Answer, Permission::Settings],
        Some(team),
    );
    let app = Kit::new(&[]).keys(keys).app();
    let as_key = |key: &str| [("authorization", format!("Bearer {key}"))];
    let send = |method: Method, key: String| {
        let app = app.clone();
        async move {
            let headers = as_key(&key);
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            app.send(method, "/v1/settings", &headers, r#"{"k": 3}"#.to_string())
                .await
        }
    };
    assert_eq!(send(Method::PUT, admin.clone()).await.status, 200);
    assert_eq!(send(Method::GET, admin).await.status, 200);
    for key in [reader, bound] {
        for method in [Method::GET, Method::PUT] {
            let reply = send(method.clone(), key.clone()).await;
            assert_eq!(
                (reply.status, reply.code()),
                (403, "permission_denied"),
                "{method}: {}",
                reply.raw
            );
        }
    }
}
