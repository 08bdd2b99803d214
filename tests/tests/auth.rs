//! Auth, tenant isolation and per-tenant limits through the HTTP API, with auth on
//! (`SLUICE_API_KEYS_FILE`): keys map to tenants, a key never reaches another tenant's
//! documents, ingests, cached answers or components, and each tenant's rate and open streams
//! are capped with a 429 that says when to come back.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use sluice_core::auth::{Permission, new_key};
use sluice_tests::{
    Answer, TestServer, answer_with_headers, error_code as code, http, key_file, start, start_with,
    v1_routes,
};

use sluice_tests::REVERSE;
const QUESTION: &str = "How long does a refund take?";

/// A key file with keys for two tenants and two narrower keys of acme's.
struct Keys {
    _dir: tempfile::TempDir,
    path: String,
    acme: String,
    globex: String,
    /// acme, answer only.
    reader: String,
    /// acme, answer and prompt.
    debugger: String,
}

fn keys() -> Keys {
    let (dir, path, keys) = key_file(&[
        ("acme", &Permission::DEFAULT),
        ("globex", &Permission::DEFAULT),
        ("acme", &[Permission::Answer]),
        ("acme", &[Permission::Answer, Permission::Prompt]),
    ]);
    let [acme, globex, reader, debugger] = <[String; 4]>::try_from(keys).unwrap();
    Keys {
        _dir: dir,
        path,
        acme,
        globex,
        reader,
        debugger,
    }
}

async fn server_with(keys: &Keys, extra: &[(&str, &str)]) -> TestServer {
    let mut vars = vec![("SLUICE_API_KEYS_FILE", keys.path.as_str())];
    vars.extend_from_slice(extra);
    start(&vars).await
}

/// `method path` with `authorization` (a whole header value) and an optional tenant header;
/// status, headers and the JSON body (Null when not JSON).
async fn call(
    server: &TestServer,
    authorization: Option<&str>,
    tenant: Option<&str>,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut headers = Vec::new();
    if let Some(a) = authorization {
        headers.push(("authorization", a));
    }
    if let Some(t) = tenant {
        headers.push(("x-sluice-tenant", t));
    }
    call_with(server, &headers, method, path, body).await
}

/// `method path` with `headers` and `body`.
async fn call_with(
    server: &TestServer,
    headers: &[(&str, &str)],
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    sluice_tests::request(&server.url, headers, method, path, body).await
}

