//! Prompt assembly: numbered sources `[1]..[k]`, under a token budget derived from the LLM's
//! context window, lowest-ranked sources dropped first.

use sluice_contract::tenant_settings::{Citations, PromptSettings};
use sluice_contract::{stages::ChatMessage, stages::Hit};

/// What a chat client sent besides its last question.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Conversation {
    /// Earlier turns (`user` and `assistant`), oldest first.
    pub history: Vec<ChatMessage>,
    /// The client's system message(s), joined: added to Sluice's instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
}

/// Version of the instructions and the prompt layout below. Cached answers carry it and
/// answer only while it is unchanged: bump it with every change to the prompt.
pub const PROMPT_VERSION: u32 = 2;

/// What an answer says when retrieval found nothing and the tenant does not answer without
/// sources, unless the tenant's `prompt.no_answer` says otherwise.
pub const NO_ANSWER: &str = "I could not find this in the documents.";

/// The system message's instructions: the tenant's own first (who the assistant is, its
/// language and tone), then Sluice's rules, which the pipeline and the page depend on (the
/// sources are numbered, answers come from them and cite them as the tenant's `citations`
/// say) — last, so that the tenant's text cannot turn them off by coming after them.
pub fn instructions(own: &PromptSettings, with_sources: bool) -> String {
    let rules = if with_sources {
        let cite = match own.citations {
            Citations::Numbers => {
                "Cite the sources you use inline as [n], the number of the source."
            }
            Citations::None => "Do not put source numbers or citation marks in the answer.",
        };
        let no_answer = match &own.no_answer {
            Some(text) => format!("reply: {}", text.trim()),
            None => "say that you do not know".to_string(),
        };
        // The tenant's text may end its own sentence: one full stop, not two.
        let end = match no_answer.ends_with(['.', '!', '?', '。', '…']) {
            true => "",
            false => ".",
        };
        format!(
            "Answer using only the numbered sources provided. {cite} If the sources do not \
             contain the answer, {no_answer}{end} Be concise."
        )
    } else {
        "No documents were available for this question: answer briefly from general \
         knowledge, say that no sources were available, and do not cite any."
            .to_string()
    };
    match &own.instructions {
        Some(who) => format!("{}\n\n{rules}", who.trim()),
        None => rules,
    }
}

/// Tokens allowed per message for the chat template's role markers.
use sluice_contract::stages::MESSAGE_OVERHEAD_TOKENS as PER_MESSAGE_OVERHEAD;

/// An assembled prompt.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// Messages to send upstream.
    pub messages: Vec<ChatMessage>,
    /// The sources in the prompt, in citation order (`[1]` first).
    pub sources: Vec<Hit>,
    /// How many sources were dropped to fit the budget.
    pub dropped: usize,
    /// How many earlier turns of the conversation (the oldest) were left out to fit it.
    pub turns_dropped: usize,
    /// Estimated prompt tokens.
    pub estimated_tokens: usize,
}

/// Input-token budget for a model with `context_tokens`, keeping room for `max_output` tokens
/// and a 10 % margin, since tokens are counted with the embedding model's tokenizer, which
/// only approximates the LLM's.
pub fn input_budget(context_tokens: usize, max_output: usize) -> usize {
    context_tokens
        .saturating_sub(max_output)
        .saturating_sub(context_tokens / 10)
}

use sluice_contract::stages::MAX_BYTES_PER_TOKEN;

/// Tokens of the framing around each source (`[n]`, line breaks).
const PER_SOURCE_FRAMING: usize = 4;
/// Tokens of `Sources:` and `Question:`.
const SOURCES_FRAMING: usize = 4;

