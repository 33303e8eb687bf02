//! `dual_rms_norm_plus_res`: `residual' = (residual + rms_norm(x; w1)) · s`, then
//! `y = rms_norm(residual'; w2)` — one branch's post-norm fused with the next branch's pre-norm.
//! `s` is 1 inside a layer; at a layer's end it is the layer's scalar and `w2` the next layer's
//! input norm, so that a layer's last residual add, its scalar and the next layer's first norm
//! are one launch instead of three.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native;
use super::{arm_for, reference, rms_norm, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::DualRmsNormPlusRes;

/// The norm weights of one fused pair: the branch's post-norm `w1`, the residual's scale `s`
/// (rounded to the compute dtype, as a scalar multiply of a tensor in it is) and the next
/// pre-norm `w2`.
#[derive(Clone, Copy)]
pub struct DualNorms<'a> {
    pub post_norm: &'a Tensor,
    pub residual_scale: f64,
    pub next_pre_norm: &'a Tensor,
}

impl<'a> DualNorms<'a> {
    /// Inside a layer: no scale.
    pub fn unscaled(post_norm: &'a Tensor, next_pre_norm: &'a Tensor) -> DualNorms<'a> {
        DualNorms {
            post_norm,
            residual_scale: 1.0,
            next_pre_norm,
        }
    }
}

/// Returns `(residual', y)`.
pub fn dual_rms_norm_plus_res(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    dual_rms_norm_plus_res_on(arm_for(OP, x.device(), x.dtype()), residual, x, norms, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn dual_rms_norm_plus_res_on(
    arm: Arm,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    match arm {
        Arm::Composed => composed(residual, x, norms, eps),
        Arm::Native(Backend::Cpu) => cpu_fwd(residual, x, norms, eps),
        Arm::Native(_) => native_fwd(residual, x, norms, eps),
    }
}

/// `residual · s`, skipped where `s` is 1 (the product would be the same values); `moe_output`
/// scales its output the same way.
pub(super) fn scaled(residual: Tensor, s: f64) -> Result<Tensor> {
    if s == 1.0 {
        Ok(residual)
    } else {
        residual.affine(s, 0.0)
    }
}

pub fn composed(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let summed = (residual + rms_norm::composed(x, Some(norms.post_norm), eps)?)?;
    let residual = scaled(summed, norms.residual_scale)?;
    let y = rms_norm::composed(&residual, Some(norms.next_pre_norm), eps)?;
    Ok((residual, y))
}

/// CPU arm (f32): `rms_norm_plus_add`'s and `rms_norm`'s vectorised passes with the scale
/// between them — the arithmetic of the three ops this one replaces, in the same order.
fn cpu_fwd(residual: &Tensor, x: &Tensor, norms: DualNorms, eps: f64) -> Result<(Tensor, Tensor)> {
    let summed = rms_norm::cpu_fwd(x, Some(norms.post_norm), Some(residual), eps)?;
    let residual = scaled(summed, norms.residual_scale)?;
    let y = rms_norm::cpu_fwd(&residual, Some(norms.next_pre_norm), None, eps)?;
    Ok((residual, y))
}

/// CUDA arm: one block per row, both norms in one pass over the row (src/kernels/cuda/norms.cu);
/// a decode step's few rows 4,097–8,192 wide take the few-rows variant (more threads, one load
/// each), and more rows 4,097–6,144 wide the lean one, which reads the weights where it uses them.
fn native_fwd(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    use super::native::{per_row, per_row_few, per_row_lean, warp_lanes};
    let cols = x.dim(candle_core::D::Minus1)?;
    let (rows, lanes) = (x.elem_count() / cols, warp_lanes(x.device()));
    let launch_of = per_row_few(rows, cols, lanes)
        .or_else(|| per_row_lean(rows, cols, lanes))
        .or_else(|| per_row(rows, cols, lanes));
    let Some(rows) = launch_of else {
        return composed(residual, x, norms, eps);
    };
    launch_rows(&rows, "dual_rms_norm_plus_res", residual, x, norms, eps)
}

/// Launches `kernel` (a variant of `row_launch`'s) with the dual norm's arguments: this op's
/// kernel, and `dual_rms_norm_plus_res_e4m3`'s.
pub(super) fn launch_rows(
    row_launch: &super::native::RowLaunch,
    kernel: &str,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let out_y = super::native::empty(x.shape(), x.dtype(), x.device())?;
    let kernel = row_launch.kernel(kernel, x.dtype())?;
    let out_residual =
        launch_rows_into(row_launch, &kernel, residual, x, norms, eps, &out_y, None)?;
    Ok((out_residual, out_y))
}

/// Launches the dual norm kernel named `kernel` on `row_launch`'s grid, y into `out_y` (and,
/// given, each row's scale into `row_scale`: `dual_rms_norm_plus_res_f16`'s); returns residual'.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_rows_into(
    row_launch: &super::native::RowLaunch,
    kernel: &str,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
    out_y: &Tensor,
    row_scale: Option<&Tensor>,
) -> Result<Tensor> {
    use super::native::{empty, launch, Arg};
    let cols = x.dim(candle_core::D::Minus1)?;
    let (residual, x) = (residual.contiguous()?, x.contiguous()?);
    let w1 = norms.post_norm.to_dtype(x.dtype())?.contiguous()?;
    let w2 = norms.next_pre_norm.to_dtype(x.dtype())?.contiguous()?;
    let out_residual = empty(x.shape(), x.dtype(), x.device())?;
    let mut args = vec![
        Arg::Tensor(&residual),
        Arg::Tensor(&x),
        Arg::Tensor(&w1),
        Arg::Tensor(&w2),
        Arg::Tensor(&out_residual),
        Arg::Tensor(out_y),
    ];
    args.extend(row_scale.map(Arg::Tensor));
    args.extend([
        Arg::I32(cols as i32),
        Arg::F32(norms.residual_scale as f32),
        Arg::F32(eps as f32),
    ]);
    launch(kernel, x.device(), row_launch.grid, &args)?;
    Ok(out_residual)
}

/// Returns `residual'` followed by `y`, each `[rows, cols]`.
pub fn reference(
    residual: &[f64],
    x: &[f64],
    cols: usize,
    (w1, s, w2): (&[f64], f64, &[f64]),
    eps: f64,
) -> Vec<f64> {
    let normed = reference::map_rows(x, cols, |row| reference::rms_norm_row(row, Some(w1), eps));
    let summed: Vec<f64> = residual
        .iter()
        .zip(normed)
        .map(|(r, n)| (r + n) * s)
        .collect();
    let y = reference::map_rows(&summed, cols, |row| {
        reference::rms_norm_row(row, Some(w2), eps)
    });
    summed.into_iter().chain(y).collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        .shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the two norm weights swapped",
            run: |c| {
                let norms = DualNorms {
                    post_norm: c.float(3),
                    residual_scale: c.scale,
                    next_pre_norm: c.float(2),
                };
                let (r, y) = composed(c.float(0), c.float(1), norms, c.eps)?;
                Ok(vec![r, y])
            },
        },
        Mutant {
            what: "the residual's scale left out",
            run: |c| {
                let norms = DualNorms::unscaled(c.float(2), c.float(3));
                let (r, y) = composed(c.float(0), c.float(1), norms, c.eps)?;
                Ok(vec![r, y])
            },
        },
    ],
};

