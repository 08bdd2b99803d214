//! One service behind every door: the same key (bound to a filter), end user, deadline,
//! budget and rate limit give the same sources, or the same refusal, through `POST
//! /v1/answer`, the OpenAI route and MCP's `answer` tool — each door only reads its transport
//! into the service's request, so a rule cannot hold at one door and not at another.

use std::sync::Arc;

use axum::http::Method;
use serde_json::{Value, json};
use sluice_contract::auth::Permission;
use sluice_contract::filter::Filter;
use sluice_http::StreamDeadline;
use sluice_testkit::{MemoryKeys, Reply, ScriptedLlm};

use crate::kit::{self, App, Kit, Stream};

const QUESTION: &str = "How long does a replacement card take?";

#[derive(Debug, Clone, Copy)]
enum Door {
    Answer,
    Chat,
    Mcp,
}

const DOORS: [Door; 3] = [Door::Answer, Door::Chat, Door::Mcp];

/// How an answer through a door ended: its sources' ids in order, or Sluice's error code
/// (a refusal before the stream, or the stream's closing `error`).
#[derive(Debug, PartialEq)]
enum Outcome {
    Sources(Vec<String>),
    Failed(String),
}

fn ids(sources: &Value) -> Vec<String> {
    let sources = sources.as_array().cloned().unwrap_or_default();
    (sources.iter())
        .map(|d| d["id"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Asks [`QUESTION`] through `door` with `headers` (and the entry point's deadline, as the
/// Lambda entry sets it).
async fn ask(
    app: &App,
    door: Door,
    headers: &[(&str, &str)],
    deadline: Option<tokio::time::Instant>,
) -> Outcome {
    let (path, mut all, body) = match door {
        Door::Answer => (
            "/v1/answer",
            vec![],
            json!({"query": QUESTION, "k": 10, "cache": "bypass"}),
        ),
        Door::Chat => (
            "/v1/chat/completions",
            vec![],
            json!({"model": "any", "messages": [{"role": "user", "content": QUESTION}],
                   "sluice": {"k": 10, "cache": "bypass"}}),
        ),
        Door::Mcp => (
            "/mcp",
            vec![
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-06-18"),
                ("host", "127.0.0.1"),
            ],
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "answer", "arguments": {"query": QUESTION, "k": 10, "cache": "bypass"}}}),
        ),
    };
    all.extend_from_slice(headers);
    let mut request = kit::request(Method::POST, path, &all, body.to_string());
    if let Some(at) = deadline {
        request.extensions_mut().insert(StreamDeadline(at));
    }
    // A door that lost the deadline would wait for the stalled LLM for ever.
    let reply = tokio::time::timeout(std::time::Duration::from_secs(60), app.call(request))
        .await
        .unwrap_or_else(|_| panic!("{door:?}: no end by the deadline"));
    match door {
        Door::Answer if reply.status != 200 => Outcome::Failed(reply.code().to_string()),
        Door::Answer => {
            let answer = Stream::parse(&reply.raw);
            match answer.names().last() {
                Some(&"error") => {
                    Outcome::Failed(answer.first("error")["code"].as_str().unwrap_or("?").into())
                }
                _ => Outcome::Sources(ids(&answer.meta()["documents"])),
            }
        }
        Door::Chat if reply.status != 200 => Outcome::Failed(reply.code().to_string()),
        Door::Chat => Outcome::Sources(ids(&reply.body["sluice"]["sources"])),
        Door::Mcp => match reply.body.get("error") {
            Some(e) => Outcome::Failed(e["data"]["code"].as_str().unwrap_or("?").into()),
            None => Outcome::Sources(ids(&reply.body["result"]["structuredContent"]["sources"])),
        },
    }
}

/// A tenant `acme` with three documents (one restricted to HR), an identity for its end
/// users, an admin key, and a key bound to `{"topic": "cards"}` that may answer (with
/// `budget` tokens a month, if given).
async fn acme(overrides: &[(&str, &str)], budget: Option<u64>, llm: ScriptedLlm) -> (App, String) {
    let keys = Arc::new(MemoryKeys::default());
    let admin = keys.add("acme", &[Permission::Documents, Permission::Settings]);
    let cards = Filter::parse(&json!({"topic": "cards"})).ok();
    let bound = keys.add_principal(sluice_contract::auth::Principal {
        filter: cards,
        token_budget: budget,
        ..sluice_contract::auth::Principal::new(
            sluice_testkit::tenant("acme"),
            vec![Permission::Answer],
        )
    });
    let app = Kit::with_llm(overrides, llm).keys(keys).app();
    let as_admin = [("x-api-key", admin.as_str())];
    crate::kit::post_replacements(&app, &as_admin).await;
    let put = json!({"identity": sluice_testkit::users::identity(false)});
    let put = (app.send(Method::PUT, "/v1/settings", &as_admin, put.to_string())).await;
    assert_eq!(put.status, 200, "{}", put.raw);
    (app, bound)
}

fn answering() -> ScriptedLlm {
    ScriptedLlm::answering(crate::kit::ANSWER)
}

#[tokio::test]
async fn the_same_key_and_end_user_get_the_same_sources_through_every_door() {
    let (app, bound) = acme(&[("SLUICE_CACHE", "off")], None, answering()).await;
    let hr = sluice_testkit::users::token("hana", &["hr"]);
    let sales = sluice_testkit::users::token("erin", &["sales"]);
    for door in DOORS {
        let key = ("x-api-key", bound.as_str());
        // The key's filter (no loans) and the end user's access (HR's document for HR only).
        let as_hr = ask(&app, door, &[key, ("x-sluice-user", &hr)], None).await;
        let as_sales = ask(&app, door, &[key, ("x-sluice-user", &sales)], None).await;
        let mut seen = match &as_hr {
            Outcome::Sources(ids) => ids.clone(),
            other => panic!("{door:?}: {other:?}"),
        };
        seen.sort();
        assert_eq!(seen, ["cards", "hr-cards"], "{door:?}");
        assert_eq!(as_sales, Outcome::Sources(vec!["cards".into()]), "{door:?}");
        // A token that does not verify is refused alike.
        let forged = ask(&app, door, &[key, ("x-sluice-user", "not.a.jwt")], None).await;
        assert_eq!(
            forged,
            Outcome::Failed("invalid_user_token".into()),
            "{door:?}"
        );
    }
}

#[tokio::test]
async fn the_entry_points_deadline_budget_and_rate_limit_hold_at_every_door() {
    for door in DOORS {
        // The entry point's time is up (on Lambda: the invocation's deadline) while the LLM
        // has more to say.
        let stalling = ScriptedLlm::new(Reply::StallAfter(vec!["five ".into()]));
        let (app, bound) = acme(&[("SLUICE_CACHE", "off")], None, stalling).await;
        let key = [("x-api-key", bound.as_str())];
        let soon = tokio::time::Instant::now() + std::time::Duration::from_millis(300);
        let ended = ask(&app, door, &key, Some(soon)).await;
        assert_eq!(
            ended,
            Outcome::Failed("deadline_exceeded".into()),
            "{door:?}"
        );
        // A key whose monthly budget is one token: its first answer spends it.
        let (app, bound) = acme(&[("SLUICE_CACHE", "off")], Some(1), answering()).await;
        let key = [("x-api-key", bound.as_str())];
        assert!(matches!(
            ask(&app, door, &key, None).await,
            Outcome::Sources(_)
        ));
        let spent = ask(&app, door, &key, None).await;
        assert_eq!(spent, Outcome::Failed("budget_exceeded".into()), "{door:?}");
        // The tenant's rate: the setup's two requests and one answer, then refused.
        let rate = [
            ("SLUICE_TENANT_BURST", "3"),
            ("SLUICE_TENANT_RATE", "0.001"),
        ];
        let (app, bound) = acme(&rate, None, answering()).await;
        let key = [("x-api-key", bound.as_str())];
        assert!(matches!(
            ask(&app, door, &key, None).await,
            Outcome::Sources(_)
        ));
        let limited = ask(&app, door, &key, None).await;
        assert_eq!(limited, Outcome::Failed("rate_limited".into()), "{door:?}");
    }
}
