//! `dual_rms_norm_plus_res`: `residual' = residual + rms_norm(x; w1)`, then
//! `y = rms_norm(residual'; w2)` — one branch's post-norm fused with the next branch's pre-norm.

use super::{arm_for, missing_dispatch, reference, rms_norm, Arm, Op};
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
