//! The verdict after the last token: every sentence of the answer checked against the
//! sources' clauses.
//!
//! A clause of the answer rests on the clause of a source that best covers its content words
//! (weighted by rarity; the source's paragraph before it counts half). It is supported when
//! that clause — or one as good, within [`NEAR`] — states all of its facts (numbers, amounts,
//! dates, times, durations, names; a negation on both sides or neither) and, when that
//! clause is one option among several in its sentence ("…arrives within five business days;
//! express delivery in two business days costs $15"), the answer names that option: most of
//! the words only that clause has. So "two business days" said of the standard card is
//! caught though the sentence has it — attached to the other option.

use std::collections::HashSet;

use sluice_contract::grounding::{Evidence, Fact, FactKind, Grounding, SentenceCheck};

use super::Sources;
use super::evidence::rounded;
use super::passage::{Clause, Passage, Term};
use crate::language::lexicon::Lexicon;

/// A clause of the answer covered less than this by every clause of the sources rests on
/// none of them.
pub const MIN_COVERAGE: f32 = 0.5;
/// Clauses of the sources within this of the best one are as good a match.
pub const NEAR: f32 = 0.05;
/// The share of an option's own words (weighted) an answer must name to take its facts.
pub const MIN_OPTION: f32 = 0.5;
/// Below this no clause of the sources is shown as the closest one.
const MIN_SHOWN: f32 = 0.2;

/// The verdict on `answer` (its text as streamed) over `sources` (the chunk texts, numbered
/// from 1 in this order).
pub fn verdict(answer: &str, sources: &[&str], lexicon: &Lexicon) -> Grounding {
    let said = Passage::read(answer);
    let mut read = Sources::read(sources, lexicon);
    let terms: Vec<&Term> = (said.clauses.iter())
        .flat_map(|c| c.terms.iter().filter(|t| t.content))
        .collect();
    read.learn(&terms);
    let mut sentences = Vec::with_capacity(said.sentences.len());
    for sentence in &said.sentences {
        let checks: Vec<Check> = said.clauses[sentence.clauses.clone()]
            .iter()
            .filter_map(|clause| check(clause, &said, &read))
            .collect();
        let supported = checks.iter().all(|c| c.supported);
        let weakest = checks
            .iter()
            .filter(|c| c.supported == supported)
            .min_by(|a, b| a.score.total_cmp(&b.score));
        sentences.push(SentenceCheck {
            start: sentence.span.start,
            end: sentence.span.end,
            cites: sentence.cites.clone(),
            supported,
            score: rounded(weakest.map_or(1.0, |c| c.score)),
            evidence: weakest.and_then(|c| c.evidence.clone()),
            unsupported_facts: checks.into_iter().flat_map(|c| c.missing).collect(),
        });
    }
    let claims: Vec<&SentenceCheck> = sentences
        .iter()
        .filter(|s| s.evidence.is_some() || !s.supported)
        .collect();
    let score = if claims.is_empty() {
        1.0
    } else {
        claims.iter().map(|s| s.score).sum::<f32>() / claims.len() as f32
    };
    Grounding {
        score: rounded(score),
        unsupported: sentences.iter().filter(|s| !s.supported).count(),
        sentences,
    }
}

/// One clause of the answer, checked.
struct Check {
    supported: bool,
    score: f32,
    evidence: Option<Evidence>,
    missing: Vec<Fact>,
}

