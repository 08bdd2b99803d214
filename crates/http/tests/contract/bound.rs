//! A key bound to a filter stays inside it for everything it changes, not only for what it
//! reads: every document it writes passes its filter, an id outside it is an id it cannot
//! replace or delete, and the tenant's shared state (the rerank component, the cache, other
//! keys' usage) is beyond it unless the key was made tenant-wide on purpose.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::components::{
    CallInput, ComponentCall, ComponentError, ComponentFailure, ComponentVersion, LogLevel, LogLine,
};
use sluice_contract::filter::Filter;
use sluice_contract::{auth::Permission, auth::Principal};
use sluice_contract::{stages::FailureKind, stages::RerankFailure, stages::Store};
use sluice_testkit::MemoryKeys;

use crate::kit::{App, Kit, Reply, UNCHECKED};

/// What a bound key may be given without the tenant-wide flag.
const WRITER: [Permission; 5] = [
    Permission::Answer,
    Permission::Documents,
    Permission::DocumentsDelete,
    Permission::Cache,
    Permission::Usage,
];

struct Team {
    app: App,
    store: Arc<dyn Store>,
    admin: String,
    /// Bound to `{"team": "a"}`, with [`WRITER`].
    a: String,
    /// Bound to `{"team": "a"}` with every permission, not made tenant-wide.
    a_all: String,
    /// Bound to `{"team": "a"}` with every permission, made tenant-wide.
    a_wide: String,
}

fn team_a() -> Filter {
    Filter::parse(&json!({"team": "a"})).unwrap()
}

/// A key of `acme` bound to `{"team": "a"}` with every permission, made tenant-wide: its
/// `authorization` header.
fn wide_key(keys: &MemoryKeys) -> String {
    format!(
        "Bearer {}",
        keys.add_principal(Principal {
            filter: Some(team_a()),
            tenant_wide: true,
            ..Principal::new(sluice_testkit::tenant("acme"), Permission::ALL.to_vec())
        })
    )
}

/// Tenant `acme` with team b's document `b1` and team a's `a1`, written by the admin.
async fn team() -> Team {
    let keys = Arc::new(MemoryKeys::default());
    let admin = format!("Bearer {}", keys.add("acme", &Permission::ALL));
    let a = format!(
        "Bearer {}",
        keys.add_filtered("acme", &WRITER, Some(team_a()))
    );
    let a_all = format!(
        "Bearer {}",
        keys.add_filtered("acme", &Permission::ALL, Some(team_a()))
    );
    let a_wide = wide_key(&keys);
    let kit = Kit::new(UNCHECKED).keys(keys);
    let store = kit.store();
    let t = Team {
        app: kit.app(),
        store,
        admin,
        a,
        a_all,
        a_wide,
    };
    let docs = json!({"documents": [
        {"id": "b1", "title": "Team b's card policy", "text": "Team b replaces lost cards within five days.",
         "metadata": {"team": "b"}},
        {"id": "a1", "title": "Team a's card policy", "text": "Team a replaces lost cards within two days.",
         "metadata": {"team": "a"}},
    ]});
    let reply = t.send(&t.admin, Method::POST, "/v1/documents", &docs).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    t
}

impl Team {
    async fn send(&self, key: &str, method: Method, path: &str, body: &Value) -> Reply {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        (self.app)
            .send(method, path, &[("authorization", key)], body)
            .await
    }

    /// The document `id` as the admin reads it (`Null` when there is none).
    async fn document(&self, id: &str) -> Value {
        let reply = self
            .send(
                &self.admin,
                Method::GET,
                &format!("/v1/documents/{id}"),
                &Value::Null,
            )
            .await;
        match reply.status {
            200 => reply.body,
            404 => Value::Null,
            other => panic!("{other}: {}", reply.raw),
        }
    }

