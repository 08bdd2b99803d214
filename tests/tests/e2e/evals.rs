//! A tenant's evaluation set run through `sluice serve`'s pipeline with the real model, Qdrant
//! Edge and llama-server: questions about the sample pages find the page each is about, and a
//! run of whole answers carries the verdict and the tokens spent; a quality gate tries a change
//! of `k` and a real WebAssembly component before they go live.

use serde_json::{Value, json};
use sluice_tests::{REVERSE, TestServer, http, start};

/// Runs `asked` on `server`; the stream's events, `(name, data)`.
async fn run(server: &TestServer, asked: &Value) -> Vec<(String, Value)> {
    let response = http()
        .post(format!("{}/v1/evals/runs", server.url))
        .body(asked.to_string())
        .send()
        .await
        .expect("the run");
    assert_eq!(response.status(), 200);
    let body = response.text().await.expect("the whole run");
    (body.split("\n\n"))
        .filter_map(|frame| {
            let name = frame.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = frame.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((
                name.to_string(),
                serde_json::from_str(data).expect("JSON data"),
            ))
        })
        .collect()
}

#[tokio::test]
async fn an_evaluation_set_finds_the_sample_page_each_question_is_about() {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[]).await;
    server.ingest_samples().await;
    let set = json!({"questions": [
        {"id": "card", "question": "How many days does a replacement card take to arrive after I lose my card?",
         "documents": ["samples/lost-card.md"], "first": "samples/lost-card.md", "facts": ["5 working days"]},
        {"id": "password", "question": "How do I reset my online banking password?",
         "documents": ["samples/password-*"]},
        {"id": "transfer", "question": "What does an international transfer cost?",
         "documents": ["samples/international-transfers.md"]},
        {"id": "savings", "question": "What interest rate do savings accounts pay?",
         "documents": ["samples/savings-rates.md"]},
    ]});
    let (status, stored) = (server.send_as(
        "default",
        reqwest::Method::PUT,
        "/v1/evals/sets/samples",
        set.to_string().into_bytes(),
    ))
    .await;
    assert_eq!(status, 200, "{stored}");

    let events = run(&server, &json!({"set": "samples", "k": 3})).await;
    let (name, report) = events.last().expect("events");
    assert_eq!(name, "report", "{events:?}");
    assert_eq!(report["status"], "finished", "{report}");
    assert_eq!(events.iter().filter(|(n, _)| n == "question").count(), 4);
    for q in report["questions"].as_array().unwrap() {
        assert_eq!(
            q["recall"], 1.0,
            "each question's page among its 3 sources: {q}"
        );
    }
    assert_eq!(report["figures"]["first_source"]["value"], 1.0, "{report}");
    assert!(report["figures"]["stages"]["embed_ms"][0].as_f64().unwrap() > 0.0);

    let answered = run(
        &server,
        &json!({"set": "samples", "mode": "answer", "k": 3}),
    )
    .await;
    let (_, report) = answered.last().expect("events");
    assert_eq!(report["status"], "finished", "{report}");
    assert!(report["tokens"].as_u64().unwrap() > 0, "{report}");
    let card = &report["questions"][0];
    assert!(
        card["answer"].as_str().is_some_and(|a| !a.is_empty()),
        "{card}"
    );
    assert!(
        card["grounded"].is_boolean(),
        "the verdict on the real answer: {card}"
    );
    assert!(
        report["figures"]["stages"]["ttft_ms"].is_array(),
        "{report}"
    );
    let (_, usage) = server.get("/v1/usage").await;
    assert_eq!(usage["total"]["answers"], 4, "{usage}");
    server.stop().await;
}

#[tokio::test]
async fn a_down_vote_through_the_real_pipeline_forgets_the_answer_and_becomes_a_question() {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[("SLUICE_GROUNDING", "off")]).await;
    server.ingest_samples().await;
    let ask = json!({"query": "How many days does a replacement card take to arrive?", "k": 3});
    let first = server.answer(&ask).await;
    let meta = &first.first("meta").data;
    assert_eq!(meta["cache"], "miss");
    assert_eq!(server.answer(&ask).await.first("meta").data["cache"], "hit");
    let rating = json!({"request_id": meta["request_id"], "rating": "down",
        "comment": "wrong page", "expected_source": "samples/lost-card.md"});
    let (status, rated) = server.post("/v1/feedback", &rating).await;
    assert_eq!(status, 200, "{rated}");
    assert!(rated["evicted"].as_u64().unwrap() >= 1, "{rated}");
    assert_eq!(
        server.answer(&ask).await.first("meta").data["cache"],
        "miss"
    );
    assert_eq!(
        server.answer(&ask).await.first("meta").data["cache"],
        "miss",
        "kept out"
    );

    let (_, listed) = server.get("/v1/feedback?rating=down").await;
    assert_eq!(
        listed["feedback"][0]["answer"]["question"], ask["query"],
        "{listed}"
    );
    let (status, set) = server
        .post("/v1/evals/sets/from-users/from-feedback", &json!({}))
        .await;
    assert_eq!((status, set["added"].clone()), (200, json!(1)), "{set}");
    let events = run(&server, &json!({"set": "from-users", "k": 3})).await;
    let (_, report) = events.last().expect("events");
    assert_eq!(report["questions"][0]["recall"], 1.0, "{report}");
    server.stop().await;
}

