//! A tenant's evaluation sets, as clients send them (`PUT /v1/evals/sets/{name}`), and where
//! they and their runs' reports are kept ([`Records`]). A set is the tenant's own questions,
//! each with what a good answer needs: the documents that should be among its sources (ids, or
//! globs with `*`), optionally the one that should come first, and facts the answer should
//! state; with the request context its components read and the end user's principals it is
//! asked as. The rules that run a set and score it are the engine's (`sluice_core::quality`).

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Tenant;
use crate::access::check_principal;

/// Most questions in one set: a run answers each, one after another.
pub const MAX_QUESTIONS: usize = 500;
/// Most expected documents (ids or globs) of one question.
pub const MAX_EXPECTED: usize = 50;
/// Most facts one question's answer is checked for.
pub const MAX_FACTS: usize = 20;
/// Longest fact, in characters.
pub const MAX_FACT_CHARS: usize = 200;
/// Longest document id or glob, in bytes (as a document id's own limit).
pub const MAX_PATTERN_BYTES: usize = 512;
/// Most principals a question is asked as.
pub const MAX_QUESTION_PRINCIPALS: usize = 100;
/// Longest question id, in characters.
pub const MAX_ID_CHARS: usize = 64;
/// Most sets one tenant keeps.
pub const MAX_SETS: usize = 100;
/// Most finished runs one tenant keeps (the oldest go first).
pub const MAX_RUNS: usize = 50;
/// The rule of a set's name, as the error says it.
pub const NAME_RULE: &str = "1 to 64 letters, digits, '.', '_' or '-'";

/// How a run answers its questions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The tenant's search: scope, embedding, retrieval, its rerank component; no LLM, no
    /// tokens.
    #[default]
    Retrieval,
    /// The tenant's whole pipeline, the LLM and the grounding verdict included (tokens are
    /// counted and budgeted as answers').
    Answer,
}

/// The figures a run reports and a gate may hold: what each measures is
/// `sluice_core::quality`'s.
pub const FIGURES: [&str; 5] = ["recall", "mrr", "first_source", "grounded", "facts"];

/// A tenant's quality gate (its settings' `quality_gate`): the set every change to its
/// answers is tried on before it goes live — activating a component version, saving its
/// settings — and how much each figure may drop. A change is refused when a figure drops by
/// more than its `max_drop` and the drop is beyond the noise of the set's questions (the 95 %
/// interval of the paired difference lies below zero).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityGate {
    /// The set.
    pub set: String,
    /// Retrieval only (default), or whole answers.
    #[serde(default)]
    pub mode: Mode,
    /// The most each figure may drop, 0 to 1 (the figures of [`FIGURES`]); empty: recall and
    /// MRR may not drop at all.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_drop: BTreeMap<String, f64>,
}

impl QualityGate {
    /// The most each held figure may drop.
    pub fn held(&self) -> BTreeMap<String, f64> {
        match self.max_drop.is_empty() {
            true => [("recall".to_string(), 0.0), ("mrr".to_string(), 0.0)].into(),
            false => self.max_drop.clone(),
        }
    }

    /// Checks the set's name and each figure's drop; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        check_name(&self.set).map_err(|why| ("set".to_string(), why))?;
        for (figure, drop) in &self.max_drop {
            if !FIGURES.contains(&figure.as_str()) {
                let why = format!("unknown figure; the figures are {}", FIGURES.join(", "));
                return Err((format!("max_drop.{figure}"), why));
            }
            if !(0.0..=1.0).contains(drop) {
                return Err((
                    format!("max_drop.{figure}"),
                    format!("{drop} is not from 0 to 1"),
                ));
            }
            if self.mode == Mode::Retrieval && matches!(figure.as_str(), "grounded" | "facts") {
                let why = "is measured on answers: set \"mode\": \"answer\"".to_string();
                return Err((format!("max_drop.{figure}"), why));
            }
        }
        Ok(())
    }
}

/// Whether `name` may name a set (or a run): [`NAME_RULE`].
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    match ok {
        true => Ok(()),
        false => Err(format!("{name:?} is not a name: {NAME_RULE}")),
    }
}

