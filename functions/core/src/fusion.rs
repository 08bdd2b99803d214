//! Fusion of ranked lists: how the dense and the BM25 rankings of a hybrid search become one.
//! Qdrant fuses server-side with the same rule (`{"rrf": {"k": 60}}`); the stores that rank
//! each way separately (Pinecone's two indexes, the test kit's memory store) fuse here.

use std::collections::HashMap;

/// The `k` of reciprocal rank fusion (Cormack et al.'s 60): a rank-1 hit scores 1/61.
pub const RRF_K: usize = 60;

/// Reciprocal rank fusion of ranked lists of (id, item): each id scores the sum over the
/// lists it is in of 1 / (k + rank), rank counted from 1 (Cormack et al.); the best `limit`
/// come back with their scores, highest first, ties in the order first seen. An id found by
/// several lists keeps the first list's item (the dense one, which carries the vector).
pub fn rrf<T>(lists: Vec<Vec<(String, T)>>, k: usize, limit: usize) -> Vec<(f32, T)> {
    let mut fused: Vec<(f32, T)> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for list in lists {
        for (rank, (id, item)) in list.into_iter().enumerate() {
            let score = 1.0 / (k + rank + 1) as f32;
            match at.get(&id) {
                Some(&i) => fused[i].0 += score,
                None => {
                    at.insert(id, fused.len());
                    fused.push((score, item));
                }
            }
        }
    }
    // A stable sort keeps first-seen order among equal scores.
    fused.sort_by(|a, b| b.0.total_cmp(&a.0));
    fused.truncate(limit);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ids: &[&str]) -> Vec<(String, String)> {
        ids.iter()
            .map(|id| (id.to_string(), id.to_string()))
            .collect()
    }

    fn order(fused: &[(f32, String)]) -> Vec<&str> {
        fused.iter().map(|(_, id)| id.as_str()).collect()
    }

    #[test]
    fn rrf_ranks_by_summed_reciprocal_ranks() {
        // b is 2nd in both lists: 2/62 beats a (1/61) and c (1/61).
        let fused = rrf(vec![list(&["a", "b", "d"]), list(&["c", "b"])], 60, 10);
        assert_eq!(order(&fused), ["b", "a", "c", "d"]);
        assert!((fused[0].0 - 2.0 / 62.0).abs() < 1e-7);
        assert!((fused[1].0 - 1.0 / 61.0).abs() < 1e-7);
        assert!((fused[3].0 - 1.0 / 63.0).abs() < 1e-7);
    }

    #[test]
    fn rrf_keeps_the_limit_and_the_order_of_a_single_list() {
        assert_eq!(rrf(vec![list(&["a", "b", "c"]), vec![]], 60, 2).len(), 2);
        assert!(rrf::<String>(vec![vec![], vec![]], 60, 5).is_empty());
        let one = rrf(vec![list(&["x", "y", "z"]), vec![]], 60, 10);
        assert_eq!(order(&one), ["x", "y", "z"]);
    }

    #[test]
    fn the_first_lists_copy_of_an_id_is_kept() {
        let dense = vec![("a".to_string(), "dense copy".to_string())];
        let sparse = vec![("a".to_string(), "sparse copy".to_string())];
        let fused = rrf(vec![dense, sparse], 60, 5);
        assert_eq!(order(&fused), ["dense copy"]);
    }
}
