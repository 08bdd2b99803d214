//! The answer function under local Lambda emulation (`sluice_tests::lambda`): the `answer`
//! binary with the real model, a fresh Qdrant Edge folder and the test LLM that `make test`
//! runs, behind cargo-lambda's function URL, which streams.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use sluice_tests::lambda::Function;

#[tokio::test]
async fn the_function_url_streams_an_answer_token_by_token() {
    sluice_testkit::needs!(Llm, Model, Lambda);
    let data = tempfile::tempdir().unwrap();
    sluice_tests::ingest_into(data.path(), "default", sluice_tests::sample_documents()).await;
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            // The `answered` line is at info level.
            ("RUST_LOG", "info,qdrant_edge=error".into()),
        ],
    );
    let base = function.url();
    // The emulator holds the invocation until the function has initialised and asks for it.
    let answer = sluice_tests::answer_at(
        &base,
        None,
        &json!({"query": "How long does a replacement card take to arrive?"}),
    )
    .await;
    answer.assert_well_formed();
    let names = answer.names();
    assert_eq!(names.first(), Some(&"meta"));
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let tokens: Vec<_> = answer.events.iter().filter(|e| e.name == "token").collect();
    assert!(tokens.len() >= 2, "{names:?}");
    // Incremental delivery: the first token reached the client well before the stream ended
    // (a buffered response would deliver every event at the same moment).
    let done = answer.first("done");
    let spread = done.at - tokens[0].at;
    assert!(
        spread > Duration::from_millis(50),
        "first token at {:?}, done at {:?}: not streamed",
        tokens[0].at,
        done.at
    );

    // The function's stdout: the `answered` log line carries the answer's span, and one
    // CloudWatch EMF line carries its metrics (the stream ends after both are written).
    let request_id = answer.first("meta").data["request_id"].clone();
    let log = function.log();
    let answered = log
        .iter()
        .find(|l| l["fields"]["message"] == "answered")
        .unwrap_or_else(|| panic!("no `answered` line in {log:?}"));
    assert_eq!(answered["span"]["request_id"], request_id);
    assert_eq!(answered["span"]["tenant"], "default");
    assert_eq!(
        answered["span"]["trace_id"],
        answer.first("meta").data["trace_id"]
    );
    let emf: Vec<_> = log.iter().filter(|l| l.get("_aws").is_some()).collect();
    assert_eq!(emf.len(), 1, "one EMF line per answer: {emf:?}");
    let emf = emf[0];
    let directive = &emf["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "Sluice");
    assert_eq!(directive["Dimensions"], json!([["Function"]]));
    // AWS_LAMBDA_FUNCTION_NAME as the emulator harness sets it.
    assert_eq!(emf["Function"], "_");
    assert_eq!(emf["request_id"], request_id);
    let server_ttft = done.data["timings"]["ttft_ms"].as_f64().expect("ttft");
    assert_eq!(emf["ttft_ms"].as_f64(), Some(server_ttft));
    assert_eq!(emf["tokens"].as_f64(), Some(tokens.len() as f64));
    assert_eq!(emf["error"].as_f64(), Some(0.0));
    // The evidence rides in `meta`: the lost-card source's highlighted sentence and the
    // extract, before the first token.
    let meta = &answer.first("meta").data;
    let lost = (meta["documents"].as_array().expect("documents").iter())
        .find(|d| {
            d["id"]
                .as_str()
                .is_some_and(|id| id.ends_with("lost-card.md"))
        })
        .unwrap_or_else(|| panic!("no lost-card source in {meta}"));
    let highlight = lost["highlights"][0]["text"].as_str().unwrap_or_default();
    assert!(highlight.contains("replacement card arrives"), "{lost}");
    assert!(meta["extract"]["text"].is_string(), "{meta}");
    // The verdict on the answer rides in `done`, and its EMF metric says the same.
    let grounding = &done.data["grounding"];
    let unsupported = grounding["unsupported"]
        .as_u64()
        .expect("a verdict in done");
    assert!(grounding["sentences"].is_array(), "{grounding}");
    assert_eq!(
        emf["ungrounded"].as_f64(),
        Some(f64::from(u8::from(unsupported > 0)))
    );

    // The MCP server is behind the same URL: a search tool call, answered as JSON-RPC.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "search", "arguments": {"query": "How long does a replacement card take to arrive?", "k": 2}}});
    let (status, text) = mcp(&base, &call).await;
    assert_eq!(status, 200, "{text}");
    let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["id"], 7, "{reply}");
    let documents = &reply["result"]["structuredContent"]["documents"];
    assert_eq!(documents.as_array().map(Vec::len), Some(2), "{reply}");
    // An answer with a progress token streams its progress through the function's URL, the
    // result last.
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "answer", "arguments": {"query": "How long does a replacement card take to arrive?"},
        "_meta": {"progressToken": 1}}});
    let (_, text) = mcp(&base, &call).await;
    let messages: Vec<serde_json::Value> = (text.lines())
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let (last, notes) = messages.split_last().expect("SSE messages");
    assert_eq!(last["id"], 8, "{text}");
    assert!(
        last["result"]["structuredContent"]["answer"].is_string(),
        "{text}"
    );
    assert!(!notes.is_empty(), "{text}");
    assert!(
        notes
            .iter()
            .all(|n| n["method"] == "notifications/progress"),
        "{text}"
    );
}

