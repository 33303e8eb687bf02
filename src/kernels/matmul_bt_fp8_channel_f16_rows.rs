//! `matmul_bt_fp8_channel_f16_rows`: `matmul_bt_fp8_channel` (plain) and `linear_gelu_mul` over a
//! packed e4m3 [gate ‖ up] (GeGLU) on X given as `F16Rows` — prefill's q/k/v and gate/up rows on
//! Hopper, which their norm writes in f16 on a power-of-two scale a row
//! (`dual_rms_norm_plus_res_f16`). The native arm runs the Hopper GEMM's f16 entries (e4m3 widened
//! to f16 in one instruction a pair, each row's scale undone on its sums); where those do not
//! run, the rows are unscaled to the compute dtype for the bf16 ops.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::linear_gelu_mul::{self, Up, Weights};
use super::native::{Backend, NativeKernel};
use super::tma_gemm::{self, Epilogue, F16Rows, Rows};
use super::{
    arm_for, dequant_fp8_channel, gelu_and_mul, linear, matmul_bt_fp8_channel, reference, Arm, Op,
};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MatmulBtFp8ChannelF16Rows;

/// The GEMM's f16 entries: CUDA, compute capability 9.0, bf16 results.
const CUDA_HOPPER_BF16: &[NativeKernel] = &[NativeKernel {
    backend: Backend::Cuda,
    dtypes: &[DType::BF16],
    min_compute_capability: Some((9, 0)),
}];

/// `x` (rows `[.., K]`) · (e4m3 `weight [N, K]` × `scale`)ᵀ in `dtype`, `[.., N]`; with
/// `Epilogue::GeluAndMul`, `gelu_tanh(gate) ⊙ up` of the packed weight's halves, `[.., N/2]`.
pub fn matmul_bt_fp8_channel_f16_rows(
    x: &F16Rows,
    weight: &Tensor,
    scale: &Tensor,
    epilogue: Epilogue,
    dtype: DType,
) -> Result<Tensor> {
    let arm = arm_for(OP, x.rows.device(), dtype);
    matmul_bt_fp8_channel_f16_rows_on(arm, x, weight, scale, epilogue, dtype)
}

/// Whether the model writes f16 rows for this op (`G4_F16_ROWS=1`), read once: off by default
/// until a GPU has checked the op against f64 and measured it against bf16 rows
/// (docs/device-calls/s68c1.sh; stop 68 had no GPU).
pub fn model_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("G4_F16_ROWS").as_deref() == Ok("1"))
}

/// Whether the native arm runs the Hopper GEMM's f16 entries on `m` rows against `weight` for
/// results in `dtype`: where it does not, f16 rows would only cost their unscaling.
pub fn runs_natively(m: usize, weight: &Tensor, epilogue: Epilogue, dtype: DType) -> bool {
    matches!(arm_for(OP, weight.device(), dtype), Arm::Native(_))
        && dtype == DType::BF16
        && tma_gemm::takes_f16_rows(m, weight, epilogue)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn matmul_bt_fp8_channel_f16_rows_on(
    arm: Arm,
    x: &F16Rows,
    weight: &Tensor,
    scale: &Tensor,
    epilogue: Epilogue,
    dtype: DType,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weight, scale, epilogue, dtype),
        Arm::Native(_) => native_fwd(x, weight, scale, epilogue, dtype),
    }
}

pub fn composed(
    x: &F16Rows,
    weight: &Tensor,
    scale: &Tensor,
    epilogue: Epilogue,
    dtype: DType,
) -> Result<Tensor> {
    let projected = matmul_bt_fp8_channel::composed(&x.unscaled(dtype)?, weight, scale)?;
    match epilogue {
        Epilogue::Plain => Ok(projected),
        Epilogue::GeluAndMul => gelu_and_mul::composed(&projected),
    }
}

/// CUDA arm: the Hopper GEMM's f16 entries where they run (`tma_gemm::takes_f16_rows`); else
/// the rows unscaled, through `matmul_bt_fp8_channel` or `linear_gelu_mul`.
fn native_fwd(
    x: &F16Rows,
    weight: &Tensor,
    scale: &Tensor,
    epilogue: Epilogue,
    dtype: DType,
) -> Result<Tensor> {
    if dtype == DType::BF16 {
        let (rows, mut out_shape) = linear::rows_of(&x.rows, weight)?;
        let rows = F16Rows {
            rows,
            row_scale: x.row_scale.reshape(((), 1))?,
        };
        if let Some(y) = tma_gemm::gemm(Rows::F16(&rows), weight, scale, epilogue)? {
            *out_shape.last_mut().expect("rows_of appends N") = y.dim(1)?;
            return y.reshape(out_shape);
        }
    }
    let x = x.unscaled(dtype)?;
    match epilogue {
        Epilogue::Plain => matmul_bt_fp8_channel::matmul_bt_fp8_channel(&x, weight, scale),
        Epilogue::GeluAndMul => {
            linear_gelu_mul::linear_gelu_mul(&x, Weights::Fp8 { weight, scale }, Up::Packed)
        }
    }
}

