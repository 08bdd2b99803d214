//! `test` of a prompt-assembly component: the messages it makes for each question, beside
//! nothing — the built-in messages are what it was given.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use sluice_contract::Tenant;
use sluice_contract::components::Components;
use sluice_contract::stages::{Embedder, Hit, PromptInput, Reranker};
use sluice_contract::tenant_settings::PromptSettings;
use sluice_core::prompt::{Conversation, assemble, input_budget};

use crate::{LoopError, Question, Result, pipeline, report};

/// Characters of a message printed; the rest is counted.
const SHOWN: usize = 600;

/// The prompt component `bytes` on `questions` and their retrieved candidates: the built-in
/// prompt assembled as the answer path assembles it (the deployment's token budget, default
/// prompt settings), then the component called with it under the configured limits. Writes
/// each question's messages as the LLM would be sent them, with the call's cost, to `out`;
/// fails when any call failed.
pub(crate) async fn test_prompt(
    settings: &sluice_app::Settings,
    bytes: &[u8],
    questions: &[Question],
    retrieved: Vec<(Vec<f32>, Vec<Hit>)>,
    tenant: &Tenant,
    embedder: &Arc<dyn Embedder>,
    out: &mut dyn Write,
) -> Result<()> {
    let scratch = tempfile::tempdir().map_err(LoopError::io("making a scratch folder"))?;
    let disk = sluice_rerank::Disk::open(&scratch.path().join("components")).map_err(pipeline)?;
    let registry = sluice_app::registry(&settings.rerank, Arc::clone(embedder), Arc::new(disk))
        .map_err(pipeline)?;
    let space = tenant.prompt_components();
    let version = (registry.upload(&space, bytes, None, &sluice_contract::cancel::Cancel::new()))
        .map_err(pipeline)?;
    registry
        .activate(&space, &version.version)
        .map_err(pipeline)?;
    let by = tokio::time::Instant::now() + Duration::from_secs(60);
    let active = (registry.active_prompt(tenant, by).await)
        .map_err(LoopError::Pipeline)?
        .ok_or_else(|| LoopError::Pipeline("the registry does not run the component".into()))?;
    let answer = &settings.config.answer;
    let budget = input_budget(answer.context_tokens, answer.max_tokens as usize);
    let own = PromptSettings::default();

    let (mut failed, mut costs) = (0, Vec::with_capacity(questions.len()));
    for (q, (_, hits)) in questions.iter().zip(retrieved) {
        let (active, embedder) = (Arc::clone(&active), Arc::clone(embedder));
        let (question, context, own) = (q.query.clone(), q.context.clone(), own.clone());
        let call = tokio::task::spawn_blocking(move || {
            let count = |text: &str| embedder.count_tokens(text);
            let conversation = Conversation::default();
            let built_in = assemble(&question, &conversation, hits, budget, &own, &count);
            active.assemble(&PromptInput {
                question: &question,
                sources: &built_in.sources,
                context: &context,
                settings: &own,
                budget,
                built_in: &built_in.messages,
                request_id: "",
            })
        })
        .await
        .map_err(pipeline)?;
        writeln!(out, "\n{}", q.query).map_err(report)?;
        match &call.assembled {
            Ok(assembled) => {
                for m in &assembled.messages {
                    let shown: String = m.content.chars().take(SHOWN).collect();
                    let more = m.content.chars().count().saturating_sub(SHOWN);
                    let more = match more {
                        0 => String::new(),
                        n => format!(" … ({n} more characters)"),
                    };
                    let text = shown.replace('\n', "\n    ");
                    writeln!(out, "  [{}]\n    {text}{more}", m.role).map_err(report)?;
                }
            }
            Err(e) => {
                failed += 1;
                writeln!(out, "  FAILED (the answer sends the built-in prompt): {e}")
                    .map_err(report)?;
            }
        }
        let us = call.wall.as_secs_f64() * 1e6;
        writeln!(out, "  fuel {}, {us:.0} µs", call.fuel).map_err(report)?;
        costs.push((call.fuel, call.wall.as_micros() as u64));
    }
    crate::test::summary(costs.into_iter(), failed, out)
}