/// `call` (a JSON-RPC request) posted to the function URL's `/mcp` as an MCP client does:
/// the HTTP status and the body.
async fn mcp(base: &str, call: &serde_json::Value) -> (u16, String) {
    let reply = sluice_tests::http()
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(call)
        .send()
        .await
        .unwrap();
    (reply.status().as_u16(), reply.text().await.unwrap())
}

/// A new API key that may ask for answers as `tenant`, and its record.
fn answer_key(tenant: &str) -> (String, sluice_contract::auth::KeyRecord) {
    use sluice_contract::{auth::KeyRecord, auth::Permission, auth::Principal, auth::new_key};
    let key = new_key();
    let principal = Principal::new(sluice_tests::tenant(tenant), vec![Permission::Answer]);
    let record = KeyRecord::new(&key, principal, Some("lambda test".into()));
    (key, record)
}

/// A fresh key table on the emulator holding `records`: its name, and a client of it.
async fn key_table(
    name: &str,
    records: &[sluice_contract::auth::KeyRecord],
) -> (String, sluice_aws::keys::DynamoKeys) {
    let table = format!("sluice-keys-{name}-{}", std::process::id());
    let keys = sluice_aws::keys::DynamoKeys::connect(&table).await.unwrap();
    keys.create_table().await.unwrap();
    for record in records {
        keys.put(record).await.unwrap();
    }
    (table, keys)
}

#[tokio::test]
async fn with_keys_and_usage_in_dynamodb_the_function_url_needs_a_key_counts_it_and_never_logs_it()
{
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    use sluice_contract::usage::UsageStore;
    use sluice_contract::{auth::digest, auth::key_id, auth::new_key};
    use sluice_core::usage::today;
    // A fresh key table and usage table on the emulator, with one key of acme's whose
    // monthly budget one answer spends.
    let usage_table = format!("sluice-usage-{}", std::process::id());
    let (key, mut record) = answer_key("acme");
    record.principal.token_budget = Some(1);
    let (table, keys) = key_table("budget", std::slice::from_ref(&record)).await;
    // The same digest twice is refused.
    assert!(keys.put(&record).await.is_err());
    let usage = sluice_aws::usage::DynamoUsage::connect(&usage_table)
        .await
        .unwrap();
    usage.create_table().await.unwrap();

    let data = tempfile::tempdir().unwrap();
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_API_KEYS_TABLE", table.clone()),
            ("SLUICE_USAGE", "dynamodb".into()),
            ("SLUICE_USAGE_TABLE", usage_table.clone()),
            ("RUST_LOG", "info,qdrant_edge=error".into()),
        ],
    );
    let base = function.url();
    let body = json!({"query": "How long does a replacement card take to arrive?"});
    let refused = sluice_tests::http()
        .post(format!("{base}/v1/answer"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let error: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "missing_api_key");
    let wrong = format!("Bearer {}", new_key());
    let refused = sluice_tests::http()
        .post(format!("{base}/v1/answer"))
        .header("authorization", &wrong)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let auth = format!("Bearer {key}");
    let answer =
        sluice_tests::answer_with_headers(&base, &[("authorization", auth.as_str())], &body).await;
    answer.assert_well_formed();
    assert_eq!(answer.first("meta").data["tenant"], "acme");
    // The usage was in DynamoDB when the stream (the invocation) ended: exactly what `done`
    // said, under the key's id.
    let done = &answer.first("done").data;
    let rows = usage
        .read(&sluice_tests::tenant("acme"), today(), today())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (row, counts) = &rows[0];
    assert_eq!(row.key.as_deref(), Some(key_id(&digest(&key)).as_str()));
    assert_eq!(counts.answers, 1);
    assert_eq!(Some(counts.prompt_tokens), done["prompt_tokens"].as_u64());
    assert_eq!(Some(counts.completion_tokens), done["token_count"].as_u64());
    // Its budget is spent: the next answer is refused before anything runs.
    let refused = sluice_tests::http()
        .post(format!("{base}/v1/answer"))
        .header("authorization", &auth)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().get("retry-after").is_some());
    let error: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "budget_exceeded");
    // A search spends no tokens: it still answers, through the same URL and key, and is
    // counted as a search in DynamoDB by the time the invocation ends.
    let searched = sluice_tests::http()
        .post(format!("{base}/v1/search"))
        .header("authorization", &auth)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(searched.status(), 200);
    let found: serde_json::Value = searched.json().await.unwrap();
    assert_eq!(
        (found["tenant"].as_str(), found["k"].as_u64()),
        (Some("acme"), Some(5)),
        "{found}"
    );
    let rows = (usage.read(&sluice_tests::tenant("acme"), today(), today()))
        .await
        .unwrap();
    assert_eq!(rows[0].1.searches, 1, "{rows:?}");
    // The EMF line carries the same tokens and the key's id.
    let emf = function
        .log()
        .into_iter()
        .find(|l| l.get("_aws").is_some())
        .expect("an EMF line");
    assert_eq!(
        emf["prompt_tokens"].as_f64(),
        Some(counts.prompt_tokens as f64)
    );
    assert_eq!(emf["key"], key_id(&digest(&key)));
    // The tenant is on the answer's log lines; the key is on none.
    let log = function.log();
    assert!(
        log.iter().any(|l| l["span"]["tenant"] == "acme"),
        "no line of acme's: {log:?}"
    );
    let raw = serde_json::to_string(&log).unwrap();
    assert!(!raw.contains(&key), "the key was logged");
}

