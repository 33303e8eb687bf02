//! `moe_experts`: the routed experts' MLP of a MoE layer, weighted and combined —
//! `out[t] = Σ_slot w[t, slot] · down[e] · gelu_and_mul(gate_up[e] · x[t])`, `e = ids[t, slot]`,
//! accumulated in f32. The native arm reads only the chosen experts' weights, by id, on the
//! device: decode needs no trip through the host and its step can be captured as a graph.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::moe_mlps::SharedMlp;
use super::native;
use super::{arm_for, gelu_and_mul, linear, moe_combine, moe_gather_rows};
use super::{reference, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::MoeExperts;

/// `x [S, H]`, `ids [S, K]` u32, `weights [S, K]` f32, `gate_up [E, 2W, H]`, `down [E, H, W]`
/// → `[S, H]` f32.
pub fn moe_experts(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
) -> Result<Tensor> {
    let arm = arm_for(OP, x.device(), x.dtype());
    moe_experts_on(arm, x, ids, weights, gate_up, down)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_experts_on(
    arm: Arm,
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, ids, weights, gate_up, down),
        Arm::Native(_) => native_fwd(x, ids, weights, gate_up, down),
    }
}

/// Tokens grouped by expert on the host (a counting sort of the routing, uploaded once), one
/// gather of every routed row in expert order, both projections per expert on its slice of the
/// rows, and one weighted combine of each token's rows.
pub fn composed(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
) -> Result<Tensor> {
    let expert = |e| Ok((gate_up.get(e)?, down.get(e)?));
    composed_by_expert(x, ids, weights, gate_up.dim(0)?, expert, None)
}

/// `composed` over `experts` experts whose `(gate_up, down)` weights `expert(e)` gives (only
/// the routed ones are asked for), with `round_hidden` applied to each expert's GeGLU rows.
pub(super) fn composed_by_expert(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    experts: usize,
    expert: impl Fn(usize) -> Result<(Tensor, Tensor)>,
    round_hidden: Option<RoundRows>,
) -> Result<Tensor> {
    let routing = Routing::by_expert(ids, experts)?;
    let inputs = moe_gather_rows::moe_gather_rows(x, &routing.rows)?;
    let mut outputs = Vec::new();
    let mut start = 0;
    for (e, &count) in routing.counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let (gate_up, down) = expert(e)?;
        let rows_of_expert = inputs.narrow(0, start, count)?;
        let gate_up_rows = linear::linear(&rows_of_expert, &gate_up)?;
        let h = rounded(gelu_and_mul::gelu_and_mul(&gate_up_rows)?, round_hidden)?;
        outputs.push(linear::linear(&h, &down)?);
        start += count;
    }
    let y = if outputs.is_empty() {
        None
    } else {
        Some(Tensor::cat(&outputs, 0)?)
    };
    routing.combine(x, y.as_ref(), weights)
}

/// Rounds each row of a tensor on its own (an arm of `round_rows_e4m3`): what an FP8_DYNAMIC
/// checkpoint's down projection does to its input, the GeGLU rows between an expert's two
/// projections.
pub(super) type RoundRows = fn(&Tensor) -> Result<Tensor>;

/// `h`, through `round_hidden` where there is one.
fn rounded(h: Tensor, round_hidden: Option<RoundRows>) -> Result<Tensor> {
    match round_hidden {
        Some(round) => round(&h),
        None => Ok(h),
    }
}

/// The routed rows in expert order: each expert's count, the token of each routed row, and
/// where each token's slots landed (on the device, uploaded once).
pub(super) struct Routing {
    counts: Vec<usize>,
    rows: Tensor,
    positions: Tensor,
}

