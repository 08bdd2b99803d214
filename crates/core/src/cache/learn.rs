//! A tenant's similarity threshold learned from its own traffic, under a stated bound on the
//! rate of wrong answers.
//!
//! The verified-cache idea (vCache): some cache candidates are also answered by the LLM, and
//! the two answers compared. Each comparison is an observation — the candidate's cosine to
//! the question, and whether the answers were the same. Observations are sampled at one rate
//! over every candidate the guard passed, above the threshold (an explored hit) and below it
//! (a near miss, answered by the LLM anyway), so that among the observations at or above a
//! cosine `t` the share of different answers estimates the false-hit rate the tenant would
//! see with threshold `t`. The learned threshold is the lowest `t` whose estimate is under the
//! tenant's bound with 95 % confidence (the Wilson score interval's upper end), among the
//! cosines observed (no threshold goes below the evidence). Where no `t`
//! is, the configured threshold stays — unless the observations above it already show, with
//! the same confidence, a rate over the bound: then nothing is answered by similarity until
//! the evidence says otherwise.
//!
//! Per tenant, not per entry as in vCache: one entry is rarely asked often enough to bound
//! its own error at 1 %, a tenant's traffic is. A bound of 1 % needs about 270 same answers
//! and no different one above a threshold before it moves there.

use serde::Serialize;

/// The cosines observed, in bins of [`BIN`] from [`FLOOR`] up.
pub const FLOOR: f32 = 0.8;
/// The width of a bin.
pub const BIN: f32 = 0.005;
const BINS: usize = 40;
/// z of the one-sided 95 % bound.
const Z: f64 = 1.645;

/// A tenant's comparisons, by cosine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observations {
    seen: [u32; BINS],
    different: [u32; BINS],
}

impl Default for Observations {
    fn default() -> Self {
        Self {
            seen: [0; BINS],
            different: [0; BINS],
        }
    }
}

/// What the observations say, for metrics and the API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Comparisons made.
    pub observations: u32,
    /// Of which the answers differed.
    pub different: u32,
    /// The threshold the tenant's lookups use now (to 4 decimals).
    pub threshold: f64,
    /// Whether `threshold` was learned (otherwise the configured one, or 1.0 while the
    /// observations show too many different answers above it).
    pub learned: bool,
    /// Share of different answers among the observations at or above `threshold` (at or above
    /// the configured one when that was refuted and `threshold` is 1.0).
    pub false_hit_rate: f64,
    /// Its 95 % upper bound.
    pub false_hit_rate_upper: f64,
    /// Observations at or above `threshold`.
    pub observations_above: u32,
}

impl Observations {
    /// Records one comparison at `similarity`; `same` when the answers were judged the same.
    /// Cosines under [`FLOOR`] are not kept (no threshold goes there).
    pub fn record(&mut self, similarity: f32, same: bool) {
        if let Some(bin) = bin(similarity) {
            self.seen[bin] = self.seen[bin].saturating_add(1);
            if !same {
                self.different[bin] = self.different[bin].saturating_add(1);
            }
        }
    }

    /// Comparisons and different answers at or above bin `from`.
    fn above(&self, from: usize) -> (u32, u32) {
        (
            self.seen[from..].iter().sum(),
            self.different[from..].iter().sum(),
        )
    }

    /// The threshold to use instead of `configured` under `bound` (a false-hit rate, 0.01
    /// for 1 %), and what the observations say at it.
    pub fn estimate(&self, configured: f32, bound: f64) -> Estimate {
        // A threshold goes only where there is evidence: a bin with observations of its own.
        let learned = (0..BINS).find(|&b| {
            let (n, wrong) = self.above(b);
            self.seen[b] > 0 && wilson(wrong, n).1 <= bound
        });
        let (threshold, from, learned) = match learned {
            Some(b) => (FLOOR + b as f32 * BIN, Some(b), true),
            None => {
                let from = bin(configured);
                let (n, wrong) = from.map_or((0, 0), |b| self.above(b));
                // Too many different answers above the configured threshold, with confidence.
                if n > 0 && wilson(wrong, n).0 > bound {
                    // The figures reported are those that refuted the configured threshold.
                    (1.0, from, false)
                } else {
                    (configured, from, false)
                }
            }
        };
        let (n, wrong) = from.map_or((0, 0), |b| self.above(b));
        let (_, upper) = if n == 0 { (0.0, 1.0) } else { wilson(wrong, n) };
        Estimate {
            observations: self.seen.iter().sum(),
            different: self.different.iter().sum(),
            threshold: rounded(threshold),
            learned,
            false_hit_rate: if n == 0 {
                0.0
            } else {
                f64::from(wrong) / f64::from(n)
            },
            false_hit_rate_upper: upper,
            observations_above: n,
        }
    }
}

