//! Where a query embedding's time goes in tract: per operator, at 12, 64 and 128 tokens.
//!
//! `cargo run --profile dev -p sluice-embed --example profile -- [MODEL_DIR] [--fixed]
//! [--tract-sdpa] [--lengths=12,64,128]` (default `SLUICE_MODEL_DIR`). The graph is the one
//! Sluice runs (its attention operator in place of tract's `Sdpa`, whose time then includes
//! the written-out block it runs beyond 48 tokens); `--tract-sdpa` profiles tract's own
//! lowering instead, `--fixed` a plan built for each length.
//!
//! Prints, per length, the whole `MiniLm::embed` (tokenizer, table rows, graph, pooling) and
//! the graph alone, both p50 over the runs, then the graph's nodes grouped by operator (a
//! matmul with its shape and the kernel tract chose): time per run and share. The time
//! outside every node's `eval` is the plan's own (scheduling, freeing values).
//! onnxruntime's counterpart is `scripts/bench_ort.py --profile MODEL_DIR`.

use std::collections::BTreeMap;
use std::time::Instant;

use sluice_contract::stages::Embedder;
use sluice_embed::MiniLm;
use tract_onnx::prelude::*;

const RUNS: usize = 200;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> TractResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // --fixed: a plan built for each length (the sequence axis concrete) instead of the one
    // symbolic plan Sluice runs, to see what tract's kernel choice makes of a known length.
    let fixed = args.iter().any(|a| a == "--fixed");
    // --tract-sdpa: the attention as tract lowers its `Sdpa` (the flash kernel at every
    // length) instead of Sluice's operator.
    let tract_sdpa = args.iter().any(|a| a == "--tract-sdpa");
    let dir = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_else(|| {
            std::env::var("SLUICE_MODEL_DIR").expect("MODEL_DIR or SLUICE_MODEL_DIR")
        });
    let dir = std::path::Path::new(&dir);
    let model = MiniLm::load(dir)?;
    let plan = |tokens: Option<usize>| -> TractResult<_> {
        let mut graph = tract_onnx::onnx().model_for_path(dir.join("model.onnx"))?;
        if let Some(n) = tokens {
            graph = graph.with_input_fact(0, f32::fact([1, n, sluice_embed::DIM]).into())?;
        }
        let mut graph = graph.into_typed()?.into_decluttered()?;
        if !tract_sdpa {
            sluice_embed::attention::replace_sdpa(&mut graph)?;
        }
        graph.into_optimized()?.into_runnable()
    };
    // As MiniLm::load sets it: one thread per text.
    tract_nnef::tract_core::knobs::set_str("TRACT_FLASH_SDPA_ST", "true");
    let symbolic = plan(None)?;
    let table = std::fs::read(dir.join(sluice_embed::TABLE_FILE))?;
    let words = "the bank sends international payments over the swift network and a transfer costs a flat fee plus any fees charged by correspondent banks along the way";
    // --lengths=12,24: other lengths than the benchmark's three.
    let lengths: Vec<usize> = args
        .iter()
        .find_map(|a| a.strip_prefix("--lengths="))
        .map_or(Ok(vec![12, 64, 128]), |l| {
            l.split(',').map(str::parse).collect::<Result<_, _>>()
        })?;
    for tokens in lengths {
        let text: String = words
            .split(' ')
            .cycle()
            .take(tokens - 2)
            .collect::<Vec<_>>()
            .join(" ");
        let ids = model.ids(&text)?;
        let ids = &ids[..tokens.min(ids.len())];
        let whole: Vec<f64> = (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                model.embed(&[text.as_str()]).expect("embedding");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        let rows: Vec<f32> = ids
            .iter()
            .flat_map(|&id| {
                let at = id as usize * sluice_embed::DIM * 4;
                table[at..at + sluice_embed::DIM * 4]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            })
            .collect();
        let input = Tensor::from_shape(&[1, ids.len(), sluice_embed::DIM], &rows)?;
        let graph = if fixed {
            plan(Some(ids.len()))?
        } else {
            symbolic.clone()
        };
        // A matmul's label says its shape and the kernel tract chose ("Mult: m:384 k:1536
        // n:seq with [..]"): dense layers and the attention's two products apart.
        let mut labels = Vec::new();
        for node in graph.model().nodes() {
            let info = node.op().info()?;
            let mult = info.iter().find_map(|l| l.strip_prefix("Mult: "));
            labels.push(match mult {
                Some(m) => format!("{} {m}", node.op().name()),
                None => node.op().name().to_string(),
            });
        }
        let mut state = tract_nnef::tract_core::plan::SimpleState::new(&graph)?;
        let mut by_op: BTreeMap<String, f64> = BTreeMap::new();
        let mut alone = Vec::new();
        for run in 0..RUNS {
            let t = Instant::now();
            state.run_plan_with_eval(
                tvec!(input.clone().into()),
                |ctx, op_state, node, inputs| {
                    let t = Instant::now();
                    let out = tract_nnef::tract_core::plan::eval(ctx, op_state, node, inputs);
                    if run > 0 {
                        *by_op.entry(labels[node.id].clone()).or_default() +=
                            t.elapsed().as_secs_f64() * 1e3;
                    }
                    out
                },
            )?;
            alone.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let graph_ms = p50(alone.clone());
        let mean = alone.iter().sum::<f64>() / RUNS as f64;
        println!(
            "{tokens} tokens: embed p50 {:.2} ms; graph p50 {graph_ms:.2} ms (mean {mean:.2})",
            p50(whole)
        );
        let mut ops: Vec<_> = by_op.into_iter().collect();
        ops.sort_by(|a, b| b.1.total_cmp(&a.1));
        let counted: f64 = ops.iter().map(|(_, t)| t).sum::<f64>() / (RUNS - 1) as f64;
        for (op, total) in ops {
            let per_run = total / (RUNS - 1) as f64;
            println!(
                "  {per_run:>7.3} ms {:>5.1} %  {op}",
                per_run / mean * 100.0
            );
        }
        println!(
            "  {:>7.3} ms {:>5.1} %  (outside the nodes)",
            mean - counted,
            (mean - counted) / mean * 100.0
        );
    }
    Ok(())
}
