//! `dual_rms_norm_plus_res_e4m3`: `dual_rms_norm_plus_res` whose `y` is the input of an
//! FP8_DYNAMIC checkpoint's projection, rounded to e4m3 per row (`round_rows_e4m3`) by the norm
//! itself. The norm's block holds the whole row, so in a decode step the rounding costs it a
//! block-wide maximum instead of a launch of its own (two a layer: before q/k/v and gate/up).

use super::check::Case;
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::dual_rms_norm_plus_res::{self as dual, DualNorms};
use super::native;
use super::{arm_for, round_rows_e4m3, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::DualRmsNormPlusResE4m3;

/// Returns `(residual', round_rows_e4m3(y))`.
pub fn dual_rms_norm_plus_res_e4m3(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let arm = arm_for(OP, x.device(), x.dtype());
    dual_rms_norm_plus_res_e4m3_on(arm, residual, x, norms, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn dual_rms_norm_plus_res_e4m3_on(
    arm: Arm,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let (residual, y) = match arm {
        Arm::Composed => dual::composed(residual, x, norms, eps)?,
        Arm::Native(Backend::Cpu) => dual::dual_rms_norm_plus_res_on(arm, residual, x, norms, eps)?,
        Arm::Native(_) => return native_fwd(residual, x, norms, eps),
    };
    // The CPU has no rounding kernel: its arm is the native norm and the composed rounding.
    Ok((residual, round_rows_e4m3::composed(&y)?))
}

/// GPU arm: `dual_rms_norm_plus_res`'s kernel (src/kernels/cuda/norms.cu) rounding `y` before
/// storing it, for rows up to 4,096 wide and up to 8 rows up to 8,192 wide (a decode step's);
/// other rows take the composed arm.
fn native_fwd(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    use super::native::{per_row_few, per_row_plain, warp_lanes};
    let cols = x.dim(candle_core::D::Minus1)?;
    let (rows, lanes) = (x.elem_count() / cols.max(1), warp_lanes(x.device()));
    let launch_of = per_row_few(rows, cols, lanes).or_else(|| per_row_plain(rows, cols, lanes));
    let (Some(row_launch), true) = (launch_of, rows > 0) else {
        return dual_rms_norm_plus_res_e4m3_on(Arm::Composed, residual, x, norms, eps);
    };
    dual::launch_rows(
        &row_launch,
        "dual_rms_norm_plus_res_e4m3",
        residual,
        x,
        norms,
        eps,
    )
}

/// Returns `residual'` followed by the rounded `y`, each `[rows, cols]`: `dual_rms_norm_plus_res`'s
/// reference, `y` rounded to the dtype as it is stored, then `round_rows_e4m3`'s reference.
pub fn reference(
    residual: &[f64],
    x: &[f64],
    cols: usize,
    norms: (&[f64], f64, &[f64]),
    eps: f64,
    dtype: DType,
    round: impl Fn(Vec<f64>, DType) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let mut out = dual::reference(residual, x, cols, norms, eps);
    let y = out.split_off(residual.len());
    let y = round(y, dtype)?;
    out.extend(round_rows_e4m3::reference(&y, cols, dtype, round)?);
    Ok(out)
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsToE4m3)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        .shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "y left unrounded",
            run: |c| {
                let (r, y) = dual::composed(c.float(0), c.float(1), norms_of(c), c.eps)?;
                Ok(vec![r, y])
            },
        },
        Mutant {
            what: "the residual rounded instead of y",
            run: |c| {
                let (r, y) = dual::composed(c.float(0), c.float(1), norms_of(c), c.eps)?;
                Ok(vec![round_rows_e4m3::composed(&r)?, y])
            },
        },
    ],
};

const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "rows up to 4096 wide (E2B, E4B, 26B-A4B)",
        path: "native: one block per row, the row held in registers, y's rounding after a block-wide maximum (GPU); the CPU's norm, then the composed rounding",
        case: "[1, 2560]",
    },
    ShapePath {
        shapes: "up to 8 rows 4097 to 8192 wide (a decode step's 31B rows)",
        path: "native: one block per row of up to 1024 threads (GPU); the CPU's norm, then the composed rounding",
        case: "[2, 5376]",
    },
    ShapePath {
        shapes: "more than 8 rows wider than 4096, and rows wider than 8192",
        path: "composed on GPUs (the model rounds prefill's rows in the projection instead); the CPU's norm, then the composed rounding",
        case: "[9, 5376]",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // A decode row of E4B (2560) and 31B (5376), a few rows, a width that is no whole number of
    // vectors, and the composed fallbacks; a scale other than 1 is a layer's end.
    let shapes = [
        (1, 2560, 1.0),
        (1, 2560, 0.375),
        (3, 257, 1.0),
        (12, 1536, 1.0),
        (1, 5376, 0.375),
        (2, 5376, 1.0),
        (9, 5376, 1.0),
        (1, 8200, 1.0),
    ];
    dual::dual_cases(device, dtype, rng, &shapes, |c, r, x, cols, norms| {
        reference(r, x, cols, norms, 1e-6, dtype, |v, d| c.round(v, d))
    })
}

fn norms_of(c: &Case) -> DualNorms<'_> {
    DualNorms {
        post_norm: c.float(2),
        residual_scale: c.scale,
        next_pre_norm: c.float(3),
    }
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (r, y) = dual_rms_norm_plus_res_e4m3_on(arm, c.float(0), c.float(1), norms_of(c), c.eps)?;
    Ok(vec![r, y])
}
