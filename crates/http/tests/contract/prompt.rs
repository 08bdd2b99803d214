//! A tenant's prompt-assembly component: its messages are the ones sent (`include_prompt`
//! shows them as sent), only for its tenant; a failing one leaves the built-in prompt, says
//! `prompt_component_failed`, and tells why to the callers that manage components; its
//! version is in the cache's scope; `/v1/components/prompt` is the second component route.

use std::sync::Arc;

use serde_json::json;
use sluice_testkit::{PromptVerdict, ScriptedReranker};

use crate::kit::Kit;

const QUESTION: &str = "How long does a replacement card take?";
const FRENCH: &str = "Réponds en français, en tant que Vega.";

/// The system message sent for `tenant`'s answer.
fn system(answer: &crate::kit::Stream) -> String {
    let messages = &answer.meta()["prompt"]["messages"];
    assert_eq!(messages[0]["role"], "system", "{messages}");
    messages[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_tenants_prompt_component_writes_the_messages_sent_for_that_tenant_only() {
    let acme = sluice_testkit::tenant("acme");
    let mut kit = Kit::new(&[])
        .ingested("acme")
        .await
        .ingested("globex")
        .await;
    kit.parts.reranker = Some(Arc::new(
        ScriptedReranker::prompt_only(PromptVerdict::Prefix(FRENCH.into())).only_for(&[acme]),
    ));
    let app = kit.app();
    let ask = json!({"query": QUESTION, "include_prompt": true});
    let own = app.answer_as("acme", &ask).await;
    let built_in = app.answer_as("globex", &ask).await;
    for answer in [&own, &built_in] {
        answer.assert_well_formed();
        assert!(answer.degraded().is_empty(), "{:?}", answer.degraded());
    }
    assert_eq!(system(&own), format!("{FRENCH}\n{}", system(&built_in)));
    // The same sources either way: the component shapes the messages, not retrieval.
    assert_eq!(own.sources(), built_in.sources());
    // Counted as sent.
    assert!(own.meta()["prompt_tokens"].is_u64(), "{}", own.meta());
}

#[tokio::test]
async fn a_failing_prompt_component_leaves_the_built_in_prompt_and_says_why() {
    let mut kit = Kit::new(&[])
        .ingested("default")
        .await
        .ingested("globex")
        .await;
    kit.parts.reranker = Some(Arc::new(
        ScriptedReranker::prompt_only(PromptVerdict::Fail("no template".into()))
            .only_for(&[sluice_testkit::tenant("default")]),
    ));
    let app = kit.app();
    let ask = json!({"query": QUESTION, "include_prompt": true});
    let failed = app.answer(&ask).await;
    failed.assert_well_formed();
    assert_eq!(failed.names().last(), Some(&"done"));
    assert_eq!(failed.degraded(), ["prompt_component_failed"]);
    // Auth is off here: the caller may manage components, so it is told why.
    assert_eq!(
        failed.meta()["prompt_error"],
        json!({"kind": "component_error", "message": "no template"})
    );
    let built_in = app.answer_as("globex", &ask).await;
    assert_eq!(system(&failed), system(&built_in));
}

#[tokio::test]
async fn an_answer_made_under_one_prompt_component_is_not_replayed_under_another() {
    // One cache and one store, three deployments of the tenant's component in turn: v1, v1
    // again, then v2.
    let kit = Kit::new(&[]).ingested("default").await;
    let (cache, store) = (kit.parts.cache.clone(), kit.store());
    let with = |mut kit: Kit, version: &str| {
        kit.parts.cache = cache.clone();
        kit.parts.store = Some(Arc::clone(&store));
        kit.parts.reranker = Some(Arc::new(
            ScriptedReranker::prompt_only(PromptVerdict::Prefix(FRENCH.into())).version(version),
        ));
        kit.app()
    };
    let ask = json!({"query": QUESTION});
    let first = with(kit, "v1");
    assert_eq!(first.answer(&ask).await.meta()["cache"], "miss");
    // The premise: another deployment of the same version finds the answer.
    let again = with(Kit::new(&[]), "v1");
    assert_eq!(again.answer(&ask).await.meta()["cache"], "hit");
    let second = with(Kit::new(&[]), "v2");
    assert_eq!(second.answer(&ask).await.meta()["cache"], "miss");
}

#[tokio::test]
async fn the_prompt_components_have_their_own_route_and_other_kinds_none() {
    use axum::http::Method;
    let app = Kit::new(&[]).app();
    // No registry in this deployment: the route exists and says so.
    let reply = app
        .send(Method::GET, "/v1/components/prompt", &[], "")
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (404, "components_disabled"),
        "{}",
        reply.raw
    );
    let reply = app
        .send(Method::GET, "/v1/components/ranking", &[], "")
        .await;
    assert_eq!(
        (reply.status, reply.code()),
        (404, "not_found"),
        "{}",
        reply.raw
    );
}
