//! `moe_experts_fp8_dynamic`: `moe_experts_fp8` for an FP8_DYNAMIC ("W8A8") checkpoint's
//! experts, whose every projection rounds its input to e4m3 per row first, as the checkpoint's
//! `input_activations` ask and vLLM runs them: each token's row before gate/up (one rounding
//! serves all of its experts, since every one sees the same row), and each routed row of GeGLU
//! output before down. Both arms are `moe_experts_fp8`'s, with `round_rows_e4m3` on x and
//! between the two projections.

use super::check::Case;
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::moe_experts::RoundRows;
use super::moe_experts_fp8::{self, fp8_expert_cases, with_experts_of, Fp8Experts};
use super::{arm_for, round_rows_e4m3, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MoeExpertsFp8Dynamic;

/// `x [S, H]`, `ids [S, K]` u32, `weights [S, K]` f32, e4m3 experts → `[S, H]` f32.
pub fn moe_experts_fp8_dynamic(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    let arm = arm_for(OP, x.device(), x.dtype());
    moe_experts_fp8_dynamic_on(arm, x, ids, weights, gate_up, down)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_experts_fp8_dynamic_on(
    arm: Arm,
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, ids, weights, gate_up, down),
        Arm::Native(_) => native_fwd(x, ids, weights, gate_up, down),
    }
}

pub fn composed(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    let x = round_rows_e4m3::composed(x)?;
    let round_hidden: RoundRows = round_rows_e4m3::composed;
    moe_experts_fp8::routed_experts(&x, ids, weights, gate_up, down, Some(round_hidden))
}

/// GPU arm: `round_rows_e4m3`'s kernel on x, then `moe_experts_fp8`'s paths (decode launches,
/// grouped GEMMs) with the same kernel on the GeGLU rows between each expert's projections.
fn native_fwd(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    let x = round_rows_e4m3::round_rows_e4m3(x)?;
    let round_hidden: RoundRows = round_rows_e4m3::round_rows_e4m3;
    moe_experts_fp8::native_paths(&x, ids, weights, gate_up, down, Some(round_hidden))
}

/// The op's contract (`contract.rs`): checked against `moe_experts::reference` on the
/// dequantised weights, with `round_rows_e4m3::reference` on each token's row and each routed
/// row of GeGLU output, in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsToE4m3).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the GeGLU rows left unrounded before down",
            run: |c| {
                let x = round_rows_e4m3::composed(c.float(0))?;
                let unrounded = with_experts_of(c, |gate_up, down| {
                    moe_experts_fp8::routed_experts(&x, c.raw(0), c.float(1), gate_up, down, None)
                })?;
                Ok(vec![unrounded])
            },
        },
        Mutant {
            what: "x left unrounded",
            run: |c| {
                let round_hidden: RoundRows = round_rows_e4m3::composed;
                let (x, ids, weights) = (c.float(0), c.raw(0), c.float(1));
                let y = with_experts_of(c, |gate_up, down| {
                    moe_experts_fp8::routed_experts(
                        x,
                        ids,
                        weights,
                        gate_up,
                        down,
                        Some(round_hidden),
                    )
                })?;
                Ok(vec![y])
            },
        },
    ],
};

/// Shapes the native arm hands to another path: `moe_experts_fp8`'s.
const SHAPE_PATHS: &[ShapePath] = moe_experts_fp8::SHAPE_PATHS;

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    fp8_expert_cases(device, dtype, rng, |c, values| {
        // Each step in the dtype, as `round_rows_e4m3` computes it; the GeGLU rows in it too.
        values.moe_experts_rounding(|rows, cols| {
            let in_dtype = c.round(rows, dtype)?;
            round_rows_e4m3::reference(&in_dtype, cols, dtype, |v, d| c.round(v, d))
        })
    })
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (x, ids, weights) = (c.float(0), c.raw(0), c.float(1));
    let y = with_experts_of(c, |gate_up, down| {
        moe_experts_fp8_dynamic_on(arm, x, ids, weights, gate_up, down)
    })?;
    Ok(vec![y])
}
