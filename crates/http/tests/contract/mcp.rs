//! `/mcp`: the MCP server's tools over JSON-RPC, through the router in process. The real
//! clients (the official Python SDK) are in `tests/tests/e2e/mcp.rs`.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_testkit::MemoryKeys;

use crate::kit::{App, Kit, UNCHECKED};

const QUESTION: &str = "How long does a replacement card take?";

/// The headers of an MCP client's POST.
const HEADERS: [(&str, &str); 4] = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
    ("mcp-protocol-version", "2025-06-18"),
    // As every HTTP/1.1 client sends it (the transport refuses a request without).
    ("host", "127.0.0.1"),
];

/// One JSON-RPC request to `/mcp` with `headers`: the HTTP status and the JSON-RPC reply.
async fn rpc(app: &App, headers: &[(&str, &str)], method: &str, params: Value) -> (u16, Value) {
    let mut all = HEADERS.to_vec();
    all.extend_from_slice(headers);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let reply = app.send(Method::POST, "/mcp", &all, body.to_string()).await;
    let value = serde_json::from_str(&reply.raw).unwrap_or_else(|_| json!({"raw": reply.raw}));
    (reply.status, value)
}

fn names(listed: &Value) -> Vec<String> {
    let tools = listed["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[tokio::test]
async fn the_tools_answer_as_their_routes_do() {
    let app = Kit::new(UNCHECKED).ingested("default").await.app();
    let (status, init) = rpc(
        &app,
        &[],
        "initialize",
        json!({
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "contract-test", "version": "1"}}),
    )
    .await;
    assert_eq!(status, 200, "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "sluice", "{init}");
    let (_, listed) = rpc(&app, &[], "tools/list", json!({})).await;
    assert_eq!(
        names(&listed),
        ["search", "answer", "list_documents", "get_document"],
        "{listed}"
    );
    let (_, called) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "search", "arguments": {"query": QUESTION, "k": 2}}),
    )
    .await;
    let found = &called["result"]["structuredContent"];
    assert_eq!(
        found["documents"].as_array().map(Vec::len),
        Some(2),
        "{called}"
    );
    let (_, answered) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "answer", "arguments": {"query": QUESTION}}),
    )
    .await;
    let answer = &answered["result"]["structuredContent"];
    assert!(
        !answer["answer"].as_str().unwrap_or("").is_empty(),
        "{answered}"
    );
    assert!(
        !answer["sources"].as_array().unwrap().is_empty(),
        "{answered}"
    );
    let (_, bad) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "search", "arguments": {"k": 2}}),
    )
    .await;
    assert_eq!(bad["error"]["data"]["code"], "missing_query", "{bad}");
    let (_, unknown) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "delete_everything"}),
    )
    .await;
    assert_eq!(
        unknown["error"]["data"]["code"], "unknown_tool",
        "{unknown}"
    );
    // The specification's code for an unknown tool.
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

/// The JSON-RPC messages of an SSE reply, in order.
fn sse_messages(raw: &str) -> Vec<Value> {
    raw.split("\n\n")
        .flat_map(|block| block.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

#[tokio::test]
async fn an_answer_tells_its_progress_to_a_client_that_asks_for_it() {
    let llm = sluice_testkit::ScriptedLlm::answering("Five to seven business days.");
    let app = Kit::with_llm(UNCHECKED, llm)
        .ingested("default")
        .await
        .app();
    let (_, plain) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "answer", "arguments": {"query": QUESTION}}),
    )
    .await;
    let answer = plain["result"]["structuredContent"]["answer"].clone();
    assert!(
        answer.is_string(),
        "no progress asked: one JSON reply {plain}"
    );
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "answer", "arguments": {"query": QUESTION, "cache": "bypass"},
        "_meta": {"progressToken": "p-1"}}});
    let reply = app
        .send(Method::POST, "/mcp", &HEADERS, body.to_string())
        .await;
    let messages = sse_messages(&reply.raw);
    let (last, notes) = messages.split_last().expect("messages");
    assert_eq!(last["id"], 7, "the result comes last: {}", reply.raw);
    assert_eq!(last["result"]["structuredContent"]["answer"], answer);
    assert!(notes.len() >= 2, "{}", reply.raw);
    let mut seen = -1.0;
    for note in notes {
        assert_eq!(note["method"], "notifications/progress", "{note}");
        assert_eq!(note["params"]["progressToken"], "p-1", "{note}");
        let progress = note["params"]["progress"].as_f64().unwrap_or(-1.0);
        assert!(progress > seen, "progress only grows: {}", reply.raw);
        seen = progress;
    }
    // First the sources found, then each token's text: together, the answer.
    let first = notes[0]["params"]["message"].as_str().unwrap_or("");
    assert!(first.contains("sources found"), "{first}");
    let told: String = (notes[1..].iter())
        .filter_map(|n| n["params"]["message"].as_str())
        .collect();
    assert_eq!(Some(told.as_str()), answer.as_str());
    assert_eq!(seen as usize, notes.len() - 1, "one step per token");
}