/// Two answers are the same when they cite the same documents, state the same facts as far
/// as words tell ([`same_facts`](super::guard::same_facts)), and their texts' embeddings are
/// at least this close.
pub const SAME_ANSWER: f32 = 0.9;

/// Whether to compare this candidate: true for a `rate` share of calls, drawn afresh each
/// time (a random hasher's output).
pub fn sampled(rate: f64) -> bool {
    use std::hash::BuildHasher;
    let draw = std::collections::hash_map::RandomState::new().hash_one(0u8);
    ((draw >> 11) as f64 / (1u64 << 53) as f64) < rate
}

/// A cosine as people read it: 0.9, not 0.8999999761581421.
pub fn rounded(cosine: f32) -> f64 {
    (f64::from(cosine) * 10_000.0).round() / 10_000.0
}

/// The bin of `similarity`, `None` under [`FLOOR`].
fn bin(similarity: f32) -> Option<usize> {
    // A cosine on an edge (0.825, say, which f32 holds as 4.9999… bins up) counts in the bin it
    // starts: so a threshold at a bin's edge and that bin mean the same cosines.
    (similarity >= FLOOR).then(|| (((similarity - FLOOR) / BIN + 1e-3) as usize).min(BINS - 1))
}

/// The Wilson score interval of `k` in `n` at one-sided 95 %: (lower, upper).
fn wilson(k: u32, n: u32) -> (f64, f64) {
    let (k, n) = (f64::from(k), f64::from(n));
    let p = k / n;
    let z2 = Z * Z;
    let centre = p + z2 / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    let scale = 1.0 + z2 / n;
    (
        ((centre - spread) / scale).max(0.0),
        ((centre + spread) / scale).min(1.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_observations_keep_the_configured_threshold() {
        let e = Observations::default().estimate(0.9, 0.01);
        assert_eq!((e.threshold, e.learned, e.observations), (0.9, false, 0));
    }

    #[test]
    fn the_threshold_moves_down_only_with_enough_same_answers() {
        let mut o = Observations::default();
        // 200 same answers at 0.85 and above: the bound at 1 % needs more.
        for i in 0..200 {
            o.record(0.85 + (i % 20) as f32 * 0.007, true);
        }
        assert!(!o.estimate(0.9, 0.01).learned);
        for i in 0..200 {
            o.record(0.85 + (i % 20) as f32 * 0.007, true);
        }
        let e = o.estimate(0.9, 0.01);
        assert!(e.learned, "{e:?}");
        assert!((e.threshold - 0.85).abs() < 1e-6, "{e:?}");
        assert!(e.false_hit_rate_upper <= 0.01);
    }

    #[test]
    fn different_answers_keep_the_threshold_above_them() {
        let mut o = Observations::default();
        for i in 0..2000 {
            o.record(0.8 + (i % 40) as f32 * BIN, true);
        }
        // Different answers low down: the threshold stays above where they are.
        for _ in 0..30 {
            o.record(0.822, false);
        }
        let e = o.estimate(0.95, 0.01);
        assert!(e.learned && e.threshold > 0.822, "{e:?}");
        assert!(e.false_hit_rate_upper <= 0.01, "{e:?}");
    }

    #[test]
    fn many_different_answers_above_the_configured_threshold_stop_similar_hits() {
        let mut o = Observations::default();
        for i in 0..100 {
            o.record(0.96, i % 5 != 0);
        }
        let e = o.estimate(0.95, 0.01);
        assert_eq!((e.threshold, e.learned), (1.0, false), "{e:?}");
    }

    #[test]
    fn sampling_draws_about_its_rate() {
        let drawn = (0..20_000).filter(|_| sampled(0.1)).count();
        assert!((1_600..2_400).contains(&drawn), "{drawn}");
        assert!(!(0..1000).any(|_| sampled(0.0)));
    }

    #[test]
    fn wilson_bounds_contain_the_rate() {
        let (lo, hi) = wilson(0, 300);
        assert_eq!(lo, 0.0);
        assert!(hi < 0.01 && hi > 0.008, "{hi}");
        let (lo, hi) = wilson(10, 100);
        assert!(lo < 0.1 && hi > 0.1);
    }
}
