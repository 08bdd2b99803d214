//! Who may call what: API keys and their tenants and permissions, browsers of other origins,
//! each tenant's request rate and open streams, the ingest limits, and tenants that never see
//! each other's documents or cached answers.

use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use serde_json::json;
use sluice_contract::{auth::Permission, auth::new_key};
use sluice_testkit::{MemoryKeys, Reply, ScriptedLlm, V1_ROUTES};

use crate::kit::{self, App, Kit};

fn method(name: &str) -> Method {
    Method::from_bytes(name.as_bytes()).expect("a method")
}

struct Keyed {
    app: App,
    acme: String,
    globex: String,
    /// acme's, answers only.
    reader: String,
    /// acme's, answers with the prompt echoed.
    debugger: String,
}

fn keyed(overrides: &[(&str, &str)], llm: ScriptedLlm) -> Keyed {
    let keys = Arc::new(MemoryKeys::default());
    let acme = keys.add("acme", &Permission::DEFAULT);
    let globex = keys.add("globex", &Permission::DEFAULT);
    let reader = keys.add("acme", &[Permission::Answer]);
    let debugger = keys.add("acme", &[Permission::Answer, Permission::Prompt]);
    Keyed {
        app: Kit::with_llm(overrides, llm).keys(keys).app(),
        acme,
        globex,
        reader,
        debugger,
    }
}

impl Keyed {
    async fn call(&self, key: &str, method: Method, path: &str, body: &str) -> kit::Reply {
        let bearer = format!("Bearer {key}");
        self.app
            .send(
                method,
                path,
                &[("authorization", &bearer)],
                body.to_string(),
            )
            .await
    }
}

fn answering() -> ScriptedLlm {
    ScriptedLlm::answering(kit::ANSWER)
}

#[tokio::test]
async fn every_v1_route_needs_a_valid_key() {
    let k = keyed(&[], answering());
    let wrong = format!("Bearer {}", new_key());
    for &(name, path, body) in V1_ROUTES {
        let reply = k.app.send(method(name), path, &[], body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (401, "missing_api_key"),
            "{name} {path}"
        );
        assert_eq!(reply.headers["www-authenticate"], "Bearer realm=\"sluice\"");
        for bad in [wrong.as_str(), "Basic YWNtZTpzZWNyZXQ=", "Bearer"] {
            let reply = k
                .app
                .send(method(name), path, &[("authorization", bad)], body)
                .await;
            assert_eq!(
                (reply.status, reply.code()),
                (401, "invalid_api_key"),
                "{name} {path} {bad}"
            );
        }
        // The tenant header is no credential.
        let reply = k
            .app
            .send(method(name), path, &[("x-sluice-tenant", "acme")], body)
            .await;
        assert_eq!(reply.status, 401, "{name} {path}");
    }
    // `x-api-key` carries the key when `Authorization` holds a SigV4 signature.
    let sigv4 = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261130/us-east-1/lambda/aws4_request";
    let headers = [("authorization", sigv4), ("x-api-key", k.acme.as_str())];
    let reply = k.app.send(Method::GET, "/v1/models", &headers, "").await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let stranger = new_key();
    let reply = k
        .app
        .send(Method::GET, "/v1/models", &[("x-api-key", &stranger)], "")
        .await;
    assert_eq!((reply.status, reply.code()), (401, "invalid_api_key"));
    // Outside /v1 nothing is asked.
    assert_eq!(
        k.app.send(Method::GET, "/healthz", &[], "").await.status,
        200
    );
}