/// One question of a set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalQuestion {
    /// Its id in the set's reports (default `q<position>`, from 1).
    #[serde(default)]
    pub id: String,
    /// What is asked, as a user would ask it.
    pub question: String,
    /// The documents that should be among the sources: ids, or globs where `*` stands for any
    /// run of characters (`cards/*`). Empty: the question is scored on its answer alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub documents: Vec<String>,
    /// The document (id or glob) that should be the first source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
    /// Words or numbers the answer should state (compared as its words are, case and
    /// punctuation aside).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<String>,
    /// What the tenant's components read (`rerank_context` of an answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_context: Option<Value>,
    /// A metadata filter, as an answer's `filter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Value>,
    /// The end user's principals the question is asked as (`group:hr`, `user:alice`): it sees
    /// what such a user would. Absent: as the key that runs the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principals: Option<Vec<String>>,
}

/// A set of questions, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSet {
    /// What the set is for (shown in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The questions, in the order a run asks them.
    pub questions: Vec<EvalQuestion>,
}

/// Why a set was refused: the field (`questions[3].documents[0]`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidEvalSet {
    /// Where in the document.
    pub field: String,
    /// What is wrong there.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidEvalSet {
    InvalidEvalSet {
        field: field.into(),
        message: message.into(),
    }
}

impl EvalSet {
    /// Reads and checks a set: its shape (an unknown field is an error), the caps, unique
    /// question ids (each question without one gets `q<position>`), the principals. The
    /// question's text, filter and request context are checked by the service as an answer's
    /// are, where the limits of the deployment are known.
    pub fn parse(json: &Value) -> Result<Self, InvalidEvalSet> {
        let mut set: EvalSet = serde_json::from_value(json.clone()).map_err(|e| {
            let message = e.to_string();
            invalid("set", message)
        })?;
        if set.questions.is_empty() {
            return Err(invalid("questions", "a set needs at least one question"));
        }
        if set.questions.len() > MAX_QUESTIONS {
            return Err(invalid(
                "questions",
                format!(
                    "{} questions; the limit is {MAX_QUESTIONS}",
                    set.questions.len()
                ),
            ));
        }
        if let Some(d) = &set.description
            && d.chars().count() > 1000
        {
            return Err(invalid("description", "longer than 1000 characters"));
        }
        let mut ids = HashSet::new();
        for (i, q) in set.questions.iter_mut().enumerate() {
            let at = |field: &str| format!("questions[{i}].{field}");
            if q.id.is_empty() {
                q.id = format!("q{}", i + 1);
            }
            if q.id.chars().count() > MAX_ID_CHARS || q.id.chars().any(char::is_control) {
                return Err(invalid(
                    at("id"),
                    format!("at most {MAX_ID_CHARS} characters, none a control character"),
                ));
            }
            if !ids.insert(q.id.clone()) {
                return Err(invalid(at("id"), format!("{:?} is used twice", q.id)));
            }
            if q.documents.len() > MAX_EXPECTED {
                return Err(invalid(
                    at("documents"),
                    format!(
                        "{} documents; the limit is {MAX_EXPECTED}",
                        q.documents.len()
                    ),
                ));
            }
            for (j, p) in q.documents.iter().chain(&q.first).enumerate() {
                if p.is_empty() || p.len() > MAX_PATTERN_BYTES || p.chars().any(char::is_control) {
                    let field = match j < q.documents.len() {
                        true => at(&format!("documents[{j}]")),
                        false => at("first"),
                    };
                    return Err(invalid(
                        field,
                        format!(
                            "a document id or glob of 1 to {MAX_PATTERN_BYTES} bytes, no \
                             control characters"
                        ),
                    ));
                }
            }
            if q.facts.len() > MAX_FACTS {
                return Err(invalid(
                    at("facts"),
                    format!("{} facts; the limit is {MAX_FACTS}", q.facts.len()),
                ));
            }
            for (j, f) in q.facts.iter().enumerate() {
                let chars = f.trim().chars().count();
                if chars == 0 || chars > MAX_FACT_CHARS {
                    return Err(invalid(
                        at(&format!("facts[{j}]")),
                        format!("1 to {MAX_FACT_CHARS} characters"),
                    ));
                }
            }
            if let Some(principals) = &q.principals {
                if principals.len() > MAX_QUESTION_PRINCIPALS {
                    return Err(invalid(
                        at("principals"),
                        format!("at most {MAX_QUESTION_PRINCIPALS}"),
                    ));
                }
                for (j, p) in principals.iter().enumerate() {
                    check_principal(p)
                        .map_err(|why| invalid(at(&format!("principals[{j}]")), why))?;
                }
            }
        }
        Ok(set)
    }
}

