//! `dual_rms_norm_plus_res_f16`: `dual_rms_norm_plus_res` whose `y` is the input of an FP8
//! checkpoint's q/k/v or gate/up projection on Hopper, stored as `F16Rows` (tma_gemm.rs): in f16,
//! each row on the power of two that brings its largest |y| into [2^14, 2^15), with the inverse
//! beside it. The Hopper GEMM's f16 entries widen e4m3 in one instruction a pair where bf16 X
//! costs four (3–12 % shorter GEMMs, H100, stop 67), and only a kernel that holds the whole row
//! can find its scale without a pass of its own. bf16 only: y is rounded to bf16 first, so the
//! projection sums the values the bf16 path would.

use super::check::Case;
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::dual_rms_norm_plus_res::{self as dual, DualNorms};
use super::native::{self, Backend, NativeKernel, RowLaunch};
use super::tma_gemm::{f16_row_scale, F16Rows};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::DualRmsNormPlusResF16;

/// g4's GPU kernel (CUDA and HIP) in bf16; the model calls it only where the Hopper GEMM takes
/// its rows.
const GPU_BF16: &[NativeKernel] = &[
    NativeKernel {
        backend: Backend::Cuda,
        dtypes: &[DType::BF16],
        min_compute_capability: Some((8, 0)),
    },
    NativeKernel {
        backend: Backend::Hip,
        dtypes: &[DType::BF16],
        min_compute_capability: None,
    },
];

/// Returns `(residual', y as F16Rows)`.
pub fn dual_rms_norm_plus_res_f16(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, F16Rows)> {
    dual_rms_norm_plus_res_f16_on(arm_for(OP, x.device(), x.dtype()), residual, x, norms, eps)
}

/// Whether the native arm runs on `x`'s rows: the model writes f16 rows only where they cost no
/// pass of their own.
pub fn runs_natively(x: &Tensor) -> bool {
    matches!(arm_for(OP, x.device(), x.dtype()), Arm::Native(_)) && row_launch(x).is_some()
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn dual_rms_norm_plus_res_f16_on(
    arm: Arm,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, F16Rows)> {
    match (arm, row_launch(x)) {
        (Arm::Native(_), Some(launch)) => native_fwd(&launch, residual, x, norms, eps),
        _ => composed(residual, x, norms, eps),
    }
}

pub fn composed(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, F16Rows)> {
    let (residual, y) = dual::composed(residual, x, norms, eps)?;
    Ok((residual, F16Rows::composed(&y)?))
}

/// The kernel's launch for `x`'s rows: up to 4,096 wide, or 4,097–6,144 (31B's 5,376) as
/// `_wide_lean`; `None` for others.
fn row_launch(x: &Tensor) -> Option<RowLaunch> {
    use super::native::{per_row_lean, per_row_plain, warp_lanes};
    let cols = x.dim(D::Minus1).ok()?;
    let (rows, lanes) = (x.elem_count() / cols.max(1), warp_lanes(x.device()));
    (rows > 0)
        .then(|| per_row_plain(rows, cols, lanes).or_else(|| per_row_lean(rows, cols, lanes)))
        .flatten()
}

/// CUDA arm: `dual_rms_norm_plus_res`'s kernel (src/kernels/cuda/norms.cu) storing y in f16 on
/// its row's scale, found from the row it holds in registers.
fn native_fwd(
    launch: &RowLaunch,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
) -> Result<(Tensor, F16Rows)> {
    let rows = native::empty(x.shape(), DType::F16, x.device())?;
    let mut scale_shape = x.dims().to_vec();
    if let Some(cols) = scale_shape.last_mut() {
        *cols = 1;
    }
    let row_scale = native::empty(scale_shape, DType::F32, x.device())?;
    let kernel = launch.kernel("dual_rms_norm_plus_res_f16", x.dtype())?;
    let residual = dual::launch_rows_into(
        launch,
        &kernel,
        residual,
        x,
        norms,
        eps,
        &rows,
        Some(&row_scale),
    )?;
    Ok((residual, F16Rows { rows, row_scale }))
}

/// The op's contract (`contract.rs`): checked against `dual_rms_norm_plus_res`'s reference, y
/// rounded to bf16 as it is stored, in every case below; `run` also refuses row scales other
/// than the powers of two the GEMM's f16 entries expect.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec {
        dtypes: &[DType::BF16],
        ..OpSpec::floats(ToleranceClass::RoundsOnce)
            .native(GPU_BF16)
            .shape_paths(SHAPE_PATHS)
            .not_used_yet(super::matmul_bt_fp8_channel_f16_rows::NOT_USED_YET)
    },
    cases,
    run,
    mutants: &[
        Mutant {
            what: "y's row scales left on it",
            run: |c| {
                let (r, y) = composed(c.float(0), c.float(1), norms_of(c), c.eps)?;
                Ok(vec![r, y.rows.to_dtype(DType::F32)?])
            },
        },
        Mutant {
            what: "the two norm weights swapped",
            run: |c| {
                let norms = DualNorms {
                    post_norm: c.float(3),
                    residual_scale: c.scale,
                    next_pre_norm: c.float(2),
                };
                let (r, y) = composed(c.float(0), c.float(1), norms, c.eps)?;
                Ok(vec![r, y.unscaled(DType::F32)?])
            },
        },
    ],
};

