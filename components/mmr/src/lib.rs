//! Maximal marginal relevance (Carbonell & Goldstein, 1998): picks candidates one by one,
//! each maximising `λ·sim(query, c) − (1−λ)·max sim(c, already picked)`, so that near-duplicate
//! chunks do not crowd out other sources. Embeddings come from the host (`embed`), which
//! already holds the query's and the candidates' vectors.

use sluice_rerank_sdk::{Candidate, Context, Guest, Ranking, embed, export_reranker, scores};

/// Weight of relevance against novelty.
const LAMBDA: f32 = 0.7;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

struct Mmr;

impl Guest for Mmr {
    fn rerank(query: String, _context: Context, candidates: Vec<Candidate>) -> Result<Ranking, String> {
        let mut texts = vec![query];
        texts.extend(candidates.iter().map(|c| c.text.clone()));
        let vectors = embed(&texts)?;
        let (q, docs) = vectors.split_first().ok_or("the host returned no vectors")?;
        if docs.len() != candidates.len() {
            return Err(format!("{} vectors for {} candidates", docs.len(), candidates.len()));
        }
        let relevance: Vec<f32> = docs.iter().map(|d| dot(q, d)).collect();
        let mut picked: Vec<usize> = Vec::with_capacity(docs.len());
        let mut left: Vec<usize> = (0..docs.len()).collect();
        while !left.is_empty() {
            let value = |i: usize| {
                let redundancy = picked.iter().map(|&j| dot(&docs[i], &docs[j])).fold(0.0f32, f32::max);
                LAMBDA * relevance[i] - (1.0 - LAMBDA) * redundancy
            };
            // First best wins ties, so equal candidates keep their fused order.
            let mut best = 0;
            for pos in 1..left.len() {
                if value(left[pos]) > value(left[best]) {
                    best = pos;
                }
            }
            picked.push(left.remove(best));
        }
        let n = picked.len();
        let mut score = vec![0.0f32; n];
        for (rank, &i) in picked.iter().enumerate() {
            score[i] = (n - rank) as f32;
        }
        Ok(scores(score))
    }
}

export_reranker!(Mmr);
