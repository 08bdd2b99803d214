//! Fusion: how the dense and the BM25 rankings of a hybrid search become one, and how a
//! tenant chooses the rule (`SLUICE_FUSION`, `SLUICE_FUSION_TENANTS`).
//!
//! Two rules, each with its parameters:
//! - **weighted reciprocal rank fusion** (`rrf:k=60:dense=1:bm25=1`, the default; Cormack et
//!   al. with a weight per retriever), as Qdrant defines it: a chunk scores, over the lists
//!   it is in, Σ 1 / (rank / weight + k − 1), rank from 1 — with weight 1 that is
//!   1 / (k + rank − 1), and a weight stretches the ranks (weight 3: a list's 3rd counts as
//!   another's 1st); weight 0 adds nothing. It reads ranks only, so the two retrievers'
//!   scales never meet. Qdrant (REST and Edge) computes it in the store
//!   (`{"rrf": {"k": …, "weights": […]}}`); Pinecone's two indexes and the test kit's memory
//!   store are fused here by the same formula, so a setting ranks alike on every backend
//!   (within one list, equal scores take their ranks in id order here; Qdrant ranks them by
//!   its own rule).
//! - **convex combination** (`convex:dense=0.7`): each list's scores are min-max normalised
//!   to [0, 1] (its best 1, its worst 0; a list whose scores are all equal gives each 1), and
//!   a chunk scores dense · its dense score + (1 − dense) · its BM25 score, a list it is not
//!   in counting 0. It reads how far ahead a hit is, which ranks cannot say. No store
//!   computes it (Qdrant's `formula` cannot normalise), so every backend runs both searches
//!   in one round trip and fuses here.
//!
//! Ties are broken by id, never by the order a store happened to return: equal fused scores
//! come back in id order (the retrieval stage then orders equal scores by document and
//! chunk, whatever the backend), so the same request gets the same list every time.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// The `k` of reciprocal rank fusion (Cormack et al.'s 60): a rank-1 hit scores 1/60.
pub const RRF_K: usize = 60;
/// Largest RRF `k` accepted: past a few hundred every rank scores alike.
pub const MAX_RRF_K: usize = 10_000;
/// Largest RRF weight accepted (only the ratio of the two matters).
pub const MAX_WEIGHT: f32 = 100.0;

/// How a hybrid search fuses its two rankings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Weighted reciprocal rank fusion.
    Rrf {
        /// Rank offset: small `k` favours the top of each list, large `k` flattens it.
        k: usize,
        /// Weight of the dense ranking.
        dense: f32,
        /// Weight of the BM25 ranking.
        bm25: f32,
    },
    /// Convex combination of min-max normalised scores.
    Convex {
        /// Share of the dense score, from 0 (BM25 alone) to 1 (dense alone); BM25 has the rest.
        dense: f32,
    },
}

impl Default for Fusion {
    /// Plain RRF: k = 60, both rankings weighted alike.
    fn default() -> Self {
        Fusion::Rrf {
            k: RRF_K,
            dense: 1.0,
            bm25: 1.0,
        }
    }
}

/// A fusion setting that cannot be used; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0} (write rrf, rrf:k=60:dense=1:bm25=0.5 or convex:dense=0.7)")]
pub struct InvalidFusion(pub String);

/// One retriever's ranking: (id, the retriever's score, item), best first.
pub type Ranking<T> = Vec<(String, f32, T)>;

impl Fusion {
    /// The two rankings as one: the best `limit` with their fused scores, highest first. An
    /// id in both lists keeps the dense list's item (which carries the vector).
    pub fn fuse<T>(&self, dense: Ranking<T>, bm25: Ranking<T>, limit: usize) -> Vec<(f32, T)> {
        match *self {
            Fusion::Rrf {
                k,
                dense: wd,
                bm25: wb,
            } => {
                // Ranks are read from each list's order, so equal scores are ranked by id
                // first: a store's order among them must not move a chunk's fused score.
                let ranks = |mut list: Ranking<T>| {
                    list.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                    list.into_iter().map(|(id, _, item)| (id, item))
                };
                rrf(
                    vec![(wd, ranks(dense).collect()), (wb, ranks(bm25).collect())],
                    k,
                    limit,
                )
            }
            Fusion::Convex { dense: alpha } => convex(dense, bm25, alpha, limit),
        }
    }

