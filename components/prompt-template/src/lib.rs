//! prompt-template: a Sluice prompt-assembly component (sluice:prompt@0.1.0).
//!
//! Build: `sluice component build` (in this folder)
//! Try:   `sluice component test <the .component.wasm> --queries questions.txt --corpus DOCS`
//!        (prints the messages it assembles for each question)
//! Test:  `cargo test` (the rules alone, on this machine)

use sluice_rerank_sdk::prompt::{Guest, Message, PromptInput, export_assembler, message};

struct Component;

impl Guest for Component {
    fn assemble(input: PromptInput) -> Result<Vec<Message>, String> {
        // The built-in messages: the system message (the tenant's instructions, then Sluice's
        // rules), the conversation's kept turns, then the user's message with the numbered
        // sources and the question. Change them, or build your own from `input.question`,
        // `input.turns`, `input.sources` (number, title, text, section, page, metadata as
        // JSON text) and `input.settings`; stay within `input.budget` tokens (8 a message
        // included; `sluice_rerank_sdk::prompt::count_tokens` counts as the host does).
        let mut messages = input.built_in;
        // The caller's `rerank_context`, e.g. {"locale": "fr"}.
        let locale = input.context.iter().find(|(k, _)| k == "locale");
        if let Some((_, locale)) = locale {
            messages.insert(
                0,
                message(
                    "system",
                    format!("Answer in the language of the locale {locale}."),
                ),
            );
        }
        Ok(messages)
    }
}

export_assembler!(Component);

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_rerank_sdk::prompt::Settings;

    fn pairs(messages: &[Message]) -> Vec<(&str, &str)> {
        (messages.iter())
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect()
    }

    fn input(context: Vec<(String, String)>) -> PromptInput {
        PromptInput {
            question: "q".into(),
            turns: Vec::new(),
            sources: Vec::new(),
            context,
            settings: Settings {
                instructions: String::new(),
                no_answer: String::new(),
                citations: true,
                answer_without_sources: true,
            },
            budget: 4096,
            built_in: vec![message("system", "rules"), message("user", "q")],
        }
    }

    #[test]
    fn a_locale_in_the_context_comes_first_and_the_built_in_messages_follow() {
        let plain = Component::assemble(input(Vec::new())).unwrap();
        assert_eq!(pairs(&plain), pairs(&input(Vec::new()).built_in));
        let french = Component::assemble(input(vec![("locale".into(), "fr".into())])).unwrap();
        assert_eq!(french.len(), 3);
        assert!(french[0].content.contains("locale fr"), "{:?}", french[0]);
        assert_eq!(pairs(&french[1..]), pairs(&plain));
    }
}
