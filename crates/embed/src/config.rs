//! The embedding model's section of the configuration: where its package is, and how much of
//! the machine it may use.

use std::path::PathBuf;

use sluice_contract::settings::{self, ConfigError, ranged};

/// `SLUICE_MODEL_DIR`, `SLUICE_EMBED_WINDOWS`, `SLUICE_EMBED_THREADS`.
#[derive(Debug, Clone)]
pub struct EmbedConfig {
    /// `SLUICE_MODEL_DIR`: `model.onnx`, `word_embeddings.f32` and `tokenizer.json` of the
    /// embedding model (and `model.nnef.tar` where it was prepared).
    pub model_dir: PathBuf,
    /// `SLUICE_EMBED_WINDOWS`: most windows of the model's 256 tokens a long text (a long
    /// question) is read in; 1 reads only the first, as truncation does.
    pub windows: usize,
    /// `SLUICE_EMBED_THREADS`: threads a batch of texts (an ingest's chunks) is embedded on;
    /// a query is always one text on one thread. Default: the cores this process may use.
    pub threads: usize,
}

impl EmbedConfig {
    /// Reads the section through `get` (blank values already unset).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Ok(EmbedConfig {
            model_dir: settings::model_dir(get),
            windows: ranged(get, "SLUICE_EMBED_WINDOWS", 4, 1, 16)?,
            threads: ranged(get, "SLUICE_EMBED_THREADS", cores(), 1, 256)?,
        })
    }
}

/// The cores this process may use (its CPU affinity, cgroup quota included), at most 256.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(256))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_contract::settings::pairs;

    #[test]
    fn defaults_and_bounds() {
        let c = EmbedConfig::from_lookup(&pairs(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(
            c.model_dir,
            PathBuf::from("/home/u/.cache/sluice/models/all-MiniLM-L6-v2")
        );
        assert_eq!(c.windows, 4);
        assert!(c.threads >= 1);
        let set = pairs(&[("SLUICE_MODEL_DIR", "/m"), ("SLUICE_EMBED_THREADS", "3")]);
        let c = EmbedConfig::from_lookup(&set).unwrap();
        assert_eq!((c.model_dir, c.threads), (PathBuf::from("/m"), 3));
        let e = EmbedConfig::from_lookup(&pairs(&[("SLUICE_EMBED_WINDOWS", "17")])).unwrap_err();
        assert_eq!(e.name, "SLUICE_EMBED_WINDOWS");
    }
}
