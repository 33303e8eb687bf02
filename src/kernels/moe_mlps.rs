//! `moe_mlps`: both MLPs of a MoE layer over one step (GEMMA4_TEXT.md §2.7) — the shared MLP
//! `down_s · gelu_and_mul(gate_up_s · x_s)` on its input and the routed experts
//! (`moe_experts`) on theirs — returned apart, since each has its own post-norm (`moe_output`).
//! In decode the native arm runs both in two launches where they took four: the shared MLP's
//! GeGLU outputs are more blocks of the experts' gate_up kernel, and its down rows more warps in
//! the experts' down blocks. A decode step's short launches cost their ramp and tail as much as
//! their bytes: 26B-A4B bf16 decode +2.5 % (H100, stop 63). The weights are in x's dtype: with
//! e4m3 weights the same fusion decoded 26B-A4B FP8 1.3 % slower (its one-output blocks read
//! too little each), so an FP8 checkpoint keeps its four launches.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::linear_gelu_mul::{self, Up, Weights};
use super::moe_experts::{self, NATIVE_MAX_SLOTS, NATIVE_MAX_TOKENS};
use super::{arm_for, linear, reference, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MoeMlps;

/// The shared MLP: its input `x [S, H]`, `gate_up [2·Ws, H]` (`[gate ‖ up]`) and `down [H, Ws]`,
/// all in x's dtype.
#[derive(Clone, Copy)]
pub struct SharedMlp<'a> {
    pub x: &'a Tensor,
    pub gate_up: &'a Tensor,
    pub down: &'a Tensor,
}

/// The routed experts, as `moe_experts` takes them: `x [S, H]`, `ids [S, K]` u32, `weights
/// [S, K]` f32, `gate_up [E, 2W, H]`, `down [E, H, W]`.
#[derive(Clone, Copy)]
pub struct RoutedExperts<'a> {
    pub x: &'a Tensor,
    pub ids: &'a Tensor,
    pub weights: &'a Tensor,
    pub gate_up: &'a Tensor,
    pub down: &'a Tensor,
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

/// Each MLP through its own ops (`linear_gelu_mul`, `linear`, `moe_experts`), each on the arm
/// the registry picks for it.
pub fn composed(shared: SharedMlp, routed: RoutedExperts) -> Result<(Tensor, Tensor)> {
    let activated =
        linear_gelu_mul::linear_gelu_mul(shared.x, Weights::Dense(shared.gate_up), Up::Packed)?;
    let shared_out = linear::linear(&activated, shared.down)?;
    let experts = moe_experts::moe_experts(
        routed.x,
        routed.ids,
        routed.weights,
        routed.gate_up,
        routed.down,
    )?;
    Ok((shared_out, experts))
}

