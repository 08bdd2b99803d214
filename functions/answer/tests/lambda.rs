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
        &[("SLUICE_DATA_DIR", data.path().display().to_string())],
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
}
