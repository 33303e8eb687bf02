//! `moe_experts_fp8`: `moe_experts` over an FP8 checkpoint's experts — e4m3 weights with one f32
//! scale per row (`gate_up [E, 2W, H]` with `[E, 2W]` scales, `down [E, H, W]` with `[E, H]`), the
//! layout compressed-tensors' exploded experts join into. The native arm decodes e4m3 in
//! registers while it reads only the chosen experts' rows (decode: half of bf16's bytes); a
//! prefill in bf16 or f16 decodes e4m3 tiles inside `moe_experts`' grouped GEMMs, other
//! prefills dequantise the layer's experts into a scratch copy first.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::moe_experts::{self, ExpertRows, RoundRows, NATIVE_MAX_SLOTS, NATIVE_MAX_TOKENS};
use super::{arm_for, dequant_fp8_channel, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MoeExpertsFp8;

/// One projection of every expert: e4m3 `[E, rows, cols]` and its f32 row scales `[E, rows]`.
#[derive(Clone, Copy)]
pub struct Fp8Experts<'a> {
    pub weight: &'a Tensor,
    pub scale: &'a Tensor,
}

impl Fp8Experts<'_> {
    /// `[E, rows, cols]` in `dtype`, through `dequant_fp8_channel`'s native arm.
    fn dequantised(&self, dtype: DType) -> Result<Tensor> {
        let (experts, rows, cols) = self.weight.dims3()?;
        let weight = self.weight.reshape((experts * rows, cols))?;
        let scale = self.scale.reshape(experts * rows)?;
        dequant_fp8_channel::dequant_fp8_channel(&weight, &scale, dtype)?
            .reshape((experts, rows, cols))
    }

    /// Expert `e`'s `[rows, cols]` in `dtype`, through `dequant_fp8_channel`'s composed arm.
    fn expert(&self, e: usize, dtype: DType) -> Result<Tensor> {
        dequant_fp8_channel::composed(&self.weight.get(e)?, &self.scale.get(e)?, dtype)
    }
}