    /// The RRF weights Qdrant is sent with `n` prefetches (dense first, then BM25 when the
    /// query has BM25 terms); `None` for a rule Qdrant cannot compute.
    pub fn rrf_weights(&self, n: usize) -> Option<(usize, Vec<f32>)> {
        match *self {
            Fusion::Rrf { k, dense, bm25 } => Some((k, [dense, bm25][..n.min(2)].to_vec())),
            Fusion::Convex { .. } => None,
        }
    }
}

impl fmt::Display for Fusion {
    /// The canonical spelling, which [`Fusion::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fusion::Rrf { k, dense, bm25 } => write!(f, "rrf:k={k}:dense={dense}:bm25={bm25}"),
            Fusion::Convex { dense } => write!(f, "convex:dense={dense}"),
        }
    }
}

impl FromStr for Fusion {
    type Err = InvalidFusion;

    /// `rrf` or `convex`, then `:name=value` parameters: for `rrf` `k` (1 to 10,000, default
    /// 60), `dense` and `bm25` (weights from 0 to 100, not both 0; default 1 each); for
    /// `convex` `dense` (from 0 to 1, default 0.5).
    fn from_str(spec: &str) -> Result<Self, InvalidFusion> {
        let bad = |m: String| InvalidFusion(format!("fusion {spec:?}: {m}"));
        let mut parts = spec.trim().split(':');
        let method = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
        let mut params: HashMap<String, String> = HashMap::new();
        for part in parts {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not name=value")))?;
            let name = name.trim().to_ascii_lowercase();
            if params
                .insert(name.clone(), value.trim().to_string())
                .is_some()
            {
                return Err(bad(format!("{name} is given twice")));
            }
        }
        let allowed: &[&str] = match method.as_str() {
            "rrf" => &["k", "dense", "bm25"],
            "convex" => &["dense"],
            other => return Err(bad(format!("unknown method {other:?}"))),
        };
        if let Some(name) = params.keys().find(|n| !allowed.contains(&n.as_str())) {
            return Err(bad(format!(
                "{method} takes {}, not {name}",
                allowed.join(", ")
            )));
        }
        let number = |name: &str, default: f32, max: f32| -> Result<f32, InvalidFusion> {
            match params.get(name) {
                None => Ok(default),
                Some(v) => match v.parse::<f32>() {
                    Ok(x) if (0.0..=max).contains(&x) => Ok(x),
                    _ => Err(bad(format!("{name}={v} is not a number from 0 to {max}"))),
                },
            }
        };
        match method.as_str() {
            "rrf" => {
                let k = match params.get("k") {
                    None => RRF_K,
                    Some(v) => match v.parse::<usize>() {
                        Ok(k) if (1..=MAX_RRF_K).contains(&k) => k,
                        _ => {
                            return Err(bad(format!(
                                "k={v} is not a whole number from 1 to {MAX_RRF_K}"
                            )));
                        }
                    },
                };
                let (dense, bm25) = (
                    number("dense", 1.0, MAX_WEIGHT)?,
                    number("bm25", 1.0, MAX_WEIGHT)?,
                );
                if dense == 0.0 && bm25 == 0.0 {
                    return Err(bad("the two weights cannot both be 0".into()));
                }
                Ok(Fusion::Rrf { k, dense, bm25 })
            }
            _ => Ok(Fusion::Convex {
                dense: number("dense", 0.5, 1.0)?,
            }),
        }
    }
}

/// The fusion each tenant's searches use: `SLUICE_FUSION` for all, `SLUICE_FUSION_TENANTS`
/// for those tuned otherwise (`sluice eval tune` writes the line).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FusionConfig {
    /// `SLUICE_FUSION`: every tenant's rule unless overridden.
    pub default: Fusion,
    /// `SLUICE_FUSION_TENANTS`: `tenant=spec` pairs, comma-separated.
    pub tenants: HashMap<crate::Tenant, Fusion>,
}

