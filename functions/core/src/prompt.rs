//! Prompt assembly: numbered sources `[1]..[k]`, under a token budget derived from the LLM's
//! context window, lowest-ranked sources dropped first.

use crate::stages::{ChatMessage, Hit};

/// Version of the instructions and the prompt layout below. Cached answers carry it and
/// answer only while it is unchanged: bump it with every change to the prompt.
pub const PROMPT_VERSION: u32 = 1;

/// Instruction when sources are present.
pub const SYSTEM_WITH_SOURCES: &str = "You are Sluice, an assistant that answers questions \
using only the numbered sources provided. Cite the sources you use inline as [n]. If the \
sources do not contain the answer, say that you do not know. Be concise.";

/// Instruction when retrieval found nothing or did not finish in time.
pub const SYSTEM_WITHOUT_SOURCES: &str = "You are Sluice, a helpful assistant. No documents \
were available for this question: answer briefly from general knowledge, say that no sources \
were available, and do not cite any.";

/// Tokens allowed per message for the chat template's role markers.
const PER_MESSAGE_OVERHEAD: usize = 8;

/// An assembled prompt.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// Messages to send upstream.
    pub messages: Vec<ChatMessage>,
    /// The sources in the prompt, in citation order (`[1]` first).
    pub sources: Vec<Hit>,
    /// How many sources were dropped to fit the budget.
    pub dropped: usize,
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

/// Tokens of the framing around each source (`[n]`, line breaks).
const PER_SOURCE_FRAMING: usize = 4;
/// Tokens of `Sources:` and `Question:`.
const SOURCES_FRAMING: usize = 4;

/// Builds the chat messages for `question` over `hits` (best first), dropping the
/// lowest-ranked sources until the prompt fits `budget` tokens. Source texts are not
/// tokenised again: their counts come from ingest ([`Hit::tokens`]); `count` is used for the
/// question, the titles and the instructions.
pub fn assemble(
    question: &str,
    hits: Vec<Hit>,
    budget: usize,
    count: &dyn Fn(&str) -> usize,
) -> Prompt {
    let question_tokens = count(question) + 2 * PER_MESSAGE_OVERHEAD;
    let costs: Vec<usize> = hits
        .iter()
        .map(|h| {
            let text = if h.tokens > 0 {
                h.tokens
            } else {
                count(&h.text)
            };
            text + count(&h.document.title) + PER_SOURCE_FRAMING
        })
        .collect();
    let mut keep = hits.len();
    let mut total = count(SYSTEM_WITH_SOURCES)
        + question_tokens
        + SOURCES_FRAMING
        + costs.iter().sum::<usize>();
    while keep > 0 && total > budget {
        keep -= 1;
        total -= costs[keep];
    }
    let mut sources = hits;
    let dropped = sources.len() - keep;
    sources.truncate(keep);
    let estimated_tokens = if keep == 0 {
        count(SYSTEM_WITHOUT_SOURCES) + question_tokens
    } else {
        total
    };
    Prompt {
        messages: messages(question, &sources),
        sources,
        dropped,
        estimated_tokens,
    }
}

fn messages(question: &str, sources: &[Hit]) -> Vec<ChatMessage> {
    if sources.is_empty() {
        return vec![
            ChatMessage::new("system", SYSTEM_WITHOUT_SOURCES),
            ChatMessage::new("user", question),
        ];
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
    vec![
        ChatMessage::new("system", SYSTEM_WITH_SOURCES),
        ChatMessage::new("user", user),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::DocumentInfo;

    fn hit(id: &str, words: usize) -> Hit {
        Hit {
            document: DocumentInfo {
                id: id.into(),
                title: format!("Title {id}"),
                source: "t".into(),
                metadata: Default::default(),
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

    #[test]
    fn sources_are_numbered_in_rank_order() {
        let p = assemble("why?", vec![hit("a", 3), hit("b", 3)], 1000, &words);
        assert_eq!(p.messages[0].content, SYSTEM_WITH_SOURCES);
        let user = &p.messages[1].content;
        let a = user.find("[1] Title a").unwrap();
        let b = user.find("[2] Title b").unwrap();
        assert!(a < b && user.ends_with("Question: why?"), "{user}");
        assert_eq!(p.dropped, 0);
    }

    #[test]
    fn lowest_ranked_sources_are_dropped_to_fit() {
        let hits = vec![hit("a", 100), hit("b", 100), hit("c", 100)];
        let full = assemble("q", hits.clone(), usize::MAX, &words).estimated_tokens;
        let p = assemble("q", hits, full - 50, &words);
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
        let p = assemble("what is rust?", vec![], 1000, &words);
        assert_eq!(p.messages[0].content, SYSTEM_WITHOUT_SOURCES);
        assert_eq!(p.messages[1].content, "what is rust?");
        // Everything dropped also ends in the no-context instruction.
        let p = assemble("q", vec![hit("a", 500)], 100, &words);
        assert_eq!(
            (p.dropped, p.messages[0].content.as_str()),
            (1, SYSTEM_WITHOUT_SOURCES)
        );
    }

    #[test]
    fn the_estimate_covers_the_assembled_messages() {
        let p = assemble(
            "what now?",
            vec![hit("a", 40), hit("b", 60)],
            usize::MAX,
            &words,
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
}