impl Routing {
    /// A counting sort of the routing `ids [N, k]` by expert, on the host (the routing weights
    /// stay on the device: only the ids cross).
    fn by_expert(ids: &Tensor, experts: usize) -> Result<Routing> {
        let device = ids.device().clone();
        let (tokens, slots) = ids.dims2()?;
        let ids = ids.flatten_all()?.to_vec1::<u32>()?;
        let mut counts = vec![0usize; experts];
        for &expert in &ids {
            let Some(count) = counts.get_mut(expert as usize) else {
                candle_core::bail!(
                    "moe_experts: expert id {expert} out of range ({experts} experts)"
                );
            };
            *count += 1;
        }
        let mut starts: Vec<usize> = counts
            .iter()
            .scan(0, |next, &count| {
                let start = *next;
                *next += count;
                Some(start)
            })
            .collect();
        let (mut rows, mut positions) = (vec![0u32; ids.len()], vec![0u32; ids.len()]);
        for (slot, &expert) in ids.iter().enumerate() {
            let at = &mut starts[expert as usize];
            (rows[*at], positions[slot]) = ((slot / slots) as u32, *at as u32);
            *at += 1;
        }
        Ok(Routing {
            counts,
            rows: Tensor::from_vec(rows, ids.len(), &device)?,
            positions: Tensor::from_vec(positions, (tokens, slots), &device)?,
        })
    }

    /// `Σ w · y` of each token's routed rows `y [routed, H]` (none: zeros), in f32, with the
    /// routing's `weights [N, k]`.
    fn combine(&self, x: &Tensor, y: Option<&Tensor>, weights: &Tensor) -> Result<Tensor> {
        match y {
            Some(y) => moe_combine::moe_combine(y, &self.positions, weights),
            None => Tensor::zeros(x.dims2()?, DType::F32, x.device()),
        }
    }
}

/// Prefill on the native arm. bf16 and f16 on CUDA: everything on the device (`device_grouped`).
/// Otherwise the routing goes to the host for its counting sort and each projection of every
/// expert is one grouped GEMM of the vendor BLAS (`host_grouped`).
pub(super) fn prefill(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
    round_hidden: Option<RoundRows>,
) -> Result<Tensor> {
    let (x, gate_up, down) = (x.contiguous()?, gate_up.contiguous()?, down.contiguous()?);
    let rows = |weight| ExpertRows {
        weight,
        scale: None,
    };
    if runs_on_device(&x, rows(&gate_up), rows(&down))? {
        device_grouped(&x, ids, weights, rows(&gate_up), rows(&down), round_hidden)
    } else {
        host_grouped(&x, ids, weights, &gate_up, &down, round_hidden)
    }
}

/// Whether `device_grouped` takes this prefill: CUDA, x in bf16 or f16 and the experts in x's
/// dtype or e4m3 (with scales), whole 16-byte vectors along both widths, contiguous and aligned.
pub(super) fn runs_on_device(x: &Tensor, gate_up: ExpertRows, down: ExpertRows) -> Result<bool> {
    use super::native::vector_aligned;
    let per_vector = |rows: &ExpertRows| 16 / rows.weight.dtype().size_in_bytes();
    let dtype_fits = |rows: &ExpertRows| match rows.scale {
        Some(_) => rows.weight.dtype() == DType::F8E4M3,
        None => rows.weight.dtype() == x.dtype(),
    };
    Ok(matches!(x.device(), Device::Cuda(_))
        && matches!(x.dtype(), DType::BF16 | DType::F16)
        && dtype_fits(&gate_up)
        && dtype_fits(&down)
        && x.dim(1)?.is_multiple_of(per_vector(&gate_up).max(8))
        && down.weight.dim(2)?.is_multiple_of(per_vector(&down).max(8))
        && gate_up.weight.dim(0)? <= ROUTE_MAX_EXPERTS
        && [x, gate_up.weight, down.weight]
            .into_iter()
            .all(|t| t.is_contiguous() && vector_aligned(t)))
}

/// The routing sort's block (`g4_moe_route`): one thread per expert in its scan.
const ROUTE_THREADS: u32 = 1024;
const ROUTE_MAX_EXPERTS: usize = ROUTE_THREADS as usize;
/// The grouped GEMM's block (moe_grouped.cu): 8 warps, 128 weight rows, 4 stages of 64 routed
/// and 128 weight rows of 64 elements in shared memory (96 KiB; e4m3 rows take half, plus one
/// decoded tile: 80 KiB).
const GROUPED_THREADS: u32 = 256;
const GROUPED_WEIGHT_ROWS: usize = 128;
const GROUPED_SHARED_BYTES: u32 = 4 * (64 + 128) * 64 * 2;
const GROUPED_FP8_SHARED_BYTES: u32 = 4 * (64 * 64 * 2 + 128 * 64) + 128 * 64 * 2;

