//! The questions `test` and `bench --queries` run on.

use std::path::Path;

use serde_json::Value;
use sluice_contract::stages::{MAX_K, RerankContext};

use crate::{LoopError, Result};

/// One question: a line of text, or a JSON object `{"query", "rerank_context"?, "k"?}`.
#[derive(Debug, Clone)]
pub struct Question {
    /// What is asked.
    pub query: String,
    /// What the component is told about the caller.
    pub context: RerankContext,
    /// Candidates retrieved (default: the configured `k`).
    pub k: Option<usize>,
}

/// The questions of a file: one per line (blank lines and `#` comments skipped); errors name
/// the line.
pub fn questions(path: &Path) -> Result<Vec<Question>> {
    let text = std::fs::read_to_string(path)
        .map_err(LoopError::io(format!("reading {}", path.display())))?;
    let parsed = parse(&text)
        .map_err(|(line, why)| LoopError::Invalid(format!("{}:{line}: {why}", path.display())))?;
    if parsed.is_empty() {
        return Err(LoopError::Invalid(format!(
            "{}: no questions",
            path.display()
        )));
    }
    Ok(parsed)
}

/// The questions of a file's text, or the first bad line (1-based) and why.
fn parse(text: &str) -> std::result::Result<Vec<Question>, (usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with('{') {
            out.push(Question {
                query: line.to_string(),
                context: RerankContext::default(),
                k: None,
            });
            continue;
        }
        let bad = |why: String| (n + 1, why);
        let v: Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let query = (v["query"].as_str())
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| bad("no \"query\"".into()))?;
        let context = match v.get("rerank_context") {
            None => RerankContext::default(),
            Some(c) => {
                RerankContext::parse(c).map_err(|e| bad(format!("\"rerank_context\": {e}")))?
            }
        };
        let k = match v.get("k") {
            None => None,
            Some(k) => Some(
                (k.as_u64())
                    .filter(|k| (1..=MAX_K as u64).contains(k))
                    .ok_or_else(|| bad(format!("\"k\" must be 1 to {MAX_K}")))?
                    as usize,
            ),
        };
        out.push(Question {
            query: query.to_string(),
            context,
            k,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_questions_and_objects_carry_their_context_and_k() {
        let text = "# comment\n\nwhat is the limit\n\
                    {\"query\": \"fees?\", \"rerank_context\": {\"plan\": \"pro\"}, \"k\": 3}\n";
        let q = parse(text).expect("parses");
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].query.as_str(), q[0].k), ("what is the limit", None));
        assert!(q[0].context.iter().next().is_none());
        assert_eq!((q[1].query.as_str(), q[1].k), ("fees?", Some(3)));
        let pairs: Vec<_> = q[1].context.iter().collect();
        assert_eq!(pairs.len(), 1, "{pairs:?}");
    }

    #[test]
    fn a_bad_line_is_named_with_why() {
        for (text, line, why) in [
            ("ok\n{\"k\": 3}", 2, "no \"query\""),
            ("{\"query\": \"q\", \"k\": 0}", 1, "\"k\" must be 1 to"),
            (
                "a\nb\n{\"query\": \"q\", \"rerank_context\": 5}",
                3,
                "\"rerank_context\"",
            ),
            ("{not json", 1, ""),
        ] {
            let (at, message) = parse(text).expect_err(text);
            assert_eq!(at, line, "{text}: {message}");
            assert!(message.contains(why), "{text}: {message}");
        }
    }
}