/// Builds the chat messages for `question` over `hits` (best first) in `conversation`,
/// under `budget` tokens: the instructions, the sources and the question come first (the
/// lowest-ranked sources dropped until they fit), then the earlier turns, newest first, as
/// many as the rest of the budget holds (the oldest left out first). Source texts are not
/// tokenised again: their counts come from ingest ([`Hit::tokens`]); `count` is used for
/// the question, the titles, the turns and the instructions.
///
/// The messages: one system message — Sluice's instructions, then the client's own system
/// message after a blank line (one system message, first: what chat templates expect) —,
/// the kept turns in their order, and the user message with the sources and the question.
pub fn assemble(
    question: &str,
    conversation: &Conversation,
    hits: Vec<Hit>,
    budget: usize,
    own: &PromptSettings,
    count: &dyn Fn(&str) -> usize,
) -> Prompt {
    let client_system = conversation.system.as_deref().map_or(0, count);
    let question_tokens = count(question) + 2 * PER_MESSAGE_OVERHEAD + client_system;
    let costs: Vec<usize> = hits
        .iter()
        .map(|h| {
            // Counted at ingest, unless that count cannot be right for this many bytes (a
            // chunk stored before long runs were counted a token per byte): then again.
            let text = if h.tokens > 0 && h.text.len() <= h.tokens * MAX_BYTES_PER_TOKEN {
                h.tokens
            } else {
                count(&h.text)
            };
            text + count(&h.document.title) + PER_SOURCE_FRAMING
        })
        .collect();
    let mut keep = hits.len();
    let with_sources = instructions(own, true);
    let mut total =
        count(&with_sources) + question_tokens + SOURCES_FRAMING + costs.iter().sum::<usize>();
    while keep > 0 && total > budget {
        keep -= 1;
        total -= costs[keep];
    }
    let mut sources = hits;
    let dropped = sources.len() - keep;
    sources.truncate(keep);
    // The instructions as sent: those for an answer without sources when none fit.
    let (system, mut estimated_tokens) = if keep == 0 {
        let without = instructions(own, false);
        let tokens = count(&without) + question_tokens;
        (without, tokens)
    } else {
        (with_sources, total)
    };
    // The turns that fit what is left, newest first.
    let turns = &conversation.history;
    let mut first_kept = turns.len();
    while first_kept > 0 {
        let text = &turns[first_kept - 1].content;
        // A turn that cannot fit what is left is not counted (counting costs its bytes).
        if estimated_tokens + text.len() / MAX_BYTES_PER_TOKEN > budget {
            break;
        }
        let cost = count(text) + PER_MESSAGE_OVERHEAD;
        if estimated_tokens + cost > budget {
            break;
        }
        estimated_tokens += cost;
        first_kept -= 1;
    }
    Prompt {
        messages: messages(
            question,
            conversation,
            &turns[first_kept..],
            &sources,
            system,
        ),
        sources,
        dropped,
        turns_dropped: first_kept,
        estimated_tokens,
    }
}