/// Three launches and the combine, no host round trip: `g4_moe_route` sorts the routing by
/// expert on the device; gate_up reads each expert's rows straight from `x` through the sorted
/// tokens and applies GeGLU in its epilogue; down multiplies those rows in expert order; the
/// combine sums each token's rows with its weights. e4m3 experts are decoded in the GEMMs.
pub(super) fn device_grouped(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: ExpertRows,
    down: ExpertRows,
    round_hidden: Option<RoundRows>,
) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, launch_with_shared, Arg, Grid};
    let (device, dtype) = (x.device(), x.dtype());
    let (tokens, hidden) = x.dims2()?;
    let slots = ids.dim(1)?;
    let (experts, width) = (gate_up.weight.dim(0)?, down.weight.dim(2)?);
    let routed = tokens * slots;
    let ids = ids.to_dtype(DType::U32)?.contiguous()?;
    let offsets = empty(experts + 1, DType::U32, device)?;
    let rows = empty(routed, DType::U32, device)?;
    let positions = empty((tokens, slots), DType::U32, device)?;
    let route = Grid {
        blocks: 1,
        threads: ROUTE_THREADS,
    };
    let args = [
        Arg::Tensor(&ids),
        Arg::Tensor(&offsets),
        Arg::Tensor(&rows),
        Arg::Tensor(&positions),
        Arg::I32(routed as i32),
        Arg::I32(slots as i32),
        Arg::I32(experts as i32),
    ];
    launch("g4_moe_route", device, route, &args)?;
    let (kernel, shared_bytes) = match gate_up.scale {
        Some(_) => ("moe_grouped_fp8", GROUPED_FP8_SHARED_BYTES),
        None => ("moe_grouped", GROUPED_SHARED_BYTES),
    };
    // One projection: `inputs` (the rows, and for gate_up the token of each), the weight and
    // its scales, into `[routed, n]`; `columns_per_block` output columns per block.
    let project = |projection: &str,
                   inputs: &[Arg],
                   weight: ExpertRows,
                   n: usize,
                   k: usize,
                   columns_per_block: usize|
     -> Result<Tensor> {
        let out = empty((routed, n), dtype, device)?;
        let scale = weight
            .scale
            .map(|s| s.to_dtype(DType::F32)?.contiguous())
            .transpose()?;
        let column_blocks = n.div_ceil(columns_per_block);
        let mut args = inputs.to_vec();
        args.push(Arg::Tensor(weight.weight));
        args.extend(scale.as_ref().map(Arg::Tensor));
        args.extend([
            Arg::Tensor(&out),
            Arg::Tensor(&offsets),
            Arg::I32(n as i32),
            Arg::I32(k as i32),
            Arg::I32(column_blocks as i32),
        ]);
        let grid = Grid {
            blocks: (experts * column_blocks) as u32,
            threads: GROUPED_THREADS,
        };
        let name = kernel_name(&format!("{kernel}_{projection}"), dtype)?;
        launch_with_shared(&name, device, grid, shared_bytes, &args)?;
        Ok(out)
    };
    // gate_up's blocks each take the gate and up rows of half as many columns.
    let inputs = [Arg::Tensor(x), Arg::Tensor(&rows)];
    let h = project(
        "gate_up",
        &inputs,
        gate_up,
        width,
        hidden,
        GROUPED_WEIGHT_ROWS / 2,
    )?;
    let h = rounded(h, round_hidden)?;
    let y = project(
        "down",
        &[Arg::Tensor(&h)],
        down,
        hidden,
        width,
        GROUPED_WEIGHT_ROWS,
    )?;
    moe_combine::moe_combine(&y, &positions, weights)
}

/// The host-sorted prefill: each projection of every expert in one grouped GEMM of the vendor
/// BLAS, on the routing's counting sort.
fn host_grouped(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
    round_hidden: Option<RoundRows>,
) -> Result<Tensor> {
    let routing = Routing::by_expert(ids, gate_up.dim(0)?)?;
    let inputs = moe_gather_rows::moe_gather_rows(x, &routing.rows)?.contiguous()?;
    let gate_up_rows = native::grouped_gemm_bt(&inputs, &routing.counts, &gate_up.contiguous()?)?;
    let h = rounded(gelu_and_mul::gelu_and_mul(&gate_up_rows)?, round_hidden)?.contiguous()?;
    let y = native::grouped_gemm_bt(&h, &routing.counts, &down.contiguous()?)?;
    routing.combine(x, Some(&y), weights)
}