async fn as_key(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let bytes = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let (status, _, body) = call(server, Some(&bearer(key)), None, method, path, bytes).await;
    (status, body)
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

async fn ask(server: &TestServer, key: &str, body: &Value) -> Answer {
    let auth = bearer(key);
    let answer = answer_with_headers(&server.url, &[("authorization", &auth)], body).await;
    answer.assert_well_formed();
    answer
}

async fn ingest(server: &TestServer, key: &str, id: &str, text: &str) -> Value {
    let (status, body) = as_key(
        server,
        key,
        Method::POST,
        "/v1/documents",
        json!({"documents": [{"id": id, "text": text}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn every_v1_route_needs_a_valid_key() {
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    let routes = v1_routes();
    let wrong = bearer(&new_key());
    for (method, path, body) in routes {
        let (status, headers, error) =
            call(&server, None, None, method.clone(), path, body.clone()).await;
        assert_eq!(
            (status, code(&error)),
            (401, "missing_api_key"),
            "{method} {path}"
        );
        assert_eq!(headers["www-authenticate"], "Bearer realm=\"sluice\"");
        for bad in [wrong.as_str(), "Basic YWNtZTpzZWNyZXQ=", "Bearer"] {
            let (status, _, error) =
                call(&server, Some(bad), None, method.clone(), path, body.clone()).await;
            assert_eq!(
                (status, code(&error)),
                (401, "invalid_api_key"),
                "{method} {path} {bad}"
            );
        }
        // Naming a tenant is no way around the key.
        let (status, _, _) = call(&server, None, Some("acme"), method.clone(), path, body).await;
        assert_eq!(status, 401, "{method} {path}");
    }
    // Behind IAM auth the key rides in x-api-key beside the SigV4 signature.
    let (status, _, listed) = call_with(
        &server,
        &[
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261130/us-east-1/lambda/aws4_request",
            ),
            ("x-api-key", keys.acme.as_str()),
        ],
        Method::GET,
        "/v1/components/rerank",
        Vec::new(),
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    let stranger = new_key();
    let (status, _, error) = call_with(
        &server,
        &[("x-api-key", stranger.as_str())],
        Method::GET,
        "/v1/components/rerank",
        Vec::new(),
    )
    .await;
    assert_eq!((status, code(&error)), (401, "invalid_api_key"));
    // Health and readiness stay open to the load balancer.
    assert_eq!(server.get("/healthz").await.0, 200);
    // Nothing was written by any of the refused requests.
    server.assert_nothing_written("acme").await;
    server.assert_nothing_written("default").await;
}

#[tokio::test]
async fn a_key_acts_for_its_own_tenant_and_within_its_permissions() {
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    // The key's tenant is the request's; naming it is fine, naming another is a 403.
    let acme = bearer(&keys.acme);
    let body = br#"{"query":"hello"}"#.to_vec();
    let (status, _, error) = call(
        &server,
        Some(&acme),
        Some("globex"),
        Method::POST,
        "/v1/answer",
        body.clone(),
    )
    .await;
    assert_eq!((status, code(&error)), (403, "forbidden_tenant"));
    let answer = answer_with_headers(
        &server.url,
        &[("authorization", &acme), ("x-sluice-tenant", "acme")],
        &json!({"query": "hello"}),
    )
    .await;
    assert_eq!(answer.first("meta").data["tenant"], "acme");
    // An answer-only key may ask, not ingest, manage components or clear the cache.
    let reader = &keys.reader;
    assert_eq!(
        ask(&server, reader, &json!({"query": "hi"}))
            .await
            .first("meta")
            .data["tenant"],
        "acme"
    );
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/documents",
            json!({"documents": [{"id": "a", "text": "x"}]}),
        ),
        (Method::GET, "/v1/components/rerank", Value::Null),
        (Method::DELETE, "/v1/cache", Value::Null),
    ] {
        let (status, error) = as_key(&server, reader, method.clone(), path, body).await;
        assert_eq!(
            (status, code(&error)),
            (403, "permission_denied"),
            "{method} {path}"
        );
    }
    // Seeing the assembled prompt needs the prompt permission, which keys lack by default.
    let echo = json!({"query": "hi", "include_prompt": true});
    for key in [&keys.reader, &keys.acme] {
        let (status, error) = as_key(&server, key, Method::POST, "/v1/answer", echo.clone()).await;
        assert_eq!((status, code(&error)), (403, "permission_denied"));
    }
    // (A cache hit calls no LLM, so has no prompt to show: bypass it.)
    let echo = json!({"query": "hi", "include_prompt": true, "cache": "bypass"});
    let answer = ask(&server, &keys.debugger, &echo).await;
    assert!(answer.first("meta").data["prompt"]["messages"].is_array());
}

#[tokio::test]
async fn one_tenants_documents_are_never_retrieved_for_another() {
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    ingest(
        &server,
        &keys.acme,
        "refunds",
        "Acme refunds take five business days.",
    )
    .await;
    let acme = ask(&server, &keys.acme, &json!({"query": QUESTION})).await;
    let sources = acme.first("meta").data["documents"].clone();
    assert_eq!(sources[0]["id"], "refunds", "{sources}");
    let globex = ask(&server, &keys.globex, &json!({"query": QUESTION})).await;
    let meta = &globex.first("meta").data;
    assert_eq!(meta["tenant"], "globex");
    assert_eq!(meta["documents"], json!([]), "{meta}");
}

#[tokio::test]
async fn one_tenants_ingest_never_replaces_or_versions_anothers_documents() {
    let keys = keys();
    let server = server_with(&keys, &[("SLUICE_CACHE", "off")]).await;
    let first = ingest(
        &server,
        &keys.acme,
        "policy",
        "Acme refunds take five business days.",
    )
    .await;
    assert_eq!(first["corpus_version"], 1);
    // The same document id from another tenant is another document.
    let other = ingest(
        &server,
        &keys.globex,
        "policy",
        "Globex refunds take ninety days.",
    )
    .await;
    assert_eq!(
        other["corpus_version"], 1,
        "globex has its own corpus version"
    );
    let acme = ask(&server, &keys.acme, &json!({"query": QUESTION})).await;
    let snippet = acme.first("meta").data["documents"][0]["snippet"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(snippet.contains("five business days"), "{snippet}");
    assert_eq!(server.pipeline.store.count("acme").await.unwrap(), 1);
    assert_eq!(server.pipeline.store.count("globex").await.unwrap(), 1);
    let again = ingest(
        &server,
        &keys.acme,
        "policy",
        "Acme refunds take six business days.",
    )
    .await;
    assert_eq!(again["corpus_version"], 2, "only acme's own ingests count");
}

#[tokio::test]
async fn one_tenants_cached_answers_are_never_served_to_another() {
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    for key in [&keys.acme, &keys.globex] {
        ingest(&server, key, "refunds", "Refunds take five business days.").await;
    }
    let body = json!({"query": QUESTION});
    // The cache write follows `done`: ask until acme's answer comes from the cache.
    let started = Instant::now();
    loop {
        let a = ask(&server, &keys.acme, &body).await;
        if a.first("meta").data["cache"] == "hit" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "acme's answer never cached"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let globex = ask(&server, &keys.globex, &body).await;
    assert_eq!(globex.first("meta").data["cache"], "miss");
    // Clearing is per tenant too: globex's clear leaves acme's entry.
    let (status, cleared) = as_key(
        &server,
        &keys.globex,
        Method::DELETE,
        "/v1/cache",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{cleared}");
    let acme = ask(&server, &keys.acme, &body).await;
    assert_eq!(acme.first("meta").data["cache"], "hit");
}

#[tokio::test]
async fn one_tenants_components_are_invisible_to_another() {
    let keys = keys();
    let server = server_with(&keys, &[]).await;
    let route = "/v1/components/rerank";
    let (status, _, uploaded) = call(
        &server,
        Some(&bearer(&keys.acme)),
        None,
        Method::PUT,
        route,
        REVERSE.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(status, 201, "{uploaded}");
    let version = uploaded["version"].as_str().unwrap().to_string();
    let activate = json!({"version": version});
    let (status, _) = as_key(
        &server,
        &keys.acme,
        Method::POST,
        &format!("{route}/activate"),
        activate.clone(),
    )
    .await;
    assert_eq!(status, 200);
    // globex sees none of it and cannot activate it by its version.
    let (status, listed) = as_key(&server, &keys.globex, Method::GET, route, Value::Null).await;
    assert_eq!(
        (status, &listed["versions"], &listed["active"]),
        (200, &json!([]), &Value::Null)
    );
    let (status, error) = as_key(
        &server,
        &keys.globex,
        Method::POST,
        &format!("{route}/activate"),
        activate,
    )
    .await;
    assert_eq!((status, code(&error)), (404, "unknown_version"));
    // globex deactivating its own (none) leaves acme's active.
    let (status, _) = as_key(&server, &keys.globex, Method::DELETE, route, Value::Null).await;
    assert_eq!(status, 200);
    let (_, listed) = as_key(&server, &keys.acme, Method::GET, route, Value::Null).await;
    assert_eq!(listed["active"], version.as_str());
}

#[tokio::test]
async fn over_its_rate_a_tenant_gets_429_with_retry_after() {
    let keys = keys();
    // Two at once, then one every two seconds.
    let server = server_with(
        &keys,
        &[("SLUICE_TENANT_RATE", "0.5"), ("SLUICE_TENANT_BURST", "2")],
    )
    .await;
    let route = "/v1/components/rerank";
    for _ in 0..2 {
        assert_eq!(
            as_key(&server, &keys.acme, Method::GET, route, Value::Null)
                .await
                .0,
            200
        );
    }
    let (status, headers, error) = call(
        &server,
        Some(&bearer(&keys.acme)),
        None,
        Method::GET,
        route,
        Vec::new(),
    )
    .await;
    assert_eq!((status, code(&error)), (429, "rate_limited"), "{error}");
    let after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&after), "Retry-After: {after}");
    // Answers draw on the same rate; another tenant's is its own.
    let (status, error) = as_key(
        &server,
        &keys.acme,
        Method::POST,
        "/v1/answer",
        json!({"query": "x"}),
    )
    .await;
    assert_eq!((status, code(&error)), (429, "rate_limited"));
    assert_eq!(
        as_key(&server, &keys.globex, Method::GET, route, Value::Null)
            .await
            .0,
        200
    );
    // After the wait it says, the tenant is let in again.
    tokio::time::sleep(Duration::from_secs(after)).await;
    assert_eq!(
        as_key(&server, &keys.acme, Method::GET, route, Value::Null)
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn every_v1_request_counts_against_the_rate_whatever_it_asks() {
    // The models list, a refused answer body, a chat completion: each takes one request from
    // the tenant's rate, as every other route does (a burst of 3 here, and hardly any refill).
    let keys = keys();
    let server = server_with(
        &keys,
        &[("SLUICE_TENANT_RATE", "0.01"), ("SLUICE_TENANT_BURST", "3")],
    )
    .await;
    let acme = &keys.acme;
    assert_eq!(
        as_key(&server, acme, Method::GET, "/v1/models", Value::Null)
            .await
            .0,
        200
    );
    let (status, error) = as_key(&server, acme, Method::POST, "/v1/answer", json!({"k": 3})).await;
    assert_eq!((status, code(&error)), (400, "missing_query"));
    let (status, error) = as_key(
        &server,
        acme,
        Method::POST,
        "/v1/answer",
        json!({"query": ""}),
    )
    .await;
    assert_eq!((status, code(&error)), (400, "empty_query"));
    for (method, path, body) in v1_routes() {
        let (status, _, error) = call(
            &server,
            Some(&bearer(acme)),
            None,
            method.clone(),
            path,
            body,
        )
        .await;
        assert_eq!(
            (status, code(&error)),
            (429, "rate_limited"),
            "{method} {path}"
        );
    }
    // Another tenant has a rate of its own.
    assert_eq!(
        as_key(
            &server,
            &keys.globex,
            Method::GET,
            "/v1/models",
            Value::Null
        )
        .await
        .0,
        200
    );
}

/// An upstream that streams a token every 50 ms and never finishes.
async fn endless_llm() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            let chunks = futures::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let chunk = json!({"choices": [{"index": 0, "delta": {"content": "w "}}]});
                Some((Ok::<_, std::io::Error>(format!("data: {chunk}\n\n")), ()))
            });
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(axum::body::Body::from_stream(chunks))
                .unwrap()
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_tenants_open_streams_are_capped_until_one_ends() {
    let keys = keys();
    let llm = endless_llm().await;
    let server = server_with(
        &keys,
        &[
            ("SLUICE_TENANT_MAX_STREAMS", "1"),
            ("SLUICE_LLM_URL", &llm),
            ("SLUICE_CACHE", "off"),
        ],
    )
    .await;
    let open = |key: &str| {
        http()
            .post(format!("{}/v1/answer", server.url))
            .header("authorization", bearer(key))
            .json(&json!({"query": "tell me everything"}))
            .send()
    };
    let mut first = open(&keys.acme).await.unwrap();
    assert_eq!(first.status(), 200);
    first.chunk().await.unwrap().expect("the stream started");
    let second = open(&keys.acme).await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "1");
    assert_eq!(
        code(&second.json::<Value>().await.unwrap()),
        "too_many_streams"
    );
    // Another tenant streams alongside.
    let globex = open(&keys.globex).await.unwrap();
    assert_eq!(globex.status(), 200);
    // The client going away ends the stream and frees its place.
    drop(first);
    let started = Instant::now();
    loop {
        let r = open(&keys.acme).await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_ingest_over_its_limits_is_refused_whole() {
    // Auth off here: the limits are the same either way.
    let server = start_with(
        &[
            ("SLUICE_MAX_DOCUMENTS", "2"),
            ("SLUICE_MAX_CHUNKS", "3"),
            ("SLUICE_CHUNK_TOKENS", "16"),
            ("SLUICE_CHUNK_OVERLAP_TOKENS", "0"),
        ],
        |s| s,
    )
    .await;
    let doc = |id: &str, text: &str| json!({"id": id, "text": text});
    let three = json!({"documents": [doc("a", "x"), doc("b", "y"), doc("c", "z")]});
    let (status, error) = server.post("/v1/documents", &three).await;
    assert_eq!((status, code(&error)), (413, "ingest_too_large"), "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SLUICE_MAX_DOCUMENTS")
    );
    // Two documents, the second long enough for more chunks than allowed: the first, though
    // valid, is not written either.
    let long = "The refund policy covers every order placed online. ".repeat(12);
    let two = json!({"documents": [doc("short", "Refunds take five days."), doc("long", &long)]});
    let (status, error) = server.post("/v1/documents", &two).await;
    assert_eq!((status, code(&error)), (413, "ingest_too_large"), "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SLUICE_MAX_CHUNKS")
    );
    server.assert_nothing_written("default").await;
    // Within the limits the same route works.
    let ok = json!({"documents": [doc("short", "Refunds take five days.")]});
    assert_eq!(server.post("/v1/documents", &ok).await.0, 200);
}