#[tokio::test]
async fn a_quality_gate_tries_a_settings_change_and_a_real_component_on_the_real_pipeline_and_gaps_are_grouped()
 {
    sluice_testkit::needs!(Llm, Model);
    let server = start(&[]).await;
    server.ingest_samples().await;
    let set = json!({"questions": [
        {"question": "How many days does a replacement card take to arrive?", "documents": ["samples/lost-card.md"], "first": "samples/lost-card.md"},
        {"question": "How do I reset my online banking password?", "documents": ["samples/password-reset.md"], "first": "samples/password-reset.md"},
        {"question": "What does an international transfer cost?", "documents": ["samples/international-transfers.md"], "first": "samples/international-transfers.md"},
    ]});
    async fn put(server: &TestServer, path: &str, body: &Value) -> (u16, Value) {
        let bytes = body.to_string().into_bytes();
        server
            .send_as("default", reqwest::Method::PUT, path, bytes)
            .await
    }
    assert_eq!(put(&server, "/v1/evals/sets/gate", &set).await.0, 200);
    let (status, gated) = put(
        &server,
        "/v1/settings",
        &json!({"quality_gate": {"set": "gate"}}),
    )
    .await;
    assert_eq!(status, 200, "{gated}");
    // A change of k tried on the set through the real model and store: each page stays
    // first, so it is saved, with the comparison.
    let (status, saved) = put(
        &server,
        "/v1/settings",
        &json!({"k": 2, "quality_gate": {"set": "gate"}}),
    )
    .await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["quality"]["versus"]["mrr"]["value"], 0.0, "{saved}");
    assert_eq!(
        saved["quality"]["live"]["first_source"]["value"], 1.0,
        "{saved}"
    );

    // A real component that reverses the order (the sandbox's `reverse.wat`, run by wasmtime):
    // each labelled page falls from first to second, so activating it is refused.
    let route = "/v1/components/rerank";
    let (status, uploaded) =
        (server.send_as("default", reqwest::Method::PUT, route, REVERSE.into())).await;
    assert_eq!(status, 201, "{uploaded}");
    let version = uploaded["version"].as_str().unwrap().to_string();
    let activate = json!({"version": version}).to_string().into_bytes();
    let activating = format!("{route}/activate");
    let (status, refused) = (server.send_as(
        "default",
        reqwest::Method::POST,
        &activating,
        activate.clone(),
    ))
    .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("quality_regression")),
        "{refused}"
    );
    let details = &refused["error"]["details"];
    assert_eq!(details["versus"]["mrr"]["value"], -0.5, "{refused}");
    assert_eq!(details["worst"].as_array().unwrap().len(), 3, "{refused}");
    let (_, listed) = server
        .send_as("default", reqwest::Method::GET, route, vec![])
        .await;
    assert!(
        listed.to_string().contains("\"active\":false"),
        "nothing activated: {listed}"
    );
    // The same component on a set labelled with what the live order ranks second improves
    // it: activated, with the comparison.
    let mut seconds = Vec::new();
    for q in set["questions"].as_array().unwrap() {
        let (_, found) = server
            .post("/v1/search", &json!({"query": q["question"]}))
            .await;
        let second = found["documents"][1]["id"].as_str().unwrap().to_string();
        seconds.push(json!({"question": q["question"], "documents": [second], "first": second}));
    }
    let seconds = json!({"questions": seconds});
    assert_eq!(
        put(&server, "/v1/evals/sets/seconds", &seconds).await.0,
        200
    );
    let gate = json!({"k": 2, "quality_gate": {"set": "seconds"}});
    assert_eq!(put(&server, "/v1/settings", &gate).await.0, 200);
    let (status, activated) =
        (server.send_as("default", reqwest::Method::POST, &activating, activate)).await;
    assert_eq!(status, 200, "{activated}");
    assert_eq!(activated["active"], true, "{activated}");
    assert_eq!(
        activated["quality"]["versus"]["mrr"]["value"], 0.5,
        "{activated}"
    );

    // Questions no document answers (a filter none passes), in two wordings of one
    // question: grouped by the real model's embedding.
    for question in [
        "How do I open a business account?",
        "How can I open a business account?",
        "How do I open a business account?",
    ] {
        let asked = json!({"query": question, "k": 2, "filter": {"topic": "business"}});
        server.answer(&asked).await;
    }
    let mut gaps = Value::Null;
    for _ in 0..100 {
        gaps = server.get("/v1/insights/gaps").await.1;
        let counted: u64 = (gaps["gaps"].as_array().into_iter().flatten())
            .map(|g| g["count"].as_u64().unwrap_or(0))
            .sum();
        if counted >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let business = (gaps["gaps"].as_array().unwrap().iter())
        .find(|g| g["questions"].to_string().contains("business account"))
        .unwrap_or_else(|| panic!("{gaps}"));
    assert_eq!(business["count"], 3, "both wordings in one gap: {gaps}");
    server.stop().await;
}
