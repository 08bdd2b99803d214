//! A deterministic embedder: no model, same text same vector.

use sluice_contract::error::EmbedError;
use sluice_contract::stages::Embedder;

/// Vectors made by hashing each word of a text (lower-cased, split at anything that is not a
/// letter or digit) into one of `dim` components, then L2-normalised: texts that share words
/// are close, and the same text always gives the same vector. A token is a word.
pub struct HashEmbedder {
    dim: usize,
}

impl HashEmbedder {
    /// Dimension of the vectors unless told otherwise: the real model's.
    pub const DIM: usize = 384;

    /// Vectors of [`HashEmbedder::DIM`] components.
    pub fn new() -> Self {
        Self::with_dim(Self::DIM)
    }

    /// Vectors of `dim` components (at least 2).
    pub fn with_dim(dim: usize) -> Self {
        Self { dim: dim.max(2) }
    }

    /// The words a text is made of, as this embedder sees them.
    pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
    }

    fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        for word in Self::words(text) {
            // FNV-1a: stable across runs and platforms (std's hasher is seeded per process).
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in word.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            // Component 0 is kept for texts without words.
            v[1 + (h % (self.dim as u64 - 1)) as usize] += 1.0;
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 {
            v[0] = 1.0;
        } else {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

impl Default for HashEmbedder {
    fn default() -> Self {
        Self::new()
    }
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        "hash-embedder"
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }
    fn count_tokens(&self, text: &str) -> usize {
        Self::words(text).count()
    }
}

/// A hook run before a call of [`Hooked`]: it may hold the call, or fail it.
type EmbedHook = Box<dyn Fn(&[&str]) -> Result<(), EmbedError> + Send + Sync>;
/// A hook run before a token count of [`Hooked`].
type CountHook = Box<dyn Fn(&str) + Send + Sync>;

/// The [`HashEmbedder`] with hooks run before each embedding and each token count: a double
/// that watches, holds or fails what passes, the hooks being the test's own code.
pub struct Hooked {
    inner: HashEmbedder,
    before_embed: EmbedHook,
    before_count: CountHook,
}

impl Hooked {
    /// Hooks that do nothing.
    pub fn new() -> Self {
        Self {
            inner: HashEmbedder::new(),
            before_embed: Box::new(|_| Ok(())),
            before_count: Box::new(|_| {}),
        }
    }

    /// Runs `hook` before each embedding; its error is the call's.
    pub fn on_embed(
        mut self,
        hook: impl Fn(&[&str]) -> Result<(), EmbedError> + Send + Sync + 'static,
    ) -> Self {
        self.before_embed = Box::new(hook);
        self
    }

    /// Runs `hook` before each token count.
    pub fn on_count(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.before_count = Box::new(hook);
        self
    }
}

impl Default for Hooked {
    fn default() -> Self {
        Self::new()
    }
}

impl Embedder for Hooked {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
    fn dim(&self) -> usize {
        self.inner.dim()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (self.before_embed)(texts)?;
        self.inner.embed(texts)
    }
    fn count_tokens(&self, text: &str) -> usize {
        (self.before_count)(text);
        self.inner.count_tokens(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn the_same_text_gives_the_same_unit_vector_and_shared_words_bring_texts_close() {
        let e = HashEmbedder::new();
        let v = e
            .embed(&["Lost card", "lost CARD!", "ATM limits", ""])
            .unwrap();
        assert_eq!(v[0], v[1]);
        assert!((cosine(&v[0], &v[0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&v[0], &v[2]) < 0.5);
        assert!(
            (cosine(&v[3], &v[3]) - 1.0).abs() < 1e-6,
            "a text without words"
        );
        assert_eq!(e.count_tokens("a lost card"), 3);
    }
}
