//! Prompt-assembly components in the sandbox, built from Rust by
//! `scripts/build-components.sh`: the template changes the messages as its rules say, and a
//! component that traps, loops, returns 8 MiB of text, floods the token budget or ends on the
//! wrong role is stopped, each with its kind of failure, and the sandbox runs the next call as
//! before. A rerank component cannot be a tenant's prompt component, nor the other way round.

use std::sync::Arc;

use sluice_contract::cancel::Cancel;
use sluice_contract::components::{ComponentError, Components};
use sluice_rerank::{
    Disk, HostServices, Message, PromptInput, PromptSettings, Registry, RerankError, Sandbox,
    WORLD_PROMPT,
};

mod common;
use common::roomy;

/// Counts a token per word, as the tests' tokenizer.
struct Words;

impl HostServices for Words {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
    }
    fn count_tokens(&self, text: &str) -> u32 {
        text.split_whitespace().count() as u32
    }
}

fn message(role: &str, content: &str) -> Message {
    Message {
        role: role.into(),
        content: content.into(),
    }
}

/// The messages as (role, text) pairs, to compare.
fn pairs(messages: &[Message]) -> Vec<(&str, &str)> {
    (messages.iter())
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect()
}

fn input(question: &str, context: &[(&str, &str)]) -> PromptInput {
    PromptInput {
        question: question.into(),
        turns: Vec::new(),
        sources: Vec::new(),
        context: (context.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        settings: PromptSettings {
            instructions: String::new(),
            no_answer: String::new(),
            citations: true,
            answer_without_sources: true,
        },
        budget: 2048,
        built_in: vec![
            message("system", "Answer using only the numbered sources provided."),
            message("user", &format!("Question: {question}")),
        ],
    }
}

fn sandbox() -> Sandbox {
    Sandbox::new(roomy(), Arc::new(Words)).expect("engine")
}

#[test]
fn the_template_puts_the_callers_locale_first_and_keeps_the_built_in_messages() {
    sluice_testkit::needs!(Components);
    let sandbox = sandbox();
    let wasm = sluice_rerank::built_component("prompt-template").unwrap();
    let template = sandbox.compile(&wasm).expect("the template uploads");
    assert_eq!(template.world(), WORLD_PROMPT);
    assert!(template.is_prompt());
    let plain = input("How long does a card take?", &[]);
    let (assembled, cost) = sandbox.assemble_costed(&template, &plain);
    let (messages, tokens) = assembled.unwrap();
    assert_eq!(pairs(&messages), pairs(&plain.built_in));
    // Their tokens as the check counted them: a word a token here, 8 a message.
    let words: usize = messages
        .iter()
        .map(|m| m.content.split_whitespace().count())
        .sum();
    assert_eq!(tokens, words + 8 * messages.len());
    assert!(cost.fuel > 0, "{cost:?}");
    let french = input("How long does a card take?", &[("locale", "fr")]);
    let (messages, _) = sandbox.assemble_costed(&template, &french).0.unwrap();
    assert_eq!(messages.len(), 3);
    assert!(messages[0].content.contains("locale fr"), "{messages:?}");
    assert_eq!(pairs(&messages[1..]), pairs(&french.built_in));
}

#[test]
fn a_hostile_prompt_component_is_stopped_each_way_and_the_sandbox_goes_on() {
    sluice_testkit::needs!(Components);
    let sandbox = sandbox();
    let wasm = sluice_rerank::built_component("prompt-hostile").unwrap();
    let hostile = sandbox
        .compile(&wasm)
        .expect("well behaved in its smoke run");
    let fails = |question: &str| {
        let (out, _) = sandbox.assemble_costed(&hostile, &input(question, &[]));
        let err = out.expect_err(question);
        // Each time, the next call runs as before.
        let ok = sandbox.assemble_costed(&hostile, &input("fine", &[])).0;
        assert_eq!(ok.unwrap().0[0].content, "hostile: well behaved this time");
        err
    };
    // A panic, reported by the SDK's hook: its message and place in the source.
    let panicked = fails("trap");
    assert!(
        matches!(&panicked, RerankError::Panic(m)
            if m.starts_with("panicked at prompt-hostile/src/lib.rs:") && m.ends_with("asked to trap")),
        "{panicked:?}"
    );
    assert_eq!(fails("loop"), RerankError::OutOfFuel(roomy().fuel));
    // 8 MiB of text: stopped as wasmtime copies it out, past the call's copy budget (or,
    // had the guest's memory not held it, at its memory cap) — never taken in whole.
    let huge = fails("huge");
    assert!(
        matches!(&huge, RerankError::HostBudget(m) if m.contains("copy budget"))
            || matches!(&huge, RerankError::Memory(_)),
        "{huge:?}"
    );
    let flood = fails("flood");
    assert!(
        matches!(&flood, RerankError::InvalidOutput(m) if m.contains("tokens of messages") && m.contains("budget is 2048")),
        "{flood:?}"
    );
    let last = fails("no-user");
    assert!(
        matches!(&last, RerankError::InvalidOutput(m) if m.contains("not the user's")),
        "{last:?}"
    );
}

#[test]
fn each_component_route_takes_only_its_own_world() {
    sluice_testkit::needs!(Components);
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::new(
        sandbox(),
        Arc::new(Disk::open(dir.path()).unwrap()),
        std::time::Duration::from_secs(1),
    );
    let acme = sluice_testkit::tenant("acme");
    let prompt = sluice_rerank::built_component("prompt-template").unwrap();
    let rerank = sluice_rerank::built_component("template").unwrap();
    let cancel = Cancel::new();
    let refused = |e: Result<_, ComponentError>| match e {
        Err(ComponentError::Invalid(why)) => why,
        other => panic!("{other:?}"),
    };
    let why = refused(registry.upload(&acme, &prompt, None, &cancel));
    assert!(why.contains("/v1/components/prompt"), "{why}");
    let why = refused(registry.upload(&acme.prompt_components(), &rerank, None, &cancel));
    assert!(why.contains("/v1/components/rerank"), "{why}");
    // Each in its own place: one of each kind, listed apart.
    let p = registry
        .upload(&acme.prompt_components(), &prompt, None, &cancel)
        .unwrap();
    let r = registry.upload(&acme, &rerank, None, &cancel).unwrap();
    let listed = |t| -> Vec<String> {
        registry
            .list(t)
            .unwrap()
            .into_iter()
            .map(|v| v.version)
            .collect()
    };
    assert_eq!(listed(&acme), [r.version]);
    assert_eq!(listed(&acme.prompt_components()), [p.version]);
}
