//! Seeded randomness for measurements, not for anything secret: a run is repeatable by its
//! seed on every machine — the load generator's Poisson gaps, `sluice eval`'s split and
//! bootstrap, the test kit's generated cases.

/// A small seeded generator (SplitMix64).
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n ≥ 1; the modulo's bias is below 2⁻⁴⁰ for n < 2²⁴).
    pub fn below(&mut self, n: usize) -> usize {
        (self.bits() % n as u64) as usize
    }

    /// An exponential gap in seconds with mean `1 / rate`.
    pub fn exponential(&mut self, rate: f64) -> f64 {
        // Uniform in (0, 1]: never ln(0).
        let u = ((self.bits() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        -u.ln() / rate
    }
}
