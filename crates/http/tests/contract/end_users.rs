//! End users: a tenant's identity verifies the token in `x-sluice-user`, and each user sees —
//! in answers, their prompts, listings and the cache — only the documents whose `_access`
//! names one of their principals, or that have none. A tenant without an identity answers as
//! before.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::{Permission, Principal};
use sluice_testkit::MemoryKeys;
use sluice_testkit::users::{Secret, hs256_token, identity, secret_identity, sign, token};

use crate::kit::{App, Kit, Reply, UNCHECKED};

const QUESTION: &str = "How long does a replacement card take?";

/// Four documents on one subject: open to all, for HR, for Alice alone, for no end user.
fn documents() -> Value {
    let doc = |id: &str, access: Option<Value>| {
        let mut d = json!({"id": id, "title": id,
            "text": format!("A replacement card takes 5 days ({id}).")});
        if let Some(a) = access {
            d["metadata"] = json!({"_access": a});
        }
        d
    };
    json!({"documents": [
        doc("open", None),
        doc("hr-only", Some(json!(["group:hr"]))),
        doc("alice-only", Some(json!(["user:alice"]))),
        doc("nobody", Some(json!([]))),
    ]})
}

async fn app(required: bool) -> App {
    let app = Kit::new(UNCHECKED).app();
    let put = (app.send(
        Method::PUT,
        "/v1/settings",
        &[("x-sluice-tenant", "acme")],
        json!({"identity": identity(required)}).to_string(),
    ))
    .await;
    assert_eq!(put.status, 200, "{}", put.raw);
    let sent = app.post_as("acme", "/v1/documents", &documents()).await;
    assert_eq!(sent.status, 200, "{}", sent.raw);
    app
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// The sources of an answer to `QUESTION` for the user of `user_token` (none: no header).
async fn sources(app: &App, user_token: Option<&str>) -> (Vec<String>, Value) {
    let mut headers = vec![("x-sluice-tenant", "acme")];
    if let Some(t) = user_token {
        headers.push(("x-sluice-user", t));
    }
    let ask = json!({"query": QUESTION, "k": 10, "include_prompt": true});
    let answer = app.answer_with(&headers, &ask).await;
    answer.assert_well_formed();
    (sorted(answer.sources()), answer.meta().clone())
}

async fn listed(app: &App, user_token: &str) -> Vec<String> {
    let reply = (app.send(
        Method::GET,
        "/v1/documents",
        &[("x-sluice-tenant", "acme"), ("x-sluice-user", user_token)],
        "",
    ))
    .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let body: Value = serde_json::from_str(&reply.raw).unwrap();
    let ids = body["documents"].as_array().cloned().unwrap_or_default();
    sorted(
        ids.iter()
            .map(|d| d["id"].as_str().unwrap_or("?").to_string())
            .collect(),
    )
}

#[tokio::test]
async fn each_user_sees_only_the_documents_open_to_them() {
    let app = app(false).await;
    let alice = token("alice", &["sales"]);
    let bob = token("bob", &["hr"]);
    let (seen, meta) = sources(&app, Some(&alice)).await;
    assert_eq!(seen, ["alice-only", "open"]);
    let prompt = meta["prompt"].to_string();
    assert!(
        prompt.contains("(alice-only)") && !prompt.contains("(hr-only)"),
        "{prompt}"
    );
    assert_eq!(sources(&app, Some(&bob)).await.0, ["hr-only", "open"]);
    assert_eq!(
        sources(&app, None).await.0,
        ["open"],
        "no token: the open ones"
    );
    assert_eq!(listed(&app, &alice).await, ["alice-only", "open"]);
    assert_eq!(listed(&app, &bob).await, ["hr-only", "open"]);
    // One document by id: another's is not there for this user.
    let get = |id: &'static str, t: String| {
        let app = &app;
        async move {
            let path = format!("/v1/documents/{id}");
            let headers = [("x-sluice-tenant", "acme"), ("x-sluice-user", t.as_str())];
            app.send(Method::GET, &path, &headers, "").await.status
        }
    };
    assert_eq!(get("alice-only", alice.clone()).await, 200);
    assert_eq!(get("hr-only", alice.clone()).await, 404);
    assert_eq!(get("nobody", bob.clone()).await, 404);
}

