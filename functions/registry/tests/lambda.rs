//! The registry and answer functions under local Lambda emulation (`sluice_tests::lambda`),
//! each in its own process as on Lambda, sharing component storage in S3 and DynamoDB on the
//! emulator `make test` starts: a component uploaded and activated through the registry's URL
//! reranks the answer function's next answer.

use std::path::Path;

use serde_json::{Value, json};
use sluice_contract::document::Document;
use sluice_tests::aws;
use sluice_tests::lambda::Function;

const ROUTE: &str = "/v1/components/rerank";
const QUESTION: &str = "How long does a replacement card take to arrive?";

async fn send(method: reqwest::Method, url: String, body: Vec<u8>) -> (u16, Value) {
    let r = sluice_tests::http()
        .request(method, url)
        .header("x-sluice-tenant", "acme")
        .header("content-type", "application/wasm")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_component_activated_through_the_registry_reranks_the_answer_functions_answers() {
    sluice_testkit::needs!(Llm, Aws, Model, Lambda, Components);
    let bucket = aws::bucket("components").await;
    let table = aws::component_table().await;
    let shared = |dir: &tempfile::TempDir| {
        vec![
            ("SLUICE_DATA_DIR", dir.path().display().to_string()),
            ("SLUICE_COMPONENT_BUCKET", bucket.clone()),
            ("SLUICE_COMPONENT_TABLE", table.clone()),
            // The answer function checks the pointer on every request here (default 5 s), and
            // waits for the check (and the fetch of a new version) up to a cache budget, within
            // the deadline: generous here, so that the emulator's pace does not decide whether
            // the next answer already sees the activation.
            ("SLUICE_COMPONENT_REFRESH_MS", "0".into()),
            ("SLUICE_CACHE_BUDGET_MS", "3000".into()),
            ("SLUICE_RETRIEVAL_DEADLINE_MS", "5000".into()),
            // The limits but the component's deadline: the upload's smoke run and the rerank
            // must not miss 5 ms on a loaded machine; the deadline is not what is tested.
            ("SLUICE_RERANK_DEADLINE_MS", "1000".into()),
        ]
    };
    let (registry_dir, answer_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // The corpus, in the answer function's store before it starts (the answer function serves
    // no documents route; the ingest function does).
    let documents = ["lost-card.md", "card-limits.md", "password-reset.md"]
        .iter()
        .map(|name| Document {
            format: None,
            sections: Vec::new(),
            id: name.to_string(),
            title: None,
            text: std::fs::read_to_string(sluice_tests::samples_dir().join(name)).unwrap(),
            source: None,
            metadata: Default::default(),
        })
        .collect();
    sluice_tests::ingest_into(answer_dir.path(), "acme", documents).await;
    let registry = Function::start(
        Path::new(env!("CARGO_BIN_EXE_registry")),
        &shared(&registry_dir),
    );
    // The answer function's binary, built beside this one by the workspace build.
    let answer_bin = Path::new(env!("CARGO_BIN_EXE_registry")).with_file_name("answer");
    assert!(
        answer_bin.is_file(),
        "{} is missing: build the workspace (`make test` does)",
        answer_bin.display()
    );
    let answer = Function::start(&answer_bin, &shared(&answer_dir));

    let before =
        sluice_tests::answer_at(&answer.url(), Some("acme"), &json!({"query": QUESTION})).await;
    before.assert_well_formed();
    assert!(before.first("done").data["timings"]["rerank_ms"].is_null());

    // Upload (validated and compiled by the registry function) and activate.
    let wasm = sluice_rerank::built_component("keyword-boost").unwrap();
    let (status, body) = send(
        reqwest::Method::PUT,
        format!("{}{ROUTE}", registry.url()),
        wasm,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let version = body["version"].as_str().unwrap().to_string();
    let (status, body) = send(
        reqwest::Method::POST,
        format!("{}{ROUTE}/activate", registry.url()),
        json!({ "version": version }).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, list) = send(
        reqwest::Method::GET,
        format!("{}{ROUTE}", registry.url()),
        vec![],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(list["active"], version.as_str(), "{list}");
    // What the answer function loads: the upload and its artefact, in the bucket.
    assert!(aws::object_exists(&bucket, &format!("acme/{version}.wasm")).await);

    let after =
        sluice_tests::answer_at(&answer.url(), Some("acme"), &json!({"query": QUESTION})).await;
    after.assert_well_formed();
    let done = &after.first("done").data;
    assert!(done["timings"]["rerank_ms"].is_number(), "{done}");
    assert_eq!(
        after.first("meta").data["documents"][0]["id"],
        "lost-card.md"
    );

    // Another tenant has no component.
    let other =
        sluice_tests::answer_at(&answer.url(), Some("globex"), &json!({"query": QUESTION})).await;
    assert!(other.first("done").data["timings"]["rerank_ms"].is_null());
}