#[tokio::test]
async fn a_key_acts_for_its_own_tenant_and_within_its_permissions() {
    let k = keyed(&[], answering());
    let bearer = format!("Bearer {}", k.acme);
    let ask = json!({"query": "hello"});
    let reply = k
        .app
        .send(
            Method::POST,
            "/v1/answer",
            &[("authorization", &bearer), ("x-sluice-tenant", "globex")],
            ask.to_string(),
        )
        .await;
    assert_eq!((reply.status, reply.code()), (403, "forbidden_tenant"));
    let answer = k
        .app
        .answer_with(
            &[("authorization", &bearer), ("x-sluice-tenant", "acme")],
            &ask,
        )
        .await;
    assert_eq!(answer.meta()["tenant"], "acme");
    let reader = format!("Bearer {}", k.reader);
    let answer = k.app.answer_with(&[("authorization", &reader)], &ask).await;
    assert_eq!(answer.meta()["tenant"], "acme", "the key's tenant");
    for (name, path, body) in [
        (
            "POST",
            "/v1/documents",
            r#"{"documents":[{"id":"a","text":"x"}]}"#,
        ),
        ("GET", "/v1/components/rerank", ""),
        ("DELETE", "/v1/cache", ""),
    ] {
        let reply = k.call(&k.reader, method(name), path, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "permission_denied"),
            "{name} {path}"
        );
    }
    // The prompt is echoed only to a key with the `prompt` permission.
    let echo = json!({"query": "hi", "include_prompt": true}).to_string();
    for key in [&k.reader, &k.acme] {
        let reply = k.call(key, Method::POST, "/v1/answer", &echo).await;
        assert_eq!((reply.status, reply.code()), (403, "permission_denied"));
    }
    let debugger = format!("Bearer {}", k.debugger);
    let echo = json!({"query": "hi", "include_prompt": true, "cache": "bypass"});
    let answer = k
        .app
        .answer_with(&[("authorization", &debugger)], &echo)
        .await;
    assert!(answer.meta()["prompt"]["messages"].is_array());
}

#[tokio::test]
async fn tenants_never_see_each_others_documents_or_cached_answers() {
    let app = Kit::new(&[]).ingested("acme").await.app();
    let ask = json!({"query": "How long does a replacement card take?"});
    let acme = app.answer_as("acme", &ask).await;
    assert_eq!(acme.sources()[0], "lost-card");
    assert_eq!(app.answer_as("acme", &ask).await.meta()["cache"], "hit");
    // The identical question from another tenant: none of acme's sources, nor its answer.
    let globex = app.answer_as("globex", &ask).await;
    assert!(globex.sources().is_empty(), "{:?}", globex.sources());
    assert_eq!(globex.meta()["cache"], "miss");
    // globex's ingest of the same ids leaves acme's corpus version alone.
    app.ingest("globex").await;
    let store = app.server.ingest.as_ref().expect("ingest").store.clone();
    let version = |t: &str| {
        let store = store.clone();
        let t = sluice_testkit::tenant(t);
        async move { store.corpus_version(&t).await.expect("version") }
    };
    assert_eq!((version("acme").await, version("globex").await), (1, 1));
}

#[tokio::test]
async fn a_browser_page_of_another_origin_is_refused_on_every_v1_route() {
    let app = Kit::new(&[]).app();
    for &(name, path, body) in V1_ROUTES {
        for headers in [
            vec![
                ("origin", "https://evil.example"),
                ("host", "127.0.0.1:8080"),
            ],
            vec![("origin", "null"), ("host", "127.0.0.1:8080")],
            vec![("sec-fetch-site", "cross-site"), ("host", "127.0.0.1:8080")],
        ] {
            let reply = app.send(method(name), path, &headers, body).await;
            assert_eq!(
                (reply.status, reply.code()),
                (403, "cross_origin"),
                "{name} {path} {headers:?}"
            );
        }
    }
    // Clients without an origin (curl, SDKs) and the server's own pages are served.
    let ask = json!({"query": "hi"});
    app.answer(&ask).await.assert_well_formed();
    let same = [
        ("origin", "http://127.0.0.1:8080"),
        ("host", "127.0.0.1:8080"),
    ];
    app.answer_with(&same, &ask).await.assert_well_formed();
    let proxied = [
        ("origin", "https://rag.example.com"),
        ("host", "10.0.0.7:8080"),
        ("x-forwarded-host", "rag.example.com"),
    ];
    app.answer_with(&proxied, &ask).await.assert_well_formed();
}