#[tokio::test]
async fn a_keys_permissions_decide_the_tools_it_sees_and_calls() {
    let keys = Arc::new(MemoryKeys::default());
    let searcher = keys.add("acme", &[Permission::Search]);
    let app = Kit::new(UNCHECKED).keys(keys).app();
    // Refused with the status every route gives (not a 200 with an error inside), an unknown
    // key too; `initialize` as well, before any JSON-RPC is read.
    for (headers, code) in [
        (vec![], "missing_api_key"),
        (vec![("authorization", "Bearer nope")], "invalid_api_key"),
    ] {
        for method in ["tools/list", "initialize"] {
            let (status, refused) = rpc(&app, &headers, method, json!({})).await;
            assert_eq!(status, 401, "{method}: {refused}");
            assert_eq!(refused["error"]["data"]["code"], code, "{refused}");
        }
    }
    let auth = format!("Bearer {searcher}");
    let as_searcher = [("authorization", auth.as_str())];
    let (_, listed) = rpc(&app, &as_searcher, "tools/list", json!({})).await;
    assert_eq!(names(&listed), ["search"], "{listed}");
    let (_, denied) = rpc(
        &app,
        &as_searcher,
        "tools/call",
        json!({"name": "answer", "arguments": {"query": QUESTION}}),
    )
    .await;
    assert_eq!(
        denied["error"]["data"]["code"], "permission_denied",
        "{denied}"
    );
    assert_eq!(denied["error"]["data"]["status"], 403, "{denied}");
}

#[tokio::test]
async fn bad_requests_get_a_clear_answer() {
    let app = Kit::new(UNCHECKED).ingested("default").await.app();
    // Refused before any JSON-RPC is read, each as a JSON-RPC error with Sluice's code and
    // the HTTP status: a web page of another origin, a session id (none is ever issued), a
    // body over the server's cap.
    let init = json!({
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "page", "version": "1"}});
    let search = json!({"name": "search", "arguments": {"query": QUESTION, "k": 1}});
    let huge = json!({"name": "search", "arguments": {"query": "x".repeat(2 << 20)}});
    for (headers, method, params, code, status) in [
        (
            &[("origin", "https://evil.example")][..],
            "initialize",
            &init,
            "cross_origin",
            403,
        ),
        (
            &[("mcp-session-id", "nobody-issued-this")][..],
            "tools/call",
            &search,
            "unknown_session",
            404,
        ),
        (&[][..], "tools/call", &huge, "body_too_large", 413),
    ] {
        let (got, refused) = rpc(&app, headers, method, params.clone()).await;
        assert_eq!(got, status, "{refused}");
        assert_eq!(
            refused["error"]["data"],
            json!({"code": code, "status": status, "retryable": false}),
            "{refused}"
        );
        assert_eq!(refused["id"], Value::Null, "{refused}");
        assert!(refused["error"]["code"].is_i64(), "{refused}");
    }
    // Arguments that are not the tool's: the route's own refusal.
    let (_, wrong) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "search", "arguments": {"query": QUESTION, "include_prompt": true}}),
    )
    .await;
    assert_eq!(
        wrong["error"]["data"],
        json!({"code": "invalid_json", "status": 400, "retryable": false}),
        "{wrong}"
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_answer_stops_it_and_is_charged_what_was_generated() {
    let words = (0..40)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let llm =
        sluice_testkit::ScriptedLlm::answering(&words).gap(std::time::Duration::from_millis(50));
    let app = Kit::with_llm(UNCHECKED, llm)
        .ingested("default")
        .await
        .app();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "answer", "arguments": {"query": QUESTION}}});
    let request = crate::kit::request(Method::POST, "/mcp", &HEADERS, body.to_string());
    // The client goes away a few tokens in (the tool answers only at the end).
    let left = tokio::time::timeout(std::time::Duration::from_millis(400), app.open(request)).await;
    assert!(left.is_err(), "the answer should still be going");
    // Within a moment the answer has ended, charged for fewer tokens than it would have made.
    let meter = app.server.usage.clone().expect("usage on");
    let mut counted = 0;
    for _ in 0..200 {
        meter.flush().await.expect("flushed");
        let rows = (meter.store().read(
            &sluice_testkit::tenant("default"),
            sluice_core::usage::today(),
            sluice_core::usage::today(),
        ))
        .await
        .unwrap();
        counted = rows.iter().map(|(_, c)| c.completion_tokens).sum::<u64>();
        if counted > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(counted > 0 && counted < 40, "{counted} tokens charged");
}

