//! `rms_norm_plus_add`: `residual + rms_norm(x; w)` — the post-norm residual add of every branch.

use super::{arm_for, missing_dispatch, reference, rms_norm, Arm, Backend, Op};
use candle_core::{Result, Tensor};

const OP: Op = Op::RmsNormPlusAdd;

pub fn rms_norm_plus_add(
    residual: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    rms_norm_plus_add_on(arm_for(OP, x.device(), x.dtype()), residual, x, weight, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn rms_norm_plus_add_on(
    arm: Arm,
    residual: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(residual, x, weight, eps),
        Arm::Native(Backend::Cuda) => cuda_fwd(residual, x, weight, eps),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(residual: &Tensor, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    residual + rms_norm::composed(x, Some(weight), eps)?
}

/// CUDA arm: one block per row (src/kernels/cuda/norms.cu).
fn cuda_fwd(residual: &Tensor, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    use super::cuda_launch::{empty, kernel_name, launch, per_row, Arg};
    let cols = x.dim(candle_core::D::Minus1)?;
    let Some(grid) = per_row(x.elem_count() / cols, cols) else {
        return composed(residual, x, weight, eps);
    };
    let (residual, x) = (residual.contiguous()?, x.contiguous()?);
    let weight = weight.to_dtype(x.dtype())?.contiguous()?;
    let out = empty(x.shape(), x.dtype(), x.device())?;
    let args = [
        Arg::Tensor(&residual),
        Arg::Tensor(&x),
        Arg::Tensor(&weight),
        Arg::Tensor(&out),
        Arg::I32(cols as i32),
        Arg::F32(eps as f32),
    ];
    launch(
        &kernel_name("rms_norm_plus_add", x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    Ok(out)
}

/// `residual, x [rows, cols]`, `weight [cols]`.
pub fn reference(residual: &[f64], x: &[f64], cols: usize, weight: &[f64], eps: f64) -> Vec<f64> {
    let normed = reference::map_rows(x, cols, |row| {
        reference::rms_norm_row(row, Some(weight), eps)
    });
    residual.iter().zip(normed).map(|(r, n)| r + n).collect()
}
