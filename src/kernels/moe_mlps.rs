//! `moe_mlps`: both MLPs of a MoE layer over one step (GEMMA4_TEXT.md §2.7) — the shared MLP
//! `down_s · gelu_and_mul(gate_up_s · x_s)` on its input and the routed experts
//! (`moe_experts`) on theirs — returned apart, since each has its own post-norm (`moe_output`).
//! In decode the native arm runs both in two launches where they took four: the shared MLP's
//! GeGLU outputs are more blocks of the experts' gate_up kernel, and its down rows more warps in
//! the experts' down blocks. A decode step's short launches cost their ramp and tail as much as
//! their bytes.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
pub use super::linear_gelu_mul::Weights;
use super::linear_gelu_mul::{self, Up};
use super::moe_experts::{self, NATIVE_MAX_SLOTS, NATIVE_MAX_TOKENS};
use super::moe_experts_fp8::{self, Fp8Experts};
use super::{arm_for, dequant_fp8_channel, linear, matmul_bt_fp8_channel, reference, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MoeMlps;

/// The shared MLP: its input `x [S, H]`, `gate_up [2·Ws, H]` (`[gate ‖ up]`) and `down [H, Ws]`.
#[derive(Clone, Copy)]
pub struct SharedMlp<'a> {
    pub x: &'a Tensor,
    pub gate_up: Weights<'a>,
    pub down: Weights<'a>,
}

/// Every expert's projections, `gate_up [E, 2W, H]` and `down [E, H, W]`: in x's dtype
/// (`moe_experts`), or e4m3 with their row scales (`moe_experts_fp8`).
#[derive(Clone, Copy)]
pub enum ExpertWeights<'a> {
    Dense {
        gate_up: &'a Tensor,
        down: &'a Tensor,
    },
    Fp8 {
        gate_up: Fp8Experts<'a>,
        down: Fp8Experts<'a>,
    },
}

/// The routed experts: their input `x [S, H]`, `ids [S, K]` u32 and `weights [S, K]` f32.
#[derive(Clone, Copy)]
pub struct RoutedExperts<'a> {
    pub x: &'a Tensor,
    pub ids: &'a Tensor,
    pub weights: &'a Tensor,
    pub experts: ExpertWeights<'a>,
}