/// Tokens up to which the native arm runs its decode kernels; longer (prefill) blocks reuse
/// each expert's weights across its tokens, which the grouped paths do.
pub(super) const NATIVE_MAX_TOKENS: usize = 8;
/// Experts per token the down kernel holds sums for (`G4_MOE_MAX_SLOTS`).
pub(super) const NATIVE_MAX_SLOTS: usize = 8;
/// Warps that share one gate/up column (the gate_up kernel's block: one per row and column).
const GATE_UP_WARPS_PER_COLUMN: usize = 4;

/// CUDA arm: two launches (src/kernels/cuda/moe_experts.cu): gate_up with the activation fused,
/// then down with the weighted combine, each warp streaming one weight row per output.
fn native_fwd(
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: &Tensor,
    down: &Tensor,
) -> Result<Tensor> {
    use super::native::vector_aligned;
    let (tokens, hidden) = x.dims2()?;
    let slots = ids.dim(1)?;
    let width = down.dim(2)?;
    let per_vector = 16 / x.dtype().size_in_bytes();
    if gate_up.dtype() != x.dtype() || down.dtype() != x.dtype() {
        return composed(x, ids, weights, gate_up, down);
    }
    if tokens > NATIVE_MAX_TOKENS {
        return prefill(x, ids, weights, gate_up, down, None);
    }
    let fits = slots <= NATIVE_MAX_SLOTS
        && hidden.is_multiple_of(per_vector)
        && width.is_multiple_of(per_vector);
    if !fits {
        return composed(x, ids, weights, gate_up, down);
    }
    let (x, gate_up, down) = (x.contiguous()?, gate_up.contiguous()?, down.contiguous()?);
    if ![&x, &gate_up, &down].into_iter().all(vector_aligned) {
        return composed(&x, ids, weights, &gate_up, &down);
    }
    let rows = |weight| ExpertRows {
        weight,
        scale: None,
    };
    let (gate_up, down) = (rows(&gate_up), rows(&down));
    let (out, _) = launch_decode("moe_experts", &x, ids, weights, gate_up, down, None, None)?;
    Ok(out)
}

/// Every expert's projection as the native kernels read it: its weight rows, and their scales
/// when the rows are e4m3 (`moe_experts_fp8`).
#[derive(Clone, Copy)]
pub(super) struct ExpertRows<'a> {
    pub weight: &'a Tensor,
    pub scale: Option<&'a Tensor>,
}