    async fn corpus_version(&self) -> u64 {
        (self.store)
            .corpus_version(&sluice_testkit::tenant("acme"))
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_bound_key_cannot_replace_a_document_outside_its_filter() {
    let t = team().await;
    let version = t.corpus_version().await;
    // Team b's id, relabelled as team a's: an id that does not exist to this key. As it was
    // (team b's label), it is outside the filter before its id is looked at.
    for (metadata, status, code) in [
        (json!({"team": "a"}), 404, "unknown_document"),
        (json!({"team": "b"}), 403, "outside_key_filter"),
    ] {
        let body = json!({"documents": [{"id": "b1", "text": "Planted.", "metadata": metadata}]});
        let reply = t.send(&t.a, Method::POST, "/v1/documents", &body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (status, code),
            "{metadata}: {}",
            reply.raw
        );
        assert!(!reply.raw.contains("Team b"), "{}", reply.raw);
    }
    let b1 = t.document("b1").await;
    assert_eq!(b1["metadata"], json!({"team": "b"}));
    assert_eq!(b1["title"], "Team b's card policy");
    // Nor can it delete it, by id or by filter.
    let reply = t
        .send(&t.a, Method::DELETE, "/v1/documents/b1", &Value::Null)
        .await;
    assert_eq!((reply.status, reply.code()), (404, "unknown_document"));
    let by_filter = json!({"filter": {"team": "b"}, "confirm": true});
    let reply = t
        .send(&t.a, Method::DELETE, "/v1/documents", &by_filter)
        .await;
    assert_eq!(
        (reply.status, reply.body["deleted"].clone()),
        (200, json!(0))
    );
    assert!(!t.document("b1").await.is_null());
    assert_eq!(t.corpus_version().await, version, "nothing was written");
    // Its own document it replaces as any key would.
    let own = json!({"documents": [{"id": "a1", "text": "Two days, now one.", "metadata": {"team": "a"}}]});
    let reply = t.send(&t.a, Method::POST, "/v1/documents", &own).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert!(t.corpus_version().await > version);
}

#[tokio::test]
async fn every_document_a_bound_key_writes_passes_its_filter() {
    let t = team().await;
    let version = t.corpus_version().await;
    let outside = [
        json!({"team": "b"}),
        json!({}),
        json!({"team": ["a", "b"]}),
        json!({"team": "A"}),
    ];
    for metadata in outside {
        let body = json!({"documents": [{"id": "planted", "text": "Cards are free.", "metadata": metadata}]});
        let reply = t.send(&t.a, Method::POST, "/v1/documents", &body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "outside_key_filter"),
            "{metadata}: {}",
            reply.raw
        );
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("\"planted\"")
        );
    }
    // One document outside the filter refuses the batch: the one inside is not written either.
    let mixed = json!({"documents": [
        {"id": "inside", "text": "Fine.", "metadata": {"team": "a"}},
        {"id": "outside", "text": "Not fine.", "metadata": {"team": "b"}},
    ]});
    let reply = t.send(&t.a, Method::POST, "/v1/documents", &mixed).await;
    assert_eq!(reply.code(), "outside_key_filter");
    // A file's front matter is its metadata, and is held to the same rule.
    let file = |team: &str| format!("---\nteam: {team}\n---\n# Fees\nCards are free.\n");
    let reply = (t.app)
        .send(
            Method::POST,
            "/v1/documents?filename=fees.md",
            &[("authorization", t.a.as_str())],
            file("b"),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (403, "outside_key_filter"));
    for id in ["planted", "inside", "outside", "fees.md"] {
        assert!(t.document(id).await.is_null(), "{id} was written");
    }
    assert_eq!(t.corpus_version().await, version, "nothing was written");
    let reply = (t.app)
        .send(
            Method::POST,
            "/v1/documents?filename=fees.md",
            &[("authorization", t.a.as_str())],
            file("a"),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(
        t.document("fees.md").await["metadata"],
        json!({"team": "a"})
    );
    // What it wrote is what it, and team b's readers, can or cannot see.
    let ask = json!({"query": "Are cards free?", "filter": {"team": "b"}});
    let admin = [("authorization", t.admin.as_str())];
    let answer = t.app.answer_with(&admin, &ask).await;
    assert!(
        !answer.sources().iter().any(|s| s == "fees.md"),
        "{:?}",
        answer.sources()
    );
}

#[tokio::test]
async fn tenant_wide_actions_need_a_key_made_tenant_wide() {
    let t = team().await;
    for (method, path, body) in [
        (Method::PUT, "/v1/components/rerank", json!("(component)")),
        (Method::GET, "/v1/components/rerank", Value::Null),
        (Method::DELETE, "/v1/components/rerank", Value::Null),
        (
            Method::POST,
            "/v1/components/rerank/activate",
            json!({"version": "v"}),
        ),
        (Method::GET, "/v1/usage?keys=true", Value::Null),
    ] {
        let reply = t.send(&t.a_all, method.clone(), path, &body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "permission_denied"),
            "{method} {path}: {}",
            reply.raw
        );
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("bound to a filter") && message.contains("--tenant-wide"),
            "{message}"
        );
        // Made tenant-wide on purpose, the same key passes admission (this server has no
        // components: 404 for those routes, the usage of every key for the last).
        let reply = t.send(&t.a_wide, method.clone(), path, &body).await;
        assert_ne!(
            reply.code(),
            "permission_denied",
            "{method} {path}: {}",
            reply.raw
        );
    }
}

