//! Document metadata and filters through the API: metadata is accepted, checked and given back
//! in `meta.documents`; `filter` (on `/v1/answer` and in a chat completion's `sluice` options)
//! restricts the sources; a key's mandatory filter is ANDed with the request's and cannot be
//! widened or removed; answers under one filter are never served from the cache to another.
//! Each store's own translation of the filter is tested against that store in its crate.

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_testkit::MemoryKeys;
use std::sync::Arc;

use crate::kit::{App, Kit, UNCHECKED};

/// Four policies sharing their words, told apart by metadata.
fn policies() -> Value {
    let doc = |id: &str, metadata: Value| {
        json!({"id": id, "title": id,
               "text": format!("The refund policy {id} says refunds are paid within ten days."),
               "metadata": metadata})
    };
    json!({"documents": [
        doc("finance-2024", json!({"groups": ["finance"], "year": 2024,
                                   "updated_at": "2024-05-01T00:00:00Z"})),
        doc("finance-2025", json!({"groups": ["finance", "hr"], "year": 2025,
                                   "updated_at": "2025-02-01T10:00:00+01:00"})),
        doc("hr-2025", json!({"groups": ["hr"], "year": 2025})),
        doc("public", json!({"public": true})),
    ]})
}

/// The app with [`policies`] ingested (with `key`, when auth is on).
async fn app_with_policies(kit: Kit, key: Option<&str>) -> App {
    let app = kit.app();
    let bearer = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("authorization", b.as_str()))
        .collect();
    let reply = app
        .send(
            Method::POST,
            "/v1/documents",
            &headers,
            policies().to_string(),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    app
}

