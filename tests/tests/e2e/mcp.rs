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
        json!({"code": "missing_query", "status": 400})
    );
    assert_eq!(failures["no_such_tool"]["data"]["code"], "unknown_tool");
    assert_eq!(
        failures["get_document"]["data"],
        json!({"code": "unknown_document", "status": 404})
    );
}
