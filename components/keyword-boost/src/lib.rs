//! Keyword and phrase boost: the fused score plus a bonus for every query word (of three
//! letters or more) found in the candidate's title or text, and a larger one when the whole
//! query appears as a phrase.
//!
//! Built for the frozen `sluice:rerank@0.1.0` world on purpose, with wit-bindgen directly
//! (the SDK speaks 0.2): it is the tree's proof that components built for 0.1 keep running.

wit_bindgen::generate!({
    world: "reranker",
    path: "../../wit/rerank",
});

/// Bonus per matching query word; RRF scores are about 1/60, so one matching word outweighs
/// a few ranks of fused order.
const WORD_BONUS: f32 = 0.01;
/// Bonus when the whole query appears verbatim.
const PHRASE_BONUS: f32 = 0.05;

struct KeywordBoost;

impl Guest for KeywordBoost {
    fn rerank(query: String, candidates: Vec<Candidate>) -> Result<Vec<Scored>, String> {
        let query = query.to_lowercase();
        let words: Vec<&str> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() >= 3)
            .collect();
        Ok(candidates
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let haystack = format!("{} {}", c.title, c.text).to_lowercase();
                let hits = words.iter().filter(|w| haystack.contains(*w)).count() as f32;
                let phrase = if !query.trim().is_empty() && haystack.contains(query.trim()) { PHRASE_BONUS } else { 0.0 };
                Scored { index: index as u32, score: c.score + hits * WORD_BONUS + phrase }
            })
            .collect())
    }
}

export!(KeywordBoost);
