//! The answer function under local Lambda emulation (`sluice_tests::lambda`): the `answer`
//! binary with the real model, a fresh Qdrant Edge folder and the test LLM that `make test`
//! runs, behind cargo-lambda's function URL, which streams.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use sluice_tests::lambda::Function;

#[tokio::test]
async fn the_function_url_streams_an_answer_token_by_token() {
    let data = tempfile::tempdir().unwrap();
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
}

#[tokio::test]
async fn with_keys_and_usage_in_dynamodb_the_function_url_needs_a_key_counts_it_and_never_logs_it()
{
    use sluice_core::auth::{KeyRecord, Permission, Principal, digest, key_id, new_key};
    use sluice_core::usage::{UsageStore, today};
    // A fresh key table and usage table on the emulator, with one key of acme's whose
    // monthly budget one answer spends.
    let table = format!("sluice-keys-{}", std::process::id());
    let usage_table = format!("sluice-usage-{}", std::process::id());
    let config = sluice_core::Config::from_lookup(|name| match name {
        "SLUICE_API_KEYS_TABLE" => Some(table.clone()),
        "SLUICE_USAGE_TABLE" => Some(usage_table.clone()),
        _ => None,
    })
    .unwrap();
    let keys = sluice_aws::keys::DynamoKeys::connect(&config.auth)
        .await
        .unwrap();
    keys.create_table().await.unwrap();
    let usage = sluice_aws::usage::DynamoUsage::connect(&config.usage)
        .await
        .unwrap();
    usage.create_table().await.unwrap();
    let key = new_key();
    let record = KeyRecord {
        hash: digest(&key),
        principal: Principal {
            tenant: sluice_tests::tenant("acme"),
            permissions: vec![Permission::Answer],
            filter: None,
            token_budget: Some(1),
        },
        name: Some("lambda test".into()),
    };
    keys.put(&record).await.unwrap();
    // The same digest twice is refused.
    assert!(keys.put(&record).await.is_err());

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
    use sluice_core::stages::Components;
    // acme has an active component; S3 (its upload and compiled artefact) answers 5 s late.
    let (bucket, table) = component_storage().await;
    let data = tempfile::tempdir().unwrap();
    let config = sluice_tests::config(
        data.path(),
        &[
            ("SLUICE_COMPONENT_BUCKET", bucket.as_str()),
            ("SLUICE_COMPONENT_TABLE", table.as_str()),
        ],
    );
    let storage = sluice_aws::components::S3Components::connect(&config.components)
        .await
        .unwrap();
    let registry = sluice_sandbox::Registry::from_config(
        &config.rerank,
        std::sync::Arc::new(sluice_sandbox::ModelHost(sluice_tests::model())),
        std::sync::Arc::new(storage),
    )
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let wat = include_str!("../../sandbox/tests/reverse.wat");
        let acme = sluice_tests::tenant("acme");
        let version = registry.upload(&acme, wat.as_bytes()).unwrap().version;
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
