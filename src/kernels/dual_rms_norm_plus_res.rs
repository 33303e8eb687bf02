//! `dual_rms_norm_plus_res`: `residual' = residual + rms_norm(x; w1)`, then
//! `y = rms_norm(residual'; w2)` — one branch's post-norm fused with the next branch's pre-norm.

use super::{arm_for, missing_dispatch, reference, rms_norm, Arm, Backend, Op};
use candle_core::{Result, Tensor};

const OP: Op = Op::DualRmsNormPlusRes;

/// Returns `(residual', y)`.
pub fn dual_rms_norm_plus_res(
    residual: &Tensor,
    x: &Tensor,
    post_norm: &Tensor,
    next_pre_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    dual_rms_norm_plus_res_on(
        arm_for(OP, x.device(), x.dtype()),
        residual,
        x,
        post_norm,
        next_pre_norm,
        eps,
    )
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn dual_rms_norm_plus_res_on(
    arm: Arm,
    residual: &Tensor,
    x: &Tensor,
    post_norm: &Tensor,
    next_pre_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    match arm {
        Arm::Composed => composed(residual, x, post_norm, next_pre_norm, eps),
        Arm::Native(Backend::Cuda) => cuda_fwd(residual, x, post_norm, next_pre_norm, eps),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(
    residual: &Tensor,
    x: &Tensor,
    post_norm: &Tensor,
    next_pre_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let residual = (residual + rms_norm::composed(x, Some(post_norm), eps)?)?;
    let y = rms_norm::composed(&residual, Some(next_pre_norm), eps)?;
    Ok((residual, y))
}

/// CUDA arm: one block per row, both norms in one pass over the row (src/kernels/cuda/norms.cu).
fn cuda_fwd(
    residual: &Tensor,
    x: &Tensor,
    post_norm: &Tensor,
    next_pre_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    use super::cuda_launch::{empty, kernel_name, launch, per_row, Arg};
    let cols = x.dim(candle_core::D::Minus1)?;
    let Some(grid) = per_row(x.elem_count() / cols, cols) else {
        return composed(residual, x, post_norm, next_pre_norm, eps);
    };
    let (residual, x) = (residual.contiguous()?, x.contiguous()?);
    let w1 = post_norm.to_dtype(x.dtype())?.contiguous()?;
    let w2 = next_pre_norm.to_dtype(x.dtype())?.contiguous()?;
    let out_residual = empty(x.shape(), x.dtype(), x.device())?;
    let out_y = empty(x.shape(), x.dtype(), x.device())?;
    let args = [
        Arg::Tensor(&residual),
        Arg::Tensor(&x),
        Arg::Tensor(&w1),
        Arg::Tensor(&w2),
        Arg::Tensor(&out_residual),
        Arg::Tensor(&out_y),
        Arg::I32(cols as i32),
        Arg::F32(eps as f32),
    ];
    launch(
        &kernel_name("dual_rms_norm_plus_res", x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    Ok((out_residual, out_y))
}

/// Returns `residual'` followed by `y`, each `[rows, cols]`.
pub fn reference(
    residual: &[f64],
    x: &[f64],
    cols: usize,
    w1: &[f64],
    w2: &[f64],
    eps: f64,
) -> Vec<f64> {
    let normed = reference::map_rows(x, cols, |row| reference::rms_norm_row(row, Some(w1), eps));
    let summed: Vec<f64> = residual.iter().zip(normed).map(|(r, n)| r + n).collect();
    let y = reference::map_rows(&summed, cols, |row| {
        reference::rms_norm_row(row, Some(w2), eps)
    });
    summed.into_iter().chain(y).collect()
}