#[tokio::test]
async fn the_routes_rules_hold_through_the_tools() {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add(
        "acme",
        &[
            Permission::Documents,
            Permission::Settings,
            Permission::Usage,
        ],
    );
    let cards = Some(Filter::parse(&json!({"topic": "cards"})).unwrap());
    let bound = keys.add_filtered("acme", &[Permission::Search], cards);
    let app = Kit::new(UNCHECKED).keys(keys).app();
    let as_admin = [("x-api-key", admin.as_str())];
    crate::kit::post_replacements(&app, &as_admin).await;
    let search = |headers: Vec<(&'static str, String)>, arguments: Value| {
        let app = &app;
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let call = json!({"name": "search", "arguments": arguments});
            let (_, reply) = rpc(app, &headers, "tools/call", call).await;
            let documents = reply["result"]["structuredContent"]["documents"]
                .as_array()
                .cloned();
            let mut ids: Vec<String> = (documents.unwrap_or_else(|| panic!("{reply}")).iter())
                .map(|d| d["id"].as_str().unwrap_or("?").to_string())
                .collect();
            ids.sort();
            ids
        }
    };
    let key = ("x-api-key", bound.clone());
    // The key's filter, narrowed (never widened) by the call's.
    let wide = json!({"query": QUESTION, "k": 10});
    assert_eq!(
        search(vec![key.clone()], wide.clone()).await,
        ["cards", "hr-cards"]
    );
    let loans = json!({"query": QUESTION, "k": 10, "filter": {"topic": "loans"}});
    assert!(search(vec![key.clone()], loans).await.is_empty());
    // The end user's access on top (once the tenant has an identity provider): a sales user
    // does not see HR's document.
    let put = json!({"identity": sluice_testkit::users::identity(false)});
    let put = (app.send(Method::PUT, "/v1/settings", &as_admin, put.to_string())).await;
    assert_eq!(put.status, 200, "{}", put.raw);
    let sales = (
        "x-sluice-user",
        sluice_testkit::users::token("erin", &["sales"]),
    );
    assert_eq!(search(vec![key, sales], wide).await, ["cards"]);
    // Counted as searches, as the route counts them.
    let usage = app.send(Method::GET, "/v1/usage", &as_admin, "").await;
    let usage: Value = serde_json::from_str(&usage.raw).unwrap();
    assert_eq!(usage["total"]["searches"], 3, "{usage}");
    assert!(app.llm.calls().is_empty());
}

#[tokio::test]
async fn past_the_deadline_a_tool_returns_what_was_found_and_says_so() {
    let mut kit = Kit::new(UNCHECKED).ingested("default").await;
    let mut store = sluice_testkit::Troubled::around(kit.store());
    store.delay = std::time::Duration::from_secs(30);
    kit.parts.store = Some(Arc::new(store));
    let app = kit.app();
    let call = json!({"name": "search",
        "arguments": {"query": QUESTION, "retrieval_deadline_ms": 200}});
    let (_, reply) = rpc(&app, &[], "tools/call", call).await;
    let found = &reply["result"]["structuredContent"];
    assert_eq!(found["degraded"], json!(["retrieval_timeout"]), "{reply}");
    assert_eq!(found["documents"], json!([]), "{reply}");
}