/// The decode arm's two launches of `{kernel}_gate_up` and `{kernel}_down` (moe_experts.cu),
/// shared by `moe_experts`, `moe_experts_fp8` and `moe_mlps`: gate_up with the activation fused,
/// then down with the weighted combine. Each weight is followed by its scales when it has them;
/// `round_hidden` runs between the two. A `shared` MLP rides along (`moe_mlps`): its GeGLU
/// outputs are more gate_up blocks and its down rows more warps of each down block, its
/// arguments after the experts'. → the experts' sum `[S, H]` f32, and the shared MLP's output
/// `[S, H]` in x's dtype when there is one.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_decode(
    kernel: &str,
    x: &Tensor,
    ids: &Tensor,
    weights: &Tensor,
    gate_up: ExpertRows,
    down: ExpertRows,
    round_hidden: Option<RoundRows>,
    shared: Option<SharedMlp>,
) -> Result<(Tensor, Option<Tensor>)> {
    use super::native::{empty, kernel_name, launch, warp_lanes, Arg};
    let (device, dtype) = (x.device(), x.dtype());
    let (tokens, hidden) = x.dims2()?;
    let slots = ids.dim(1)?;
    let width = down.weight.dim(2)?;
    let shared_width = shared.map(|mlp| mlp.down.dim(1)).transpose()?.unwrap_or(0);
    let ids = ids.to_dtype(DType::U32)?.contiguous()?;
    let weights = weights.to_dtype(DType::F32)?.contiguous()?;
    let scales = |rows: &ExpertRows| {
        rows.scale
            .map(|s| s.to_dtype(DType::F32)?.contiguous())
            .transpose()
    };
    let (gate_up_scale, down_scale) = (scales(&gate_up)?, scales(&down)?);
    let h = empty((tokens * slots, width), dtype, device)?;
    let out = empty((tokens, hidden), DType::F32, device)?;
    // The shared MLP with its GeGLU rows and its output.
    let shared = match shared {
        Some(mlp) => Some((
            mlp,
            empty((tokens, shared_width), dtype, device)?,
            empty((tokens, hidden), dtype, device)?,
        )),
        None => None,
    };
    let lanes = warp_lanes(device);
    let (gate_up_grid, down_grid) = expert_grids(tokens, slots, hidden, width, shared_width, lanes);
    let sizes = [
        Arg::I32(slots as i32),
        Arg::I32(hidden as i32),
        Arg::I32(width as i32),
    ];
    let mut args = vec![
        Arg::Tensor(x),
        Arg::Tensor(&ids),
        Arg::Tensor(gate_up.weight),
    ];
    args.extend(gate_up_scale.as_ref().map(Arg::Tensor));
    args.push(Arg::Tensor(&h));
    args.extend(sizes);
    if let Some((mlp, shared_h, _)) = &shared {
        args.extend([
            Arg::Tensor(mlp.x),
            Arg::Tensor(mlp.gate_up),
            Arg::Tensor(shared_h),
            Arg::I32(tokens as i32),
            Arg::I32(shared_width as i32),
        ]);
    }
    launch(
        &kernel_name(&format!("{kernel}_gate_up"), dtype)?,
        device,
        gate_up_grid,
        &args,
    )?;
    let h = rounded(h, round_hidden)?;
    let mut args = vec![
        Arg::Tensor(&h),
        Arg::Tensor(&ids),
        Arg::Tensor(&weights),
        Arg::Tensor(down.weight),
    ];
    args.extend(down_scale.as_ref().map(Arg::Tensor));
    args.push(Arg::Tensor(&out));
    args.extend(sizes);
    if let Some((mlp, shared_h, shared_out)) = &shared {
        args.extend([
            Arg::Tensor(shared_h),
            Arg::Tensor(mlp.down),
            Arg::Tensor(shared_out),
            Arg::I32(shared_width as i32),
        ]);
    }
    launch(
        &kernel_name(&format!("{kernel}_down"), dtype)?,
        device,
        down_grid,
        &args,
    )?;
    Ok((out, shared.map(|(_, _, shared_out)| shared_out)))
}

