//! MiniLM's attention block as one operator of Sluice's own, chosen per sequence length.
//!
//! The exported graph states each layer's attention as one `com.microsoft`
//! `MultiHeadAttention` node, which tract reads as its `Sdpa` operator (Q·Kᵀ, scale, softmax,
//! ·V). tract would lower every `Sdpa` of a plan whose length is symbolic to its flash kernel
//! (`FlashSdpaOp`: one pass per head, no probabilities materialised). Measured per operator
//! (`examples/profile.rs`), that kernel is worth having only for short sequences: at 12
//! tokens the six layers' attention takes 0.65 ms against 1.4–1.7 ms for the decomposed
//! block (two small matmuls per head, their packing, a softmax over tiny rows, each paying a
//! per-call cost), about even at 48, and at 64 and 128 tokens it is 1.6× and 3× slower than
//! tract's matmuls. A query is short and a document chunk is long, so [`Attention`] decides
//! at each run: up to [`FLASH_MAX_TOKENS`] the flash kernel, beyond it a small plan of the
//! decomposed block built once at load. It holds no weights (Q, K and V are its inputs), so
//! the second plan costs no memory to speak of.

use std::sync::Arc;

use tract_nnef::tract_core::internal::*;
use tract_nnef::tract_core::ops::einsum::EinSum;
use tract_nnef::tract_core::ops::math;
use tract_nnef::tract_core::ops::nn::{Softmax, SoftmaxKind};
use tract_transformers::ops::flash_sdpa::FlashSdpaOp;
use tract_transformers::ops::sdpa::Sdpa;

/// Longest sequence, in tokens, whose attention runs the flash kernel (measured crossover:
/// the two are even at 48 tokens on the benchmark machine).
pub const FLASH_MAX_TOKENS: usize = 48;

/// Scaled dot-product attention, no mask: Q, K and V are `[1, tokens, heads, head_dim]` (each
/// layer's projections split into heads, before the transposes that the graph's `Sdpa` took
/// them through: the written-out block reads them in this order as they are), the output
/// `[1, heads, tokens, head_dim]` as `Sdpa`'s.
#[derive(Debug, Clone)]
pub struct Attention {
    scale: f32,
    flash: FlashSdpaOp,
    /// The decomposed block, optimised for a symbolic length.
    decomposed: Arc<TypedSimplePlan>,
}

impl PartialEq for Attention {
    fn eq(&self, other: &Self) -> bool {
        self.scale == other.scale && Arc::ptr_eq(&self.decomposed, &other.decomposed)
    }
}
impl Eq for Attention {}

impl Attention {
    /// The operator for `heads` heads of `head_dim`, scaling scores by `scale`.
    pub fn new(heads: usize, head_dim: usize, scale: f32) -> TractResult<Self> {
        let mut block = TypedModel::default();
        let tokens = block.symbols.sym("T");
        let fact = f32::fact([1.to_dim(), tokens.into(), heads.to_dim(), head_dim.to_dim()]);
        let q = block.add_source("q", fact.clone())?;
        let k = block.add_source("k", fact.clone())?;
        let v = block.add_source("v", fact)?;
        let scores = EinSum::new("bmhk,bnhk->bhmn".parse()?, f32::datum_type());
        let scores = block.wire_node("scores", scores, &[q, k])?[0];
        let factor = block.add_const("scale", tensor4(&[[[[scale]]]]))?;
        let scaled = block.wire_node("scaled", math::mul(), &[scores, factor])?[0];
        let softmax = Softmax::new(tvec![3], None, SoftmaxKind::Softmax);
        let probs = block.wire_node("softmax", softmax, &[scaled])?[0];
        let out = EinSum::new("bhmn,bnhv->bhmv".parse()?, f32::datum_type());
        let out = block.wire_node("out", out, &[probs, v])?[0];
        block.select_output_outlets(&[out])?;
        Ok(Self {
            scale,
            flash: FlashSdpaOp {
                causal: false,
                scale: Some(scale),
            },
            decomposed: block.into_optimized()?.into_runnable()?,
        })
    }
}

impl Op for Attention {
    fn name(&self) -> StaticName {
        "SluiceAttention".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!(
            "scale: {}, flash up to {FLASH_MAX_TOKENS} tokens",
            self.scale
        )])
    }

    op_as_typed_op!();
}

impl EvalOp for Attention {
    op_out_of_plan!();

    fn eval(&self, ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(inputs.len() == 3, "attention takes Q, K and V");
        match inputs[0].shape().get(1) {
            Some(&tokens) if tokens <= FLASH_MAX_TOKENS => {
                // The flash kernel reads [1, heads, tokens, head_dim].
                let heads_first = inputs
                    .into_iter()
                    .map(|t| Ok(t.into_tensor().move_axis(2, 1)?.into_tvalue()))
                    .collect::<TractResult<TVec<_>>>()?;
                self.flash.eval(ctx, heads_first)
            }
            _ => self.decomposed.run(inputs),
        }
    }
}

