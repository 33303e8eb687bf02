//! `linear_gelu_mul_fp8_dynamic`: `linear_gelu_mul` over e4m3 weights for an FP8_DYNAMIC
//! ("W8A8") checkpoint, whose projection inputs are rounded to e4m3 per row first
//! (`round_rows_e4m3`): `gelu_tanh(x'·W_gateᵀ) ⊙ up` with `x'` the rounded rows — the MLP's packed
//! gate/up and the per-layer-input gate. Its decode arm is one launch, the fused GEMV with each
//! block rounding the row into shared memory itself, where the rounding kernel and the fused GEMV
//! were two.

use super::check::Case;
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::linear_gelu_mul::{self, gelu_mul_after, Up, Weights};
use super::matmul_bt_fp8_channel::GEMV_MAX_ROWS;
use super::{arm_for, linear, matmul_bt_fp8_dynamic, round_rows_e4m3, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::LinearGeluMulFp8Dynamic;

/// `x [.., K]`, `weight [N, K]` F8E4M3, `scale [N]` → `[.., D]` in x's dtype, with D = N/2
/// (packed) or N (given).
pub fn linear_gelu_mul_fp8_dynamic(
    x: &Tensor,
    weight: &Tensor,
    scale: &Tensor,
    up: Up,
) -> Result<Tensor> {
    let arm = arm_for(OP, x.device(), x.dtype());
    linear_gelu_mul_fp8_dynamic_on(arm, x, weight, scale, up)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn linear_gelu_mul_fp8_dynamic_on(
    arm: Arm,
    x: &Tensor,
    weight: &Tensor,
    scale: &Tensor,
    up: Up,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weight, scale, up),
        Arm::Native(_) => native_fwd(x, weight, scale, up),
    }
}

pub fn composed(x: &Tensor, weight: &Tensor, scale: &Tensor, up: Up) -> Result<Tensor> {
    let rounded = round_rows_e4m3::composed(x)?;
    linear_gelu_mul::composed(&rounded, Weights::Fp8 { weight, scale }, up)
}

/// GPU arm: prefill's rows through `matmul_bt_fp8_dynamic` (FP8 tensor cores where it takes
/// them) and then the product; decode's one row through `linear_gelu_mul`'s fused GEMV with each
/// block rounding the row itself; other rows through the rounding kernel and that GEMV.
fn native_fwd(x: &Tensor, weight: &Tensor, scale: &Tensor, up: Up) -> Result<Tensor> {
    let weights = Weights::Fp8 { weight, scale };
    let (rows, _) = linear::rows_of(x, weight)?;
    let (m, k) = rows.dims2()?;
    if m > GEMV_MAX_ROWS {
        let projected = matmul_bt_fp8_dynamic::matmul_bt_fp8_dynamic(x, weight, scale)?;
        return gelu_mul_after(&projected, up);
    }
    let staged = if m == 1 {
        round_rows_e4m3::staged_row_bytes(k, x.dtype())
    } else {
        None
    };
    if let Some(bytes) = staged {
        if let Some(y) = linear_gelu_mul::fused_gemv(x, weights, up, Some(bytes))? {
            return Ok(y);
        }
    }
    let rounded = round_rows_e4m3::round_rows_e4m3(x)?;
    linear_gelu_mul::linear_gelu_mul(&rounded, weights, up)
}

/// The op's contract (`contract.rs`): checked against `linear_gelu_mul::reference` on the
/// dequantised weights and x rounded by `round_rows_e4m3::reference`, in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "x left unrounded (weight-only FP8)",
            run: |c| {
                let (x, weights, up) = linear_gelu_mul::inputs(c);
                Ok(vec![linear_gelu_mul::composed(x, weights, up)?])
            },
        },
        Mutant {
            what: "the row scales ignored",
            run: |c| {
                let (x, up) = (c.float(0), up_of(c));
                Ok(vec![composed(x, c.raw(0), &c.float(1).ones_like()?, up)?])
            },
        },
    ],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "one row (decode), K a multiple of 16, the row within 47 KiB",
        path: "linear_gelu_mul's fused GEMV, each block rounding the row in shared memory",
        case: "M1 D10240 K2560 packed e4m3",
    },
    ShapePath {
        shapes: "2 to 8 rows, or one row of more than 47 KiB",
        path: "native rounding kernel, then linear_gelu_mul's fused GEMV",
        case: "M3 D33 K512 given e4m3",
    },
    ShapePath {
        shapes: "more than 8 rows (prefill)",
        path: "matmul_bt_fp8_dynamic, then gelu_and_mul or gelu_mul",
        case: "M24 D16 K96 packed e4m3",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // (rows, outputs, K, packed, e4m3): decode rows on the GEMV that rounds them (E4B's
    // per-layer-input gate, up given), a row too wide for its shared memory, a few rows, a
    // prefill block, and last (the one `--perf` times) E4B's MLP gate/up.
    let shapes = [
        (1, 40, 256, true, true),
        (1, 256, 2560, false, true),
        (1, 4, 24592, false, true),
        (3, 33, 512, false, true),
        (24, 16, 96, true, true),
        (1, 10240, 2560, true, true),
    ];
    linear_gelu_mul::gelu_mul_cases_with(device, dtype, rng, &shapes, |c, x, k| {
        round_rows_e4m3::reference(x, k, dtype, |v, d| c.round(v, d))
    })
}

/// The case's `up`, as `linear_gelu_mul::inputs` reads it.
fn up_of(c: &Case) -> Up<'_> {
    linear_gelu_mul::inputs(c).2
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (x, up) = (c.float(0), up_of(c));
    Ok(vec![linear_gelu_mul_fp8_dynamic_on(
        arm,
        x,
        c.raw(0),
        c.float(1),
        up,
    )?])
}