// ---- the deadline covers the reads before retrieval ----------------------------------------
//
// Each case: the function with a fast LLM stand-in, one of its dependencies behind a 5 s delay
// (the real protocol, through a delaying proxy or a stand-in), a first request for another
// tenant (the function's init is not what is measured), then a request whose first token must
// come within the retrieval deadline (150 ms) plus a margin, with `meta.degraded` saying what
// was late.

const SLOW: Duration = Duration::from_secs(5);
const DEADLINE_MS: &str = "150";
/// Loopback, the prompt and the LLM stand-in's first token, on a loaded test machine.
const MARGIN: Duration = Duration::from_millis(400);

/// Starts the answer function with `env`, a fast LLM stand-in and the test deadline; asks
/// once for the tenant `warm-up`, then once for `acme`, and checks the second answer: its
/// first token in time, `reason` in `meta.degraded`, then `done`.
async fn first_token_in_time(env: Vec<(&str, String)>, reason: &str) {
    let data = tempfile::tempdir().unwrap();
    let llm = sluice_tests::stand_in::llm(sluice_tests::stand_in::Llm::Tokens(5)).await;
    let mut vars = vec![
        ("SLUICE_DATA_DIR", data.path().display().to_string()),
        ("SLUICE_LLM_URL", llm),
        ("SLUICE_RETRIEVAL_DEADLINE_MS", DEADLINE_MS.to_string()),
    ];
    vars.extend(env);
    let function = Function::start(Path::new(env!("CARGO_BIN_EXE_answer")), &vars);
    let body = json!({"query": "How long does a replacement card take to arrive?"});
    let warm = sluice_tests::answer_at(&function.url(), Some("warm-up"), &body).await;
    warm.assert_well_formed();
    let answer = sluice_tests::answer_at(&function.url(), Some("acme"), &body).await;
    answer.assert_well_formed();
    let degraded = &answer.first("meta").data["degraded"];
    assert!(
        degraded
            .as_array()
            .is_some_and(|d| d.iter().any(|r| r == reason)),
        "{reason} not in {degraded}"
    );
    assert_eq!(answer.names().last(), Some(&"done"), "{:?}", answer.names());
    let first = answer.first("token").at;
    eprintln!("through the answer function, {reason}: first token at {first:?}");
    let limit = Duration::from_millis(DEADLINE_MS.parse().unwrap()) + MARGIN;
    assert!(
        first < limit,
        "first token after {first:?} (limit {limit:?}), {reason}"
    );
}

/// A fresh component bucket and table on the emulator.
async fn component_storage() -> (String, String) {
    (
        sluice_tests::aws::bucket("components").await,
        sluice_tests::aws::component_table().await,
    )
}