fn ask(filter: Value) -> Value {
    json!({"query": "what does the refund policy say", "k": 10, "filter": filter})
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[tokio::test]
async fn metadata_is_stored_and_given_back_with_the_sources() {
    let app = app_with_policies(Kit::new(&[]), None).await;
    let stream = app
        .answer(&json!({"query": "refund policy", "k": 10}))
        .await;
    let documents = stream.meta()["documents"].as_array().unwrap().clone();
    assert_eq!(documents.len(), 4);
    let f25 = documents
        .iter()
        .find(|d| d["id"] == "finance-2025")
        .unwrap();
    // As sent: the date keeps its offset.
    assert_eq!(
        f25["metadata"],
        json!({"groups": ["finance", "hr"], "year": 2025, "updated_at": "2025-02-01T10:00:00+01:00"})
    );
    // A document without metadata has no metadata field.
    app.post(
        "/v1/documents",
        &json!({"documents": [{"id": "bare", "text": "refund policy bare"}]}),
    )
    .await;
    let stream = app
        .answer(&json!({"query": "refund policy bare", "k": 10, "cache": "bypass"}))
        .await;
    let bare = stream.meta()["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "bare")
        .cloned()
        .unwrap();
    assert!(bare.get("metadata").is_none(), "{bare}");
}

#[tokio::test]
async fn invalid_metadata_is_a_400_naming_the_document_and_key() {
    let app = Kit::new(&[]).app();
    for (metadata, says) in [
        (json!({"a.b": 1}), "\"a.b\" is not a valid key"),
        (json!({"owner": {"name": "x"}}), "nested object"),
        (json!({"tags": [1, 2]}), "strings only"),
        (json!({"tags": []}), "empty list"),
        (json!({"note": null}), "null"),
        (json!("not an object"), "invalid type"),
    ] {
        let body = json!({"documents": [
            {"id": "ok", "text": "fine"},
            {"id": "bad", "text": "x", "metadata": metadata},
        ]});
        let reply = app.post("/v1/documents", &body).await;
        assert_eq!(reply.status, 400, "{metadata}: {}", reply.raw);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{metadata}: {message}");
        if reply.code() == "invalid_document" {
            assert!(message.contains("\"bad\""), "{message}");
        } else {
            // Not an object at all: the body does not parse.
            assert_eq!(reply.code(), "invalid_json");
        }
    }
    // Nothing of a refused batch was written.
    let stream = app.answer(&json!({"query": "fine"})).await;
    assert!(stream.sources().is_empty(), "{:?}", stream.sources());
}

#[tokio::test]
async fn a_filter_restricts_the_sources_to_the_documents_that_pass_it() {
    let app = app_with_policies(Kit::new(&[]), None).await;
    for (filter, expected) in [
        (
            json!({"groups": "finance"}),
            vec!["finance-2024", "finance-2025"],
        ),
        (
            json!({"groups": {"$in": ["hr"]}, "year": 2025}),
            vec!["finance-2025", "hr-2025"],
        ),
        (
            json!({"year": {"$gte": 2025}}),
            vec!["finance-2025", "hr-2025"],
        ),
        // 2025-02-01T10:00+01:00 is 09:00 UTC: after 08:00 UTC the same day.
        (
            json!({"updated_at": {"$gt": "2025-02-01T08:00:00Z"}}),
            vec!["finance-2025"],
        ),
        (
            json!({"groups": {"$nin": ["finance"]}}),
            vec!["hr-2025", "public"],
        ),
        (
            json!({"$or": [{"public": true}, {"year": 2024}]}),
            vec!["finance-2024", "public"],
        ),
        (json!({"year": {"$exists": false}}), vec!["public"]),
        (json!({"team": "nobody"}), vec![]),
    ] {
        let stream = app.answer(&ask(filter.clone())).await;
        stream.assert_well_formed();
        assert_eq!(sorted(stream.sources()), expected, "{filter}");
    }
}

#[tokio::test]
async fn invalid_filters_are_a_400_invalid_filter_naming_the_problem() {
    let app = Kit::new(&[]).app();
    for (filter, says) in [
        (json!(["year"]), "a filter is a JSON object"),
        (json!("year = 2025"), "a filter is a JSON object"),
        (json!({"year": {"$near": 2025}}), "unknown operator $near"),
        (
            json!({"year": {"$gt": "recent"}}),
            "compares numbers or RFC 3339 dates",
        ),
        (json!({"groups": {"$in": "finance"}}), "takes a list"),
        (json!({"public": {"$exists": "yes"}}), "takes true or false"),
        (json!({"$or": {}}), "takes a list"),
        (json!({"owner.name": "x"}), "not a valid key"),
    ] {
        let reply = app.post("/v1/answer", &ask(filter.clone())).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_filter"),
            "{filter}: {}",
            reply.raw
        );
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("\"filter\": "), "{message}");
        assert!(message.contains(says), "{filter}: {message}");
    }
    // A list of more than MAX_IN_VALUES values is refused; one of exactly that many is not.
    let max = sluice_contract::filter::MAX_IN_VALUES;
    let values = |n: usize| (0..n).map(|i| json!(format!("g{i}"))).collect::<Vec<_>>();
    for op in ["$in", "$nin"] {
        let over = json!({"groups": {op: values(max + 1)}});
        let reply = app.post("/v1/answer", &ask(over)).await;
        assert_eq!(
            (reply.status, reply.code()),
            (400, "invalid_filter"),
            "{}",
            reply.raw
        );
        assert!(
            reply.raw.contains(&format!("at most {max}")),
            "{}",
            reply.raw
        );
        let at = json!({"groups": {op: values(max)}});
        let reply = app.post("/v1/answer", &ask(at)).await;
        assert_eq!(reply.status, 200, "{op} with {max} values: {}", reply.raw);
    }
    // The chat route checks its `sluice.filter` the same way (OpenAI's error shape).
    let body = json!({"messages": [{"role": "user", "content": "refunds?"}],
                      "sluice": {"filter": {"year": {"$near": 1}}}});
    let reply = app.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 400, "{}", reply.raw);
    assert_eq!(reply.body["error"]["code"], "invalid_filter");
}