/// `x [S, H]`, `ids [S, K]` u32, `weights [S, K]` f32 → `[S, H]` f32.
pub fn moe_experts_fp8(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    let arm = arm_for(OP, x.device(), x.dtype());
    moe_experts_fp8_on(arm, x, ids, weights, gate_up, down)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_experts_fp8_on(
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

/// The routed experts only, each dequantised into x's dtype when its turn comes.
pub fn composed(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    routed_experts(x, ids, weights, gate_up, down, None)
}

/// `moe_experts`' composed arm over the routed experts only, each dequantised into x's dtype
/// when its turn comes (a CPU can hold a whole MoE model's experts in e4m3 this way), with
/// `round_hidden` between each expert's projections.
pub(super) fn routed_experts(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
    round_hidden: Option<RoundRows>,
) -> Result<Tensor> {
    let dtype = x.dtype();
    let expert = |e| Ok((gate_up.expert(e, dtype)?, down.expert(e, dtype)?));
    let experts = gate_up.weight.dim(0)?;
    moe_experts::composed_by_expert(x, ids, weights, experts, expert, round_hidden)
}

fn native_fwd(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
) -> Result<Tensor> {
    native_paths(x, ids, weights, gate_up, down, None)
}

/// CUDA arm: for decode, `moe_experts`' two launches over e4m3 rows
/// (src/kernels/cuda/moe_experts.cu); for a prefill, `moe_experts`' device-side grouped GEMMs
/// over the e4m3 rows (moe_grouped.cu), or where those do not take it the native
/// dequantisation and `moe_experts`' prefill. `round_hidden` runs between the projections.
pub(super) fn native_paths(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: Fp8Experts,
    down: Fp8Experts,
    round_hidden: Option<RoundRows>,
) -> Result<Tensor> {
    use super::native::vector_aligned;
    let (tokens, hidden) = x.dims2()?;
    let slots = ids.dim(1)?;
    let width = down.weight.dim(2)?;
    let fits = tokens <= NATIVE_MAX_TOKENS
        && slots <= NATIVE_MAX_SLOTS
        && hidden.is_multiple_of(16)
        && width.is_multiple_of(16);
    let (x, gate_up_weight, down_weight) = (
        x.contiguous()?,
        gate_up.weight.contiguous()?,
        down.weight.contiguous()?,
    );
    let (gate_up_rows, down_rows) = (
        ExpertRows {
            weight: &gate_up_weight,
            scale: Some(gate_up.scale),
        },
        ExpertRows {
            weight: &down_weight,
            scale: Some(down.scale),
        },
    );
    if tokens > NATIVE_MAX_TOKENS && moe_experts::runs_on_device(&x, gate_up_rows, down_rows)? {
        return moe_experts::device_grouped(
            &x,
            ids,
            weights,
            gate_up_rows,
            down_rows,
            round_hidden,
        );
    }
    if !fits
        || ![&x, &gate_up_weight, &down_weight]
            .into_iter()
            .all(vector_aligned)
    {
        let (gate_up, down) = (
            gate_up.dequantised(x.dtype())?,
            down.dequantised(x.dtype())?,
        );
        return moe_experts::prefill(&x, ids, weights, &gate_up, &down, round_hidden);
    }
    let (kernel, gate_up, down) = ("moe_experts_fp8", gate_up_rows, down_rows);
    let (out, _) =
        moe_experts::launch_decode(kernel, &x, ids, weights, gate_up, down, round_hidden, None)?;
    Ok(out)
}

/// The op's contract (`contract.rs`): checked against `moe_experts::reference` on the
/// dequantised weights in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[Mutant {
        what: "the down projection's row scales ignored",
        run: |c| {
            let [gate_up, gate_up_scale, down, down_scale] = experts_of(c)?;
            let gate_up = Fp8Experts {
                weight: &gate_up,
                scale: &gate_up_scale,
            };
            let ones = down_scale.ones_like()?;
            let unscaled = Fp8Experts {
                weight: &down,
                scale: &ones,
            };
            Ok(vec![composed(
                c.float(0),
                c.raw(0),
                c.float(1),
                gate_up,
                unscaled,
            )?])
        },
    }],
};

/// Shapes the native arm hands to another path.
pub(super) const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "up to 8 tokens (decode), up to 8 experts each, H and W multiples of 16",
        path: "native: chosen experts' e4m3 rows read by id and decoded in registers, two launches",
        case: "S1 top-8 of 10 H2816 W704",
    },
    ShapePath {
        shapes: "more than 8 tokens (prefill), bf16 or f16 on CUDA, H and W multiples of 16",
        path: "native: moe_experts' device-side routing and grouped GEMMs, e4m3 decoded in them",
        case: "S9 top-2 of 2 H2816 W704",
    },
    ShapePath {
        shapes: "more than 8 tokens (prefill) otherwise, or H or W not a multiple of 16",
        path: "native dequantisation of the layer's experts, then moe_experts' grouped GEMMs",
        case: "S12 top-2 of 6 H64 W32",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    fp8_expert_cases(device, dtype, rng, |_, v| {
        v.moe_experts_rounding(|rows, _| Ok(rows))
    })
}

/// One case's values as the f64 reference sees them: the weights dequantised, row-major.
pub(super) struct ExpertValues {
    pub x: Vec<f64>,
    pub ids: Vec<usize>,
    pub weights: Vec<f64>,
    pub gate_up: Vec<f64>,
    pub down: Vec<f64>,
    pub slots: usize,
    pub hidden: usize,
    pub width: usize,
}

impl ExpertValues {
    /// `moe_experts::reference` of these values, with `round(rows, cols)` applied to each
    /// token's input row and each routed row of GeGLU output.
    pub fn moe_experts_rounding(
        &self,
        round: impl Fn(Vec<f64>, usize) -> Result<Vec<f64>>,
    ) -> Result<Vec<f64>> {
        let x = round(self.x.clone(), self.hidden)?;
        moe_experts::reference(
            &x,
            &self.ids,
            &self.weights,
            &self.gate_up,
            &self.down,
            self.slots,
            self.hidden,
            self.width,
            |h| round(h, self.width),
        )
    }
}

