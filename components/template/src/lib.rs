//! template: a Sluice rerank component (sluice:rerank@0.2.0).
//!
//! Build: `sluice component build` (in this folder)
//! Try:   `sluice component test <the .component.wasm> --queries questions.txt --corpus DOCS`
//! Cost:  `sluice component bench <the .component.wasm>`
//! Test:  `cargo test` (the rules alone, on this machine)

use sluice_rerank_sdk::{Candidate, Context, Guest, Ranking, context, export_reranker, ranking};

struct Component;

impl Guest for Component {
    fn rerank(_query: String, ctx: Context, candidates: Vec<Candidate>) -> Result<Ranking, String> {
        // The caller's `rerank_context`, e.g. {"plan": "pro"}.
        let _plan = context(&ctx, "plan");
        Ok(ranking(candidates.iter().map(|c| {
            // Each candidate's document metadata: c.text_meta("topic"), c.number("year"),
            // c.flag("draft"), c.date("updated_at") (seconds), c.strings("audience").
            // `None` drops the candidate; `Some(score)` keeps it (higher is better).
            Some(c.score)
        })))
    }
}

export_reranker!(Component);

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, score: f32) -> Candidate {
        Candidate {
            id: id.into(),
            title: String::new(),
            text: String::new(),
            score,
            chunk: 0,
            metadata: Vec::new(),
        }
    }

    #[test]
    fn every_candidate_is_kept_with_its_fused_score() {
        let candidates = vec![candidate("a", 0.9), candidate("b", 0.4)];
        let ranked = Component::rerank("q".into(), Vec::new(), candidates).unwrap();
        let kept: Vec<(u32, f32)> = ranked.scores.iter().map(|s| (s.index, s.score)).collect();
        assert_eq!(kept, [(0, 0.9), (1, 0.4)]);
        assert!(ranked.dropped.is_empty());
    }
}