#[tokio::test]
async fn a_slow_component_pointer_read_does_not_hold_the_first_token() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    // DynamoDB (the component table) answers 5 s late; the tenant has not been seen.
    let (bucket, table) = component_storage().await;
    let dynamodb = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("emulator");
    let slow = sluice_tests::proxy::delaying(&dynamodb, SLOW).await;
    first_token_in_time(
        vec![
            ("SLUICE_COMPONENT_BUCKET", bucket),
            ("SLUICE_COMPONENT_TABLE", table),
            ("AWS_ENDPOINT_URL_DYNAMODB", slow),
        ],
        "component_timeout",
    )
    .await;
}

#[tokio::test]
async fn a_slow_component_fetch_does_not_hold_the_first_token() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    use sluice_contract::components::Components;
    // acme has an active component; S3 (its upload and compiled artefact) answers 5 s late.
    let (bucket, table) = component_storage().await;
    let data = tempfile::tempdir().unwrap();
    let settings = sluice_tests::settings(
        data.path(),
        &[
            ("SLUICE_COMPONENT_BUCKET", bucket.as_str()),
            ("SLUICE_COMPONENT_TABLE", table.as_str()),
        ],
    );
    let storage = sluice_aws::components::S3Components::connect(&bucket, &table)
        .await
        .unwrap();
    let registry = sluice_rerank::Registry::from_config(
        &settings.rerank,
        std::sync::Arc::new(sluice_rerank::ModelHost(sluice_tests::model())),
        std::sync::Arc::new(storage),
    )
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let wat = include_str!("../../../crates/rerank/tests/reverse.wat");
        let acme = sluice_tests::tenant("acme");
        let version = registry
            .upload(
                &acme,
                wat.as_bytes(),
                None,
                &sluice_contract::cancel::Cancel::new(),
            )
            .unwrap()
            .version;
        registry.activate(&acme, &version).unwrap();
    })
    .await
    .unwrap();
    let s3 = std::env::var("AWS_ENDPOINT_URL_S3").expect("emulator");
    let slow = sluice_tests::proxy::delaying(&s3, SLOW).await;
    first_token_in_time(
        vec![
            ("SLUICE_COMPONENT_BUCKET", bucket),
            ("SLUICE_COMPONENT_TABLE", table),
            ("AWS_ENDPOINT_URL_S3", slow),
        ],
        "component_timeout",
    )
    .await;
}

#[tokio::test]
async fn a_slow_corpus_version_read_does_not_hold_the_first_token() {
    sluice_testkit::needs!(Llm, Model, Lambda);
    // A Qdrant stand-in (a stand-in for the transport: it answers the query with no points and
    // the corpus-version read 5 s late), with the answer cache on, which needs the version.
    async fn qdrant(request: axum::extract::Request) -> axum::response::Response {
        let path = request.uri().path().to_string();
        if path.contains("_versions") {
            tokio::time::sleep(SLOW).await;
        }
        axum::Json(json!({"result": {"points": []}, "status": "ok", "time": 0.0})).into_response()
    }
    use axum::response::IntoResponse;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(qdrant)).await });
    first_token_in_time(
        vec![
            ("SLUICE_STORE", "qdrant".into()),
            ("SLUICE_QDRANT_URL", url),
            ("SLUICE_CACHE", "memory".into()),
        ],
        "corpus_version_timeout",
    )
    .await;
}

// ---- one environment, many invocations at once (Lambda Managed Instances) ------------------
//
// The function polls with `AWS_LAMBDA_MAX_CONCURRENCY` workers and the emulator hands each
// poll its own invocation, so the one process has that many at once, as an execution
// environment of Lambda Managed Instances does. The LLM stand-in writes at a steady
// pace, so the answers overlap.
//
// What only the runtime's concurrent mode gives is the last test's: in this emulator a
// runtime polling for one invocation at a time asks for the next once a response has
// *begun*, so streams overlap either way, but an invocation still before its response
// (here, a slow key lookup) holds every other one; with a worker per invocation it holds
// none. (Checked by running these tests against the binary with the variable unset: that
// test fails, the others pass.)

use sluice_tests::stand_in::{self, Llm};

const QUESTION: &str = "How long does a replacement card take to arrive?";

/// A caller's `traceparent` whose trace id is `i` in 32 hex digits.
fn traceparent(i: usize) -> (String, String) {
    let trace = format!("{:032x}", 0x5100_0000 + i);
    (format!("00-{trace}-00f067aa0ba902b7-01"), trace)
}

