//! The synthetic upstream as Sluice's own LLM client sees it: the OpenAI streaming format,
//! the token cap, usage, and the fixed rate.

use std::time::{Duration, Instant};

use futures::StreamExt;
use sluice_bench::synthetic::{Answers, MODEL_ID, Settings, serve};
use sluice_contract::{stages::ChatMessage, stages::Llm, stages::LlmEvent};
use sluice_llm::{OpenAiClient, Timeouts};

async fn fixture(settings: Settings) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(serve(listener, settings));
    url
}

fn client(url: &str) -> OpenAiClient {
    let timeouts = Timeouts {
        connect: Duration::from_secs(1),
        first_token: Duration::from_secs(5),
        idle: Duration::from_secs(5),
    };
    OpenAiClient::new(url, MODEL_ID, None, timeouts).unwrap()
}

/// Tokens, finish reason, completion tokens, and the time from the first token to the last.
async fn ask(llm: &OpenAiClient, max_tokens: u32) -> (Vec<String>, String, Option<u64>, Duration) {
    let mut stream = llm
        .stream(
            vec![ChatMessage::new("user", "anything")],
            max_tokens,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .await
        .unwrap();
    let (mut tokens, mut first, mut last) = (vec![], None, Instant::now());
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            LlmEvent::Token(t) => {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
                tokens.push(t);
            }
            LlmEvent::Finish {
                finish_reason,
                completion_tokens,
                ..
            } => {
                let spread = last - first.unwrap_or(last);
                return (tokens, finish_reason, completion_tokens, spread);
            }
        }
    }
    panic!("the stream ended without a finish");
}

#[tokio::test]
async fn it_streams_numbered_tokens_at_the_set_rate_and_honours_max_tokens() {
    let url = fixture(Settings {
        tokens_per_sec: 200.0,
        tokens: 20,
        answers: Answers::Placeholders,
    })
    .await;
    let llm = client(&url);

    let (tokens, finish, count, spread) = ask(&llm, 10).await;
    assert_eq!(tokens.len(), 10);
    assert_eq!(tokens[0], " t0");
    assert_eq!(finish, "length");
    assert_eq!(count, Some(10), "usage, as vLLM reports it");
    // Nine intervals of 5 ms between the first and the last token, at least.
    assert!(spread >= Duration::from_millis(40), "{spread:?}");

    let (tokens, finish, count, _) = ask(&llm, 50).await;
    assert_eq!(
        (tokens.len(), finish.as_str(), count),
        (20, "stop", Some(20))
    );
}

#[tokio::test]
async fn it_says_what_it_is_and_refuses_what_it_does_not_do() {
    let url = fixture(Settings {
        tokens_per_sec: 1000.0,
        tokens: 3,
        answers: Answers::Placeholders,
    })
    .await;
    let http = reqwest::Client::new();
    let models: serde_json::Value = http
        .get(format!("{url}/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL_ID);
    let r = http
        .post(format!("{url}/chat/completions"))
        .json(&serde_json::json!({"model": MODEL_ID, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only streams")
    );
    // The readiness probe Sluice uses passes.
    client(&url).ready().await.unwrap();
}

/// Sluice's prompt, as the pipeline lays it out, for `question` over `sources`.
fn prompt(sources: &[(&str, &str)], question: &str) -> String {
    let mut user = String::from("Sources:\n\n");
    for (i, (title, text)) in sources.iter().enumerate() {
        user += &format!("[{}] {title}\n{text}\n\n", i + 1);
    }
    user + "Question: " + question
}

#[test]
fn from_the_sources_it_answers_the_sentence_nearest_the_question_cited() {
    use sluice_bench::synthetic::from_sources;
    let sources = [
        (
            "Savings",
            "Savings accounts pay 3% a year. Interest is paid monthly.",
        ),
        (
            "Lost card",
            "Report a lost card in the app. A replacement card arrives within 5 working days.",
        ),
    ];
    let asked = prompt(&sources, "How long does a replacement card take to arrive?");
    assert_eq!(
        from_sources(&asked),
        "A replacement card arrives within 5 working days [2]."
    );
    let asked = prompt(&sources, "When is savings interest paid?");
    assert_eq!(from_sources(&asked), "Interest is paid monthly [1].");
    // No sources (or none sharing a word): it says so, citing nothing.
    for nothing in [
        prompt(&sources, "Who won?"),
        "Who won the match?".to_string(),
    ] {
        assert_eq!(
            from_sources(&nothing),
            "I could not find this in the documents."
        );
    }
}

#[tokio::test]
async fn from_the_sources_it_streams_that_answer_a_word_a_token_with_the_prompts_size() {
    let url = fixture(Settings {
        tokens_per_sec: 1000.0,
        tokens: 3,
        answers: Answers::Sources,
    })
    .await;
    let user = prompt(
        &[("Lost card", "A new card arrives within 5 working days.")],
        "When does a new card arrive?",
    );
    let body = serde_json::json!({"model": MODEL_ID, "stream": true, "max_tokens": 100,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Answer from the sources."}, {"role": "user", "content": user}]});
    let text = reqwest::Client::new()
        .post(format!("{url}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let chunks: Vec<serde_json::Value> = (text.lines())
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let said: String = (chunks.iter())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(said.trim(), "A new card arrives within 5 working days [1].");
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 9, "a word a token: {usage}");
    let chars = "Answer from the sources.".len() + user.len();
    assert_eq!(usage["prompt_tokens"], chars.div_ceil(4), "{usage}");
}
