//! `/mcp` through the official MCP Python SDK (`mcp` on PyPI, `tests/openai/mcp_client.py`,
//! in the OpenAI clients' venv): a real client nobody here wrote, over Streamable HTTP, on a
//! server with auth on and the samples. (The tools' rules are contract tests:
//! `crates/http/tests/contract/mcp.rs`.)

use serde_json::json;

use super::openai::{acme_with_samples, python};

#[tokio::test]
async fn the_mcp_python_sdk_lists_and_calls_each_tool() {
    sluice_testkit::needs!(Llm, Model, Tools);
    let (_dir, server, key) = acme_with_samples(&[]).await;
    let url = format!("{}/mcp", server.url);
    let question = "How many days does a replacement card take to arrive after I lose my card?";
    let seen = python("mcp_client", &[&url, &key, question], 180).await;

    assert_eq!(seen["server"], "sluice", "{seen}");
    assert_eq!(
        seen["tools"],
        json!(["search", "answer", "list_documents", "get_document"])
    );
    assert_eq!(seen["schemas"]["search"]["required"], json!(["query"]));
    // search: the lost-card page among three sources, no error.
    let search = &seen["search"];
    assert_eq!(search["error"], false, "{search}");
    let ids: Vec<&str> = (search["content"]["documents"].as_array().unwrap().iter())
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{search}");
    assert!(ids.contains(&"samples/lost-card.md"), "{ids:?}");
    // answer: text, its sources, the verdict.
    let answer = &seen["answer"]["content"];
    assert!(
        !answer["answer"].as_str().unwrap().trim().is_empty(),
        "{answer}"
    );
    assert!(
        !answer["sources"].as_array().unwrap().is_empty(),
        "{answer}"
    );
    assert!(answer["grounding"].is_object(), "{answer}");
    // The answer's progress, as the SDK's callback got it (only the answer tells any): the
    // sources found, then each token, growing, the tokens together the answer.
    let progress = seen["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "{progress:?}");
    let steps: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    let told: String = (progress[1..].iter())
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert_eq!(told, answer["answer"].as_str().unwrap());
    // The documents, a page of two, then one of them by id.
    let listed = &seen["list_documents"]["content"];
    assert_eq!(listed["documents"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(
        seen["get_document"]["id"], listed["documents"][0]["id"],
        "{seen}"
    );
    // Errors as the SDK raises them: JSON-RPC errors with Sluice's code and status in data.
    let failures = &seen["failures"];
    assert_eq!(failures["search"]["code"], -32602, "{failures}");
    assert_eq!(
        failures["search"]["data"],
        json!({"code": "missing_query", "status": 400, "retryable": false})
    );
    assert_eq!(failures["no_such_tool"]["data"]["code"], "unknown_tool");
    assert_eq!(
        failures["get_document"]["data"],
        json!({"code": "unknown_document", "status": 404, "retryable": false})
    );
}

/// The MCP Inspector's command line (`mcp-inspector --cli URL --transport http …`, npm) as the
/// caller of `key`: the JSON it prints, or what it says when it fails.
async fn inspector(url: &str, key: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    let bin = sluice_testkit::services::sluice_home()
        .join("mcp-inspector/node_modules/.bin/mcp-inspector");
    let header = format!("x-api-key: {key}");
    let mut command = tokio::process::Command::new(bin);
    command.args(["--cli", url, "--transport", "http"]);
    if !key.is_empty() {
        command.args(["--header", &header]);
    }
    let out = command.args(args).output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(180), out)
        .await
        .expect("the inspector finished")
        .expect("the inspector ran");
    match out.status.success() {
        true => Ok(serde_json::from_slice(&out.stdout).expect("the inspector prints JSON")),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[tokio::test]
async fn the_mcp_inspector_cli_lists_and_calls_the_tools() {
    sluice_testkit::needs!(Llm, Model, Tools);
    let (_dir, server, key) = acme_with_samples(&[]).await;
    let url = format!("{}/mcp", server.url);
    let question =
        "query=How many days does a replacement card take to arrive after I lose my card?";

    let listed = inspector(&url, &key, &["--method", "tools/list"])
        .await
        .unwrap();
    let names: Vec<&str> = (listed["tools"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["search", "answer", "list_documents", "get_document"]
    );
    let call = ["--method", "tools/call", "--tool-name"];
    let found = inspector(
        &url,
        &key,
        &[
            &call[..],
            &["search", "--tool-arg", question, "--tool-arg", "k=2"],
        ]
        .concat(),
    )
    .await
    .unwrap();
    let ids: Vec<&str> = (found["structuredContent"]["documents"]
        .as_array()
        .unwrap()
        .iter())
    .map(|d| d["id"].as_str().unwrap())
    .collect();
    assert_eq!(ids.len(), 2, "{found}");
    assert!(ids.contains(&"samples/lost-card.md"), "{ids:?}");
    let answered = inspector(
        &url,
        &key,
        &[&call[..], &["answer", "--tool-arg", question]].concat(),
    )
    .await
    .unwrap();
    let answer = &answered["structuredContent"];
    assert!(
        !answer["answer"].as_str().unwrap().trim().is_empty(),
        "{answer}"
    );
    assert!(
        answer["sources"].as_array().is_some_and(|s| !s.is_empty()),
        "{answer}"
    );
    let page = inspector(
        &url,
        &key,
        &[&call[..], &["list_documents", "--tool-arg", "limit=2"]].concat(),
    )
    .await
    .unwrap();
    assert_eq!(
        page["structuredContent"]["documents"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    // What fails, as the Inspector reports it: the JSON-RPC code and Sluice's message.
    let unknown = inspector(&url, &key, &[&call[..], &["no_such_tool"]].concat()).await;
    let said = unknown.expect_err("an unknown tool fails");
    assert!(
        said.contains("-32602") && said.contains("no_such_tool"),
        "{said}"
    );
    let keyless = inspector(&url, "", &["--method", "tools/list"]).await;
    let said = keyless.expect_err("no key, no tools");
    assert!(said.contains("API key"), "{said}");
}