#[tokio::test]
async fn the_chat_route_takes_a_filter_in_its_sluice_options() {
    let app = app_with_policies(Kit::new(&[]), None).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "what does the refund policy say"}],
                      "sluice": {"k": 10, "filter": {"public": true}}});
    let reply = app.post("/v1/chat/completions", &body).await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let sources: Vec<&str> = reply.body["sluice"]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["public"]);
}

#[tokio::test]
async fn a_keys_filter_binds_every_request_and_cannot_be_widened() {
    let keys = Arc::new(MemoryKeys::default());
    let bound = Filter::parse(&json!({"groups": {"$in": ["finance"]}})).unwrap();
    let finance = keys.add_filtered("default", &Permission::ALL, Some(bound));
    let open = keys.add("default", &Permission::ALL);
    let app = app_with_policies(Kit::new(&[]).keys(Arc::clone(&keys)), Some(&open)).await;
    let ask_with = |key: &str, body: Value| {
        let bearer = format!("Bearer {key}");
        let app = &app;
        async move {
            let reply = app
                .send(
                    Method::POST,
                    "/v1/answer",
                    &[("authorization", &bearer)],
                    body.to_string(),
                )
                .await;
            assert_eq!(reply.status, 200, "{}", reply.raw);
            sorted(crate::kit::Stream::parse(&reply.raw).sources())
        }
    };
    let finance_docs = vec!["finance-2024".to_string(), "finance-2025".to_string()];
    // No filter sent: the key's alone.
    let plain = json!({"query": "what does the refund policy say", "k": 10});
    assert_eq!(ask_with(&finance, plain.clone()).await, finance_docs);
    // Attempts to widen it: each is ANDed with the key's filter, never instead of it.
    for widen in [
        json!({"$or": [{"groups": "hr"}, {"groups": {"$exists": false}}]}),
        json!({"groups": {"$nin": ["finance"]}}),
        json!({"public": true}),
        json!({"groups": {"$exists": true}}),
    ] {
        let got = ask_with(&finance, ask(widen.clone())).await;
        assert!(
            got.iter().all(|id| finance_docs.contains(id)),
            "{widen} widened the key's filter: {got:?}"
        );
    }
    // Narrowing works.
    assert_eq!(
        ask_with(&finance, ask(json!({"year": 2025}))).await,
        ["finance-2025"]
    );
    // The same question with a key without a filter sees everything — and is not served the
    // bound key's cached answer (nor the other way round).
    assert_eq!(ask_with(&open, plain.clone()).await.len(), 4);
    assert_eq!(ask_with(&finance, plain).await, finance_docs);
}

#[tokio::test]
async fn an_answer_made_under_one_filter_is_never_served_under_another() {
    let app = app_with_policies(Kit::new(UNCHECKED), None).await;
    let first = app.answer(&ask(json!({"groups": "hr"}))).await;
    assert_eq!(first.meta()["cache"], "miss");
    // The same question and filter: a hit.
    let again = app.answer(&ask(json!({"groups": "hr"}))).await;
    assert_eq!(again.meta()["cache"], "hit");
    assert_eq!(again.sources(), first.sources());
    // The same filter written another way (a bare value is $eq): the same digest, a hit.
    let same = app.answer(&ask(json!({"groups": {"$eq": "hr"}}))).await;
    assert_eq!(same.meta()["cache"], "hit");
    // Another filter, and no filter: misses, with their own sources.
    let other = app.answer(&ask(json!({"groups": "finance"}))).await;
    assert_eq!(other.meta()["cache"], "miss");
    assert_eq!(sorted(other.sources()), ["finance-2024", "finance-2025"]);
    let unfiltered = app
        .answer(&json!({"query": "what does the refund policy say", "k": 10}))
        .await;
    assert_eq!(unfiltered.meta()["cache"], "miss");
    assert_eq!(unfiltered.sources().len(), 4);
    // And the filtered entries are still there for their own filters.
    let back = app.answer(&ask(json!({"groups": "finance"}))).await;
    assert_eq!(back.meta()["cache"], "hit");
}