impl TypedOp for Attention {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 3 && inputs.iter().all(|f| f.rank() == 4));
        let mut shape = inputs[0].shape.to_tvec();
        shape.swap(1, 2);
        Ok(tvec!(inputs[0].datum_type.fact(shape)))
    }

    as_op!();
}

/// The input of the transpose that made `outlet` `[1, heads, tokens, head_dim]` from
/// `[1, tokens, heads, head_dim]`, if that is what made it.
fn before_heads_first(model: &TypedModel, outlet: OutletId) -> Option<OutletId> {
    let node = model.node(outlet.node);
    (node.op_as::<AxisOp>() == Some(&AxisOp::Move(2, 1))).then(|| node.inputs[0])
}

/// Replaces every unmasked, non-causal `Sdpa` of `model` (the decluttered graph) whose Q, K
/// and V come through the heads-first transpose (as `MultiHeadAttention` wires them) by
/// [`Attention`] on the tensors before it; returns how many.
pub fn replace_sdpa(model: &mut TypedModel) -> TractResult<usize> {
    let found: Vec<usize> = model
        .nodes()
        .iter()
        .filter(|n| {
            n.op_as::<Sdpa>()
                .is_some_and(|s| !s.is_causal && n.inputs.len() == 3)
                && (n.inputs.iter()).all(|&i| before_heads_first(model, i).is_some())
        })
        .map(|n| n.id)
        .collect();
    let mut built: Option<((usize, usize, u32), Attention)> = None;
    for &id in &found {
        let node = model.node(id);
        let sdpa = node.op_as::<Sdpa>().context("an Sdpa node")?;
        let q = model.outlet_fact(node.inputs[0])?;
        ensure!(
            q.rank() == 4,
            "attention over {q:?}: expected [1, heads, tokens, head_dim]"
        );
        let (heads, head_dim) = (q.shape[1].to_usize()?, q.shape[3].to_usize()?);
        let scale = match &sdpa.scale {
            Some(s) => s.cast_to_scalar::<f32>()?,
            None => (head_dim as f32).sqrt().recip(),
        };
        // Every layer has the same shape: one decomposed plan serves them all.
        let op = match built.take() {
            Some((key, op)) if key == (heads, head_dim, scale.to_bits()) => op,
            _ => Attention::new(heads, head_dim, scale)?,
        };
        built = Some(((heads, head_dim, scale.to_bits()), op.clone()));
        let inputs: TVec<OutletId> = (node.inputs.iter())
            .filter_map(|&i| before_heads_first(model, i))
            .collect();
        let patch = TypedModelPatch::replace_single_op(model, node, &inputs, op)?;
        patch.apply(model)?;
    }
    Ok(found.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention the plain way, for [1, heads, tokens, dim] row-major inputs.
    fn reference(q: &[f32], k: &[f32], v: &[f32], heads: usize, n: usize, d: usize) -> Vec<f32> {
        let scale = (d as f32).sqrt().recip();
        let mut out = vec![0f32; heads * n * d];
        for h in 0..heads {
            let at = |t: &[f32], i: usize, j: usize| t[(h * n + i) * d + j];
            for i in 0..n {
                let scores: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..d)
                            .map(|c| (at(q, i, c) * at(k, j, c)) as f64)
                            .sum::<f64>()
                    })
                    .map(|s| s * scale as f64)
                    .collect();
                let max = scores.iter().copied().fold(f64::MIN, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for c in 0..d {
                    let x: f64 = (0..n).map(|j| exps[j] / sum * at(v, j, c) as f64).sum();
                    out[(h * n + i) * d + c] = x as f32;
                }
            }
        }
        out
    }

    #[test]
    fn both_paths_compute_attention() {
        let (heads, d) = (12, 32);
        let op = Attention::new(heads, d, (d as f32).sqrt().recip()).unwrap();
        // A length on each side of the switch, and the switch itself.
        for n in [1, 12, FLASH_MAX_TOKENS, FLASH_MAX_TOKENS + 1, 130] {
            let mut state = 0x2545_f491_4f6c_dd1du64;
            let mut data = |len: usize| -> Vec<f32> {
                (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state % 2001) as f32 / 1000.0 - 1.0
                    })
                    .collect()
            };
            let (q, k, v) = (
                data(heads * n * d),
                data(heads * n * d),
                data(heads * n * d),
            );
            // The operator reads [1, tokens, heads, dim]: the same values, tokens first.
            let tensor = |x: &[f32]| {
                Tensor::from_shape(&[1, heads, n, d], x)
                    .unwrap()
                    .move_axis(1, 2)
                    .unwrap()
                    .into_tvalue()
            };
            let out = op
                .eval(
                    &EvalContext::out_of_plan(),
                    tvec![tensor(&q), tensor(&k), tensor(&v)],
                )
                .unwrap();
            let got = out[0].to_plain_array_view::<f32>().unwrap();
            assert_eq!(got.shape(), [1, heads, n, d]);
            let want = reference(&q, &k, &v, heads, n, d);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-5, "{n} tokens: off by {worst}");
        }
    }
}