/// → the shared MLP's output `[S, H]` in x's dtype and the experts' weighted sum `[S, H]` f32.
pub fn moe_mlps(shared: SharedMlp, routed: RoutedExperts) -> Result<(Tensor, Tensor)> {
    moe_mlps_on(
        arm_for(OP, shared.x.device(), shared.x.dtype()),
        shared,
        routed,
    )
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_mlps_on(arm: Arm, shared: SharedMlp, routed: RoutedExperts) -> Result<(Tensor, Tensor)> {
    match arm {
        Arm::Composed => composed(shared, routed),
        Arm::Native(_) => native_fwd(shared, routed),
    }
}

/// Each MLP through its own ops (`linear_gelu_mul`, then `linear` or `matmul_bt_fp8_channel`;
/// `moe_experts` or `moe_experts_fp8`), each on the arm the registry picks for it.
pub fn composed(shared: SharedMlp, routed: RoutedExperts) -> Result<(Tensor, Tensor)> {
    let activated = linear_gelu_mul::linear_gelu_mul(shared.x, shared.gate_up, Up::Packed)?;
    let shared_out = match shared.down {
        Weights::Dense(w) => linear::linear(&activated, w)?,
        Weights::Fp8 { weight, scale } => {
            matmul_bt_fp8_channel::matmul_bt_fp8_channel(&activated, weight, scale)?
        }
    };
    let (x, ids, weights) = (routed.x, routed.ids, routed.weights);
    let experts = match routed.experts {
        ExpertWeights::Dense { gate_up, down } => {
            moe_experts::moe_experts(x, ids, weights, gate_up, down)?
        }
        ExpertWeights::Fp8 { gate_up, down } => {
            moe_experts_fp8::moe_experts_fp8(x, ids, weights, gate_up, down)?
        }
    };
    Ok((shared_out, experts))
}

/// Warps of a down block that split the shared MLP's row (`G4_MOE_MAX_SHARED_WARPS` at most).
const MAX_SHARED_WARPS: usize = 8;

/// The down kernel's warps for the shared MLP's rows of `shared_width`: as many as the experts'
/// rows of `width` it is long, so that every warp of the block reads about as much.
fn shared_warps(shared_width: usize, width: usize) -> usize {
    shared_width.div_ceil(width).clamp(1, MAX_SHARED_WARPS)
}

/// A projection as the kernels read it: its weight rows and, when e4m3, their scales.
type Rows<'a> = (&'a Tensor, Option<&'a Tensor>);

fn rows(weights: Weights) -> Rows {
    match weights {
        Weights::Dense(w) => (w, None),
        Weights::Fp8 { weight, scale } => (weight, Some(scale)),
    }
}

/// CUDA arm: for decode, `moe_experts`' two launches with the shared MLP inside them
/// (`g4_moe_mlps_gate_up` and `g4_moe_mlps_down`, or their `_fp8` pair, in
/// src/kernels/cuda/moe_experts.cu), where all four projections are in x's dtype or all e4m3;
/// otherwise the composed arm.
fn native_fwd(shared: SharedMlp, routed: RoutedExperts) -> Result<(Tensor, Tensor)> {
    use super::native::{empty, kernel_name, launch, vector_aligned, warp_lanes, Arg, Grid};
    let (device, dtype) = (shared.x.device(), shared.x.dtype());
    let (tokens, hidden) = shared.x.dims2()?;
    let slots = routed.ids.dim(1)?;
    let (gate_up, down) = match routed.experts {
        ExpertWeights::Dense { gate_up, down } => ((gate_up, None), (down, None)),
        ExpertWeights::Fp8 { gate_up, down } => (
            (gate_up.weight, Some(gate_up.scale)),
            (down.weight, Some(down.scale)),
        ),
    };
    let projections = [rows(shared.gate_up), rows(shared.down), gate_up, down];
    let e4m3 = projections[0].1.is_some();
    let weight_dtype = if e4m3 { DType::F8E4M3 } else { dtype };
    let one_format = projections
        .iter()
        .all(|(w, scale)| scale.is_some() == e4m3 && w.dtype() == weight_dtype);
    // down [E, H, W] and the shared down [H, Ws].
    let (width, shared_width) = (down.0.dim(2)?, projections[1].0.dim(1)?);
    let per_vector = 16 / weight_dtype.size_in_bytes();
    let fits = one_format
        && routed.x.dtype() == dtype
        && routed.x.dims2()? == (tokens, hidden)
        && tokens <= NATIVE_MAX_TOKENS
        && slots <= NATIVE_MAX_SLOTS
        && [hidden, width, shared_width]
            .iter()
            .all(|n| n.is_multiple_of(per_vector));
    if !fits {
        return composed(shared, routed);
    }
    let contiguous = |t: &Tensor| t.contiguous();
    let (shared_x, routed_x) = (contiguous(shared.x)?, contiguous(routed.x)?);
    let weights: Vec<Tensor> = projections
        .iter()
        .map(|(w, _)| contiguous(w))
        .collect::<Result<_>>()?;
    if ![&shared_x, &routed_x]
        .into_iter()
        .chain(&weights)
        .all(vector_aligned)
    {
        return composed(shared, routed);
    }
    let scales: Vec<Option<Tensor>> = projections
        .iter()
        .map(|(_, s)| s.map(|s| s.to_dtype(DType::F32)?.contiguous()).transpose())
        .collect::<Result<_>>()?;
    // One projection's arguments: its weight, then its scales when it has them.
    let weight_args = |i: usize| {
        std::iter::once(Arg::Tensor(&weights[i])).chain(scales[i].as_ref().map(Arg::Tensor))
    };
    let ids = routed.ids.to_dtype(DType::U32)?.contiguous()?;
    let routing_weights = routed.weights.to_dtype(DType::F32)?.contiguous()?;
    let h = empty((tokens * slots, width), dtype, device)?;
    let shared_h = empty((tokens, shared_width), dtype, device)?;
    let experts = empty((tokens, hidden), DType::F32, device)?;
    let shared_out = empty((tokens, hidden), dtype, device)?;
    let lanes = warp_lanes(device);
    let (gate_up_grid, down_grid) = moe_experts::expert_grids(tokens, slots, hidden, width, lanes);
    let gate_up_grid = Grid {
        blocks: gate_up_grid.blocks + (tokens * shared_width) as u32,
        ..gate_up_grid
    };
    let down_grid = Grid::of_warps(
        down_grid.blocks as usize,
        slots + shared_warps(shared_width, width),
        lanes,
    );
    let kernel = if e4m3 { "moe_mlps_fp8" } else { "moe_mlps" };
    let sizes = [
        Arg::I32(slots as i32),
        Arg::I32(hidden as i32),
        Arg::I32(width as i32),
    ];
    let mut args = vec![Arg::Tensor(&routed_x), Arg::Tensor(&ids)];
    args.extend(weight_args(2));
    args.push(Arg::Tensor(&h));
    args.extend(sizes);
    args.push(Arg::Tensor(&shared_x));
    args.extend(weight_args(0));
    args.extend([
        Arg::Tensor(&shared_h),
        Arg::I32(tokens as i32),
        Arg::I32(shared_width as i32),
    ]);
    let name = kernel_name(&format!("{kernel}_gate_up"), dtype)?;
    launch(&name, device, gate_up_grid, &args)?;
    let mut args = vec![
        Arg::Tensor(&h),
        Arg::Tensor(&ids),
        Arg::Tensor(&routing_weights),
    ];
    args.extend(weight_args(3));
    args.push(Arg::Tensor(&experts));
    args.extend(sizes);
    args.push(Arg::Tensor(&shared_h));
    args.extend(weight_args(1));
    args.extend([Arg::Tensor(&shared_out), Arg::I32(shared_width as i32)]);
    launch(
        &kernel_name(&format!("{kernel}_down"), dtype)?,
        device,
        down_grid,
        &args,
    )?;
    Ok((shared_out, experts))
}

/// Row-major f64: the shared MLP's `x_s [S, H]`, `gate_up_s [2·Ws, H]`, `down_s [H, Ws]` →
/// `[S, H]`.
pub fn shared_reference(
    x: &[f64],
    gate_up: &[f64],
    down: &[f64],
    hidden: usize,
    width: usize,
) -> Vec<f64> {
    let tokens = x.len() / hidden;
    let projected = reference::matmul_bt(x, gate_up, tokens, 2 * width, hidden);
    let activated: Vec<f64> = (0..tokens * width)
        .map(|i| {
            let (t, j) = (i / width, i % width);
            let row = &projected[t * 2 * width..(t + 1) * 2 * width];
            reference::gelu_tanh(row[j]) * row[width + j]
        })
        .collect();
    reference::matmul_bt(&activated, down, tokens, hidden, width)
}

/// The op's contract (`contract.rs`): the shared MLP's output then the experts' sum, checked
/// against `shared_reference` and `moe_experts::reference` (on the dequantised weights where
/// they are e4m3) in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the shared MLP fed the experts' input",
            run: |c| {
                let inputs = CaseInputs::of(c)?;
                let (mut shared, routed) = inputs.op_inputs(c);
                shared.x = routed.x;
                let (shared_out, experts) = composed(shared, routed)?;
                Ok(vec![shared_out, experts])
            },
        },
        Mutant {
            what: "the experts fed the shared MLP's input",
            run: |c| {
                let inputs = CaseInputs::of(c)?;
                let (shared, mut routed) = inputs.op_inputs(c);
                routed.x = shared.x;
                let (shared_out, experts) = composed(shared, routed)?;
                Ok(vec![shared_out, experts])
            },
        },
    ],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "up to 8 tokens (decode), up to 8 experts each, H, W and Ws whole 16-byte vectors \
                 of weights, all four projections in x's dtype or all e4m3",
        path: "native: the shared MLP inside the experts' two launches",
        case: "S1 top-8 of 10 H2816 W704 Ws2112 dense",
    },
    ShapePath {
        shapes: "more than 8 tokens (prefill)",
        path: "composed: linear_gelu_mul, linear (or matmul_bt_fp8_channel) and moe_experts (or \
               moe_experts_fp8) apart",
        case: "S9 top-2 of 2 H2816 W704 Ws2112 e4m3",
    },
    ShapePath {
        shapes: "H, W or Ws not a whole number of 16-byte vectors of weights",
        path: "composed",
        case: "S3 top-2 of 5 H36 W20 Ws60 dense",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (tokens, experts per token, experts, hidden, expert width, shared width, e4m3): small
    // decode steps (a shared row shorter than an expert's, and one 3.5 expert rows long), a
    // prefill block, and 26B-A4B's sizes (H 2816, W 704, Ws 2112) in decode top-8 (10 experts
    // instead of 128 keep the check small) and in a prefill, with dense and e4m3 weights.
    for (tokens, slots, experts, hidden, width, shared_width, e4m3) in [
        (1, 2, 4, 64, 32, 16, false),
        (3, 2, 5, 36, 20, 60, false),
        (8, 4, 6, 128, 32, 112, false),
        (12, 2, 6, 64, 32, 96, false),
        (1, 8, 10, 2816, 704, 2112, false),
        (2, 4, 6, 128, 48, 176, true),
        (1, 8, 10, 2816, 704, 2112, true),
        (9, 2, 2, 2816, 704, 2112, true),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        // e4m3 weights reach ±448 before their scales: small activations (moe_experts_fp8's).
        let reach = if e4m3 {
            0.05 * (128.0 / hidden as f64).sqrt().min(1.0)
        } else {
            1.0
        };
        let shared_x = c.uniform(&[tokens, hidden], -reach, reach)?;
        let x = c.uniform(&[tokens, hidden], -reach, reach)?;
        let (ids, weights) = moe_experts::routing_inputs(&mut c, tokens, slots, experts)?;
        // Each weight [rows, cols] as the reference sees it: uniform in ±2/√cols, or e4m3 with
        // row scales (a raw input and a float one) dequantised.
        let mut weight = |rows: usize, cols: usize| -> Result<Vec<f64>> {
            if e4m3 {
                let (w, scale) = dequant_fp8_channel::fp8_weight(&mut c, rows, cols)?;
                Ok(dequant_fp8_channel::reference(&w, &scale, cols))
            } else {
                let spread = (cols as f64).powf(-0.5) * 2.0;
                c.uniform(&[rows, cols], -spread, spread)
            }
        };
        let shared_gate_up = weight(2 * shared_width, hidden)?;
        let shared_down = weight(hidden, shared_width)?;
        let gate_up = weight(experts * 2 * width, hidden)?;
        let down = weight(experts * hidden, width)?;
        let mut expected = shared_reference(
            &shared_x,
            &shared_gate_up,
            &shared_down,
            hidden,
            shared_width,
        );
        expected.extend(moe_experts::reference(
            &x, &ids, &weights, &gate_up, &down, slots, hidden, width, Ok,
        )?);
        let label = format!(
            "S{tokens} top-{slots} of {experts} H{hidden} W{width} Ws{shared_width} {}",
            if e4m3 { "e4m3" } else { "dense" }
        );
        cases.push(c.finish(label, expected));
    }
    Ok(cases)
}

