//! Sluice's attention operator against the same encoder with its attention written out, the
//! two graphs run in alternation (pairs of runs, so that both meet the same noise).
//!
//! ```text
//! scripts/minilm.py export-unfused WEIGHTS_DIR /tmp/unfused/model.onnx
//! cargo run --profile dev -p sluice-embed --example attention -- MODEL_DIR /tmp/unfused/model.onnx [--all-cores]
//! ```
//!
//! Prints, per length, each graph's p50 and the p50 of the pairs' ratios (Sluice's / written
//! out). The graphs alone: no tokenizer, table reads or pooling.

use std::time::Instant;

use tract_onnx::prelude::*;

const PAIRS: usize = 60;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> TractResult<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // --all-cores: let the flash kernel spread a text's heads over every core (rayon), as
    // tract does by default, for the idle-core case; Sluice runs it on one thread.
    let all_cores = args.iter().any(|a| a == "--all-cores");
    args.retain(|a| a != "--all-cores");
    let [dir, unfused] = args.as_slice() else {
        tract_nnef::tract_core::internal::bail!("usage: attention MODEL_DIR UNFUSED.onnx");
    };
    let dir = std::path::Path::new(dir);
    let graph = |path: &std::path::Path, sluice: bool| -> TractResult<_> {
        let mut model = tract_onnx::onnx()
            .model_for_path(path)?
            .into_typed()?
            .into_decluttered()?;
        if sluice {
            sluice_embed::attention::replace_sdpa(&mut model)?;
        }
        model.into_optimized()?.into_runnable()
    };
    // As MiniLm::load sets it: one thread per text.
    if !all_cores {
        tract_nnef::tract_core::knobs::set_str("TRACT_FLASH_SDPA_ST", "true");
    }
    let written_out = graph(std::path::Path::new(unfused), false)?;
    let sluice = graph(&dir.join("model.onnx"), true)?;
    let table = std::fs::read(dir.join(sluice_embed::TABLE_FILE))?;
    let row = sluice_embed::DIM * 4;
    for tokens in [12usize, 24, 32, 48, 64, 128] {
        // Rows of ordinary tokens (ids 1000, 1037, …) as the input.
        let rows: Vec<f32> = (0..tokens)
            .flat_map(|i| table[(1000 + 37 * i) * row..][..row].chunks_exact(4))
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let input = Tensor::from_shape(&[1, tokens, sluice_embed::DIM], &rows)?;
        let (mut a, mut b, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..PAIRS {
            let t = Instant::now();
            written_out.run(tvec!(input.clone().into()))?;
            let x = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            sluice.run(tvec!(input.clone().into()))?;
            let y = t.elapsed().as_secs_f64() * 1e3;
            a.push(x);
            b.push(y);
            ratio.push(y / x);
        }
        println!(
            "{tokens:>3} tokens: attention written out p50 {:.2} ms, Sluice's operator p50 {:.2} ms, ratio p50 {:.2}",
            p50(a),
            p50(b),
            p50(ratio)
        );
    }
    Ok(())
}
