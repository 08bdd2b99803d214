//! `POST /v1/answer` end to end: real model, real Qdrant Edge store, real local LLM.

use sluice_testkit::tenant;

use serde_json::json;
use sluice_tests::start;

#[tokio::test]
async fn a_question_gets_its_document_in_the_top_3_and_a_streamed_answer() {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[]).await;
    let report = server.ingest_samples().await;
    assert_eq!(report["documents"], 9, "{report}");
    assert_eq!(report["corpus_version"], 1);

    let answer = server
        .answer(&json!({"query": "How many days does a replacement card take to arrive after I lose my card?", "k": 5, "session_id": "s-42"}))
        .await;
    answer.assert_well_formed();
    assert_eq!(
        answer.names().last(),
        Some(&"done"),
        "{:?}",
        answer.events.last()
    );

    let meta = &answer.first("meta").data;
    let top3: Vec<&str> = meta["documents"]
        .as_array()
        .unwrap()
        .iter()
        .take(3)
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert!(top3.contains(&"samples/lost-card.md"), "top 3: {top3:?}");
    assert_eq!(
        meta["cache"], "miss",
        "the in-memory cache is on by default"
    );
    assert_eq!(meta["degraded"], json!([]));
    assert_eq!(meta["tenant"], "default");
    assert_eq!(meta["k"], 5);
    assert_eq!(meta["session_id"], "s-42");
    assert_eq!(meta["model_id"], "SmolLM2-135M-Instruct");
    let first = &meta["documents"][0];
    for field in ["id", "source", "title", "snippet"] {
        assert!(
            first[field].as_str().is_some_and(|s| !s.is_empty()),
            "documents[0].{field} in {first}"
        );
    }
    assert!(first["score"].as_f64().unwrap() > 0.0);

    let done = &answer.first("done").data;
    assert_eq!(done["request_id"], meta["request_id"]);
    assert_eq!(done["session_id"], "s-42");
    assert_eq!(done["model_id"], meta["model_id"]);
    assert_eq!(done["k"], 5);
    assert_eq!(done["cached"], false);
    assert!(!done["replica_id"].as_str().unwrap().is_empty());
    assert!(!done["finish_reason"].as_str().unwrap().is_empty());
    let tokens = answer.names().iter().filter(|n| **n == "token").count() as u64;
    let count = done["token_count"].as_u64().unwrap();
    assert!(
        (1..=24).contains(&count),
        "token_count {count} with a 24-token cap"
    );
    if done["token_count_source"] == "events" {
        assert_eq!(count, tokens);
    }
    assert!(!answer.text().trim().is_empty());

    // Timings: every stage ran, and no stage is longer than the whole.
    let t = &done["timings"];
    let ms = |k: &str| {
        t[k].as_f64()
            .unwrap_or_else(|| panic!("timings.{k} missing in {t}"))
    };
    let total = ms("total_ms");
    for k in [
        "embed_ms",
        "retrieve_ms",
        "prompt_ms",
        "llm_ttft_ms",
        "ttft_ms",
    ] {
        assert!(
            ms(k) >= 0.0 && ms(k) <= total,
            "{k} = {} > total {total}",
            ms(k)
        );
    }
    assert!(ms("embed_ms") + ms("retrieve_ms") + ms("prompt_ms") <= ms("ttft_ms"));
    assert!(ms("llm_ttft_ms") <= ms("ttft_ms"));
    // meta carries the timings known when it was sent.
    assert_eq!(meta["timings"]["embed_ms"], t["embed_ms"]);
    assert!(meta["timings"].get("ttft_ms").is_none());
}

#[tokio::test]
async fn reingesting_replaces_a_document_and_bumps_the_corpus_version() {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[]).await;
    let doc = |text: &str| json!({"documents": [{"id": "faq", "title": "FAQ", "text": text}]});
    let long = "The vault opens at nine. ".repeat(200);
    let (status, first) = server.post("/v1/documents", &doc(&long)).await;
    assert_eq!(status, 200, "{first}");
    assert!(first["chunks"].as_u64().unwrap() > 1, "{first}");
    assert_eq!(first["corpus_version"], 1);

    let (_, second) = server
        .post("/v1/documents", &doc("The vault now opens at ten."))
        .await;
    assert_eq!(
        (second["chunks"].as_u64(), second["corpus_version"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(
        server
            .pipeline
            .store
            .count(&tenant("default"))
            .await
            .unwrap(),
        1
    );
    let answer = server
        .answer(&json!({"query": "When does the vault open?", "k": 3}))
        .await;
    let docs = answer.first("meta").data["documents"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(docs.len(), 1);
    assert!(docs[0]["snippet"].as_str().unwrap().contains("ten"));
}

#[tokio::test]
async fn an_unreachable_remote_store_opens_its_breaker_and_answers_go_on_without_context() {
    sluice_testkit::needs!(Llm, Model);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let qdrant = [
        ("SLUICE_STORE", "qdrant"),
        ("SLUICE_QDRANT_URL", url.as_str()),
    ];
    let pinecone = [
        ("SLUICE_STORE", "pinecone"),
        ("SLUICE_PINECONE_API_KEY", "pc-test"),
        ("SLUICE_PINECONE_HOST", url.as_str()),
        ("SLUICE_PINECONE_SPARSE_HOST", url.as_str()),
    ];
    for store in [&qdrant[..], &pinecone[..]] {
        let mut vars = vec![
            ("SLUICE_BREAKER_FAILURES", "2"),
            ("SLUICE_BREAKER_COOLDOWN_MS", "60000"),
            ("SLUICE_CACHE", "off"),
        ];
        vars.extend_from_slice(store);
        let server = start(&vars).await;
        let body = json!({"query": "How long does a replacement card take?"});
        let mut reasons = Vec::new();
        for _ in 0..3 {
            let answer = server.answer(&body).await;
            answer.assert_well_formed();
            assert_eq!(answer.names().last(), Some(&"done"));
            reasons.push(answer.first("meta").data["degraded"].clone());
        }
        assert_eq!(
            reasons,
            [
                json!(["retrieval_failed"]),
                json!(["retrieval_failed"]),
                json!(["retrieval_circuit_open"])
            ],
            "{store:?}"
        );
    }
}

#[tokio::test]
async fn a_dead_first_llm_endpoint_fails_over_to_the_next() {
    sluice_testkit::needs!(Llm, Model);
    let urls = format!(
        "{},{}",
        sluice_tests::closed_llm_url(),
        sluice_tests::llm_url()
    );
    let server = start(&[("SLUICE_LLM_URL", urls.as_str())]).await;
    server.ingest_samples().await;
    let answer = server
        .answer(&json!({"query": "How do I reset my password?", "cache": "bypass"}))
        .await;
    answer.assert_well_formed();
    assert_eq!(answer.names().last(), Some(&"done"), "{:?}", answer.names());
    assert!(answer.text().chars().any(char::is_alphanumeric));
    // Ready while one endpoint answers.
    let (status, _) = server.get("/readyz").await;
    assert_eq!(status, 200);
}