/// Whether document id `id` is matched by `pattern`: equal, or — where the pattern has `*` —
/// each `*` standing for any run of characters (none included).
pub fn matches(pattern: &str, id: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return pattern == id;
    };
    if !pattern.contains('*') {
        return pattern == id;
    }
    let Some(mut rest) = id.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let (last, middle) = parts.split_last().map_or(("", &[][..]), |(l, m)| (*l, m));
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// What a tenant keeps besides its settings, each kind on its own shelf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shelf {
    /// Evaluation sets, by name.
    EvalSets,
    /// Finished evaluation runs' reports, by run id.
    EvalRuns,
    /// Ratings of answers, by the answer's request id.
    Feedback,
    /// Questions the corpus did not answer, by a digest of the question.
    Gaps,
    /// Answers and searches as a rating of them reads them, by request id: written only to a
    /// store every process reads ([`Records::shared`]; one process keeps them in memory),
    /// never listed, each forgotten [`ANSWERS_KEPT_FOR`] after it was made.
    Answers,
    /// A tenant's sources ([`crate::sources::Source`]), by name.
    Sources,
    /// The reports of sources' syncs, by `<source>/<sync id>`.
    Syncs,
}

/// How long an answer can be rated after it was made.
pub const ANSWERS_KEPT_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl Shelf {
    /// The shelf's name in files and tables.
    pub const fn as_str(self) -> &'static str {
        match self {
            Shelf::EvalSets => "eval_sets",
            Shelf::EvalRuns => "eval_runs",
            Shelf::Feedback => "feedback",
            Shelf::Gaps => "gaps",
            Shelf::Answers => "answers",
            Shelf::Sources => "sources",
            Shelf::Syncs => "syncs",
        }
    }

    /// How long a record of this shelf is kept after it was written (`None`: until it is
    /// deleted). A store that expires items itself (DynamoDB's TTL) is told; readers check.
    pub const fn expires_after(self) -> Option<std::time::Duration> {
        match self {
            Shelf::Answers => Some(ANSWERS_KEPT_FOR),
            _ => None,
        }
    }
}

/// One thing kept on a shelf: its name, how many times it was written, when last, and the
/// JSON document itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Its name on the shelf.
    pub name: String,
    /// 1 at the first write, one more at each.
    pub version: u64,
    /// When it was last written (RFC 3339, UTC).
    pub updated_at: String,
    /// The document.
    pub body: Value,
}

/// A records store that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The file or table failed; the message says which and why.
    #[error("{0}")]
    Unavailable(String),
}

/// Where tenants' records are kept: a shelf per kind, a record per name. `sluice serve` keeps
/// them in files (`sluice-local`); tests in memory (`sluice-testkit`).
#[async_trait::async_trait]
pub trait Records: Send + Sync {
    /// The record `name` on the tenant's `shelf`.
    async fn get(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
    ) -> Result<Option<Record>, RecordsError>;
    /// Every record on the tenant's `shelf`, by name.
    async fn list(&self, tenant: &Tenant, shelf: Shelf) -> Result<Vec<Record>, RecordsError>;
    /// Writes `body` as `name` (its version one more than before).
    async fn put(
        &self,
        tenant: &Tenant,
        shelf: Shelf,
        name: &str,
        body: Value,
    ) -> Result<Record, RecordsError>;
    /// Removes `name`; whether it was there.
    async fn delete(&self, tenant: &Tenant, shelf: Shelf, name: &str)
    -> Result<bool, RecordsError>;
    /// The tenants that keep at least one record on `shelf` (what a scheduler walks: the
    /// tenants with sources).
    async fn tenants(&self, shelf: Shelf) -> Result<Vec<Tenant>, RecordsError>;
    /// Whether other processes read what this store writes (DynamoDB: every Lambda
    /// environment), so that a record one of them writes reaches the one a later request lands
    /// on. Answers are kept for rating in it only then.
    fn shared(&self) -> bool {
        false
    }
}

