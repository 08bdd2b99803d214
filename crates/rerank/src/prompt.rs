//! Prompt assembly by a tenant's component: what it is given at upload (the smoke run), and
//! the host's checks of its input and of the messages it returns.

use crate::worlds::{Message, PromptInput, PromptSettings, Source, Turn};
use crate::{ComponentLimits, RerankError};
use sluice_contract::stages::{MAX_BYTES_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS};

/// Roles a returned message may have.
const ROLES: [&str; 3] = ["system", "user", "assistant"];

/// The input of the smoke run at upload: a question, one earlier turn, two sources with
/// metadata, a context entry, settings with every field set, and the built-in messages.
pub(crate) fn smoke_input() -> PromptInput {
    let source = |number: u32, text: &str| Source {
        number,
        id: format!("smoke-{number}"),
        title: format!("Smoke {number}"),
        text: text.to_string(),
        section: "Smoke > Test".to_string(),
        page: number,
        metadata: vec![("topic".into(), "\"smoke\"".into())],
    };
    let built_in = vec![
        Message {
            role: "system".into(),
            content: "Answer using only the numbered sources provided.".into(),
        },
        Message {
            role: "user".into(),
            content: "Sources:\n[1] first source\n[2] second source\n\nQuestion: smoke test".into(),
        },
    ];
    PromptInput {
        question: "smoke test".into(),
        turns: vec![Turn {
            role: "user".into(),
            content: "an earlier question".into(),
        }],
        sources: vec![source(1, "first source"), source(2, "second source")],
        context: vec![("plan".into(), "smoke".into())],
        settings: PromptSettings {
            instructions: "You are the smoke test.".into(),
            no_answer: "Not in the sources.".into(),
            citations: true,
            answer_without_sources: true,
        },
        budget: 4096,
        built_in,
    }
}

/// Refuses an input over the limits before anything runs (the sources as a rerank call's
/// candidates: at most [`ComponentLimits::max_candidates`], each text at most
/// [`ComponentLimits::max_text_bytes`]).
pub(crate) fn check_input(
    input: &PromptInput,
    limits: &ComponentLimits,
) -> Result<(), RerankError> {
    if input.sources.len() > limits.max_candidates {
        return Err(RerankError::Input(format!(
            "{} sources; the limit is {}",
            input.sources.len(),
            limits.max_candidates
        )));
    }
    if let Some(s) = (input.sources.iter()).find(|s| s.text.len() > limits.max_text_bytes) {
        return Err(RerankError::Input(format!(
            "source {:?} has {} bytes of text; the limit is {}",
            s.id,
            s.text.len(),
            limits.max_text_bytes
        )));
    }
    Ok(())
}

/// Checks the messages a component returned: at least one; each `system`, `user` or
/// `assistant`; the last the user's (what a chat model answers); at most
/// [`ComponentLimits::max_prompt_bytes`] of text; and at most `budget` tokens as `count`
/// counts them, [`MESSAGE_OVERHEAD_TOKENS`] per message included: their tokens. Component
/// output is untrusted input.
pub(crate) fn check(
    messages: &[Message],
    budget: usize,
    limits: &ComponentLimits,
    count: &dyn Fn(&str) -> usize,
) -> Result<usize, RerankError> {
    let invalid = |why: String| Err(RerankError::InvalidOutput(why));
    let Some(last) = messages.last() else {
        return invalid("no messages".into());
    };
    if let Some(m) = messages.iter().find(|m| !ROLES.contains(&m.role.as_str())) {
        let role: String = m.role.chars().take(32).collect();
        return invalid(format!(
            "a message's role is {role:?}; it must be system, user or assistant"
        ));
    }
    if last.role != "user" {
        return invalid(format!(
            "the last message is the {}'s, not the user's",
            last.role
        ));
    }
    let bytes: usize = messages.iter().map(|m| m.content.len()).sum();
    if bytes > limits.max_prompt_bytes {
        return invalid(format!(
            "{bytes} bytes of messages; the limit is {}",
            limits.max_prompt_bytes
        ));
    }
    // Counting costs CPU in proportion to the bytes, whatever the deadline: text whose floor
    // of tokens is over the budget is refused uncounted, and counting stops once it is passed.
    let over = |tokens: String| {
        invalid(format!(
            "{tokens} tokens of messages; the prompt's budget is {budget}"
        ))
    };
    if bytes / MAX_BYTES_PER_TOKEN > budget {
        return over(format!("at least {}", bytes / MAX_BYTES_PER_TOKEN));
    }
    let mut tokens = 0;
    for message in messages {
        tokens += count(&message.content) + MESSAGE_OVERHEAD_TOKENS;
        if tokens > budget {
            return over(format!("{tokens} or more"));
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, content: String) -> Message {
        Message {
            role: role.into(),
            content,
        }
    }

    /// What counting a component's messages may cost is bounded by the budget, not by what
    /// the component returned: text that cannot fit is refused before any of it is counted,
    /// and counting stops at the first message that passes the budget.
    #[test]
    fn messages_over_the_budget_are_refused_without_counting_them_all() {
        let counted = std::cell::Cell::new(0usize);
        let count = |text: &str| {
            counted.set(counted.get() + text.len());
            text.split_whitespace().count()
        };
        let limits = ComponentLimits::default();
        let huge = vec![message("user", "word ".repeat(200_000))];
        let e = check(&huge, 2048, &limits, &count).unwrap_err();
        assert!(e.to_string().contains("budget is 2048"), "{e}");
        assert_eq!(counted.get(), 0, "nothing was counted");
        // Many messages, each small, together over: counting stops once past the budget.
        let mut many: Vec<Message> = (0..50)
            .map(|_| message("system", "word ".repeat(100)))
            .collect();
        many.push(message("user", "question".into()));
        let e = check(&many, 2048, &limits, &count).unwrap_err();
        assert!(e.to_string().contains("or more"), "{e}");
        assert!(counted.get() <= 25 * 500, "{} bytes counted", counted.get());
        // Within the budget, every message is counted.
        counted.set(0);
        assert!(check(&many[32..], 2048, &limits, &count).is_ok());
        assert_eq!(counted.get(), 18 * 500 + "question".len());
    }
}
