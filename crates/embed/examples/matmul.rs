//! The encoder's dense projections one at a time: tract's matmul (the kernel it picks for a
//! symbolic length, as in the model) against a register-blocked kernel written here (AVX2 +
//! FMA: 6 token rows × 16 outputs in registers, each weight read once per 6 tokens), the two
//! run in alternation. What "a dense operator of Sluice's own" would buy before it is wired
//! into the graph.
//!
//! ```text
//! cargo run --profile dev -p sluice-embed --example matmul [-- 12,24,64,128]
//! cargo run --profile dev -p sluice-embed --features multithread-mm --example matmul   # tract on 2 threads
//! scripts/bench_ort.py --matmul 1|2                                                   # onnxruntime's side
//! ```
//!
//! Prints, per shape (x[T,K]·W[K,M], W constant) and length T, the p50 of each and of the
//! pairs' ratios. Both sum in the same order, so their outputs are checked equal to 1e-4.

use std::time::Instant;

use tract_nnef::tract_core::internal::*;
use tract_nnef::tract_core::ops::einsum::EinSum;

/// The encoder's projections, (K, M): Q, K, V and the attention output; the FFN up; its down.
const SHAPES: [(usize, usize); 3] = [(384, 384), (384, 1536), (1536, 384)];
const PAIRS: usize = 41;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// W packed in panels of 16 outputs, each panel k-major (16 contiguous floats per k).
struct Packed {
    k: usize,
    m: usize,
    panels: Vec<f32>,
}

const PANEL: usize = 16;
const ROWS: usize = 6;

impl Packed {
    fn new(w: &[f32], k: usize, m: usize) -> Self {
        let mut panels = vec![0f32; m.div_ceil(PANEL) * PANEL * k];
        for (i, v) in w.iter().enumerate() {
            let (kk, col) = (i / m, i % m);
            panels[((col / PANEL) * k + kk) * PANEL + col % PANEL] = *v;
        }
        Self { k, m, panels }
    }

    /// out[T,M] = x[T,K]·W.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run(&self, x: &[f32], t: usize, out: &mut [f32]) {
        use std::arch::x86_64::*;
        let (k, m) = (self.k, self.m);
        // x in blocks of ROWS tokens, k-major: the ROWS values of one k side by side.
        let blocks = t.div_ceil(ROWS);
        let mut xp = vec![0f32; blocks * k * ROWS];
        for (row, values) in x.chunks_exact(k).enumerate() {
            let (b, r) = (row / ROWS, row % ROWS);
            for (kk, v) in values.iter().enumerate() {
                xp[(b * k + kk) * ROWS + r] = *v;
            }
        }
        for p in 0..m.div_ceil(PANEL) {
            let w = &self.panels[p * k * PANEL..][..k * PANEL];
            for b in 0..blocks {
                let xb = &xp[b * k * ROWS..][..k * ROWS];
                // SAFETY: every load reads inside `w` (16 floats at kk·16 < k·16) or `xb`
                // (one float), and the caller checked the CPU has AVX2 and FMA.
                // Six rows written out: the twelve accumulators stay in registers at any
                // optimisation level (a loop over an array of them spills at opt-level 2).
                let z = _mm256_setzero_ps();
                let (mut a0, mut a1, mut a2, mut a3, mut a4, mut a5) = (z, z, z, z, z, z);
                let (mut b0, mut b1, mut b2, mut b3, mut b4, mut b5) = (z, z, z, z, z, z);
                let (mut wp, mut xq) = (w.as_ptr(), xb.as_ptr());
                for _ in 0..k {
                    unsafe {
                        let (w0, w1) = (_mm256_loadu_ps(wp), _mm256_loadu_ps(wp.add(8)));
                        let v = _mm256_broadcast_ss(&*xq);
                        (a0, b0) = (_mm256_fmadd_ps(v, w0, a0), _mm256_fmadd_ps(v, w1, b0));
                        let v = _mm256_broadcast_ss(&*xq.add(1));
                        (a1, b1) = (_mm256_fmadd_ps(v, w0, a1), _mm256_fmadd_ps(v, w1, b1));
                        let v = _mm256_broadcast_ss(&*xq.add(2));
                        (a2, b2) = (_mm256_fmadd_ps(v, w0, a2), _mm256_fmadd_ps(v, w1, b2));
                        let v = _mm256_broadcast_ss(&*xq.add(3));
                        (a3, b3) = (_mm256_fmadd_ps(v, w0, a3), _mm256_fmadd_ps(v, w1, b3));
                        let v = _mm256_broadcast_ss(&*xq.add(4));
                        (a4, b4) = (_mm256_fmadd_ps(v, w0, a4), _mm256_fmadd_ps(v, w1, b4));
                        let v = _mm256_broadcast_ss(&*xq.add(5));
                        (a5, b5) = (_mm256_fmadd_ps(v, w0, a5), _mm256_fmadd_ps(v, w1, b5));
                        wp = wp.add(PANEL);
                        xq = xq.add(ROWS);
                    }
                }
                let acc = [[a0, b0], [a1, b1], [a2, b2], [a3, b3], [a4, b4], [a5, b5]];
                let cols = PANEL.min(m - p * PANEL);
                for (r, a) in acc.iter().enumerate().take(t - b * ROWS) {
                    let mut tile = [0f32; PANEL];
                    unsafe {
                        _mm256_storeu_ps(tile.as_mut_ptr(), a[0]);
                        _mm256_storeu_ps(tile.as_mut_ptr().add(8), a[1]);
                    }
                    out[(b * ROWS + r) * m + p * PANEL..][..cols].copy_from_slice(&tile[..cols]);
                }
            }
        }
    }
}

