//! Locality-sensitive hashing of query embeddings: random hyperplanes (SimHash).
//!
//! Each bit of a signature is the side of one hyperplane a vector falls on; two vectors at
//! angle θ agree on a bit with probability p = 1 − θ/π. A band of [`BITS`] bits is one
//! bucket; two vectors share a bucket in at least one of [`BANDS`] bands with probability
//! 1 − (1 − p^BITS)^BANDS:
//!
//! | cosine | p | share a bucket (10 × 10) |
//! |---|---|---|
//! | 0.97 | 0.922 | 99.7 % |
//! | 0.95 | 0.899 | 98.5 % |
//! | 0.90 | 0.856 | 91 % |
//! | 0.85 | 0.823 | 79 % |
//! | 0.50 | 0.667 | 16 % |
//! | 0.20 | 0.564 | 3.2 % |
//!
//! So a cached question at the default threshold (0.9) is found with ≥ 91 % probability
//! (98.5 % from 0.95) while unrelated entries (cosine 0–0.3 with MiniLM) are rarely read.
//! 1024 buckets per band keep the entries read per lookup small, and 10 bands are 10
//! lookups, run in parallel.
//!
//! The hyperplanes must be the same in every process and after every restart (entries
//! outlive processes in DynamoDB), so they come from a fixed seed through integer
//! arithmetic only: no platform math library is involved.

use sluice_contract::cache::BANDS;
/// Bits per band: each band has 2^BITS buckets.
pub const BITS: usize = 10;
/// Changing the seed, [`BANDS`] or [`BITS`] orphans existing entries' buckets (they still
/// match by exact key until they expire).
const SEED: u64 = 0x51ce_00c0_ffee_cafe;

/// The hyperplanes for one embedding dimension.
#[derive(Debug, Clone)]
pub struct Lsh {
    dim: usize,
    /// `BANDS * BITS` normals of `dim` components each, row after row.
    planes: Vec<f32>,
}

impl Lsh {
    /// The hyperplanes for vectors of `dim` components.
    pub fn new(dim: usize) -> Self {
        let mut state = SEED;
        let mut planes = Vec::with_capacity(BANDS * BITS * dim);
        for _ in 0..BANDS * BITS * dim {
            // Irwin–Hall: the sum of 12 uniforms minus 6 is close to a standard normal, so
            // the normals point in uniformly random directions, as SimHash assumes.
            let sum: f64 = (0..12).map(|_| uniform(&mut state)).sum();
            planes.push((sum - 6.0) as f32);
        }
        Self { dim, planes }
    }

    /// Embedding dimension these hyperplanes are for.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The bucket of `vector` in each band (`BANDS` values below 2^BITS).
    pub fn buckets(&self, vector: &[f32]) -> Vec<u32> {
        self.planes
            .chunks_exact(self.dim * BITS)
            .map(|band| {
                band.chunks_exact(self.dim).fold(0u32, |sig, normal| {
                    let dot: f32 = normal.iter().zip(vector).map(|(a, b)| a * b).sum();
                    sig << 1 | u32::from(dot >= 0.0)
                })
            })
            .collect()
    }
}

/// splitmix64, as a uniform double in [0, 1) (53 bits, exact).
fn uniform(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: Vec<f32>) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    /// A unit vector at cosine `c` from `base` (both unit; `other` orthogonalised first).
    fn at_cosine(base: &[f32], other: &[f32], c: f32) -> Vec<f32> {
        let d: f32 = base.iter().zip(other).map(|(a, b)| a * b).sum();
        let ortho = unit(other.iter().zip(base).map(|(o, b)| o - d * b).collect());
        let s = (1.0 - c * c).sqrt();
        base.iter()
            .zip(&ortho)
            .map(|(b, o)| c * b + s * o)
            .collect()
    }

    fn random_unit(state: &mut u64, dim: usize) -> Vec<f32> {
        unit((0..dim).map(|_| uniform(state) as f32 - 0.5).collect())
    }

    #[test]
    fn buckets_are_deterministic_and_in_range() {
        let a = Lsh::new(384);
        let b = Lsh::new(384);
        let mut state = 7;
        let v = random_unit(&mut state, 384);
        let buckets = a.buckets(&v);
        assert_eq!(buckets.len(), BANDS);
        assert_eq!(buckets, b.buckets(&v));
        assert!(buckets.iter().all(|&s| s < 1 << BITS));
    }

    /// At each cosine of the module's table, the share of pairs that meet in a bucket is the
    /// table's odds, within four standard errors of 2,000 pairs; and the table's odds are
    /// the formula's.
    #[test]
    fn pairs_share_a_bucket_at_the_odds_the_table_states() {
        let lsh = Lsh::new(384);
        let mut state = 11;
        let trials = 2000;
        let table = [
            (0.97, 0.997),
            (0.95, 0.985),
            (0.90, 0.91),
            (0.85, 0.79),
            (0.50, 0.16),
            (0.20, 0.032),
        ];
        for (cosine, stated) in table {
            let p = 1.0 - f64::acos(cosine) / std::f64::consts::PI;
            let odds = 1.0 - (1.0 - p.powi(BITS as i32)).powi(BANDS as i32);
            assert!(
                (odds - stated).abs() < 0.006,
                "cosine {cosine}: {odds:.3} stated {stated}"
            );
            let mut met = 0;
            for _ in 0..trials {
                let base = random_unit(&mut state, 384);
                let other = random_unit(&mut state, 384);
                let v = at_cosine(&base, &other, cosine as f32);
                let (a, b) = (lsh.buckets(&base), lsh.buckets(&v));
                met += usize::from(a.iter().zip(&b).any(|(x, y)| x == y));
            }
            let seen = met as f64 / trials as f64;
            let error = (odds * (1.0 - odds) / trials as f64).sqrt();
            assert!(
                (seen - odds).abs() <= 4.0 * error + 0.005,
                "cosine {cosine}: {met}/{trials} pairs met, {odds:.3} expected"
            );
        }
    }
}