/// Row-major f64: `x [S, H]`, `ids`/`weights [S, K]`, `gate_up [E, 2W, H]`, `down [E, H, W]`;
/// `round_hidden` takes each routed row of GeGLU output before down sees it.
#[allow(clippy::too_many_arguments)]
pub fn reference(
    x: &[f64],
    ids: &[usize],
    weights: &[f64],
    gate_up: &[f64],
    down: &[f64],
    slots: usize,
    hidden: usize,
    width: usize,
    round_hidden: impl Fn(Vec<f64>) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let tokens = x.len() / hidden;
    let mut out = vec![0.0; tokens * hidden];
    for t in 0..tokens {
        let row = &x[t * hidden..(t + 1) * hidden];
        for slot in 0..slots {
            let (e, w) = (ids[t * slots + slot], weights[t * slots + slot]);
            let gu = &gate_up[e * 2 * width * hidden..(e + 1) * 2 * width * hidden];
            let projected = reference::matmul_bt(row, gu, 1, 2 * width, hidden);
            let h: Vec<f64> = (0..width)
                .map(|j| reference::gelu_tanh(projected[j]) * projected[width + j])
                .collect();
            let h = round_hidden(h)?;
            let d = &down[e * hidden * width..(e + 1) * hidden * width];
            let y = reference::matmul_bt(&h, d, 1, hidden, width);
            for (o, v) in out[t * hidden..(t + 1) * hidden].iter_mut().zip(y) {
                *o += w * v;
            }
        }
    }
    Ok(out)
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the routing weights ignored",
            run: |c| {
                let ones = c.float(1).ones_like()?;
                Ok(vec![composed(
                    c.float(0),
                    c.raw(0),
                    &ones,
                    c.float(2),
                    c.float(3),
                )?])
            },
        },
        Mutant {
            what: "each token's experts read one expert too far",
            run: |c| {
                let experts = c.float(2).dim(0)? as u32;
                let shifted: Vec<Vec<u32>> = c
                    .raw(0)
                    .to_vec2::<u32>()?
                    .into_iter()
                    .map(|row| row.into_iter().map(|e| (e + 1) % experts).collect())
                    .collect();
                let shifted = Tensor::new(shifted, c.raw(0).device())?;
                Ok(vec![composed(
                    c.float(0),
                    &shifted,
                    c.float(1),
                    c.float(2),
                    c.float(3),
                )?])
            },
        },
    ],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "up to 8 tokens (decode), up to 8 experts each, H and W whole 16-byte vectors",
        path: "native: chosen experts' weights read by id on the device, two launches",
        case: "S1 top-8 of 10 H2816 W704",
    },
    ShapePath {
        shapes: "more than 8 tokens (prefill), bf16 or f16 on CUDA, H and W whole 16-byte vectors",
        path: "native: routing sorted on the device, one grouped GEMM launch per projection \
               reading the per-expert offsets there (rows gathered and GeGLU fused in gate_up)",
        case: "S9 top-2 of 2 H2816 W704",
    },
    ShapePath {
        shapes: "more than 8 tokens (prefill), otherwise",
        path:
            "native: tokens grouped by expert on the host, one vendor grouped GEMM per projection",
        case: "S12 top-2 of 6 H64 W32",
    },
    ShapePath {
        shapes: "H or W not a whole number of 16-byte vectors",
        path: "composed",
        case: "S3 top-2 of 5 H36 W20",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (tokens, experts per token, experts, hidden, expert width). Prefill blocks (more than 8
    // tokens): one under the grouped GEMM's tile widths, one with more rows per expert than one
    // pass of its tile (100 each), one at 26B-A4B's expert sizes (H 2816, W 704). The last is
    // a decode step at those sizes, top-8 (10 experts instead of 128 keep the check small).
    for (tokens, slots, experts, hidden, width) in [
        (1, 2, 4, 64, 32),
        (3, 2, 5, 36, 20),
        (8, 4, 6, 128, 64),
        (12, 2, 6, 64, 32),
        (100, 2, 2, 136, 72),
        (1, 8, 10, 2816, 704),
        (9, 2, 2, 2816, 704),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[tokens, hidden], -1.0, 1.0)?;
        let (ids, weights) = routing_inputs(&mut c, tokens, slots, experts)?;
        let (gate_up, down) = mlp_weights(&mut c, &[experts], hidden, width)?;
        let expected = reference(
            &x, &ids, &weights, &gate_up, &down, slots, hidden, width, Ok,
        )?;
        let label = format!("S{tokens} top-{slots} of {experts} H{hidden} W{width}");
        cases.push(c.finish(label, expected));
    }
    Ok(cases)
}

/// A case's GeGLU MLP weights, `gate_up [.., 2·width, hidden]` and `down [.., hidden, width]`
/// after the `leading` dimensions (the experts: `[E]`; one MLP: none), each uniform in
/// ±2/√(its K).
pub(super) fn mlp_weights(
    c: &mut Builder,
    leading: &[usize],
    hidden: usize,
    width: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let shape = |rows: usize, cols: usize| [leading, &[rows, cols]].concat();
    let spread = (hidden as f64).powf(-0.5) * 2.0;
    let gate_up = c.uniform(&shape(2 * width, hidden), -spread, spread)?;
    let down_spread = (width as f64).powf(-0.5) * 2.0;
    let down = c.uniform(&shape(hidden, width), -down_spread, down_spread)?;
    Ok((gate_up, down))
}

/// A case's routing: distinct experts per token, as top-k chooses them (the ids, a raw input),
/// and their weights (a float input), returned as the values the reference sees.
pub(super) fn routing_inputs(
    c: &mut Builder,
    tokens: usize,
    slots: usize,
    experts: usize,
) -> Result<(Vec<usize>, Vec<f64>)> {
    let mut ids = Vec::with_capacity(tokens * slots);
    for _ in 0..tokens {
        let mut all: Vec<usize> = (0..experts).collect();
        for i in 0..slots {
            let j = c.rng.random_range(i..experts);
            all.swap(i, j);
        }
        ids.extend_from_slice(&all[..slots]);
    }
    let weights = c.float_as(&[tokens, slots], DType::F32, |r| r.random_range(0.05..0.5))?;
    let id_values: Vec<u32> = ids.iter().map(|&e| e as u32).collect();
    c.raw(Tensor::from_vec(id_values, (tokens, slots), c.device())?);
    Ok((ids, weights))
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![moe_experts_on(arm, f(0), c.raw(0), f(1), f(2), f(3))?])
}

