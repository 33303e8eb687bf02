//! `moe_weighted_scatter_add`: `out[token[r]] += w[r] · y[r]`, accumulated in f32.

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
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
        Arm::Native(Backend::Cuda) => cuda_fwd(out, tokens, weights, y),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(out: &Tensor, tokens: &Tensor, weights: &Tensor, y: &Tensor) -> Result<Tensor> {
    let weighted = y
        .to_dtype(DType::F32)?
        .broadcast_mul(&weights.unsqueeze(1)?)?;
    // candle 0.11.1's CUDA index_add applies the destination's layout, start offset included, to
    // a fresh buffer and panics (found by probe-ops on the H200): give it an offset-0 copy
    // (`copy` would keep the offset).
    let out = if out.layout().start_offset() > 0 {
        out.force_contiguous()?
    } else {
        out.clone()
    };
    out.index_add(tokens, &weighted, 0)
}

/// CUDA arm: copies `out`, then adds with f32 atomics (src/kernels/cuda/moe.cu); the order of
/// additions into one row may vary between runs.
fn cuda_fwd(out: &Tensor, tokens: &Tensor, weights: &Tensor, y: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, kernel_name, launch, Arg};
    let acc = out.to_dtype(DType::F32)?.copy()?;
    let tokens = tokens.to_dtype(DType::U32)?.contiguous()?;
    let weights = weights.to_dtype(DType::F32)?.contiguous()?;
    let y = y.contiguous()?;
    let (count, cols) = y.dims2()?;
    let args = [
        Arg::Tensor(&acc),
        Arg::Tensor(&tokens),
        Arg::Tensor(&weights),
        Arg::Tensor(&y),
        Arg::Usize(count),
        Arg::Usize(cols),
    ];
    launch(
        &kernel_name("moe_weighted_scatter_add", y.dtype())?,
        y.device(),
        elementwise(count * cols),
        &args,
    )?;
    Ok(acc)
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