#[tokio::test]
async fn over_its_rate_a_tenant_gets_429_with_retry_after_and_others_do_not() {
    let k = keyed(
        &[("SLUICE_TENANT_RATE", "0.5"), ("SLUICE_TENANT_BURST", "2")],
        answering(),
    );
    for _ in 0..2 {
        assert_eq!(
            k.call(&k.acme, Method::GET, "/v1/models", "").await.status,
            200
        );
    }
    let reply = k.call(&k.acme, Method::GET, "/v1/models", "").await;
    assert_eq!((reply.status, reply.code()), (429, "rate_limited"));
    let after: u64 = reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&after), "Retry-After: {after}");
    assert_eq!(
        k.call(&k.globex, Method::GET, "/v1/models", "")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn every_v1_request_counts_against_the_rate_whatever_it_asks() {
    let k = keyed(
        &[("SLUICE_TENANT_RATE", "0.01"), ("SLUICE_TENANT_BURST", "3")],
        answering(),
    );
    assert_eq!(
        k.call(&k.acme, Method::GET, "/v1/models", "").await.status,
        200
    );
    // Refused requests count too: a tenant cannot probe for free.
    let reply = k
        .call(&k.acme, Method::POST, "/v1/answer", r#"{"k": 3}"#)
        .await;
    assert_eq!(reply.code(), "missing_query");
    let reply = k
        .call(&k.acme, Method::POST, "/v1/answer", r#"{"query": ""}"#)
        .await;
    assert_eq!(reply.code(), "empty_query");
    for &(name, path, body) in V1_ROUTES {
        let reply = k.call(&k.acme, method(name), path, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (429, "rate_limited"),
            "{name} {path}"
        );
    }
    assert_eq!(
        k.call(&k.globex, Method::GET, "/v1/models", "")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_tenants_open_streams_are_capped_until_one_ends() {
    let endless = ScriptedLlm::new(Reply::StallAfter(vec!["w ".into()]));
    let k = keyed(
        &[("SLUICE_TENANT_MAX_STREAMS", "1"), ("SLUICE_CACHE", "off")],
        endless,
    );
    let open = |key: &str| {
        let bearer = format!("Bearer {key}");
        let request = kit::request(
            Method::POST,
            "/v1/answer",
            &[("authorization", &bearer)],
            json!({"query": "tell me everything"}).to_string(),
        );
        k.app.open(request)
    };
    let first = open(&k.acme).await;
    assert_eq!(first.status(), 200);
    let second = k
        .call(&k.acme, Method::POST, "/v1/answer", r#"{"query": "more"}"#)
        .await;
    assert_eq!((second.status, second.code()), (429, "too_many_streams"));
    assert_eq!(second.headers["retry-after"], "1");
    let globex = open(&k.globex).await;
    assert_eq!(globex.status(), 200, "another tenant's streams are its own");
    drop(first);
    // The place is freed when the stream is dropped.
    let again = tokio::time::timeout(Duration::from_secs(5), open(&k.acme)).await;
    assert_eq!(again.expect("no wait").status(), 200);
}

#[tokio::test]
async fn an_ingest_over_its_limits_is_refused_whole_naming_the_limit() {
    let app = Kit::new(&[
        ("SLUICE_MAX_DOCUMENTS", "2"),
        ("SLUICE_MAX_CHUNKS", "3"),
        ("SLUICE_CHUNK_TOKENS", "16"),
        ("SLUICE_CHUNK_OVERLAP_TOKENS", "0"),
    ])
    .app();
    let doc = |id: &str, text: &str| json!({"id": id, "text": text});
    let three = json!({"documents": [doc("a", "x"), doc("b", "y"), doc("c", "z")]});
    let reply = app.post("/v1/documents", &three).await;
    assert_eq!((reply.status, reply.code()), (413, "ingest_too_large"));
    assert!(reply.raw.contains("SLUICE_MAX_DOCUMENTS"), "{}", reply.raw);
    let long = "The refund policy covers every order placed online. ".repeat(12);
    let two = json!({"documents": [doc("short", "Refunds take five days."), doc("long", &long)]});
    let reply = app.post("/v1/documents", &two).await;
    assert_eq!((reply.status, reply.code()), (413, "ingest_too_large"));
    assert!(reply.raw.contains("SLUICE_MAX_CHUNKS"), "{}", reply.raw);
    let store = app.server.ingest.as_ref().expect("ingest").store.clone();
    let default = sluice_testkit::tenant("default");
    assert_eq!(
        store.count(&default).await.expect("count"),
        0,
        "nothing written"
    );
    let ok = json!({"documents": [doc("short", "Refunds take five days.")]});
    assert_eq!(app.post("/v1/documents", &ok).await.status, 200);
}

#[tokio::test]
async fn a_process_serves_only_its_parts() {
    // The registry function: no answers, no documents.
    let mut kit = Kit::new(&[]);
    kit.parts.role = sluice_app::Role::Components;
    let app = kit.app();
    for path in ["/v1/answer", "/v1/documents", "/v1/chat/completions"] {
        let reply = app.post(path, &json!({})).await;
        assert_eq!((reply.status, reply.code()), (404, "not_found"), "{path}");
    }
    let ready = app.send(Method::GET, "/readyz", &[], "").await;
    assert_eq!(ready.status, 200, "{}", ready.raw);
    assert!(ready.body["checks"].get("llm").is_none(), "{}", ready.raw);
}
