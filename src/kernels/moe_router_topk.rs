//! `moe_router_topk`: softmax over all experts (f32) → top-k → renormalise to sum 1 →
//! × `per_expert_scale[expert]`.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::MoeRouterTopk;

/// `logits [N, E]`, `per_expert_scale [E]` → `(weights [N, k] f32, experts [N, k] u32)`.
pub fn moe_router_topk(
    logits: &Tensor,
    k: usize,
    per_expert_scale: &Tensor,
) -> Result<(Tensor, Tensor)> {
    moe_router_topk_on(
        arm_for(OP, logits.device(), logits.dtype()),
        logits,
        k,
        per_expert_scale,
    )
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_router_topk_on(
    arm: Arm,
    logits: &Tensor,
    k: usize,
    per_expert_scale: &Tensor,
) -> Result<(Tensor, Tensor)> {
    match arm {
        Arm::Composed => composed(logits, k, per_expert_scale),
        Arm::Native(_) => native_fwd(logits, k, per_expert_scale),
    }
}

pub fn composed(logits: &Tensor, k: usize, per_expert_scale: &Tensor) -> Result<(Tensor, Tensor)> {
    let rows = logits.dim(0)?;
    let probs = candle_nn::ops::softmax_last_dim(&logits.to_dtype(DType::F32)?)?;
    let experts = probs
        .arg_sort_last_dim(false)?
        .narrow(1, 0, k)?
        .contiguous()?;
    let top = probs.gather(&experts, 1)?;
    let weights = top.broadcast_div(&top.sum_keepdim(1)?)?;
    let scale = per_expert_scale
        .to_dtype(DType::F32)?
        .index_select(&experts.flatten_all()?, 0)?
        .reshape((rows, k))?;
    Ok(((weights * scale)?, experts))
}

/// Tokens (one warp each) per block of the CUDA arm.
const TOKENS_PER_BLOCK: usize = 4;

/// Experts a lane of the CUDA arm holds (`G4_ROUTER_PER_LANE` in src/kernels/cuda/moe.cu).
const EXPERTS_PER_LANE: usize = 8;

/// CUDA arm: one warp per token, its probabilities in registers (src/kernels/cuda/moe.cu); more
/// experts than its lanes hold, or more choices than lanes, take the composed arm.
fn native_fwd(logits: &Tensor, k: usize, per_expert_scale: &Tensor) -> Result<(Tensor, Tensor)> {
    use super::native::{empty, kernel_name, launch, warp_lanes, Arg, Grid};
    let (rows, experts) = logits.dims2()?;
    let lanes = warp_lanes(logits.device());
    if experts > EXPERTS_PER_LANE * lanes || k > lanes || k > experts {
        return composed(logits, k, per_expert_scale);
    }
    let logits = logits.contiguous()?;
    let scale = per_expert_scale.to_dtype(logits.dtype())?.contiguous()?;
    let weights = empty((rows, k), DType::F32, logits.device())?;
    let chosen = empty((rows, k), DType::U32, logits.device())?;
    let args = [
        Arg::Tensor(&logits),
        Arg::Tensor(&scale),
        Arg::Tensor(&weights),
        Arg::Tensor(&chosen),
        Arg::I32(rows as i32),
        Arg::I32(experts as i32),
        Arg::I32(k as i32),
    ];
    launch(
        &kernel_name("moe_router_topk", logits.dtype())?,
        logits.device(),
        Grid::of_warps(rows.div_ceil(TOKENS_PER_BLOCK), TOKENS_PER_BLOCK, lanes),
        &args,
    )?;
    Ok((weights, chosen))
}

/// `logits [rows, e]` → per row, `k` pairs `(expert, weight)` in descending probability.
pub fn reference(
    logits: &[f64],
    e: usize,
    k: usize,
    per_expert_scale: &[f64],
) -> Vec<Vec<(usize, f64)>> {
    logits
        .chunks(e)
        .map(|row| {
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = row.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            let mut ranked: Vec<(usize, f64)> =
                exps.iter().map(|x| x / total).enumerate().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            ranked.truncate(k);
            let kept: f64 = ranked.iter().map(|(_, p)| p).sum();
            ranked
                .into_iter()
                .map(|(expert, p)| (expert, p / kept * per_expert_scale[expert]))
                .collect()
        })
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[Mutant {
        what: "no renormalisation after top-k",
        run: |c| {
            let (w, idx) = composed(c.float(0), c.k, c.float(1))?;
            Ok(vec![(w * 0.9)?, idx])
        },
    }],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "up to 8 experts per warp lane (256 on NVIDIA GPUs), top-k up to the lanes",
        path: "native: one warp per token, the probabilities in registers",
        case: "[5, 128] top-8",
    },
    ShapePath {
        shapes: "more experts than that (300 take this path on NVIDIA GPUs only)",
        path: "composed",
        case: "[2, 300] top-8",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (rows, experts, k) in [(1, 4, 2), (3, 16, 4), (2, 300, 8), (5, 128, 8)] {
        let mut c = Builder::new(device, dtype, rng);
        // Distinct, well-separated logits: rounding can never create a tie.
        let mut logits = Vec::with_capacity(rows * experts);
        for _ in 0..rows {
            let mut row: Vec<f64> = (0..experts)
                .map(|e| e as f64 * 0.1 - experts as f64 * 0.05)
                .collect();
            for i in (1..row.len()).rev() {
                row.swap(i, c.rng.random_range(0..=i));
            }
            logits.extend(row);
        }
        let logits = c.values_as(&[rows, experts], dtype, logits)?;
        let scale = c.float(&[experts], norm_weight)?;
        let picked = reference(&logits, experts, k, &scale);
        let weights = picked.iter().flatten().map(|&(_, w)| w).collect();
        let mut case = c.finish(format!("[{rows}, {experts}] top-{k}"), weights);
        case.k = k;
        case.expected_indices = Some(picked.iter().flatten().map(|&(e, _)| e as u32).collect());
        cases.push(case);
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    let (w, idx) = moe_router_topk_on(arm, f(0), c.k, f(1))?;
    Ok(vec![w, idx])
}