/// What the transport itself refuses — a method, an `Accept` it cannot answer, a content type,
/// a body that is not JSON-RPC, a batch — comes back in the JSON shape of every refusal, with
/// its HTTP status, never as plain text.
#[tokio::test]
async fn the_transports_refusals_are_json_with_their_status() {
    let app = Kit::new(UNCHECKED).app();
    let post = |headers: Vec<(&'static str, &'static str)>, body: &'static str| {
        let mut all = HEADERS.to_vec();
        all.retain(|(name, _)| !headers.iter().any(|(h, _)| h == name));
        all.extend(headers);
        let app = &app;
        async move { app.send(Method::POST, "/mcp", &all, body.to_string()).await }
    };
    let list = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
    let cases = [
        (post(vec![("accept", "text/plain")], list).await, 406),
        (post(vec![("content-type", "text/plain")], list).await, 415),
        (post(vec![], "{not json").await, 400),
        (
            post(
                vec![],
                r#"[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]"#,
            )
            .await,
            400,
        ),
        (app.send(Method::PUT, "/mcp", &HEADERS, "").await, 405),
    ];
    for (reply, status) in cases {
        assert_eq!(reply.status, status, "{}", reply.raw);
        let body: Value = serde_json::from_str(&reply.raw)
            .unwrap_or_else(|_| panic!("not JSON ({status}): {}", reply.raw));
        assert_eq!(body["error"]["data"]["status"], status, "{body}");
        assert!(body["error"]["data"]["code"].is_string(), "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
}

/// `tools/list` is one request of the tenant's rate, as `initialize` and a tool call are:
/// with a burst of three, three lists pass and the fourth is refused.
#[tokio::test]
async fn a_tool_listing_costs_one_request_of_the_rate() {
    let app = Kit::new(&[
        ("SLUICE_TENANT_RATE", "0.001"),
        ("SLUICE_TENANT_BURST", "3"),
    ])
    .app();
    for n in 0..3 {
        let (status, listed) = rpc(&app, &[], "tools/list", json!({})).await;
        assert_eq!(status, 200, "list {n}: {listed}");
        assert_eq!(names(&listed).len(), 4, "{listed}");
    }
    let (_, refused) = rpc(&app, &[], "tools/list", json!({})).await;
    assert_eq!(
        refused["error"]["data"]["code"], "rate_limited",
        "{refused}"
    );
}

/// A key store that counts its lookups.
struct Counting {
    keys: Arc<MemoryKeys>,
    finds: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl sluice_contract::auth::KeyStore for Counting {
    async fn find(
        &self,
        hash: &str,
    ) -> Result<Option<sluice_contract::auth::Principal>, sluice_contract::auth::AuthError> {
        (self.finds).fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.keys.find(hash).await
    }
}

#[tokio::test]
async fn a_listing_of_the_tools_is_one_admission_whatever_the_number_of_tools() {
    let keys = Arc::new(MemoryKeys::default());
    let all = keys.add(
        "acme",
        &[
            Permission::Answer,
            Permission::Search,
            Permission::Documents,
        ],
    );
    let counting = Arc::new(Counting {
        keys,
        finds: Default::default(),
    });
    let mut kit = Kit::new(&[
        ("SLUICE_TENANT_BURST", "2"),
        ("SLUICE_TENANT_RATE", "0.001"),
    ]);
    kit.parts.keys = Some(counting.clone());
    let app = kit.app();
    let auth = format!("Bearer {all}");
    let headers = [("authorization", auth.as_str())];
    let (_, listed) = rpc(&app, &headers, "tools/list", json!({})).await;
    assert_eq!(names(&listed).len(), 4, "{listed}");
    // The key looked up once for the four tools, besides the transport's gate (which answers
    // a missing or unknown key with a 401 before any JSON-RPC is read).
    let finds = counting.finds.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(finds, 2, "{finds} key lookups for one listing");
    // One token of the tenant's rate (its burst is two): a second listing passes, a third
    // is over.
    let (_, again) = rpc(&app, &headers, "tools/list", json!({})).await;
    assert_eq!(names(&again).len(), 4, "{again}");
    let (status, over) = rpc(&app, &headers, "tools/list", json!({})).await;
    assert_eq!(
        over["error"]["data"]["code"], "rate_limited",
        "{status} {over}"
    );
}

#[tokio::test]
async fn an_answer_through_mcp_is_one_request_and_one_answer_in_the_metrics_and_the_usage() {
    let app = Kit::new(UNCHECKED).ingested("default").await.app();
    let (_, answered) = rpc(
        &app,
        &[],
        "tools/call",
        json!({"name": "answer", "arguments": {"query": QUESTION}}),
    )
    .await;
    assert!(
        answered["result"]["structuredContent"]["answer"].is_string(),
        "{answered}"
    );
    let metrics = app.server.metrics.encode();
    let requests: Vec<&str> = (metrics.lines())
        .filter(|l| l.starts_with("sluice_http_requests_total{"))
        .collect();
    assert_eq!(
        requests,
        ["sluice_http_requests_total{route=\"/mcp\",status=\"200\"} 1"],
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "sluice_answers_total{ending=\"done\"} 1"),
        "{metrics}"
    );
    let meter = app.server.usage.clone().expect("usage on");
    meter.flush().await.expect("flushed");
    let today = sluice_core::usage::today();
    let rows = (meter
        .store()
        .read(&sluice_testkit::tenant("default"), today, today))
    .await
    .unwrap();
    let answers: u64 = rows.iter().map(|(_, c)| c.answers).sum();
    assert_eq!(answers, 1, "{rows:?}");
}