/// The records of one tenant and shelf, by name: what the file and memory stores keep.
pub type Shelved = BTreeMap<String, Record>;

/// `body` as the next version of `name` on `shelf` (what a store that holds the shelf in
/// memory writes).
pub fn next_record(shelf: &mut Shelved, name: &str, body: Value) -> Record {
    let version = shelf.get(name).map_or(0, |r| r.version) + 1;
    let record = Record {
        name: name.to_string(),
        version,
        updated_at: crate::tenant_settings::now(),
        body,
    };
    shelf.insert(name.to_string(), record.clone());
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_any_run_of_characters_and_plain_ids_only_themselves() {
        assert!(matches("lost-card", "lost-card"));
        assert!(!matches("lost-card", "lost-card-2"));
        assert!(matches("cards/*", "cards/lost"));
        assert!(matches("cards/*", "cards/"));
        assert!(!matches("cards/*", "card/lost"));
        assert!(matches("*-faq", "cards-faq"));
        assert!(!matches("*-faq", "cards-faq.md"));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(matches("a*b*c", "abc"));
        assert!(!matches("a*b*c", "acb"));
        assert!(!matches("ab*ba", "aba"), "the two ends may not overlap");
        assert!(matches("*", "anything"));
    }

    #[test]
    fn a_set_is_checked_whole_and_names_the_field_at_fault() {
        let ok = EvalSet::parse(&json!({"questions": [
            {"question": "a?", "documents": ["x"]}, {"id": "two", "question": "b?"}
        ]}))
        .expect("valid");
        assert_eq!(ok.questions[0].id, "q1");
        assert_eq!(ok.questions[1].id, "two");
        let field = |v: Value| EvalSet::parse(&v).expect_err("refused").field;
        assert_eq!(field(json!({"questions": []})), "questions");
        assert_eq!(
            field(json!({"questions": [{"question": "a", "extra": 1}]})),
            "set"
        );
        assert_eq!(
            field(json!({"questions": [{"question": "a"}, {"id": "q1", "question": "b"}]})),
            "questions[1].id"
        );
        assert_eq!(
            field(json!({"questions": [{"question": "a", "documents": [""]}]})),
            "questions[0].documents[0]"
        );
        assert_eq!(
            field(json!({"questions": [{"question": "a", "first": "x\u{7}"}]})),
            "questions[0].first"
        );
        assert_eq!(
            field(json!({"questions": [{"question": "a", "facts": [" "]}]})),
            "questions[0].facts[0]"
        );
        assert_eq!(
            field(json!({"questions": [{"question": "a", "principals": ["hr"]}]})),
            "questions[0].principals[0]"
        );
        let many: Vec<Value> = (0..=MAX_QUESTIONS)
            .map(|_| json!({"question": "a"}))
            .collect();
        assert_eq!(field(json!({"questions": many})), "questions");
    }

    #[test]
    fn a_gate_holds_known_figures_within_range_and_answer_figures_only_on_answers() {
        let gate = |v: Value| serde_json::from_value::<QualityGate>(v).expect("a gate");
        let plain = gate(json!({"set": "help"}));
        assert!(plain.validate().is_ok());
        assert_eq!(
            plain.held(),
            [("mrr".into(), 0.0), ("recall".into(), 0.0)].into()
        );
        let field = |v: Value| gate(v).validate().expect_err("refused").0;
        assert_eq!(field(json!({"set": "a b"})), "set");
        assert_eq!(
            field(json!({"set": "s", "max_drop": {"speed": 0.1}})),
            "max_drop.speed"
        );
        assert_eq!(
            field(json!({"set": "s", "max_drop": {"mrr": 1.5}})),
            "max_drop.mrr"
        );
        assert_eq!(
            field(json!({"set": "s", "max_drop": {"grounded": 0.1}})),
            "max_drop.grounded"
        );
        let answers = gate(json!({"set": "s", "mode": "answer", "max_drop": {"grounded": 0.1}}));
        assert!(answers.validate().is_ok());
    }

    #[test]
    fn names_are_short_and_plain() {
        assert!(check_name("smoke-1.v2_a").is_ok());
        for bad in ["", "a b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
