//! The questions `test` and `bench --queries` run on.

use std::path::Path;

use serde_json::Value;
use sluice_contract::stages::{MAX_K, RerankContext};

use crate::{LoopError, Result};

/// One question: a line of text, or a JSON object `{"query", "rerank_context"?, "k"?,
/// "expect"?}`.
#[derive(Debug, Clone)]
pub struct Question {
    /// What is asked.
    pub query: String,
    /// What the component is told about the caller.
    pub context: RerankContext,
    /// Candidates retrieved (default: the configured `k`).
    pub k: Option<usize>,
    /// What the component's order must hold.
    pub expect: Expect,
}

/// What a question's reranked order must hold (`"expect": {"first": "id", "absent":
/// ["internal-*"]}`): document ids, where `*` stands for any run of characters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The document the order starts with.
    #[serde(default)]
    pub first: Option<String>,
    /// Documents the order must not hold (the component dropped them, or they were not
    /// retrieved).
    #[serde(default)]
    pub absent: Vec<String>,
}

impl Expect {
    /// What `order` (document ids, best first) breaks of the expectation: one line each.
    pub fn broken(&self, order: &[&str]) -> Vec<String> {
        let mut broken = Vec::new();
        if let Some(first) = &self.first
            && order.first().is_none_or(|id| !matches(first, id))
        {
            let got = order
                .first()
                .map_or("nothing".into(), |id| format!("{id:?}"));
            broken.push(format!("expected {first:?} first, got {got}"));
        }
        for pattern in &self.absent {
            for (i, id) in order
                .iter()
                .enumerate()
                .filter(|(_, id)| matches(pattern, id))
            {
                broken.push(format!("expected no {pattern:?}, got {id:?} at #{}", i + 1));
            }
        }
        broken
    }
}

/// Whether `id` matches `pattern`, in which `*` stands for any run of characters.
pub fn matches(pattern: &str, id: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = id.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
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
                expect: Expect::default(),
            });
            continue;
        }
        let bad = |why: String| (n + 1, why);
        let v: Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        if let Some(key) = (v.as_object().into_iter().flat_map(|o| o.keys()))
            .find(|k| !["query", "rerank_context", "k", "expect"].contains(&k.as_str()))
        {
            return Err(bad(format!(
                "unknown field {key:?} (query, rerank_context, k, expect)"
            )));
        }
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
        let expect = match v.get("expect") {
            None => Expect::default(),
            Some(e) => {
                serde_json::from_value(e.clone()).map_err(|e| bad(format!("\"expect\": {e}")))?
            }
        };
        out.push(Question {
            query: query.to_string(),
            context,
            k,
            expect,
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
            (
                "{\"query\": \"q\", \"expected\": {}}",
                1,
                "unknown field \"expected\"",
            ),
            (
                "{\"query\": \"q\", \"expect\": {\"frist\": \"a\"}}",
                1,
                "\"expect\": unknown field",
            ),
        ] {
            let (at, message) = parse(text).expect_err(text);
            assert_eq!(at, line, "{text}: {message}");
            assert!(message.contains(why), "{text}: {message}");
        }
    }

    #[test]
    fn an_expectation_names_what_the_order_breaks() {
        let line = r#"{"query": "sla", "expect": {"first": "premium-*", "absent": ["internal-*", "draft"]}}"#;
        let expect = parse(line).expect("parses").remove(0).expect;
        assert!(expect.broken(&["premium-sla", "faq"]).is_empty());
        let broken = expect.broken(&["faq", "internal-notes", "premium-sla", "draft"]);
        assert_eq!(
            broken,
            [
                "expected \"premium-*\" first, got \"faq\"",
                "expected no \"internal-*\", got \"internal-notes\" at #2",
                "expected no \"draft\", got \"draft\" at #4",
            ]
        );
        assert_eq!(
            expect.broken(&[]).len(),
            1,
            "nothing is not the first expected"
        );
    }

    #[test]
    fn a_pattern_star_stands_for_any_run_of_characters() {
        for (pattern, id, is) in [
            ("a", "a", true),
            ("a", "ab", false),
            ("a*", "abc", true),
            ("*c", "abc", true),
            ("a*c", "abbbc", true),
            ("a*b*c", "axbyc", true),
            ("a*b*c", "acb", false),
            ("*", "", true),
            ("a*a", "a", false),
            ("internal-*", "public", false),
        ] {
            assert_eq!(matches(pattern, id), is, "{pattern} {id}");
        }
    }

    /// The questions file the components page shows is one `sluice component test` reads, with
    /// the expectations it says.
    #[test]
    fn the_questions_file_the_components_page_shows_is_read_as_shown() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/components.md");
        let page = std::fs::read_to_string(&path).expect("docs/components.md");
        let example = (page.split("```jsonl\n").nth(1))
            .and_then(|rest| rest.split("```").next())
            .expect("a ```jsonl example on docs/components.md");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("questions.jsonl");
        std::fs::write(&file, example).unwrap();
        let questions = questions(&file).unwrap();
        assert_eq!(questions.len(), example.lines().count());
        let first = &questions[0].expect;
        assert_eq!(first.first.as_deref(), Some("samples/card-limits.md"));
        let good = ["samples/card-limits.md", "support-hours"];
        assert!(first.broken(&good).is_empty());
        assert_eq!(
            first.broken(&["support-hours", "internal/notes.md"]).len(),
            2
        );
    }
}