/// Starts `STREAMS` answers at once, one per tenant `tenant-<i>` with its own trace; each
/// answer with when it was sent, counted from the first.
async fn many_at_once(base: &str, streams: usize) -> Vec<(Duration, sluice_tests::Answer)> {
    let first = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..streams {
        let base = base.to_string();
        tasks.push(tokio::spawn(async move {
            let tenant = format!("tenant-{i}");
            let (traceparent, _) = traceparent(i);
            let sent = first.elapsed();
            let headers = [
                ("x-sluice-tenant", tenant.as_str()),
                ("traceparent", traceparent.as_str()),
            ];
            let answer =
                sluice_tests::answer_with_headers(&base, &headers, &json!({"query": QUESTION}))
                    .await;
            (sent, answer)
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test]
async fn one_environment_streams_many_answers_at_once_each_with_its_own_tenant_and_trace() {
    sluice_testkit::needs!(Llm, Model, Lambda);
    const STREAMS: usize = 16;
    const TOKENS: usize = 10;
    let data = tempfile::tempdir().unwrap();
    let (llm, traces) = stand_in::llm_traced(Llm::Paced(TOKENS, Duration::from_millis(150))).await;
    let function = Function::start_concurrent(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_LLM_URL", llm),
            ("RUST_LOG", "info,qdrant_edge=error".into()),
        ],
        STREAMS as u32,
    );
    // The first answer waits for the function's init.
    let warm = sluice_tests::answer_at(
        &function.url(),
        Some("warm-up"),
        &json!({"query": QUESTION}),
    )
    .await;
    warm.assert_well_formed();

    let answers = many_at_once(&function.url(), STREAMS).await;
    for (i, (_, answer)) in answers.iter().enumerate() {
        answer.assert_well_formed();
        assert_eq!(
            answer.names().last(),
            Some(&"done"),
            "{i}: {:?}",
            answer.names()
        );
        let expected: String = (0..TOKENS).map(|n| format!("w{n} ")).collect();
        assert_eq!(answer.text(), expected, "{i}");
        let meta = &answer.first("meta").data;
        assert_eq!(meta["tenant"], format!("tenant-{i}"));
        assert_eq!(meta["trace_id"], traceparent(i).1);
    }
    // They were open together: every answer had its first token before any had ended
    // (one at a time, the last would start 15 answers of 1.5 s after the first ended).
    let at = |(sent, answer): &(Duration, sluice_tests::Answer), event: &str| {
        *sent + answer.first(event).at
    };
    let last_first_token = answers.iter().map(|a| at(a, "token")).max().unwrap();
    let first_done = answers.iter().map(|a| at(a, "done")).min().unwrap();
    assert!(
        last_first_token < first_done,
        "last first token at {last_first_token:?}, first done at {first_done:?}"
    );
    // Each LLM call carried its own invocation's trace.
    let seen = traces.lock().unwrap().clone();
    assert_eq!(seen.len(), STREAMS + 1, "{seen:?}");
    for i in 0..STREAMS {
        let trace = traceparent(i).1;
        let calls = seen.iter().filter(|t| t.contains(&trace)).count();
        assert_eq!(calls, 1, "trace {trace} in {seen:?}");
    }
    // And each answer's log line and EMF line are its own: request id, tenant and trace
    // together, never another invocation's.
    let log = function.log();
    for (i, (_, answer)) in answers.iter().enumerate() {
        let request_id = &answer.first("meta").data["request_id"];
        let answered: Vec<_> = log
            .iter()
            .filter(|l| {
                l["fields"]["message"] == "answered" && l["span"]["request_id"] == *request_id
            })
            .collect();
        assert_eq!(answered.len(), 1, "{request_id}: {answered:?}");
        assert_eq!(answered[0]["span"]["tenant"], format!("tenant-{i}"));
        assert_eq!(answered[0]["span"]["trace_id"], traceparent(i).1);
        let emf = log
            .iter()
            .filter(|l| l.get("_aws").is_some() && l["request_id"] == *request_id)
            .count();
        assert_eq!(emf, 1, "{request_id}");
    }
}

#[tokio::test]
async fn clients_that_go_away_do_not_disturb_the_other_answers_in_the_environment() {
    sluice_testkit::needs!(Llm, Model, Lambda);
    const TOKENS: usize = 10;
    let data = tempfile::tempdir().unwrap();
    let llm = stand_in::llm(Llm::Paced(TOKENS, Duration::from_millis(100))).await;
    let function = Function::start_concurrent(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_LLM_URL", llm),
        ],
        8,
    );
    let body = json!({"query": QUESTION});
    sluice_tests::answer_at(&function.url(), Some("warm-up"), &body)
        .await
        .assert_well_formed();
    let expected: String = (0..TOKENS).map(|n| format!("w{n} ")).collect();
    let base = function.url();
    let mut tasks = tokio::task::JoinSet::new();
    // Two clients hang up after their first token; one gives up after 400 ms (a client
    // timeout, mid-stream)...
    for i in 0..2 {
        let url = format!("{base}/v1/answer");
        let body = body.clone();
        tasks.spawn(async move {
            let mut response = sluice_tests::http()
                .post(url)
                .header("x-sluice-tenant", format!("leaves-{i}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let mut seen = String::new();
            while !seen.contains("event: token") {
                let chunk = response
                    .chunk()
                    .await
                    .unwrap()
                    .expect("a token before the end");
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
            drop(response);
            "left"
        });
    }
    let url = format!("{base}/v1/answer");
    let impatient = body.clone();
    tasks.spawn(async move {
        let sent = sluice_tests::http()
            .post(url)
            .header("x-sluice-tenant", "impatient")
            .timeout(Duration::from_millis(400))
            .json(&impatient)
            .send()
            .await;
        let read = match sent {
            Ok(response) => response.text().await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(read.is_err(), "the client's timeout cut the stream");
        "gave up"
    });
    // ...while four others read theirs to the end, each whole.
    let kept: Vec<_> = (0..4)
        .map(|i| {
            let base = base.clone();
            let body = body.clone();
            tokio::spawn(async move {
                sluice_tests::answer_at(&base, Some(&format!("stays-{i}")), &body).await
            })
        })
        .collect();
    for answer in kept {
        let answer = answer.await.unwrap();
        answer.assert_well_formed();
        assert_eq!(answer.names().last(), Some(&"done"), "{:?}", answer.names());
        assert_eq!(answer.text(), expected);
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    // Every worker is back: eight answers at once, all whole.
    for (_, answer) in many_at_once(&base, 8).await {
        answer.assert_well_formed();
        assert_eq!(answer.text(), expected);
    }
}

#[tokio::test]
async fn at_shutdown_every_open_answer_ends_with_a_retryable_error_and_the_function_exits() {
    sluice_testkit::needs!(Llm, Model, Lambda);
    const OPEN: usize = 4;
    let data = tempfile::tempdir().unwrap();
    // Two tokens, then the LLM says nothing more: the answers stay open until shutdown.
    let (llm, traces) = stand_in::llm_traced(Llm::StallAfter(2)).await;
    let mut function = Function::start_concurrent(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_LLM_URL", llm),
            ("RUST_LOG", "info,qdrant_edge=error".into()),
        ],
        8,
    );
    let (seen, mut arrived) = tokio::sync::mpsc::unbounded_channel();
    let answers: Vec<_> = (0..OPEN)
        .map(|i| {
            let base = function.url();
            let seen = seen.clone();
            tokio::spawn(async move {
                let tenant = format!("open-{i}");
                let headers = [("x-sluice-tenant", tenant.as_str())];
                let body = json!({"query": QUESTION});
                sluice_tests::answer_reporting(&base, &headers, &body, Some(seen)).await
            })
        })
        .collect();
    // Every answer's two tokens have reached its client.
    let mut tokens = 0;
    while tokens < 2 * OPEN {
        let name = tokio::time::timeout(Duration::from_secs(60), arrived.recv())
            .await
            .expect("the answers' tokens arrive")
            .expect("an answer is still open");
        tokens += usize::from(name == "token");
    }
    assert_eq!(
        traces.lock().unwrap().len(),
        OPEN,
        "each answer reached the LLM once"
    );
    let status = function.terminate(Duration::from_secs(5)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    for answer in answers {
        let answer = answer.await.unwrap();
        answer.assert_well_formed();
        assert_eq!(answer.names(), ["meta", "token", "token", "error"]);
        let error = &answer.first("error").data;
        assert_eq!(error["code"], "shutting_down");
        assert_eq!(error["retryable"], true);
    }
    let log = function.log();
    let line = log
        .iter()
        .find(|l| l["fields"]["message"] == "SIGTERM: ending open answers")
        .unwrap_or_else(|| panic!("no shutdown line in {log:?}"));
    assert_eq!(line["fields"]["open"], OPEN);
}

#[tokio::test]
async fn the_answer_cache_and_the_tenant_limits_are_the_environments() {
    sluice_testkit::needs!(Llm, Model, Lambda);
    let data = tempfile::tempdir().unwrap();
    sluice_tests::ingest_into(data.path(), "acme", sluice_tests::sample_documents()).await;
    let llm = stand_in::llm(Llm::Paced(6, Duration::from_millis(150))).await;
    let function = Function::start_concurrent(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_LLM_URL", llm),
            ("SLUICE_CACHE", "memory".into()),
            ("SLUICE_TENANT_MAX_STREAMS", "2".into()),
            // The stand-in's words (`w0 w1 …`) are no source's: unchecked, so that they are
            // cached (the environment's cache is what is tested).
            ("SLUICE_GROUNDING", "off".into()),
        ],
        8,
    );
    let base = function.url();
    sluice_tests::answer_at(&base, Some("warm-up"), &json!({"query": "hello"}))
        .await
        .assert_well_formed();
    let questions = [
        QUESTION,
        "How do I reset my password?",
        "What is the savings rate?",
    ];
    // acme opens three answers at once in an environment that allows a tenant two: the
    // limit, which binds nothing on classic Lambda, binds here.
    let mut statuses = Vec::new();
    let mut tasks = Vec::new();
    for question in questions {
        let url = format!("{base}/v1/answer");
        tasks.push(tokio::spawn(async move {
            let response = sluice_tests::http()
                .post(url)
                .header("x-sluice-tenant", "acme")
                .json(&json!({"query": question}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.text().await.unwrap())
        }));
    }
    // Another tenant is not held by acme's limit.
    let globex = sluice_tests::answer_at(&base, Some("globex"), &json!({"query": QUESTION})).await;
    globex.assert_well_formed();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    let refused: Vec<_> = statuses.iter().filter(|(s, _)| *s == 429).collect();
    assert_eq!(refused.len(), 1, "{statuses:?}");
    let error: serde_json::Value = serde_json::from_str(&refused[0].1).unwrap();
    assert_eq!(error["error"]["code"], "too_many_streams");
    assert_eq!(statuses.iter().filter(|(s, _)| *s == 200).count(), 2);
    // The two acme answers were cached before their streams ended, in the environment's
    // cache, which every invocation shares: asked again, each is a hit for acme, and not
    // for globex (the cache is per tenant), which never asked that question itself.
    let answered: Vec<&str> = statuses
        .iter()
        .zip(questions)
        .filter(|((s, _), _)| *s == 200)
        .map(|(_, q)| q)
        .collect();
    for question in &answered {
        let again = sluice_tests::answer_at(&base, Some("acme"), &json!({"query": question})).await;
        again.assert_well_formed();
        assert_eq!(again.first("meta").data["cache"], "hit", "{question}");
    }
    let only_acme = answered
        .iter()
        .find(|q| **q != QUESTION)
        .expect("two questions");
    let other = sluice_tests::answer_at(&base, Some("globex"), &json!({"query": only_acme})).await;
    other.assert_well_formed();
    assert_ne!(other.first("meta").data["cache"], "hit");
}

#[tokio::test]
async fn one_invocations_slow_start_does_not_hold_the_environments_others() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    const LATE: Duration = Duration::from_millis(700);
    // Each invocation's work before its response starts (here: its API key's lookup) runs on
    // its own worker. A key the function has not seen yet is looked up in DynamoDB, which
    // answers that key's lookup 700 ms late (a lookup attempt's own timeout is 800 ms); a
    // key it has seen is remembered. Polling for one invocation at a time, the late one
    // would hold every answer behind it until then.
    let (late_key, late) = answer_key("late");
    let (known_key, known) = answer_key("acme");
    let (table, _) = key_table("slow", &[late.clone(), known]).await;
    let dynamodb = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("emulator");
    let (slow, holding) = sluice_tests::proxy::delaying_requests(&dynamodb, &late.hash, LATE).await;
    let data = tempfile::tempdir().unwrap();
    let llm = stand_in::llm(Llm::Paced(2, Duration::from_millis(20))).await;
    let function = Function::start_concurrent(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_LLM_URL", llm),
            ("SLUICE_API_KEYS_TABLE", table),
            ("AWS_ENDPOINT_URL_DYNAMODB", slow),
        ],
        8,
    );
    let base = function.url();
    let body = json!({"query": QUESTION});
    let known_auth = format!("Bearer {known_key}");
    let headers = [("authorization", known_auth.as_str())];
    // The known key is looked up (and remembered) once, with the function's init.
    sluice_tests::answer_with_headers(&base, &headers, &body)
        .await
        .assert_well_formed();
    let first = std::time::Instant::now();
    let waiting = {
        let (base, body) = (base.clone(), body.clone());
        tokio::spawn(async move {
            let auth = format!("Bearer {late_key}");
            let answer =
                sluice_tests::answer_with_headers(&base, &[("authorization", &auth)], &body).await;
            (answer.first("meta").at, answer)
        })
    };
    // The others are sent once the late lookup is being held.
    tokio::time::timeout(Duration::from_secs(60), holding.notified())
        .await
        .expect("the late key's lookup reaches the table");
    let mut others = Vec::new();
    for _ in 0..4 {
        let (base, body, auth) = (base.clone(), body.clone(), known_auth.clone());
        others.push(tokio::spawn(async move {
            let answer =
                sluice_tests::answer_with_headers(&base, &[("authorization", &auth)], &body).await;
            (first.elapsed(), answer)
        }));
    }
    let mut ended = Vec::new();
    for other in others {
        let (at, answer) = other.await.unwrap();
        answer.assert_well_formed();
        assert_eq!(answer.first("meta").data["tenant"], "acme");
        assert_eq!(answer.names().last(), Some(&"done"));
        ended.push(at);
    }
    let (late_meta, late) = waiting.await.unwrap();
    late.assert_well_formed();
    assert_eq!(late.first("meta").data["tenant"], "late");
    // The late one did wait for its lookup; the others all ended before it even started.
    assert!(late_meta >= LATE, "{late_meta:?}");
    let last = ended.iter().max().unwrap();
    assert!(
        *last < late_meta,
        "the others ended at {ended:?}, the late one started at {late_meta:?}"
    );
}

/// A tenant's settings written to the table by another process (the settings route of another
/// region's function, or an operator's script) are in force in a running function once its
/// kept copy is older than `SLUICE_SETTINGS_FRESH_MS`: the tenant's instructions open the
/// system message it sends, and the answer cached before the change is not replayed after it.
#[tokio::test]
async fn a_settings_change_in_dynamodb_reaches_a_running_function_within_its_freshness() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda);
    use sluice_contract::tenant_settings::{SettingsStore, TenantSettings};
    const FRESH: Duration = Duration::from_secs(2);
    let table = format!("sluice-settings-{}", std::process::id());
    let store = sluice_aws::settings::DynamoSettings::connect(&table)
        .await
        .unwrap();
    store.create_table().await.unwrap();
    let data = tempfile::tempdir().unwrap();
    sluice_tests::ingest_into(data.path(), "acme", sluice_tests::sample_documents()).await;
    let function = Function::start(
        Path::new(env!("CARGO_BIN_EXE_answer")),
        &[
            ("SLUICE_DATA_DIR", data.path().display().to_string()),
            ("SLUICE_SETTINGS_TABLE", table.clone()),
            ("SLUICE_SETTINGS_FRESH_MS", FRESH.as_millis().to_string()),
            ("SLUICE_CACHE", "memory".into()),
            // The demo model's answer may be unsupported and then never cached: unchecked here
            // (what is tested is the settings' freshness).
            ("SLUICE_GROUNDING", "off".into()),
        ],
    );
    let base = function.url();
    // One request shows the prompt and leaves the cache alone (neither read nor written), the
    // other is cached.
    let question = "How long does a replacement card take to arrive?";
    let (shown, plain) = (
        json!({"query": question, "include_prompt": true, "cache": "bypass"}),
        json!({"query": question}),
    );
    let system = |answer: &sluice_tests::Answer| {
        answer.assert_well_formed();
        answer.first("meta").data["prompt"]["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let cache = |answer: &sluice_tests::Answer| {
        answer.assert_well_formed();
        answer.first("meta").data["cache"].clone()
    };
    const OWN: &str = "You are Vega, the card desk's assistant. Answer in French.";
    let message = system(&sluice_tests::answer_at(&base, Some("acme"), &shown).await);
    assert!(!message.contains(OWN), "{message}");
    // The premise: asked twice before any change, the second answer comes from the cache.
    sluice_tests::answer_at(&base, Some("acme"), &plain).await;
    assert_eq!(
        cache(&sluice_tests::answer_at(&base, Some("acme"), &plain).await),
        "hit"
    );

    let settings = TenantSettings::parse(&json!({"prompt": {"instructions": OWN}}), 256).unwrap();
    let stored = store
        .put(&sluice_tests::tenant("acme"), settings)
        .await
        .unwrap();
    assert_eq!(stored.version, 1);
    let changed = std::time::Instant::now();
    loop {
        let message = system(&sluice_tests::answer_at(&base, Some("acme"), &shown).await);
        if message.starts_with(OWN) {
            break;
        }
        // Each answer takes its own time; what counts is that none begun after the freshness
        // (with the answer under way then) still follows the old settings.
        assert!(
            changed.elapsed() < FRESH + Duration::from_secs(20),
            "still the old system message {:?} after the change: {message}",
            changed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The answer cached under the old settings is not replayed under the new ones.
    assert_eq!(
        cache(&sluice_tests::answer_at(&base, Some("acme"), &plain).await),
        "miss"
    );
}