/// A case's weights shaped as the op takes them. Float inputs 0–2 are `x_s`, `x` and the
/// routing weights, raw input 0 the ids; then, in the order the case drew them (shared gate_up,
/// shared down, gate_up, down), either float inputs 3–6 (dense, the experts' as `[E·rows,
/// cols]`) or raw inputs 1–4 with their scales as float inputs 3–6 (e4m3).
struct CaseInputs {
    weights: [Tensor; 4],
    scales: Option<[Tensor; 4]>,
}

impl CaseInputs {
    fn of(c: &Case) -> Result<CaseInputs> {
        let hidden = c.float(0).dim(1)?;
        let e4m3 = c.raws().len() > 1;
        let weight = |i: usize| if e4m3 { c.raw(1 + i) } else { c.float(3 + i) };
        let (gate_up_rows, _) = weight(2).dims2()?;
        let width = weight(3).dim(1)?;
        let experts = gate_up_rows / (2 * width);
        let weights = [
            weight(0).clone(),
            weight(1).clone(),
            weight(2).reshape((experts, 2 * width, hidden))?,
            weight(3).reshape((experts, hidden, width))?,
        ];
        let scales = if e4m3 {
            Some([
                c.float(3).clone(),
                c.float(4).clone(),
                c.float(5).reshape((experts, 2 * width))?,
                c.float(6).reshape((experts, hidden))?,
            ])
        } else {
            None
        };
        Ok(CaseInputs { weights, scales })
    }