impl FusionConfig {
    /// The rule `tenant`'s searches use.
    pub fn for_tenant(&self, tenant: &crate::Tenant) -> Fusion {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }

    /// Reads `SLUICE_FUSION_TENANTS`' form: `acme=convex:dense=0.7,globex=rrf:k=20`.
    pub fn parse_tenants(value: &str) -> Result<HashMap<crate::Tenant, Fusion>, InvalidFusion> {
        let mut map = HashMap::new();
        for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (tenant, spec) = pair
                .split_once('=')
                .ok_or_else(|| InvalidFusion(format!("{pair:?} is not tenant=fusion")))?;
            let tenant =
                crate::Tenant::new(tenant.trim()).map_err(|e| InvalidFusion(e.to_string()))?;
            if map.insert(tenant.clone(), spec.parse()?).is_some() {
                return Err(InvalidFusion(format!("tenant {tenant} is given twice")));
            }
        }
        Ok(map)
    }

    /// `SLUICE_FUSION_TENANTS`' value with `tenant` set to `fusion` (the others kept), in a
    /// stable order: what `sluice eval tune` writes.
    pub fn tenants_with(&self, tenant: &crate::Tenant, fusion: Fusion) -> String {
        let mut all: Vec<(String, Fusion)> = (self.tenants.iter())
            .map(|(t, f)| (t.to_string(), *f))
            .collect();
        all.retain(|(t, _)| t != tenant.as_str());
        all.push((tenant.to_string(), fusion));
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let pairs: Vec<String> = all.iter().map(|(t, f)| format!("{t}={f}")).collect();
        pairs.join(",")
    }
}

/// Weighted reciprocal rank fusion of (weight, ranked list of (id, item)): each id scores the
/// sum over the lists it is in of 1 / (rank / weight + k − 1), rank counted from 1 (Qdrant's
/// formula, see the module docs); the best `limit` come back with their scores, highest
/// first, ties in id order. An id found by several lists keeps the first list's item.
pub fn rrf<T>(lists: Vec<(f32, Vec<(String, T)>)>, k: usize, limit: usize) -> Vec<(f32, T)> {
    let mut fused = Fused::default();
    for (weight, list) in lists {
        for (position, (id, item)) in list.into_iter().enumerate() {
            let score = match weight > 0.0 {
                true => 1.0 / ((position + 1) as f32 / weight + k as f32 - 1.0),
                false => 0.0,
            };
            fused.add(id, score, item);
        }
    }
    fused.best(limit)
}

/// Convex combination of min-max normalised scores (see the module docs).
fn convex<T>(dense: Ranking<T>, bm25: Ranking<T>, alpha: f32, limit: usize) -> Vec<(f32, T)> {
    let mut fused = Fused::default();
    for (weight, list) in [(alpha, dense), (1.0 - alpha, bm25)] {
        let (lo, hi) = list
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), x| {
                (lo.min(x.1), hi.max(x.1))
            });
        for (id, score, item) in list {
            let normalised = if hi > lo {
                (score - lo) / (hi - lo)
            } else {
                1.0
            };
            fused.add(id, weight * normalised, item);
        }
    }
    fused.best(limit)
}

/// Scores summed per id.
struct Fused<T> {
    scored: Vec<(f32, String, T)>,
    at: HashMap<String, usize>,
}

impl<T> Default for Fused<T> {
    fn default() -> Self {
        Self {
            scored: Vec::new(),
            at: HashMap::new(),
        }
    }
}

impl<T> Fused<T> {
    fn add(&mut self, id: String, score: f32, item: T) {
        match self.at.get(&id) {
            Some(&i) => self.scored[i].0 += score,
            None => {
                self.at.insert(id.clone(), self.scored.len());
                self.scored.push((score, id, item));
            }
        }
    }

