//! `matmul_bt_fp8_dynamic`: `Y = round_rows_e4m3(X) · (W_e4m3 × scale[row])ᵀ`, the projection of
//! an FP8_DYNAMIC ("W8A8") checkpoint, whose inputs are rounded to e4m3 per token. The composed
//! arm rounds and then runs `matmul_bt_fp8_channel`'s composed arm; the CUDA arm runs prefill's
//! bf16 and f16 rows on FP8 tensor cores (the e4m3 rows and their scales straight into cuBLASLt,
//! both scales applied to its f32 sums), and everything else as the rounding kernel followed by
//! `matmul_bt_fp8_channel`.

use super::check::{Builder, Case};
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::matmul_bt_fp8_channel::{self, GEMV_MAX_ROWS};
use super::{arm_for, linear, native, round_rows_e4m3, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MatmulBtFp8Dynamic;

/// `x [.., K]`, `weight [N, K]` F8E4M3, `scale [N]` → `[.., N]` in x's dtype.
pub fn matmul_bt_fp8_dynamic(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    matmul_bt_fp8_dynamic_on(arm_for(OP, x.device(), x.dtype()), x, weight, scale)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn matmul_bt_fp8_dynamic_on(
    arm: Arm,
    x: &Tensor,
    weight: &Tensor,
    scale: &Tensor,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weight, scale),
        Arm::Native(_) => native_fwd(x, weight, scale),
    }
}

pub fn composed(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    matmul_bt_fp8_channel::composed(&round_rows_e4m3::composed(x)?, weight, scale)
}

/// FP8 tensor cores: compute capability 8.9 (Ada) and newer.
const FP8_TENSOR_CORES: (u32, u32) = (8, 9);
/// cuBLASLt's FP8 GEMM reads K and the row pitches in whole 16-byte vectors.
const FP8_GEMM_ALIGNMENT: usize = 16;

/// CUDA arm: more than 8 rows in bf16 or f16 on FP8 tensor cores, K a multiple of 16: the rows
/// quantised to e4m3 with their scales (one launch, src/kernels/cuda/fp8.cu), then cuBLASLt.
/// Otherwise the rounding kernel and `matmul_bt_fp8_channel` (its GEMV for decode).
fn native_fwd(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    use super::native::{empty, Arg};
    let (rows, out_shape) = linear::rows_of(x, weight)?;
    let (m, k) = rows.dims2()?;
    let tensor_cores = m > GEMV_MAX_ROWS
        && matches!(x.dtype(), DType::BF16 | DType::F16)
        && k.is_multiple_of(FP8_GEMM_ALIGNMENT)
        && weight.dim(1)? == k
        && crate::device::compute_capability(x.device()).is_some_and(|cc| cc >= FP8_TENSOR_CORES);
    if !tensor_cores {
        let rounded = round_rows_e4m3::round_rows_e4m3(x)?;
        return matmul_bt_fp8_channel::matmul_bt_fp8_channel(&rounded, weight, scale);
    }
    let rows = rows.contiguous()?;
    let quantised = empty((m, k), DType::U8, x.device())?;
    let row_scales = empty(m, DType::F32, x.device())?;
    let args = [
        Arg::Tensor(&rows),
        Arg::Tensor(&quantised),
        Arg::Tensor(&row_scales),
        Arg::I32(k as i32),
    ];
    round_rows_e4m3::launch_per_row("quantize_rows_e4m3", &rows, m, &args)?;
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let y = native::gemm_bt_fp8_row_scales(
        &quantised,
        &row_scales,
        &weight.contiguous()?,
        &scale,
        x.dtype(),
    )?;
    y.reshape(out_shape)
}

/// `x [m, k]`, `weight [n, k]` (decoded e4m3 values), `scale [n]`; `round(values, dtype)` rounds
/// to a dtype, as `round_rows_e4m3::reference` takes it.
pub fn reference(
    x: &[f64],
    weight: &[f64],
    scale: &[f64],
    (m, n, k): (usize, usize, usize),
    dtype: DType,
    round: impl Fn(Vec<f64>, DType) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let rounded = round_rows_e4m3::reference(x, k, dtype, round)?;
    Ok(matmul_bt_fp8_channel::reference(
        &rounded, weight, scale, m, n, k,
    ))
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate)
        .native(native::CUDA_BLAS_FLOATS)
        .shape_paths(SHAPE_PATHS)
        .flops(gemm_flops),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the inputs not rounded (weight-only FP8)",
            run: |c| {
                Ok(vec![matmul_bt_fp8_channel::composed(
                    c.float(0),
                    c.raw(0),
                    c.float(1),
                )?])
            },
        },
        Mutant {
            what: "the row scales ignored",
            run: |c| {
                Ok(vec![composed(
                    c.float(0),
                    c.raw(0),
                    &c.float(1).ones_like()?,
                )?])
            },
        },
    ],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "up to 8 rows (decode)",
        path: "native rounding kernel, then matmul_bt_fp8_channel's GEMV",
        case: "M8 N64 K512",
    },
    ShapePath {
        shapes:
            "more than 8 rows (prefill), K a multiple of 16, bf16 or f16, compute capability 8.9+",
        path: "rows quantised to e4m3, then cuBLASLt's FP8 GEMM with both row scales",
        case: "M40 N48 K96",
    },
    ShapePath {
        shapes: "K not a multiple of 16, or f32",
        path: "native rounding kernel, then matmul_bt_fp8_channel (dequantisation and cuBLAS)",
        case: "M24 N17 K136",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // Decode rows, prefill blocks (the tensor-core path where it runs, and a K off its
    // alignment), and last (the one `--perf` times) a 64-row prefill block.
    let shapes = [
        (1, 35, 32),
        (8, 64, 512),
        (40, 48, 96),
        (24, 17, 136),
        (64, 512, 1024),
    ];
    let expected = |c: &Builder, x: &[f64], weight: &[f64], scale: &[f64], shape| {
        reference(x, weight, scale, shape, dtype, |v, d| c.round(v, d))
    };
    matmul_bt_fp8_channel::fp8_matmul_cases_with(device, dtype, rng, &shapes, expected)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![matmul_bt_fp8_dynamic_on(arm, f(0), c.raw(0), f(1))?])
}