/// The cases of an op over e4m3 experts: the inputs (x, ids, weights, then the e4m3 weights as
/// raw inputs 1 and 2 and their scales as float inputs 2 and 3, see `experts_of`) and
/// `expected(builder, values)`.
pub(super) fn fp8_expert_cases(
    device: &Device,
    dtype: DType,
    rng: &mut StdRng,
    expected: impl Fn(&Builder, &ExpertValues) -> Result<Vec<f64>>,
) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (tokens, experts per token, experts, hidden, expert width): as moe_experts' cases, the
    // prefill ones past one pass of the grouped GEMM's tile and at 26B-A4B's expert sizes, the
    // last a decode step at those sizes with 10 experts instead of 128.
    for (tokens, slots, experts, hidden, width) in [
        (1, 2, 4, 64, 32),
        (3, 2, 5, 48, 20),
        (8, 4, 6, 128, 64),
        (12, 2, 6, 64, 32),
        (100, 2, 2, 144, 80),
        (9, 2, 2, 2816, 704),
        (1, 8, 10, 2816, 704),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        // Small activations: e4m3 weights reach ±448 before their scales. Smaller still at the
        // real widths, where f16's sums would otherwise come near its largest finite value.
        let reach = 0.05 * (128.0 / hidden as f64).sqrt().min(1.0);
        let x = c.uniform(&[tokens, hidden], -reach, reach)?;
        let (ids, weights) = moe_experts::routing_inputs(&mut c, tokens, slots, experts)?;
        let (gate_up, gate_up_scale) =
            dequant_fp8_channel::fp8_weight(&mut c, experts * 2 * width, hidden)?;
        let (down, down_scale) = dequant_fp8_channel::fp8_weight(&mut c, experts * hidden, width)?;
        let values = ExpertValues {
            x,
            ids,
            weights,
            gate_up: dequant_fp8_channel::reference(&gate_up, &gate_up_scale, hidden),
            down: dequant_fp8_channel::reference(&down, &down_scale, width),
            slots,
            hidden,
            width,
        };
        let expected = expected(&c, &values)?;
        let label = format!("S{tokens} top-{slots} of {experts} H{hidden} W{width}");
        cases.push(c.finish(label, expected));
    }
    Ok(cases)
}

/// A case's experts as the op takes them, `[gate_up, its scales, down, its scales]`: raw inputs 1
/// and 2 hold the e4m3 weights as `[E·rows, cols]`, float inputs 2 and 3 their scales.
fn experts_of(c: &Case) -> Result<[Tensor; 4]> {
    let hidden = c.float(0).dim(1)?;
    let (rows, width) = c.raw(2).dims2()?;
    let experts = rows / hidden;
    Ok([
        c.raw(1).reshape((experts, 2 * width, hidden))?,
        c.float(2).reshape((experts, 2 * width))?,
        c.raw(2).reshape((experts, hidden, width))?,
        c.float(3).reshape((experts, hidden))?,
    ])
}

/// `with(gate_up, down)` on a case's experts (`experts_of`).
pub(super) fn with_experts_of<T>(
    c: &Case,
    with: impl FnOnce(Fp8Experts, Fp8Experts) -> Result<T>,
) -> Result<T> {
    let [gate_up, gate_up_scale, down, down_scale] = experts_of(c)?;
    let gate_up = Fp8Experts {
        weight: &gate_up,
        scale: &gate_up_scale,
    };
    let down = Fp8Experts {
        weight: &down,
        scale: &down_scale,
    };
    with(gate_up, down)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (x, ids, weights) = (c.float(0), c.raw(0), c.float(1));
    let y = with_experts_of(c, |gate_up, down| {
        moe_experts_fp8_on(arm, x, ids, weights, gate_up, down)
    })?;
    Ok(vec![y])
}