    /// The best `limit`, highest first, equal scores in id order (so which of them a limit
    /// cuts is settled too).
    fn best(mut self, limit: usize) -> Vec<(f32, T)> {
        (self.scored).sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        self.scored.truncate(limit);
        (self.scored.into_iter())
            .map(|(score, _, item)| (score, item))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ids: &[&str]) -> Vec<(String, String)> {
        ids.iter()
            .map(|id| (id.to_string(), id.to_string()))
            .collect()
    }

    fn scored(pairs: &[(&str, f32)]) -> Ranking<String> {
        pairs
            .iter()
            .map(|(id, s)| (id.to_string(), *s, id.to_string()))
            .collect()
    }

    fn order(fused: &[(f32, String)]) -> Vec<&str> {
        fused.iter().map(|(_, id)| id.as_str()).collect()
    }

    #[test]
    fn rrf_ranks_by_summed_reciprocal_ranks() {
        // 1 / (k + rank − 1): b is 2nd in both lists, 2/61 beats a (1/60) and c (1/60).
        let fused = rrf(
            vec![(1.0, list(&["a", "b", "d"])), (1.0, list(&["c", "b"]))],
            60,
            10,
        );
        assert_eq!(order(&fused), ["b", "a", "c", "d"]);
        assert!((fused[0].0 - 2.0 / 61.0).abs() < 1e-7);
        assert!((fused[1].0 - 1.0 / 60.0).abs() < 1e-7);
        assert!((fused[3].0 - 1.0 / 62.0).abs() < 1e-7);
        // A weight stretches the ranks: weight 2 makes a 2nd place score as a 1st.
        let fused = rrf(vec![(2.0, list(&["a", "b"])), (1.0, list(&["c"]))], 60, 10);
        assert!((fused[1].0 - 1.0 / 60.0).abs() < 1e-7, "{:?}", fused[1]);
    }

    #[test]
    fn rrf_keeps_the_limit_and_the_order_of_a_single_list() {
        assert_eq!(
            rrf(vec![(1.0, list(&["a", "b", "c"])), (1.0, vec![])], 60, 2).len(),
            2
        );
        assert!(rrf::<String>(vec![(1.0, vec![]), (1.0, vec![])], 60, 5).is_empty());
        let one = rrf(vec![(1.0, list(&["x", "y", "z"])), (1.0, vec![])], 60, 10);
        assert_eq!(order(&one), ["x", "y", "z"]);
    }

    #[test]
    fn the_first_lists_copy_of_an_id_is_kept() {
        let dense = vec![("a".to_string(), "dense copy".to_string())];
        let sparse = vec![("a".to_string(), "sparse copy".to_string())];
        let fused = rrf(vec![(1.0, dense), (1.0, sparse)], 60, 5);
        assert_eq!(order(&fused), ["dense copy"]);
    }