fn main() -> TractResult<()> {
    #[cfg(not(target_arch = "x86_64"))]
    bail!("the hand-written kernel is for x86_64 (AVX2 and FMA)");
    #[cfg(target_arch = "x86_64")]
    {
        ensure!(
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            "the hand-written kernel needs AVX2 and FMA"
        );
        #[cfg(feature = "multithread-mm")]
        {
            use tract_linalg::multithread::{Executor, set_default_executor};
            set_default_executor(Executor::multithread(2));
            println!("tract's matmuls on 2 threads (multithread-mm); the kernel here on one");
        }
        let lengths: Vec<usize> = match std::env::args().nth(1) {
            Some(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
            None => vec![12, 24, 64, 128],
        };
        for (k, m) in SHAPES {
            let w: Vec<f32> = (0..k * m)
                .map(|i| (i * 7919 % 1000) as f32 / 1000.0 - 0.5)
                .collect();
            let mut model = TypedModel::default();
            let tokens = model.symbols.sym("T");
            let x = model.add_source("x", f32::fact([tokens.to_dim(), k.to_dim()]))?;
            let weights = model.add_const("w", Tensor::from_shape(&[k, m], &w)?)?;
            let y = EinSum::new("tk,km->tm".parse()?, f32::datum_type());
            let y = model.wire_node("mm", y, &[x, weights])?;
            model.select_output_outlets(&y)?;
            let tract = model.into_optimized()?.into_runnable()?;
            let own = Packed::new(&w, k, m);
            for &t in &lengths {
                let xv: Vec<f32> = (0..t * k)
                    .map(|i| (i * 31 % 97) as f32 / 97.0 - 0.5)
                    .collect();
                let input = Tensor::from_shape(&[t, k], &xv)?.into_tvalue();
                let mut out = vec![0f32; t * m];
                let want = tract.run(tvec![input.clone()])?;
                // SAFETY: AVX2 and FMA were checked above.
                unsafe { own.run(&xv, t, &mut out) };
                let worst = (want[0].to_plain_array_view::<f32>()?.iter())
                    .zip(&out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                ensure!(worst < 1e-4, "{k}x{m} at {t} tokens: off by {worst}");
                let reps = (400_000_000 / (t * k * m)).clamp(5, 500);
                let (mut a, mut b, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..PAIRS {
                    let start = Instant::now();
                    for _ in 0..reps {
                        tract.run(tvec![input.clone()])?;
                    }
                    let ta = start.elapsed().as_secs_f64() / reps as f64;
                    let start = Instant::now();
                    for _ in 0..reps {
                        unsafe { own.run(&xv, t, &mut out) };
                    }
                    let tb = start.elapsed().as_secs_f64() / reps as f64;
                    a.push(ta);
                    b.push(tb);
                    ratio.push(tb / ta);
                }
                println!(
                    "K {k:4} M {m:4}, {t:3} tokens: tract p50 {:7.1} µs, own kernel p50 {:7.1} µs, own/tract {:.2}",
                    p50(a) * 1e6,
                    p50(b) * 1e6,
                    p50(ratio)
                );
            }
        }
        Ok(())
    }
}
