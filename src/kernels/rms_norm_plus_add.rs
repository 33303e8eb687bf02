//! `rms_norm_plus_add`: `residual + rms_norm(x; w)` — the post-norm residual add of every branch.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::native;
use super::{arm_for, reference, rms_norm, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

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
        Arm::Native(Backend::Cpu) => rms_norm::cpu_fwd(x, Some(weight), Some(residual), eps),
        Arm::Native(_) => native_fwd(residual, x, weight, eps),
    }
}

pub fn composed(residual: &Tensor, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    residual + rms_norm::composed(x, Some(weight), eps)?
}

/// CUDA arm: one block per row (src/kernels/cuda/norms.cu).
fn native_fwd(residual: &Tensor, x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let cols = x.dim(candle_core::D::Minus1)?;
    let Some(rows) = per_row(x.elem_count() / cols, cols, warp_lanes(x.device())) else {
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
        &rows.kernel("rms_norm_plus_add", x.dtype())?,
        x.device(),
        rows.grid,
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

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        .shape_paths(rms_norm::SHAPE_PATHS),
    cases,
    run,
    mutants: &[Mutant {
        what: "the residual not added",
        run: |c| {
            Ok(vec![rms_norm::composed(
                c.float(1),
                Some(c.float(2)),
                c.eps,
            )?])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // The last is a prompt's worth of rows: the CPU arm's threaded path.
    for (rows, cols) in [
        (1, 64),
        (3, 257),
        (2, 8192),
        (1, 8200),
        (5, 2560),
        (30, 2560),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let r = c.uniform(&[rows, cols], -5.0, 5.0)?;
        let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
        let w = c.float(&[cols], norm_weight)?;
        cases.push(c.finish(
            format!("[{rows}, {cols}]"),
            reference(&r, &x, cols, &w, 1e-6),
        ));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![rms_norm_plus_add_on(arm, f(0), f(1), f(2), c.eps)?])
}