#[tokio::test]
async fn a_bound_key_clears_only_the_answers_cached_under_its_filter() {
    let t = team().await;
    let ask = json!({"query": "How fast are lost cards replaced?"});
    let (admin, a) = (
        [("authorization", t.admin.as_str())],
        [("authorization", t.a.as_str())],
    );
    for headers in [&admin, &a] {
        assert_eq!(
            t.app.answer_with(headers, &ask).await.meta()["cache"],
            "miss"
        );
        assert_eq!(
            t.app.answer_with(headers, &ask).await.meta()["cache"],
            "hit"
        );
    }
    let reply = t
        .send(&t.a, Method::DELETE, "/v1/cache", &Value::Null)
        .await;
    assert_eq!(
        (reply.status, reply.body["deleted"].clone()),
        (200, json!(1))
    );
    assert_eq!(t.app.answer_with(&admin, &ask).await.meta()["cache"], "hit");
    assert_eq!(t.app.answer_with(&a, &ask).await.meta()["cache"], "miss");
    // The unbound key's clear is the tenant's: both go.
    let reply = t
        .send(&t.admin, Method::DELETE, "/v1/cache", &Value::Null)
        .await;
    assert_eq!(
        (reply.status, reply.body["deleted"].clone()),
        (200, json!(2))
    );
}

#[tokio::test]
async fn a_bound_key_sees_its_own_usage_and_no_other_keys() {
    let t = team().await;
    let (admin, a) = (
        [("authorization", t.admin.as_str())],
        [("authorization", t.a.as_str())],
    );
    let mine = t
        .app
        .answer_with(&a, &json!({"query": "lost cards?", "cache": "bypass"}))
        .await;
    let theirs = t
        .app
        .answer_with(&admin, &json!({"query": "card fees?", "cache": "bypass"}))
        .await;
    let tokens = |s: &crate::kit::Stream| s.first("done")["token_count"].as_u64().unwrap();
    assert!(tokens(&mine) > 0 && tokens(&theirs) > 0);
    let reply = t.send(&t.a, Method::GET, "/v1/usage", &Value::Null).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.body["total"]["answers"], 1, "{}", reply.raw);
    assert_eq!(
        reply.body["total"]["completion_tokens"],
        tokens(&mine),
        "{}",
        reply.raw
    );
    assert!(reply.body["key"].is_string());
    // The admin's view holds both answers (and the ingest).
    let reply = t
        .send(&t.admin, Method::GET, "/v1/usage", &Value::Null)
        .await;
    assert_eq!(reply.body["total"]["answers"], 2, "{}", reply.raw);
}

/// A registry whose one version failed on some key's call, its message quoting a document.
struct FailedOnce;