const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "rows up to 4096 wide (E2B, E4B, 26B-A4B)",
        path: "native: one block per row, the row held in registers, y's scale after a block-wide maximum",
        case: "[512, 2560]",
    },
    ShapePath {
        shapes: "rows 4097 to 6144 wide (31B)",
        path: "native: one block per row sized to it, the weights read where used",
        case: "[64, 5376]",
    },
    ShapePath {
        shapes: "rows wider than 6144",
        path: "composed (the model keeps bf16 rows there)",
        case: "[2, 8200]",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // E4B's prefill rows (2560) and 26B-A4B's (2816), 31B's (5376), a width that is no whole
    // number of vectors, the composed fallback; a scale other than 1 is a layer's end.
    let shapes = [
        (3, 257, 1.0),
        (9, 2816, 0.375),
        (64, 5376, 1.0),
        (2, 8200, 1.0),
        (512, 2560, 1.0),
    ];
    dual::dual_cases(device, dtype, rng, &shapes, |c, r, x, cols, norms| {
        let mut out = dual::reference(r, x, cols, norms, 1e-6);
        let y = out.split_off(r.len());
        out.extend(c.round(y, dtype)?);
        Ok(out)
    })
}

fn norms_of(c: &Case) -> DualNorms<'_> {
    DualNorms {
        post_norm: c.float(2),
        residual_scale: c.scale,
        next_pre_norm: c.float(3),
    }
}

/// Fails where a row's scale is not `f16_row_scale` of its largest |y| (the unscaled rows are
/// exact, so their maxima are the ones the arm saw).
fn check_row_scales(y: &F16Rows) -> Result<()> {
    let unscaled = y.unscaled(DType::F32)?;
    let maxima = unscaled.abs()?.max_keepdim(D::Minus1)?.flatten_all()?;
    let scales = y.row_scale.flatten_all()?.to_vec1::<f32>()?;
    for (row, (max, scale)) in maxima.to_vec1::<f32>()?.into_iter().zip(scales).enumerate() {
        if scale != f16_row_scale(max) {
            candle_core::bail!(
                "row {row}: scale {scale:e} for a largest |y| of {max:e}, not {:e}",
                f16_row_scale(max)
            );
        }
    }
    Ok(())
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (r, y) = dual_rms_norm_plus_res_f16_on(arm, c.float(0), c.float(1), norms_of(c), c.eps)?;
    check_row_scales(&y)?;
    Ok(vec![r, y.unscaled(DType::F32)?])
}

#[cfg(test)]
mod tests {
    use super::f16_row_scale;

    #[test]
    fn row_scales_bring_the_largest_value_into_f16s_top_octave() {
        for max in [
            1.0f32,
            0.75,
            3.0e4,
            65504.0,
            1.0e-3,
            3.3e38,
            2.0f32.powi(-120),
        ] {
            let scaled = max / f16_row_scale(max);
            let in_octave = (16384.0..32768.0).contains(&scaled);
            // Past 2^-112 the scale stops at 2^-126: the row stays below f16's top octave.
            assert!(
                in_octave || max < 2.0f32.powi(-112) && scaled < 16384.0,
                "{max:e} scaled to {scaled:e}"
            );
            assert_eq!(
                f16_row_scale(max).to_bits() & 0x7f_ffff,
                0,
                "a power of two"
            );
        }
        for degenerate in [0.0f32, f32::INFINITY, f32::NAN] {
            assert_eq!(f16_row_scale(degenerate), 1.0);
        }
    }
}