/// CUDA arm: for decode, `moe_experts`' two launches with the shared MLP inside them
/// (`g4_moe_mlps_gate_up`, `g4_moe_mlps_down` in src/kernels/cuda/moe_experts.cu); otherwise
/// the composed arm.
fn native_fwd(shared: SharedMlp, routed: RoutedExperts) -> Result<(Tensor, Tensor)> {
    use super::native::vector_aligned;
    let x = shared.x;
    let (tokens, hidden) = x.dims2()?;
    let slots = routed.ids.dim(1)?;
    let (width, shared_width) = (routed.down.dim(2)?, shared.down.dim(1)?);
    let per_vector = 16 / x.dtype().size_in_bytes();
    let same_dtype = [
        routed.x,
        shared.gate_up,
        shared.down,
        routed.gate_up,
        routed.down,
    ]
    .iter()
    .all(|t| t.dtype() == x.dtype());
    let expert_count = routed.gate_up.dim(0)?;
    let shapes_agree = routed.x.dims2()? == (tokens, hidden)
        && shared.gate_up.dims2()? == (2 * shared_width, hidden)
        && routed.gate_up.dims3()? == (expert_count, 2 * width, hidden)
        && routed.down.dims3()? == (expert_count, hidden, width);
    let fits = same_dtype
        && shapes_agree
        && tokens <= NATIVE_MAX_TOKENS
        && slots <= NATIVE_MAX_SLOTS
        && shared_width > 0
        && [hidden, width, shared_width]
            .iter()
            .all(|n| n.is_multiple_of(per_vector));
    if !fits {
        return composed(shared, routed);
    }
    let inputs = [
        shared.x.contiguous()?,
        routed.x.contiguous()?,
        shared.gate_up.contiguous()?,
        shared.down.contiguous()?,
        routed.gate_up.contiguous()?,
        routed.down.contiguous()?,
    ];
    if !inputs.iter().all(vector_aligned) {
        return composed(shared, routed);
    }
    let [shared_x, routed_x, shared_gate_up, shared_down, gate_up, down] = &inputs;
    let rows = |weight| moe_experts::ExpertRows {
        weight,
        scale: None,
    };
    let shared = SharedMlp {
        x: shared_x,
        gate_up: shared_gate_up,
        down: shared_down,
    };
    let (experts, shared_out) = moe_experts::launch_decode(
        "moe_mlps",
        routed_x,
        routed.ids,
        routed.weights,
        rows(gate_up),
        rows(down),
        None,
        Some(shared),
    )?;
    let shared_out = shared_out.expect("launch_decode returns the shared MLP's output");
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
/// against `shared_reference` and `moe_experts::reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the shared MLP fed the experts' input",
            run: |c| {
                let (mut shared, routed) = inputs_of(c);
                shared.x = routed.x;
                let (shared_out, experts) = composed(shared, routed)?;
                Ok(vec![shared_out, experts])
            },
        },
        Mutant {
            what: "the experts fed the shared MLP's input",
            run: |c| {
                let (shared, mut routed) = inputs_of(c);
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
        shapes: "up to 8 tokens (decode), up to 8 experts each, H, W and Ws whole 16-byte vectors",
        path: "native: the shared MLP inside the experts' two launches",
        case: "S1 top-8 of 10 H2816 W704 Ws2112",
    },
    ShapePath {
        shapes: "more than 8 tokens (prefill)",
        path: "composed: linear_gelu_mul, linear and moe_experts apart",
        case: "S9 top-2 of 2 H2816 W704 Ws2112",
    },
    ShapePath {
        shapes: "H, W or Ws not a whole number of 16-byte vectors",
        path: "composed: linear_gelu_mul, linear and moe_experts apart",
        case: "S3 top-2 of 5 H36 W20 Ws60",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (tokens, experts per token, experts, hidden, expert width, shared width): small decode
    // steps (a shared row shorter than an expert's, and one 3.5 expert rows long), a prefill
    // block, and 26B-A4B's sizes (H 2816, W 704, Ws 2112) in decode top-8 (10 experts instead
    // of 128 keep the check small) and in a prefill.
    for (tokens, slots, experts, hidden, width, shared_width) in [
        (1, 2, 4, 64, 32, 16),
        (3, 2, 5, 36, 20, 60),
        (8, 4, 6, 128, 32, 112),
        (12, 2, 6, 64, 32, 96),
        (1, 8, 10, 2816, 704, 2112),
        (9, 2, 2, 2816, 704, 2112),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let shared_x = c.uniform(&[tokens, hidden], -1.0, 1.0)?;
        let x = c.uniform(&[tokens, hidden], -1.0, 1.0)?;
        let (ids, weights) = moe_experts::routing_inputs(&mut c, tokens, slots, experts)?;
        let (shared_gate_up, shared_down) =
            moe_experts::mlp_weights(&mut c, &[], hidden, shared_width)?;
        let (gate_up, down) = moe_experts::mlp_weights(&mut c, &[experts], hidden, width)?;
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
        let label =
            format!("S{tokens} top-{slots} of {experts} H{hidden} W{width} Ws{shared_width}");
        cases.push(c.finish(label, expected));
    }
    Ok(cases)
}

/// A case's inputs as the op takes them: float inputs `[x_s, x, weights, gate_up_s, down_s,
/// gate_up, down]`, raw input 0 the ids.
fn inputs_of(c: &Case) -> (SharedMlp<'_>, RoutedExperts<'_>) {
    let shared = SharedMlp {
        x: c.float(0),
        gate_up: c.float(3),
        down: c.float(4),
    };
    let routed = RoutedExperts {
        x: c.float(1),
        ids: c.raw(0),
        weights: c.float(2),
        gate_up: c.float(5),
        down: c.float(6),
    };
    (shared, routed)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (shared, routed) = inputs_of(c);
    let (shared_out, experts) = moe_mlps_on(arm, shared, routed)?;
    Ok(vec![shared_out, experts])
}