/// Why the model does not call this op, nor `dual_rms_norm_plus_res_f16`, by default.
pub const NOT_USED_YET: &str = "FP8 prefill's q/k/v and gate/up on Hopper, with G4_F16_ROWS=1 until a GPU has checked and measured it";

/// The op's contract (`contract.rs`): each case runs both epilogues on one packed weight,
/// checked against `reference` (the projection, then the GeGLU product of its halves).
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec {
        dtypes: &[DType::BF16],
        ..OpSpec::floats(ToleranceClass::RoundsIntermediate)
            .native(CUDA_HOPPER_BF16)
            .shape_paths(SHAPE_PATHS)
            .not_used_yet(NOT_USED_YET)
    },
    cases,
    run,
    mutants: &[
        Mutant {
            what: "X's row scales ignored",
            run: |c| {
                let x = F16Rows::composed(c.float(0))?;
                let unscaled = F16Rows {
                    row_scale: x.row_scale.ones_like()?,
                    rows: x.rows,
                };
                both(|epilogue| composed(&unscaled, c.raw(0), c.float(1), epilogue, DType::BF16))
            },
        },
        Mutant {
            what: "the weights' row scales ignored",
            run: |c| {
                let x = F16Rows::composed(c.float(0))?;
                let ones = c.float(1).ones_like()?;
                both(|epilogue| composed(&x, c.raw(0), &ones, epilogue, DType::BF16))
            },
        },
    ],
};

const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "more than 8 rows on compute capability 9.0, K a multiple of 16, outputs of 8, as matmul_bt_fp8_channel's TMA GEMM takes them (its tilings alike)",
        path: "native TMA + wgmma GEMM, f16 entries: e4m3 widened to f16, X's and the weights' row scales on the sums",
        case: "M512 N3072 K16",
    },
    ShapePath {
        shapes: "the same, wide tiles for the whole waves, then tiles of 128 X rows (E4B's gate/up at 512 rows)",
        path: "the same GEMM's wide-then-narrow f16 entries, plain and GeGLU",
        case: "M257 N20480 K16",
    },
    ShapePath {
        shapes: "the GeGLU product where K would need slices",
        path: "the rows unscaled to bf16, then linear_gelu_mul (its projection over slices, then the product)",
        case: "M24 N96 K1024",
    },
    ShapePath {
        shapes: "outputs not a multiple of 8, or another GPU",
        path: "the rows unscaled to bf16, then matmul_bt_fp8_channel or linear_gelu_mul",
        case: "M24 N44 K96",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // (m, n, k) on 132 multiprocessors: a few part-filled tiles over a last step of K half
    // filled, E4B's q/k/v at 512 rows (tiles of 112 rows; its GeGLU half in 128-row tiles),
    // wide-then-narrow tiles, slices of K (plain) where the GeGLU takes the unscaled path, wide
    // tiles over slices, and outputs off the 8 the GEMM stores.
    let shapes = [
        (160, 400, 160),
        (512, 3072, 16),
        (257, 20480, 16),
        (24, 96, 1024),
        (129, 2944, 4288),
        (24, 44, 96),
    ];
    shapes
        .iter()
        .map(|&(m, n, k)| {
            let mut c = Builder::new(device, dtype, rng);
            // Inputs sized so that the gate's sums fall where the GeLU bends.
            let bound = 0.02 / (k as f64).sqrt();
            let x = c.uniform(&[m, k], -bound, bound)?;
            let (weight, scale) = dequant_fp8_channel::fp8_weight(&mut c, n, k)?;
            let expected = reference(&x, &weight, &scale, m, n, k);
            Ok(c.finish(format!("M{m} N{n} K{k}"), expected))
        })
        .collect()
}

/// The projection `[m, n]`, then the GeGLU product of its halves `[m, n/2]`.
pub fn reference(
    x: &[f64],
    weight: &[f64],
    scale: &[f64],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let w = dequant_fp8_channel::reference(weight, scale, k);
    let projected = reference::matmul_bt(x, &w, m, n, k);
    let product = gelu_and_mul::reference(&projected, n / 2);
    projected.into_iter().chain(product).collect()
}

/// `project` with the plain epilogue, then with GeGLU's.
fn both(project: impl Fn(Epilogue) -> Result<Tensor>) -> Result<Vec<Tensor>> {
    Ok(vec![
        project(Epilogue::Plain)?,
        project(Epilogue::GeluAndMul)?,
    ])
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let x = F16Rows::composed(c.float(0))?;
    both(|epilogue| {
        matmul_bt_fp8_channel_f16_rows_on(arm, &x, c.raw(0), c.float(1), epilogue, c.dtype)
    })
}
