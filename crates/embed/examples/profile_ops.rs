//! Where the embedding time goes: runs the ONNX model on one sequence of N tokens and prints
//! the time per tract operator, summed over runs (median-free, for orientation only).
//!
//! ```sh
//! cargo run --profile dev -p sluice-embed --example profile_ops -- MODEL_DIR/model.onnx 128
//! ```

use std::collections::HashMap;
use std::time::Instant;

use tract_onnx::prelude::*;

const WARM_UP: usize = 3;
const RUNS: usize = 10;

fn main() -> TractResult<()> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(tokens)) = (args.next(), args.next()) else {
        eprintln!("usage: profile_ops MODEL.onnx TOKENS");
        std::process::exit(2);
    };
    let tokens: usize = tokens.parse()?;
    let plan = tract_onnx::onnx()
        .model_for_path(&path)?
        .into_optimized()?
        .into_runnable()?;
    // The graph's input is the tokens' word embeddings (their values do not change the work).
    let ids = Tensor::from_shape(&[1, tokens, 384], &vec![0.01f32; tokens * 384])?;
    let mut per_op: HashMap<String, f64> = HashMap::new();
    for run in 0..WARM_UP + RUNS {
        let mut state = plan.spawn()?;
        let started = Instant::now();
        state.run_plan_with_eval(tvec!(ids.clone().into()), |ctx, op_state, node, input| {
            let t = Instant::now();
            let out = tract_onnx::tract_core::plan::eval(ctx, op_state, node, input);
            if run >= WARM_UP {
                *per_op.entry(node.op().name().to_string()).or_default() +=
                    t.elapsed().as_secs_f64();
            }
            out
        })?;
        if run >= WARM_UP {
            *per_op.entry("(total)".into()).or_default() += started.elapsed().as_secs_f64();
        }
    }
    let mut rows: Vec<_> = per_op.into_iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (op, seconds) in rows.iter().take(12) {
        println!("{:8.2} ms  {op}", seconds * 1e3 / RUNS as f64);
    }
    Ok(())
}