/// `clause` of the answer `said` against the sources; `None` when it states nothing to check
/// (fewer than two content words and no fact: "Sure.", "I don't know."; or no fact and every
/// content word a courtesy's: "I hope this helps!").
fn check(clause: &Clause, said: &Passage, read: &Sources) -> Option<Check> {
    let facts: Vec<&Term> = clause
        .facts()
        .filter(|t| t.fact != Some(FactKind::Negation))
        .collect();
    let claims = clause.keys.len() >= 2 || !facts.is_empty();
    // A courtesy ("I hope this helps!", "Happy to help further."), however near a source's
    // words, says something to the reader, not about the sources.
    if !claims || facts.is_empty() && courtesy(clause) {
        return None;
    }
    if clause.keys.is_empty() {
        // Facts alone ("September 13, 1939", "$15"): an answer's value, no claim of its own
        // to frame; each fact stated somewhere in one source.
        for (n, passage) in read.passages.iter().enumerate() {
            let at: Option<Vec<usize>> = (facts.iter())
                .map(|f| passage.clauses.iter().position(|c| has_fact(c, f)))
                .collect();
            if let Some(&first) = at.as_ref().and_then(|at| at.first()) {
                return Some(supported(read, n, first, 1.0));
            }
        }
    }
    // Every clause of the sources, by how well it covers this one's words.
    let mut scored: Vec<(f32, usize, usize)> = Vec::new();
    for (n, passage) in read.passages.iter().enumerate() {
        for (i, candidate) in passage.clauses.iter().enumerate() {
            if passage.sentences[candidate.sentence].heading {
                continue;
            }
            let score = read.coverage(candidate, clause.keys.iter().map(String::as_str));
            scored.push((score, n, i));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let best = scored.first().map_or(0.0, |s| s.0);
    if facts.is_empty() && best < MIN_SHOWN {
        // Words no source comes near and no fact: a claim with nothing behind it ("The moon
        // is made of green cheese.").
        return Some(unsupported(clause, said, read, None, best, &facts));
    }
    if best < MIN_COVERAGE {
        let closest = (best >= MIN_SHOWN).then(|| (scored[0].1, scored[0].2));
        return Some(unsupported(clause, said, read, closest, best, &facts));
    }
    // The answer's words for naming an option: its clause and what came before in its paragraph.
    let named: HashSet<&str> = clause
        .keys
        .iter()
        .chain(clause.context.iter())
        .map(String::as_str)
        .collect();
    for &(score, n, i) in scored.iter().take_while(|(s, ..)| *s >= best - NEAR) {
        let candidate = &read.passages[n].clauses[i];
        if states(candidate, clause, &facts) && names_option(read, n, i, &named, &facts) {
            return Some(supported(read, n, i, score));
        }
    }
    let (_, n, i) = scored[0];
    Some(unsupported(clause, said, read, Some((n, i)), best, &facts))
}

/// Words an answer says to its reader rather than about the sources: offers of help, thanks,
/// apologies, pointers to the answer itself.
const COURTESY: &[&str] = &[
    "hope",
    "help",
    "helpful",
    "glad",
    "happy",
    "assist",
    "assistance",
    "question",
    "ask",
    "contact",
    "feel",
    "free",
    "thank",
    "thanks",
    "please",
    "sorry",
    "apologize",
    "welcome",
    "answer",
    "find",
    "found",
    "look",
    "information",
    "detail",
    "further",
    "additional",
    "clarification",
    "clarify",
    "unclear",
    "reach",
    "great",
    "good",
    "day",
    "anything",
    "else",
    "here",
    "below",
    "following",
    "summary",
    "provide",
    "provided",
    "context",
    "based",
    "unable",
    "able",
    "unfortunately",
    "certainly",
    "course",
    "hear",
    "understand",
    "note",
    "hesitate",
    "wish",
    "support",
    "team",
    "customer",
    "service",
    "further",
    "info",
    "check",
    "sure",
];

/// Whether every content word of `clause` is a [`COURTESY`] word.
fn courtesy(clause: &Clause) -> bool {
    static KEYS: std::sync::LazyLock<HashSet<String>> = std::sync::LazyLock::new(|| {
        COURTESY
            .iter()
            .map(|w| crate::language::words::stem(w))
            .collect()
    });
    clause.keys.iter().all(|k| KEYS.contains(k))
}

/// Whether `candidate` states every fact of `clause` (`facts`, negations apart) and says
/// "not" as many times.
fn states(candidate: &Clause, clause: &Clause, facts: &[&Term]) -> bool {
    candidate.negations() == clause.negations() && facts.iter().all(|f| has_fact(candidate, f))
}

/// Whether `candidate` states `fact`: a number in the clause itself (an amount as an amount:
/// "1.00%" is not the "one" of "one withdrawal"); a name there or in its paragraph before it
/// (which names what the clause is about: "Harbor Bank", "ATM").
fn has_fact(candidate: &Clause, fact: &Term) -> bool {
    let kind_fits = |t: &Term| match fact.fact {
        Some(FactKind::Amount) => t.fact == Some(FactKind::Amount),
        _ => true,
    };
    candidate
        .terms
        .iter()
        .any(|t| t.key == fact.key && kind_fits(t))
        || (fact.fact == Some(FactKind::Name) && candidate.context.contains(&fact.key))
}

/// Whether the answer, by the words it uses (`named`), names the option clause `i` of source
/// `n` is: most of the words (weighted) no other clause of its sentence has. It is a choice
/// between options only when the answer states a number (`facts`) and another clause of the
/// sentence states one too ("five business days; … two business days costs $15"): a sentence
/// of one clause, or clauses without competing numbers, are no choice.
fn names_option(
    read: &Sources,
    n: usize,
    i: usize,
    named: &HashSet<&str>,
    facts: &[&Term],
) -> bool {
    let passage = &read.passages[n];
    let clause = &passage.clauses[i];
    let sentence = &passage.sentences[clause.sentence];
    let numeric = |t: &Term| {
        t.fact
            .is_some_and(|k| !matches!(k, FactKind::Name | FactKind::Negation))
    };
    let siblings = || {
        (passage.clauses[sentence.clauses.clone()].iter())
            .enumerate()
            .filter(|(j, _)| sentence.clauses.start + j != i)
            .map(|(_, c)| c)
    };
    let competing = siblings().any(|c| c.terms.iter().any(numeric));
    if !competing || !facts.iter().any(|f| numeric(f)) {
        return true;
    }
    let others: HashSet<&str> = siblings()
        .flat_map(|c| c.keys.iter().map(String::as_str))
        .collect();
    let own: Vec<&str> = (clause.keys.iter().map(String::as_str))
        .filter(|k| !others.contains(k))
        .collect();
    let (mut hit, mut total) = (0.0, 0.0);
    for key in own {
        let w = read.weight(key);
        total += w;
        let synonyms = read
            .synonyms
            .iter()
            .filter(|(_, s)| s.contains(key))
            .map(|(k, _)| k.as_str());
        if named.contains(key) || synonyms.into_iter().any(|k| named.contains(k)) {
            hit += w;
        }
    }
    total == 0.0 || hit / total >= MIN_OPTION
}

fn evidence(read: &Sources, n: usize, i: usize) -> Evidence {
    let passage = &read.passages[n];
    let span = passage.clauses[i].span.clone();
    Evidence {
        source: n + 1,
        start: span.start,
        end: span.end,
        text: passage.text(&span),
    }
}

/// A clause supported by clause `i` of source `n`, covered `score`.
fn supported(read: &Sources, n: usize, i: usize, score: f32) -> Check {
    Check {
        supported: true,
        score,
        evidence: Some(evidence(read, n, i)),
        missing: Vec::new(),
    }
}

/// `clause` unsupported; `closest` the clause of the sources it was nearest (source, clause;
/// when one came near), whose missing facts are listed — all of them when there is none.
fn unsupported(
    clause: &Clause,
    said: &Passage,
    read: &Sources,
    closest: Option<(usize, usize)>,
    score: f32,
    facts: &[&Term],
) -> Check {
    let candidate = closest.map(|(n, i)| &read.passages[n].clauses[i]);
    let as_fact = |f: &&Term| fact(said, f.fact.unwrap_or(FactKind::Number), f.span.clone());
    let mut missing: Vec<Fact> = facts
        .iter()
        .filter(|f| candidate.is_none_or(|c| !has_fact(c, f)))
        .map(as_fact)
        .collect();
    if candidate.is_some_and(|c| c.negations() != clause.negations()) {
        let at = (clause.terms.iter())
            .find(|t| t.fact == Some(FactKind::Negation))
            .map_or(clause.span.clone(), |t| t.span.clone());
        missing.push(fact(said, FactKind::Negation, at));
    }
    // Every fact stated, but of another option: those facts are what is unsupported.
    if missing.is_empty() {
        missing = facts.iter().map(as_fact).collect();
    }
    let stated = candidate.map_or(0, |c| facts.iter().filter(|f| has_fact(c, f)).count());
    let share = if facts.is_empty() {
        1.0
    } else {
        stated as f32 / facts.len() as f32
    };
    Check {
        supported: false,
        score: score * share,
        evidence: closest.map(|(n, i)| evidence(read, n, i)),
        missing,
    }
}

fn fact(said: &Passage, kind: FactKind, span: std::ops::Range<usize>) -> Fact {
    Fact {
        kind,
        start: span.start,
        end: span.end,
        text: said.text(&span),
    }
}