    #[test]
    fn weights_and_k_move_the_rrf_order() {
        let dense = scored(&[("d1", 0.9), ("both", 0.8), ("d3", 0.7)]);
        let bm25 = scored(&[("b1", 12.0), ("b2", 9.0), ("both", 3.0)]);
        let run = |f: Fusion| {
            let fused = f.fuse(dense.clone(), bm25.clone(), 10);
            order(&fused)
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        // Equal weights: "both" (2nd + 3rd) leads; b1 before d1 (id order) on the tie.
        assert_eq!(run(Fusion::default()), ["both", "b1", "d1", "b2", "d3"]);
        // BM25 weighted down to 0.1 (its 1st counts as a 10th): the dense order, then BM25's.
        let dense_led = Fusion::Rrf {
            k: 60,
            dense: 1.0,
            bm25: 0.1,
        };
        assert_eq!(run(dense_led), ["both", "d1", "d3", "b1", "b2"]);
        // A weight of 0 leaves that list's hits at 0, behind every other.
        let bm25_only = Fusion::Rrf {
            k: 60,
            dense: 0.0,
            bm25: 1.0,
        };
        assert_eq!(run(bm25_only), ["b1", "b2", "both", "d1", "d3"]);
    }

    #[test]
    fn a_small_rrf_k_favours_the_top_of_each_list() {
        let dense = scored(&[("d1", 0.9), ("d2", 0.8), ("d3", 0.7), ("both", 0.6)]);
        let bm25 = scored(&[("b1", 9.0), ("b2", 8.0), ("b3", 7.0), ("both", 6.0)]);
        let run = |k: usize| {
            let f = Fusion::Rrf {
                k,
                dense: 1.0,
                bm25: 1.0,
            };
            let fused = f.fuse(dense.clone(), bm25.clone(), 10);
            order(&fused)
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        // k = 60: two 4th places (2/63) beat one 1st (1/60).
        assert_eq!(run(60), ["both", "b1", "d1", "b2", "d2", "b3", "d3"]);
        // k = 2: a 1st place (1/2) beats two 4th places (2/5), which beat a 2nd (1/3).
        assert_eq!(run(2), ["b1", "d1", "both", "b2", "d2", "b3", "d3"]);
    }

    #[test]
    fn convex_adds_min_max_normalised_scores() {
        let dense = scored(&[("a", 0.9), ("b", 0.8), ("c", 0.5)]);
        let bm25 = scored(&[("c", 20.0), ("b", 15.0), ("x", 10.0)]);
        let fused = Fusion::Convex { dense: 0.7 }.fuse(dense, bm25, 10);
        // Normalised: dense a 1, b 0.75, c 0; BM25 c 1, b 0.5, x 0.
        // a 0.7; b 0.525 + 0.15 = 0.675; c 0.3; x 0.
        assert_eq!(order(&fused), ["a", "b", "c", "x"]);
        let want = [0.7, 0.675, 0.3, 0.0];
        for ((s, id), w) in fused.iter().zip(want) {
            assert!((s - w).abs() < 1e-6, "{id}: {s} vs {w}");
        }
        // Dense share 0.3: BM25 leads.
        let dense = scored(&[("a", 0.9), ("b", 0.8), ("c", 0.5)]);
        let bm25 = scored(&[("c", 20.0), ("b", 15.0), ("x", 10.0)]);
        let fused = Fusion::Convex { dense: 0.3 }.fuse(dense, bm25, 2);
        assert_eq!(order(&fused), ["c", "b"]);
    }

    #[test]
    fn convex_of_one_list_or_equal_scores_keeps_its_order() {
        // No BM25 terms (a query of stopwords): dense alone, in its order.
        let fused =
            Fusion::Convex { dense: 0.5 }.fuse(scored(&[("a", 0.4), ("b", 0.3)]), vec![], 5);
        assert_eq!(order(&fused), ["a", "b"]);
        assert!((fused[0].0 - 0.5).abs() < 1e-6 && fused[1].0.abs() < 1e-6);
        // Every score equal: each normalises to 1, in id order.
        let fused =
            Fusion::Convex { dense: 0.5 }.fuse(scored(&[("b", 0.4), ("a", 0.4)]), vec![], 5);
        assert_eq!(order(&fused), ["a", "b"]);
        assert_eq!(fused[0].0, fused[1].0);
    }

    #[test]
    fn equal_scores_fuse_to_the_same_list_in_whatever_order_a_store_returns_them() {
        // Identical vectors: three chunks the dense half scores alike, two BM25 ties, and
        // a limit that cuts through the tie. Every order of the tied entries gives one answer.
        let dense = [("c", 0.5), ("a", 0.5), ("b", 0.5), ("z", 0.4)];
        let bm25 = [("y", 3.0), ("x", 3.0), ("a", 1.0)];
        let permutations = |items: &[(&'static str, f32)]| -> Vec<Ranking<String>> {
            let mut all = Vec::new();
            let n = items.len();
            for i in 0..n {
                for j in 0..n {
                    let mut v = items.to_vec();
                    v.swap(0, i);
                    v.swap(1, j);
                    // Still best first: a store returns its list sorted by score.
                    v.sort_by(|a, b| b.1.total_cmp(&a.1));
                    all.push(scored(&v));
                }
            }
            all
        };
        for fusion in [
            Fusion::default(),
            Fusion::Convex { dense: 0.5 },
            Fusion::Rrf {
                k: 5,
                dense: 1.0,
                bm25: 2.0,
            },
        ] {
            let mut seen = std::collections::BTreeSet::new();
            for d in permutations(&dense) {
                for b in permutations(&bm25) {
                    let fused = fusion.fuse(d.clone(), b.clone(), 4);
                    let ids: Vec<(String, u32)> = fused
                        .iter()
                        .map(|(s, id)| (id.clone(), s.to_bits()))
                        .collect();
                    seen.insert(ids);
                }
            }
            assert_eq!(seen.len(), 1, "{fusion}: {seen:?}");
        }
        // Ties come back in id order: "a" (in both lists) leads plain RRF, then the rest by id.
        let fused = Fusion::default().fuse(scored(&dense), scored(&bm25), 4);
        assert_eq!(order(&fused), ["a", "x", "b", "y"]);
    }

    #[test]
    fn specs_parse_validate_and_print_back() {
        assert_eq!("rrf".parse::<Fusion>().unwrap(), Fusion::default());
        assert_eq!(
            " RRF:k=20:bm25=0.5 ".parse::<Fusion>().unwrap(),
            Fusion::Rrf {
                k: 20,
                dense: 1.0,
                bm25: 0.5
            }
        );
        assert_eq!(
            "convex".parse::<Fusion>().unwrap(),
            Fusion::Convex { dense: 0.5 }
        );
        for f in [
            Fusion::default(),
            Fusion::Rrf {
                k: 7,
                dense: 0.25,
                bm25: 2.5,
            },
            Fusion::Convex { dense: 0.85 },
        ] {
            assert_eq!(f.to_string().parse::<Fusion>().unwrap(), f, "{f}");
        }
        for (bad, says) in [
            ("", "unknown method"),
            ("dbsf", "unknown method \"dbsf\""),
            ("rrf:k=0", "k=0 is not a whole number from 1 to 10000"),
            ("rrf:k=2.5", "k=2.5 is not a whole number"),
            ("rrf:dense=-1", "dense=-1 is not a number from 0 to 100"),
            ("rrf:bm25=NaN", "bm25=NaN is not a number"),
            ("rrf:dense=0:bm25=0", "cannot both be 0"),
            ("rrf:k", "\"k\" is not name=value"),
            ("rrf:k=5:k=6", "k is given twice"),
            ("rrf:alpha=1", "rrf takes k, dense, bm25, not alpha"),
            ("convex:dense=1.5", "dense=1.5 is not a number from 0 to 1"),
            ("convex:k=5", "convex takes dense, not k"),
        ] {
            let e = bad.parse::<Fusion>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn tenants_get_their_own_rule_and_tune_rewrites_one() {
        let tenants =
            FusionConfig::parse_tenants("acme=convex:dense=0.7, globex=rrf:k=20").unwrap();
        let config = FusionConfig {
            default: Fusion::default(),
            tenants,
        };
        let t = |n: &str| crate::Tenant::new(n).unwrap();
        assert_eq!(config.for_tenant(&t("acme")), Fusion::Convex { dense: 0.7 });
        assert_eq!(config.for_tenant(&t("initech")), Fusion::default());
        let line = config.tenants_with(
            &t("acme"),
            Fusion::Rrf {
                k: 5,
                dense: 1.0,
                bm25: 0.3,
            },
        );
        assert_eq!(
            line,
            "acme=rrf:k=5:dense=1:bm25=0.3,globex=rrf:k=20:dense=1:bm25=1"
        );
        assert_eq!(FusionConfig::parse_tenants(&line).unwrap().len(), 2);
        for bad in ["acme", "a b=rrf", "acme=rrf,acme=convex", "acme=nope"] {
            assert!(FusionConfig::parse_tenants(bad).is_err(), "{bad}");
        }
    }
}