fn messages(
    question: &str,
    conversation: &Conversation,
    turns: &[ChatMessage],
    sources: &[Hit],
    instructions: String,
) -> Vec<ChatMessage> {
    let system = match &conversation.system {
        Some(own) => format!("{instructions}\n\n{own}"),
        None => instructions,
    };
    let mut messages = Vec::with_capacity(turns.len() + 2);
    messages.push(ChatMessage::new("system", system));
    messages.extend(turns.iter().cloned());
    if sources.is_empty() {
        messages.push(ChatMessage::new("user", question));
        return messages;
    }
    let mut user = String::from("Sources:\n\n");
    for (i, hit) in sources.iter().enumerate() {
        user.push_str(&format!(
            "[{}] {}\n{}\n\n",
            i + 1,
            hit.document.title,
            hit.text.trim()
        ));
    }
    user.push_str("Question: ");
    user.push_str(question);
    messages.push(ChatMessage::new("user", user));
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::stages::DocumentInfo;

    fn hit(id: &str, words: usize) -> Hit {
        Hit {
            place: Default::default(),
            document: DocumentInfo {
                format: None,
                digest: None,
                id: id.into(),
                title: format!("Title {id}"),
                source: "t".into(),
                metadata: Default::default(),
                origin: None,
            },
            chunk: 0,
            text: vec!["word"; words].join(" "),
            tokens: words,
            vector: vec![],
            score: 1.0,
        }
    }

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    fn none() -> Conversation {
        Conversation::default()
    }

    /// [`assemble`] with the default prompt settings, a token a word.
    fn plain(question: &str, conversation: &Conversation, hits: Vec<Hit>, budget: usize) -> Prompt {
        assemble(
            question,
            conversation,
            hits,
            budget,
            &PromptSettings::default(),
            &words,
        )
    }

    fn chat(turns: &[(&str, &str)], system: Option<&str>) -> Conversation {
        Conversation {
            history: turns.iter().map(|(r, c)| ChatMessage::new(r, *c)).collect(),
            system: system.map(str::to_string),
        }
    }

    #[test]
    fn earlier_turns_go_between_the_instructions_and_the_question() {
        let c = chat(
            &[
                ("user", "what is the atm limit?"),
                ("assistant", "500 dollars [1]"),
            ],
            Some("Answer in French."),
        );
        let p = plain("and for premium?", &c, vec![hit("a", 3)], 1000);
        let roles: Vec<&str> = p.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(
            p.messages[0].content,
            format!(
                "{}\n\nAnswer in French.",
                instructions(&PromptSettings::default(), true)
            )
        );
        assert_eq!(p.messages[1].content, "what is the atm limit?");
        assert!(
            p.messages[3]
                .content
                .ends_with("Question: and for premium?")
        );
        assert_eq!(p.turns_dropped, 0);
        // Without sources, the same place for the turns and the client's system message.
        let p = plain("and for premium?", &c, vec![], 1000);
        assert_eq!(
            p.messages[0].content,
            format!(
                "{}\n\nAnswer in French.",
                instructions(&PromptSettings::default(), false)
            )
        );
        assert_eq!(p.messages.len(), 4);
    }

    #[test]
    fn the_oldest_turns_are_left_out_first_and_sources_keep_their_place() {
        let turns: Vec<(&str, String)> = (0..6)
            .map(|i| {
                (
                    if i % 2 == 0 { "user" } else { "assistant" },
                    format!("turn {i} {}", "w ".repeat(20)),
                )
            })
            .collect();
        let turns: Vec<(&str, &str)> = turns.iter().map(|(r, c)| (*r, c.as_str())).collect();
        let c = chat(&turns, None);
        let full = plain("q", &c, vec![hit("a", 50)], usize::MAX);
        assert_eq!(full.turns_dropped, 0);
        // Room for about two turns fewer: the two oldest go, the source stays.
        let p = plain("q", &c, vec![hit("a", 50)], full.estimated_tokens - 40);
        assert_eq!((p.turns_dropped, p.dropped), (2, 0));
        assert!(
            p.messages[1].content.starts_with("turn 2 "),
            "{:?}",
            p.messages[1]
        );
        assert!(p.estimated_tokens <= full.estimated_tokens - 40);
        // No room for any turn: the question and its source still go.
        let bare = plain("q", &none(), vec![hit("a", 50)], usize::MAX);
        let p = plain("q", &c, vec![hit("a", 50)], bare.estimated_tokens);
        assert_eq!((p.turns_dropped, p.dropped, p.messages.len()), (6, 0, 2));
    }

    #[test]
    fn sources_are_numbered_in_rank_order() {
        let p = plain("why?", &none(), vec![hit("a", 3), hit("b", 3)], 1000);
        assert_eq!(
            p.messages[0].content,
            instructions(&PromptSettings::default(), true)
        );
        let user = &p.messages[1].content;
        let a = user.find("[1] Title a").unwrap();
        let b = user.find("[2] Title b").unwrap();
        assert!(a < b && user.ends_with("Question: why?"), "{user}");
        assert_eq!(p.dropped, 0);
    }

    /// A source whose stored count is far below its bytes (a chunk of one long run, counted
    /// as one token before such runs were counted by the byte) is counted again: the budget
    /// holds for every byte sent.
    #[test]
    fn a_stored_count_that_cannot_be_right_is_recounted() {
        let bytes = |s: &str| s.len();
        let mut long = hit("long", 1);
        long.text = "x".repeat(1 << 20);
        let p = assemble(
            "q",
            &none(),
            vec![hit("a", 3), long],
            2000,
            &PromptSettings::default(),
            &bytes,
        );
        assert_eq!(p.dropped, 1, "the megabyte source is over the budget");
        assert!(p.estimated_tokens <= 2000);
        let sent: usize = p.messages.iter().map(|m| m.content.len()).sum();
        assert!(sent < 2000, "{sent} bytes sent");
    }

    #[test]
    fn lowest_ranked_sources_are_dropped_to_fit() {
        let hits = vec![hit("a", 100), hit("b", 100), hit("c", 100)];
        let full = plain("q", &none(), hits.clone(), usize::MAX).estimated_tokens;
        let p = plain("q", &none(), hits, full - 50);
        assert_eq!(p.dropped, 1);
        assert_eq!(
            p.sources
                .iter()
                .map(|h| h.document.id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(p.estimated_tokens <= full - 50);
        assert!(!p.messages[1].content.contains("Title c"));
    }

    #[test]
    fn no_context_gets_its_own_instruction() {
        let p = plain("what is rust?", &none(), vec![], 1000);
        assert_eq!(
            p.messages[0].content,
            instructions(&PromptSettings::default(), false)
        );
        assert_eq!(p.messages[1].content, "what is rust?");
        // Everything dropped also ends in the no-context instruction.
        let p = plain("q", &none(), vec![hit("a", 500)], 100);
        assert_eq!(
            (p.dropped, p.messages[0].content.as_str()),
            (1, instructions(&PromptSettings::default(), false).as_str())
        );
    }

    #[test]
    fn the_estimate_covers_the_assembled_messages() {
        let p = plain(
            "what now?",
            &none(),
            vec![hit("a", 40), hit("b", 60)],
            usize::MAX,
        );
        let counted: usize = p
            .messages
            .iter()
            .map(|m| words(&m.content) + PER_MESSAGE_OVERHEAD)
            .sum();
        assert!(
            p.estimated_tokens >= counted,
            "{} < {counted}",
            p.estimated_tokens
        );
        assert!(
            p.estimated_tokens <= counted + 10,
            "{} ≫ {counted}",
            p.estimated_tokens
        );
    }

    #[test]
    fn budget_leaves_room_for_output_and_margin() {
        assert_eq!(input_budget(8192, 256), 8192 - 256 - 819);
        assert_eq!(input_budget(100, 500), 0);
    }

    #[test]
    fn the_tenants_instructions_come_first_and_sluices_rules_last() {
        let own = PromptSettings {
            instructions: Some("You are Ada, the bank's assistant. Answer in French.".into()),
            no_answer: Some("Je ne sais pas.".into()),
            citations: Citations::None,
            answer_without_sources: true,
        };
        let p = assemble("q", &none(), vec![hit("a", 3)], 1000, &own, &words);
        let system = &p.messages[0].content;
        assert!(system.starts_with("You are Ada"), "{system}");
        let rules = system
            .find("Answer using only the numbered sources")
            .expect(system);
        assert!(rules > system.find("Answer in French").unwrap(), "{system}");
        assert!(
            system.contains("reply: Je ne sais pas. Be concise."),
            "{system}"
        );
        for (no_answer, then) in [
            ("Je ne sais pas", ". Be"),
            ("Je ne sais pas.", " Be"),
            ("Sorry!", " Be"),
            ("No answer...", " Be"),
        ] {
            let own = PromptSettings {
                no_answer: Some(no_answer.into()),
                ..PromptSettings::default()
            };
            let rules = instructions(&own, true);
            let ending = rules.split(no_answer).nth(1).expect(&rules);
            assert!(ending.starts_with(then), "{rules}");
        }
        let said = instructions(&PromptSettings::default(), true);
        assert!(said.ends_with("do not know. Be concise."), "{said}");
        assert!(system.contains("Do not put source numbers"), "{system}");
        assert!(!system.contains("[n]"), "{system}");
        assert!(
            p.estimated_tokens > words(system),
            "the instructions are counted"
        );
        // No name unless the tenant gives one: the built-in assistant is not "Sluice".
        let plain = instructions(&PromptSettings::default(), true);
        assert!(
            !plain.contains("Sluice") && plain.contains("[n]"),
            "{plain}"
        );
    }
}