    fn op_inputs<'a>(&'a self, c: &'a Case) -> (SharedMlp<'a>, RoutedExperts<'a>) {
        let [shared_gate_up, shared_down, gate_up, down] = &self.weights;
        let (shared, experts) = match &self.scales {
            None => (
                (Weights::Dense(shared_gate_up), Weights::Dense(shared_down)),
                ExpertWeights::Dense { gate_up, down },
            ),
            Some([shared_gate_up_scale, shared_down_scale, gate_up_scale, down_scale]) => (
                (
                    Weights::Fp8 {
                        weight: shared_gate_up,
                        scale: shared_gate_up_scale,
                    },
                    Weights::Fp8 {
                        weight: shared_down,
                        scale: shared_down_scale,
                    },
                ),
                ExpertWeights::Fp8 {
                    gate_up: Fp8Experts {
                        weight: gate_up,
                        scale: gate_up_scale,
                    },
                    down: Fp8Experts {
                        weight: down,
                        scale: down_scale,
                    },
                },
            ),
        };
        let shared = SharedMlp {
            x: c.float(0),
            gate_up: shared.0,
            down: shared.1,
        };
        let routed = RoutedExperts {
            x: c.float(1),
            ids: c.raw(0),
            weights: c.float(2),
            experts,
        };
        (shared, routed)
    }
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let inputs = CaseInputs::of(c)?;
    let (shared, routed) = inputs.op_inputs(c);
    let (shared_out, experts) = moe_mlps_on(arm, shared, routed)?;
    Ok(vec![shared_out, experts])
}

#[cfg(test)]
mod tests {
    /// The down kernel keeps one partial sum per shared warp in shared memory
    /// (`G4_MOE_MAX_SHARED_WARPS`), and its blocks must hold one warp per slot and at least one
    /// for the shared row.
    #[test]
    fn the_shared_warps_fit_the_kernel() {
        let source = include_str!("cuda/moe_experts.cu");
        let max = crate::kernels::source_define(source, "G4_MOE_MAX_SHARED_WARPS") as usize;
        assert_eq!(super::MAX_SHARED_WARPS, max);
        for (shared_width, width) in [(2112, 704), (16, 32), (60, 20), (100_000, 8)] {
            let warps = super::shared_warps(shared_width, width);
            assert!((1..=max).contains(&warps));
        }
        assert_eq!(super::shared_warps(2112, 704), 3);
    }
}
