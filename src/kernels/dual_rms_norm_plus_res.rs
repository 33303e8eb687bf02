//! `dual_rms_norm_plus_res`: `residual' = residual + rms_norm(x; w1)`, then
//! `y = rms_norm(residual'; w2)` — one branch's post-norm fused with the next branch's pre-norm.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, reference, rms_norm, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

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
        Arm::Native(_) => native_fwd(residual, x, post_norm, next_pre_norm, eps),
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
fn native_fwd(
    residual: &Tensor,
    x: &Tensor,
    post_norm: &Tensor,
    next_pre_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let cols = x.dim(candle_core::D::Minus1)?;
    let Some(rows) = per_row(x.elem_count() / cols, cols, warp_lanes(x.device())) else {
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
        &rows.kernel("dual_rms_norm_plus_res", x.dtype())?,
        x.device(),
        rows.grid,
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

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce).shape_paths(rms_norm::SHAPE_PATHS),
    cases,
    run,
    mutants: &[Mutant {
        what: "the two norm weights swapped",
        run: |c| {
            let (r, y) = composed(c.float(0), c.float(1), c.float(3), c.float(2), c.eps)?;
            Ok(vec![r, y])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // 5376 is the 31B model's hidden size; 8192 the widest row held in registers.
    for (rows, cols) in [
        (1, 64),
        (3, 257),
        (2, 8192),
        (1, 8200),
        (2, 5376),
        (5, 2560),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let r = c.uniform(&[rows, cols], -5.0, 5.0)?;
        let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
        let w1 = c.float(&[cols], norm_weight)?;
        let w2 = c.float(&[cols], norm_weight)?;
        let expected = reference(&r, &x, cols, &w1, &w2, 1e-6);
        cases.push(c.finish(format!("[{rows}, {cols}]"), expected));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    let (r, y) = dual_rms_norm_plus_res_on(arm, f(0), f(1), f(2), f(3), c.eps)?;
    Ok(vec![r, y])
}
