//! Answers a reader can check, from words alone (no second model call): each source's
//! evidence sentences for the question before the first token ([`evidence`]), and after the
//! last a verdict on every sentence of the answer ([`verdict`]).
//!
//! Both read text the way the cache's guard reads questions ([`crate::language`]): words as
//! their stems, numbers as their values ("five" = "5", "1,000" = "1000"), negations as one
//! word, WordNet's synonyms standing for one another. A word counts by how rare it is among
//! the sources' clauses (a word every clause has says little about which one answers), and a
//! clause is read with the words of its paragraph before it (the heading, the sentence that
//! named what "it" is) at half weight.
//!
//! - [`passage`]: a text as paragraphs, sentences, clauses and terms, with their spans;
//! - [`evidence`]: highlights and the extract;
//! - [`verdict`]: the verdict;
//! - [`visible`]: text as a reader sees it (compatibility forms folded, invisible characters
//!   dropped), so that look-alike characters cannot carry a fact past the check.

mod evidence;
mod passage;
mod segment;
mod verdict;
mod visible;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

pub use evidence::{Evidence, evidence};
pub use verdict::verdict;

use crate::language::lexicon::Lexicon;
use passage::{Clause, Passage, Term};

/// The sources of an answer, read, with what the matching needs of them.
struct Sources<'a> {
    passages: Vec<Passage>,
    /// In how many clauses of the sources each key is.
    df: HashMap<String, usize>,
    clauses: usize,
    /// Every distinct content word of the sources: key and canonical text.
    words: Vec<(String, String)>,
    lexicon: &'a Lexicon,
    /// The source keys a word of the other side may stand for, by its key.
    synonyms: HashMap<String, HashSet<String>>,
}

impl<'a> Sources<'a> {
    fn read(texts: &[&str], lexicon: &'a Lexicon) -> Self {
        let passages: Vec<Passage> = texts.iter().map(|t| Passage::read(t)).collect();
        let mut df: HashMap<String, usize> = HashMap::new();
        let mut words: HashMap<String, String> = HashMap::new();
        let mut clauses = 0;
        for clause in passages.iter().flat_map(|p| &p.clauses) {
            clauses += 1;
            for key in &clause.keys {
                *df.entry(key.clone()).or_default() += 1;
            }
            for term in clause.terms.iter().filter(|t| t.content) {
                words
                    .entry(term.key.clone())
                    .or_insert_with(|| term.text.clone());
            }
        }
        Sources {
            passages,
            df,
            clauses,
            words: words.into_iter().collect(),
            lexicon,
            synonyms: HashMap::new(),
        }
    }

    /// How much a word with `key` tells one clause from another: more the rarer it is in
    /// the sources, most for a word they do not have.
    fn weight(&self, key: &str) -> f32 {
        let df = self.df.get(key).copied().unwrap_or(0) as f32;
        (1.0 + self.clauses as f32 / (1.0 + df)).ln()
    }

    /// Makes [`Self::covers`] know `terms`' words: the words of the sources the lexicon lets
    /// each stand for — only for words the sources do not have as written, so that the
    /// sources' words are looked up in the lexicon only when an answer or a question has one
    /// of those.
    fn learn(&mut self, terms: &[&Term]) {
        let unknown: Vec<&Term> = (terms.iter().copied())
            .filter(|t| !self.df.contains_key(&t.key))
            .collect();
        if self.lexicon.is_empty() || unknown.is_empty() {
            return;
        }
        let theirs: Vec<Vec<u32>> = (self.words.iter())
            .map(|(_, text)| self.lexicon.lemmas(text))
            .collect();
        for term in unknown {
            if self.synonyms.contains_key(&term.key) {
                continue;
            }
            let lemmas = self.lexicon.lemmas(&term.text);
            let found: HashSet<String> = (self.words.iter().zip(&theirs))
                .filter(|((_, text), theirs)| {
                    self.lexicon.equivalent(&term.text, &lemmas, text, theirs)
                })
                .map(|((key, _), _)| key.clone())
                .collect();
            self.synonyms.insert(term.key.clone(), found);
        }
    }

    /// How far a passage with content words `own` after `context` (the words of its
    /// paragraph before it) covers a word with `key`: 1 when it has it (or a word the lexicon
    /// lets it stand for), ½ when its context does, else 0.
    fn covers(&self, own: &HashSet<String>, context: &HashSet<String>, key: &str) -> f32 {
        let synonyms = self.synonyms.get(key);
        let has = |keys: &HashSet<String>| {
            keys.contains(key) || synonyms.is_some_and(|s| s.iter().any(|k| keys.contains(k)))
        };
        if has(own) {
            1.0
        } else if has(context) {
            0.5
        } else {
            0.0
        }
    }

    /// The weighted share of `keys` that `clause` covers; 1 for no keys.
    fn coverage<'k>(&self, clause: &Clause, keys: impl Iterator<Item = &'k str>) -> f32 {
        self.coverage_by(&clause.keys, &clause.context, keys)
    }

    /// The weighted share of `keys` that words `own` after `context` cover; 1 for no keys.
    fn coverage_by<'k>(
        &self,
        own: &HashSet<String>,
        context: &HashSet<String>,
        keys: impl Iterator<Item = &'k str>,
    ) -> f32 {
        let (mut covered, mut total) = (0.0, 0.0);
        for key in keys {
            let w = self.weight(key);
            covered += w * self.covers(own, context, key);
            total += w;
        }
        if total > 0.0 { covered / total } else { 1.0 }
    }
}