const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "rows up to 4096 wide, and more than 8 rows 6145 to 8192 wide",
        path: "native: one block per row, the row and both weights held in registers (CUDA); one pass per row (CPU)",
        case: "[12, 8192]",
    },
    ShapePath {
        shapes: "up to 8 rows 4097 to 8192 wide (a decode step's 31B rows)",
        path: "native: one block per row of up to 1024 threads, one 16-byte load each of the row and both weights (CUDA); one pass per row (CPU)",
        case: "[1, 5376]",
    },
    ShapePath {
        shapes: "more than 8 rows 4097 to 6144 wide (31B's prefill)",
        path: "native: one block per row sized to it, the row in registers and the weights read where used (CUDA); one pass per row (CPU)",
        case: "[64, 5376]",
    },
    ShapePath {
        shapes: "rows wider than 8192",
        path: "composed on CUDA; the CPU arm takes them",
        case: "[1, 8200]",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // 5376 is the 31B model's hidden size; 8192 the widest row held in registers. A scale other
    // than 1 is a layer's end (its scalar; 0.375 is exact in every dtype).
    let shapes = [
        (1, 64, 1.0),
        (3, 257, 0.375),
        (2, 8192, 1.0),
        (2, 8192, 0.375),
        (12, 8192, 1.0),
        (1, 8200, 1.0),
        (1, 8200, 0.375),
        (1, 5376, 1.0),
        (2, 5376, 0.375),
        (64, 5376, 1.0),
        (5, 2560, 1.0),
        (1, 2560, 0.375),
    ];
    dual_cases(device, dtype, rng, &shapes, |_, r, x, cols, norms| {
        Ok(reference(r, x, cols, norms, 1e-6))
    })
}

/// One case per `(rows, cols, scale)`: residual and x uniform, two norm weights, and
/// `expected(builder, residual, x, cols, (w1, scale, w2))` (eps 1e-6), which may draw more
/// inputs.
pub(super) fn dual_cases(
    device: &Device,
    dtype: DType,
    rng: &mut StdRng,
    shapes: &[(usize, usize, f64)],
    expected: impl Fn(&mut Builder, &[f64], &[f64], usize, (&[f64], f64, &[f64])) -> Result<Vec<f64>>,
) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for &(rows, cols, scale) in shapes {
        let mut c = Builder::new(device, dtype, rng);
        let r = c.uniform(&[rows, cols], -5.0, 5.0)?;
        let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
        let w1 = c.float(&[cols], norm_weight)?;
        let w2 = c.float(&[cols], norm_weight)?;
        let expected = expected(&mut c, &r, &x, cols, (&w1, scale, &w2))?;
        let label = match scale == 1.0 {
            true => format!("[{rows}, {cols}]"),
            false => format!("[{rows}, {cols}] scaled by {scale}"),
        };
        let mut case = c.finish(label, expected);
        case.scale = scale;
        cases.push(case);
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let norms = DualNorms {
        post_norm: c.float(2),
        residual_scale: c.scale,
        next_pre_norm: c.float(3),
    };
    let (r, y) = dual_rms_norm_plus_res_on(arm, c.float(0), c.float(1), norms, c.eps)?;
    Ok(vec![r, y])
}
