//! `moe_weighted_scatter_add`: `out[token[r]] += w[r] · y[r]`, accumulated in f32.

use super::{arm_for, missing_dispatch, Arm, Op};
use candle_core::{DType, Result, Tensor};

const OP: Op = Op::MoeWeightedScatterAdd;

/// `out [N, H]` f32, `tokens [R]` u32, `weights [R]` f32, `y [R, H]` → the new `out`.
pub fn moe_weighted_scatter_add(
    out: &Tensor,
    tokens: &Tensor,
    weights: &Tensor,
    y: &Tensor,
) -> Result<Tensor> {
    moe_weighted_scatter_add_on(arm_for(OP, y.device(), y.dtype()), out, tokens, weights, y)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_weighted_scatter_add_on(
    arm: Arm,
    out: &Tensor,
    tokens: &Tensor,
    weights: &Tensor,
    y: &Tensor,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(out, tokens, weights, y),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(out: &Tensor, tokens: &Tensor, weights: &Tensor, y: &Tensor) -> Result<Tensor> {
    let weighted = y
        .to_dtype(DType::F32)?
        .broadcast_mul(&weights.unsqueeze(1)?)?;
    out.index_add(tokens, &weighted, 0)
}

pub fn reference(
    out: &[f64],
    cols: usize,
    tokens: &[usize],
    weights: &[f64],
    y: &[f64],
) -> Vec<f64> {
    let mut out = out.to_vec();
    for (r, (&t, &w)) in tokens.iter().zip(weights).enumerate() {
        for j in 0..cols {
            out[t * cols + j] += w * y[r * cols + j];
        }
    }
    out
}