/// The two kernels' launches on `lanes`-wide warps: gate_up gives a block of
/// `GATE_UP_WARPS_PER_COLUMN` warps each (row, column) of the `tokens · slots` rows of width
/// `width`; down a block of one warp per slot each (token, output column).
pub(super) fn expert_grids(
    tokens: usize,
    slots: usize,
    hidden: usize,
    width: usize,
    shared_width: usize,
    lanes: usize,
) -> (super::native::Grid, super::native::Grid) {
    use super::native::Grid;
    (
        Grid::of_warps(
            tokens * (slots * width + shared_width),
            GATE_UP_WARPS_PER_COLUMN,
            lanes,
        ),
        Grid::of_warps(
            tokens * hidden,
            slots + shared_warps(shared_width, width),
            lanes,
        ),
    )
}

/// Warps of a down block that split the shared MLP's row (`G4_MOE_MAX_SHARED_WARPS` at most).
const MAX_SHARED_WARPS: usize = 8;

/// The down kernel's warps for the shared MLP's rows of `shared_width` (0: none): as many as
/// the experts' rows of `width` it is long, so that every warp of the block reads about as much.
fn shared_warps(shared_width: usize, width: usize) -> usize {
    shared_width.div_ceil(width).min(MAX_SHARED_WARPS)
}

#[cfg(test)]
mod tests {
    use crate::kernels::native::WARP_WIDTHS;

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
        assert_eq!(super::shared_warps(0, 704), 0);
    }

    /// The host sizes the grouped GEMM's launches from its own copy of the kernel's geometry:
    /// too little shared memory would be written past, so the two must agree.
    #[test]
    fn the_grouped_launch_geometry_is_the_kernels() {
        let source = include_str!("cuda/moe_grouped.cu");
        let define = |name| crate::kernels::source_define(source, name);
        let (rows, cols, bk, stages) = (
            define("G4_GROUPED_ROWS"),
            define("G4_GROUPED_COLS"),
            define("G4_GROUPED_BK"),
            define("G4_GROUPED_STAGES"),
        );
        let (x_tile, w_tile) = (rows * bk * 2, cols * bk * 2);
        assert_eq!(super::GROUPED_THREADS, define("G4_GROUPED_THREADS"));
        assert_eq!(super::GROUPED_WEIGHT_ROWS, cols as usize);
        assert_eq!(super::GROUPED_SHARED_BYTES, stages * (x_tile + w_tile));
        assert_eq!(
            super::GROUPED_FP8_SHARED_BYTES,
            stages * (x_tile + w_tile / 2) + w_tile
        );
        assert!(source.contains("__launch_bounds__(1024)\n    g4_moe_route"));
        assert_eq!(super::ROUTE_THREADS, 1024);
    }

    /// The kernels read their block's warp count from blockDim and warpSize and walk rows (or
    /// tokens) block by block: gate_up's blocks must hold `GATE_UP_WARPS_PER_COLUMN` warps, one
    /// block per output, the shared MLP's GeGLU outputs after the experts'; down's one warp per
    /// slot and the shared MLP's warps after them, one block per output.
    #[test]
    fn the_grids_cover_every_output_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for (tokens, slots, hidden, width, shared_width) in [
                (1, 8, 2816, 704, 0),
                (1, 8, 2816, 704, 2112),
                (3, 2, 64, 24, 0),
                (3, 2, 64, 24, 40),
                (8, 8, 100, 9, 0),
            ] {
                let (gate_up, down) =
                    super::expert_grids(tokens, slots, hidden, width, shared_width, lanes);
                assert_eq!(gate_up.warps(lanes), super::GATE_UP_WARPS_PER_COLUMN);
                assert_eq!(
                    gate_up.blocks as usize,
                    tokens * (slots * width + shared_width)
                );
                let shared_warps = super::shared_warps(shared_width, width);
                assert_eq!(down.warps(lanes), slots + shared_warps);
                assert_eq!(down.blocks as usize, tokens * hidden);
            }
        }
    }
}