impl sluice_contract::components::Components for FailedOnce {
    fn upload(
        &self,
        _: &sluice_contract::Tenant,
        _: &[u8],
        _: Option<&str>,
        _: &sluice_contract::cancel::Cancel,
    ) -> Result<ComponentVersion, ComponentError> {
        Err(ComponentError::Invalid("not in this test".into()))
    }
    fn activate(
        &self,
        _: &sluice_contract::Tenant,
        _: &str,
    ) -> Result<ComponentVersion, ComponentError> {
        Err(ComponentError::Invalid("not in this test".into()))
    }
    fn list(&self, _: &sluice_contract::Tenant) -> Result<Vec<ComponentVersion>, ComponentError> {
        Ok(vec![ComponentVersion {
            version: "v1".into(),
            size: 1,
            label: None,
            uploaded_ms: None,
            active: true,
            cost: None,
            failures: vec![
                ComponentFailure {
                    at_ms: 1,
                    request_id: Some("r1".into()),
                    failure: quoting(),
                    restricted: true,
                },
                ComponentFailure {
                    at_ms: 2,
                    request_id: Some("r2".into()),
                    failure: RerankFailure::new(FailureKind::ComponentError, "open: card fees"),
                    restricted: false,
                },
            ],
        }])
    }
    fn deactivate(&self, _: &sluice_contract::Tenant) -> Result<(), ComponentError> {
        Ok(())
    }
    fn logs(
        &self,
        _: &sluice_contract::Tenant,
        _: &str,
    ) -> Result<Vec<ComponentCall>, ComponentError> {
        let call = |n: u64, text: &str, restricted: bool| ComponentCall {
            at_ms: n,
            request_id: Some(format!("r{n}")),
            lines: vec![LogLine {
                level: LogLevel::Info,
                message: text.into(),
            }],
            failure: Some(RerankFailure::new(FailureKind::ComponentError, text)),
            input: Some(CallInput {
                query: text.into(),
                context: Default::default(),
                candidates: vec![],
                cut: false,
            }),
            restricted,
        };
        Ok(vec![
            call(1, "team b: salaries 100k", true),
            call(2, "open: card fees", false),
        ])
    }
    fn delete(&self, _: &sluice_contract::Tenant, _: &str) -> Result<(), ComponentError> {
        Ok(())
    }
}

/// A failure whose message quotes another team's document.
fn quoting() -> RerankFailure {
    RerankFailure::new(FailureKind::ComponentError, "team b: salaries 100k")
}

/// A failure's message, a log line and a failed call's input can quote any candidate the
/// call saw, and that call may have been another request's: they are shown by the one rule of
/// who may read a document's text. The tenant's admin (`documents`, no filter) sees every
/// record whole; a key that manages components without the `documents` permission sees the
/// records of calls that saw only documents open to everyone, and of the others only the
/// kind, time, request and each line's level; a key bound to a filter — even one made
/// tenant-wide to manage the components — sees no record's text.
#[tokio::test]
async fn failures_and_logs_quote_documents_only_to_keys_that_may_read_every_document() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = format!("Bearer {}", keys.add("acme", &Permission::ALL));
    let developer = format!("Bearer {}", keys.add("acme", &[Permission::Components]));
    let wide = wide_key(&keys);
    let mut kit = Kit::new(&[]).keys(keys);
    kit.parts.components = Some(Arc::new(FailedOnce));
    let app = kit.app();
    let get = |path: &'static str, key: String| {
        let app = &app;
        async move {
            let reply = app
                .send(Method::GET, path, &[("authorization", &key)], String::new())
                .await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            reply
        }
    };
    let list = |key: String| get("/v1/components/rerank", key);
    let logs = |key: String| get("/v1/components/rerank/v1/logs", key);
    // (key, sees the restricted call's text, sees the open call's text)
    for (key, restricted, open) in [
        (admin, true, true),
        (developer, false, true),
        (wide, false, false),
    ] {
        let seen = logs(key.clone()).await;
        let calls = &seen.body["calls"];
        for (call, shown, text) in [
            (&calls[0], restricted, "team b: salaries 100k"),
            (&calls[1], open, "open: card fees"),
        ] {
            assert_eq!(call["lines"][0]["level"], "info", "{}", seen.raw);
            assert_eq!(call["failure"]["kind"], "component_error", "{}", seen.raw);
            assert!(call["request_id"].is_string(), "{}", seen.raw);
            match shown {
                true => {
                    assert_eq!(call["lines"][0]["message"], text, "{}", seen.raw);
                    assert_eq!(call["input"]["query"], text, "{}", seen.raw);
                }
                false => {
                    assert!(call.get("input").is_none(), "{}", seen.raw);
                    assert!(!call.to_string().contains(text), "{}", seen.raw);
                }
            }
        }
        let seen = list(key).await;
        let failures = &seen.body["versions"][0]["failures"];
        for (failure, shown, text) in [
            (&failures[0], restricted, "team b: salaries 100k"),
            (&failures[1], open, "open: card fees"),
        ] {
            assert_eq!(failure["kind"], "component_error");
            match shown {
                true => assert_eq!(failure["message"], text, "{}", seen.raw),
                false => assert_eq!(failure["message"], RerankFailure::REDACTED),
            }
        }
    }
}