#[tokio::test]
async fn the_tenants_admin_manages_every_document_while_answers_without_a_token_see_the_open_ones()
{
    for required in [false, true] {
        let app = app(required).await;
        let acme = [("x-sluice-tenant", "acme")];
        // Listing, reading, deleting with no end user's token: every document, with its
        // access list — though the tenant requires a token of whoever reads its answers.
        let reply = app.send(Method::GET, "/v1/documents", &acme, "").await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
        let all = reply.body["documents"].as_array().unwrap().clone();
        let ids: Vec<String> = (all.iter())
            .map(|d| d["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(sorted(ids), ["alice-only", "hr-only", "nobody", "open"]);
        let hr = all.iter().find(|d| d["id"] == "hr-only").unwrap();
        assert_eq!(hr["metadata"]["_access"], json!(["group:hr"]), "{hr}");
        let read = app
            .send(Method::GET, "/v1/documents/nobody", &acme, "")
            .await;
        assert_eq!(read.status, 200, "{}", read.raw);
        // An answer without a token: the open documents only (or none, when one is required).
        match required {
            false => assert_eq!(sources(&app, None).await.0, ["open"]),
            true => assert_eq!(answered(&app, &[]).await.code(), "missing_user_token"),
        }
        // To a user, a document hidden from them is not said not to exist.
        let alice = token("alice", &["sales"]);
        let headers = [
            ("x-sluice-tenant", "acme"),
            ("x-sluice-user", alice.as_str()),
        ];
        let hidden = app
            .send(Method::GET, "/v1/documents/hr-only", &headers, "")
            .await;
        assert_eq!((hidden.status, hidden.code()), (404, "unknown_document"));
        assert!(hidden.raw.contains("may see"), "{}", hidden.raw);
        let deleted = app
            .send(Method::DELETE, "/v1/documents/nobody", &acme, "")
            .await;
        assert_eq!(
            (deleted.status, deleted.body["deleted"].as_u64()),
            (200, Some(1))
        );
    }
}

#[tokio::test]
async fn one_users_cached_answer_never_answers_a_user_who_sees_other_documents() {
    let app = app(false).await;
    let alice = token("alice", &["sales"]);
    let (first, meta) = sources(&app, Some(&alice)).await;
    assert_eq!(meta["cache"], "miss");
    let (again, meta) = sources(&app, Some(&alice)).await;
    assert_eq!((meta["cache"].as_str(), again), (Some("hit"), first));
    let (bobs, meta) = sources(&app, Some(&token("bob", &["hr"]))).await;
    assert_eq!(
        meta["cache"], "miss",
        "another user's answer is not replayed"
    );
    assert_eq!(bobs, ["hr-only", "open"]);
    let (open, meta) = sources(&app, None).await;
    assert_eq!(
        (meta["cache"].as_str(), open),
        (Some("miss"), vec!["open".to_string()])
    );
    assert_eq!(app.llm.calls().len(), 3);
}

#[tokio::test]
async fn users_who_see_the_same_sources_share_an_answer_through_them() {
    let app = app(false).await;
    // Carol and Dave are both in HR, and no document names either of them.
    let (carol, dave) = (token("carol", &["hr"]), token("dave", &["hr", "sales"]));
    let (first, meta) = sources(&app, Some(&carol)).await;
    assert_eq!(
        (meta["cache"].as_str(), &first[..]),
        (
            Some("miss"),
            &["hr-only".to_string(), "open".to_string()][..]
        )
    );
    // Dave's own retrieval returns the sources Carol's answer was made from: it answers.
    let (shared, meta) = sources(&app, Some(&dave)).await;
    assert_eq!(
        (
            meta["cache"].as_str(),
            meta["cache_match"].as_str(),
            &shared
        ),
        (Some("hit"), Some("sources"), &first)
    );
    // And it is now his own, found by his key.
    let (_, meta) = sources(&app, Some(&dave)).await;
    assert_eq!(meta["cache_match"], "exact");
    // Erin is in sales like Alice but is not Alice: Alice's answer names a document Erin may
    // not see, so Erin's sources differ and her answer is her own.
    let (alices, _) = sources(&app, Some(&token("alice", &["sales"]))).await;
    let (erins, meta) = sources(&app, Some(&token("erin", &["sales"]))).await;
    assert_eq!(meta["cache"], "miss");
    assert_eq!(
        (&alices[..], &erins[..]),
        (
            &["alice-only".to_string(), "open".to_string()][..],
            &["open".to_string()][..]
        )
    );
    assert_eq!(app.llm.calls().len(), 3, "Carol's, Alice's and Erin's");
}

#[tokio::test]
async fn a_tenant_secret_verifies_its_users_hs256_tokens() {
    let settings =
        json!({"identity": secret_identity("arn:aws:secretsmanager:us-east-1:1:secret:idp")});
    let settings = &settings;
    let with = |kit: Kit| async move {
        let app = kit.app();
        let headers = [("x-sluice-tenant", "acme")];
        let put = (app.send(Method::PUT, "/v1/settings", &headers, settings.to_string())).await;
        assert_eq!(put.status, 200, "{}", put.raw);
        let sent = app.post_as("acme", "/v1/documents", &documents()).await;
        assert_eq!(sent.status, 200, "{}", sent.raw);
        app
    };
    let app = with(Kit::new(UNCHECKED).secrets(Arc::new(Secret))).await;
    let bob = hs256_token("bob", &["hr"]);
    assert_eq!(sources(&app, Some(&bob)).await.0, ["hr-only", "open"]);
    // An RS256 token is not this tenant's.
    let reply = answered(
        &app,
        &[
            ("x-sluice-tenant", "acme"),
            ("x-sluice-user", &token("bob", &["hr"])),
        ],
    )
    .await;
    assert_eq!(
        (reply.status, reply.code()),
        (401, "invalid_user_token"),
        "{}",
        reply.raw
    );
    // A process that reads no secrets cannot check the token: 503, retryable.
    let app = with(Kit::new(UNCHECKED)).await;
    let reply = answered(
        &app,
        &[("x-sluice-tenant", "acme"), ("x-sluice-user", &bob)],
    )
    .await;
    assert_eq!(
        (reply.status, reply.code()),
        (503, "identity_unavailable"),
        "{}",
        reply.raw
    );
    assert!(app.llm.calls().is_empty());
}

async fn answered(app: &App, headers: &[(&str, &str)]) -> Reply {
    let mut headers = headers.to_vec();
    headers.push(("x-sluice-tenant", "acme"));
    let body = json!({"query": QUESTION}).to_string();
    app.send(Method::POST, "/v1/answer", &headers, body).await
}

#[tokio::test]
async fn tokens_that_do_not_verify_are_refused_saying_why() {
    let app = app(false).await;
    let claims = |change: Value| {
        let mut c = json!({"iss": sluice_testkit::users::ISSUER, "aud": "sluice",
            "sub": "alice", "exp": sluice_testkit::users::now() + 600});
        for (k, v) in change.as_object().unwrap() {
            c[k] = v.clone();
        }
        sign(&c)
    };
    for (token, says) in [
        (
            claims(json!({"exp": sluice_testkit::users::now() - 120})),
            "expired",
        ),
        (claims(json!({"aud": "other"})), "audience"),
        (claims(json!({"iss": "https://other/"})), "issuer"),
        ("not-a-token".to_string(), "malformed"),
        (String::new(), "empty"),
    ] {
        let reply = answered(&app, &[("x-sluice-user", &token)]).await;
        assert_eq!(
            (reply.status, reply.code()),
            (401, "invalid_user_token"),
            "{says}"
        );
        assert!(reply.raw.contains(says), "{says}: {}", reply.raw);
    }
    assert!(app.llm.calls().is_empty(), "nothing answered");
}

#[tokio::test]
async fn a_tenant_that_requires_a_user_refuses_requests_without_one() {
    let app = app(true).await;
    let reply = answered(&app, &[]).await;
    assert_eq!((reply.status, reply.code()), (401, "missing_user_token"));
    let alice = token("alice", &[]);
    let reply = answered(&app, &[("x-sluice-user", &alice)]).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
}

#[tokio::test]
async fn a_tenant_without_an_identity_takes_no_user_token_and_answers_as_before() {
    let app = Kit::new(UNCHECKED).ingested("acme").await.app();
    let reply = answered(&app, &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let reply = answered(&app, &[("x-sluice-user", &token("alice", &[]))]).await;
    assert_eq!((reply.status, reply.code()), (401, "invalid_user_token"));
    assert!(reply.raw.contains("no identity"), "{}", reply.raw);
}

#[tokio::test]
async fn end_users_only_read() {
    let app = app(false).await;
    let alice = token("alice", &["hr"]);
    let headers = [
        ("x-sluice-tenant", "acme"),
        ("x-sluice-user", alice.as_str()),
    ];
    let body = documents().to_string();
    for (method, path, body) in [
        (Method::POST, "/v1/documents", body.as_str()),
        (Method::DELETE, "/v1/documents/open", ""),
        (Method::GET, "/v1/settings", ""),
        (Method::DELETE, "/v1/cache", ""),
    ] {
        let reply = app
            .send(method.clone(), path, &headers, body.to_string())
            .await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "permission_denied"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn a_key_made_for_end_users_needs_a_token_and_only_reads() {
    let keys = Arc::new(MemoryKeys::default());
    let permissions = vec![
        Permission::Answer,
        Permission::Documents,
        Permission::Settings,
    ];
    let key = keys.add_principal(Principal {
        user_token: true,
        ..Principal::new(sluice_testkit::tenant("acme"), permissions)
    });
    let admin = keys.add("acme", &Permission::DEFAULT);
    let app = Kit::new(UNCHECKED).keys(keys).app();
    let auth = |k: &str| format!("Bearer {k}");
    let (key_auth, admin_auth) = (auth(&key), auth(&admin));
    let put = (app.send(
        Method::PUT,
        "/v1/settings",
        &[("authorization", admin_auth.as_str())],
        json!({"identity": identity(false)}).to_string(),
    ))
    .await;
    assert_eq!(put.status, 200, "{}", put.raw);
    let as_key = [("authorization", key_auth.as_str())];
    let reply = answered(&app, &as_key).await;
    assert_eq!((reply.status, reply.code()), (401, "missing_user_token"));
    let alice = token("alice", &[]);
    let with_user = [
        ("authorization", key_auth.as_str()),
        ("x-sluice-user", alice.as_str()),
    ];
    assert_eq!(answered(&app, &with_user).await.status, 200);
    let reply = app.send(Method::GET, "/v1/settings", &with_user, "").await;
    assert_eq!((reply.status, reply.code()), (403, "permission_denied"));
}
