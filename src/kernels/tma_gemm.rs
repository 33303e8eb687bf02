//! The Hopper GEMM behind FP8 prefill's projections: `Y = X · (W_e4m3 × scale[row])ᵀ` for many
//! rows of bf16 X on compute capability 9.0, a warp-specialised TMA + wgmma pipeline
//! (src/kernels/cuda/tma_gemm.cuh, its entry points in tma_gemm.cu).
//! The e4m3 weights (`matmul_bt_fp8_channel`) are widened to bf16 in registers on their way
//! into the tensor cores, and each row's scale multiplies its sums, so no bf16 copy of the weight
//! is written or read; for an MLP's packed [gate ‖ up] (`linear_gelu_mul`) the GeGLU product can
//! be the epilogue, so the [m, 2d] projection never reaches memory. (Over bf16 weights the same
//! pipeline takes 1.14× cuBLAS's time, H100: bf16 checkpoints keep cuBLAS.)
//!
//! X may also come in f16, each row on a power-of-two scale (`F16Rows`, written by the norm
//! before q/k/v and gate/up): e4m3 widens to f16 in one instruction a pair where bf16 takes
//! four, and the GEMM undoes each row's scale on its sums.
//!
//! Not an op of its own: the ops that call it check its results through their contracts.
//! `G4_TMA_GEMM=0` turns it off, and those ops take their other paths.

use super::native::{
    elementwise, empty, launch, launch_with_shared, tensor_map, vector_aligned, warp_lanes, Arg,
    Grid, Swizzle,
};
use candle_core::{DType, Device, Result, Tensor, D};

/// Rows of X in f16 for the GEMM's f16 entries: `x = rows × row_scale`, each row multiplied by
/// the power of two that brings its largest |x| into [2^14, 2^15) (never by more than 2^126),
/// and `row_scale [.., 1]` f32 the inverse. A bf16 X is exact so (f16 holds bf16's 8 bits of
/// mantissa from 2^-14 of f16's range up, 2^-28 of the row's largest) but for what lies below
/// that, far under the sums' own rounding.
pub struct F16Rows {
    pub rows: Tensor,
    pub row_scale: Tensor,
}

/// The exponents the f16 rows' scales bring a row's largest |x| to, and the least they allow.
const F16_ROW_MAX_EXPONENT: i32 = 14;
const F16_ROW_MIN_EXPONENT: i32 = F16_ROW_MAX_EXPONENT - 126;

/// `row_scale` of a row whose largest |x| is `max` (1 for a row of zeros, infinities or NaNs):
/// 2^(e − 14) for e the exponent of `max`, read from its bits so that it is exact.
pub fn f16_row_scale(max: f32) -> f32 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let exponent = ((max.to_bits() >> 23) & 0xff) as i32 - 127;
    let scale_exponent = exponent.max(F16_ROW_MIN_EXPONENT) - F16_ROW_MAX_EXPONENT;
    f32::from_bits(((scale_exponent + 127) as u32) << 23)
}

impl F16Rows {
    /// The composed form of a norm's rows: `x` rounded to f16 on each row's scale.
    pub fn composed(x: &Tensor) -> Result<F16Rows> {
        let x = x.to_dtype(DType::F32)?;
        let max = x.abs()?.max_keepdim(D::Minus1)?;
        let scales: Vec<f32> = max
            .flatten_all()?
            .to_vec1::<f32>()?
            .into_iter()
            .map(f16_row_scale)
            .collect();
        let row_scale = Tensor::from_vec(scales, max.shape(), x.device())?;
        let rows = x.broadcast_div(&row_scale)?.to_dtype(DType::F16)?;
        Ok(F16Rows { rows, row_scale })
    }

    /// `rows × row_scale` in `dtype`: the rows as the paths without f16 entries take them.
    pub fn unscaled(&self, dtype: DType) -> Result<Tensor> {
        self.rows
            .to_dtype(DType::F32)?
            .broadcast_mul(&self.row_scale)?
            .to_dtype(dtype)
    }
}

/// X as the GEMM takes it.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    Bf16(&'a Tensor),
    F16(&'a F16Rows),
}

/// Blocks of 128 weight rows by 128 X rows (or 256, "wide"; or 64–112 where 128-row tiles fill
/// less than one wave), K in steps of 64 (one 128-byte row of a bf16 tile), a producer
/// warpgroup and two consumer ones; 6 stages of shared memory (5 wide), each an X tile (rows ×
/// 64 bf16), a W tile (128 × 64 e4m3) and two 8-byte barriers, and 1 KiB to align them.
const WEIGHT_ROWS: usize = 128;
const X_ROWS: usize = 128;
const WIDE_X_ROWS: usize = 256;
const K_STEP: usize = 64;
const WARPS: usize = 12;
const STAGES: usize = 6;
const WIDE_STAGES: usize = 5;
/// X rows a one-slice plain GEMM's narrow tiles may take instead where its 128-row tiles fill
/// less than one wave: narrower tiles, more of them, the wave's idle multiprocessors put to work.
const SUB_WAVE_X_ROWS: [usize; 3] = [112, 96, 64];
/// The share of a 128-row tile's step that a narrower tile keeps (the weight tile's copy and
/// widening, the pipeline's waits): H100, fp8_gemm_bench at 512 rows, one wave each, E4B's q/k/v
/// 18.4 µs in 112-row tiles against 19.2, o 14.1 in 96-row ones and 15.0 in 112-row ones
/// against 15.6 (0.63, 0.57, 0.65 under this model).
const FIXED_STEP_SHARE: f64 = 0.6;
/// What a block costs besides its steps of K, in steps of a 128-row tile: filling the pipeline
/// and the epilogue (H100, fp8_gemm_bench at 512 rows, one wave of 128 × 128 tiles: ≈ 0.44 µs a
/// step and ≈ 1.6 µs besides, from E4B's q/k/v at 40 steps, 19.2 µs, and o at 32, 15.7).
const BLOCK_STEPS: f64 = 4.0;
/// At most this many slices of K.
const MAX_K_SLICES: usize = 4;
/// What slicing K costs besides the steps, in steps of K: per MiB of the f32 partial sums each
/// slice writes and the second launch reads (H100, fp8_gemm_bench at 512 rows: ≈ 0.64 µs a MiB
/// against ≈ 0.45 µs a step of a wave of 128 × 128 tiles), and for that launch itself (≈ 2.5 µs).
const SLICE_STEPS_PER_MIB: f64 = 1.4;
const SLICES_LAUNCH_STEPS: f64 = 6.0;
/// A step of a wide tile (256 X rows), in steps of a 128-row tile: twice the tensor work, the
/// weight tile's copy and widening once (fp8_gemm_bench at 512 rows, one wave, E4B's down over
/// its 160 steps: 97.4 µs wide against 62.5 narrow, H200; 98.5 against 62.7, H100).
const WIDE_STEP: f64 = 1.6;

/// What the GEMM writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// The projection `[m, n]`.
    Plain,
    /// The weight is an MLP's packed [gate ‖ up] (n = 2d rows): `gelu_tanh(gate) ⊙ up [m, d]`,
    /// rounded as the projection followed by `gelu_and_mul` rounds. One slice of K only.
    GeluAndMul,
}

/// Whether the GEMM may run (`G4_TMA_GEMM=0` says no), read once.
fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("G4_TMA_GEMM").as_deref() != Ok("0"))
}

/// How a GEMM whose wide tiles would not fill the GPU twice (`Tiling::Narrow`) shares its work
/// out: in tiles of 128 X rows or fewer, or in wide tiles over slices of K.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NarrowSplit {
    /// One block a tile in waves, K in this many slices (1: whole) whose f32 partial sums a
    /// second launch adds.
    Slices(usize),
    /// One block a tile of fewer X rows (one of [`SUB_WAVE_X_ROWS`]), K whole: where 128-row
    /// tiles fill less than one wave.
    Rows(usize),
    /// One block a wide tile (256 X rows), K in this many slices (2 or more): each weight tile
    /// widened once for twice the rows, the slices filling the waves the fewer tiles leave.
    WideSlices(usize),
}

/// The split of an `[m, n]` GEMM over `w_tiles` weight tiles and `k_steps` steps of K on
/// `multiprocessors` that costs least, in steps of a 128-row tile: waves × (a block's steps +
/// [`BLOCK_STEPS`]) plus, for slices, the partial sums' traffic and launch. Among equals the
/// first of: whole K, narrower rows (widest first), slices (fewest first), wide tiles over
/// slices (fewest first). A GeGLU epilogue takes 128-row tiles over slices only, never
/// narrower rows or wide slices (and the caller refuses more than one slice). E4B at 512 rows
/// on 132 (fp8_gemm_bench, µs): q/k/v 112 rows (H100 18.2–18.5), o 96 rows (14.0–14.2), a
/// KV-sharing layer's q 64 rows (14.6–14.7; K in 2: 15.5–15.6, which slices weighed before rows
/// took until stop 55), down wide tiles in 3 slices (H200: 43.7, where 128-row tiles in 3 took
/// 52.4 and 96-row ones 53.1).
fn narrow_split(
    m: usize,
    n: usize,
    w_tiles: usize,
    k_steps: usize,
    multiprocessors: usize,
    epilogue: Epilogue,
) -> NarrowSplit {
    let tiles = m.div_ceil(X_ROWS) * w_tiles;
    let waves = |tiles: usize| tiles.div_ceil(multiprocessors) as f64;
    let partial_mib = (m * n * 4) as f64 / (1 << 20) as f64;
    let sub_wave = epilogue == Epilogue::Plain && tiles < multiprocessors;
    let sums = |s: usize| {
        if s > 1 {
            s as f64 * partial_mib * SLICE_STEPS_PER_MIB + SLICES_LAUNCH_STEPS
        } else {
            0.0
        }
    };
    // The waves of `tiles` over `s` slices of K, in steps of their own tile.
    let sliced =
        |tiles: usize, s: usize| waves(tiles * s) * (k_steps.div_ceil(s) as f64 + BLOCK_STEPS);
    let cost = |split: NarrowSplit| match split {
        NarrowSplit::Slices(s) => sliced(tiles, s) + sums(s),
        NarrowSplit::WideSlices(s) => {
            let wide_tiles = m.div_ceil(WIDE_X_ROWS) * w_tiles;
            sliced(wide_tiles, s) * WIDE_STEP + sums(s)
        }
        NarrowSplit::Rows(rows) => {
            let step = (1.0 - FIXED_STEP_SHARE) * rows as f64 / X_ROWS as f64 + FIXED_STEP_SHARE;
            waves(m.div_ceil(rows) * w_tiles) * (k_steps as f64 * step + BLOCK_STEPS)
        }
    };
    std::iter::once(NarrowSplit::Slices(1))
        .chain(
            SUB_WAVE_X_ROWS
                .map(NarrowSplit::Rows)
                .into_iter()
                .filter(|_| sub_wave),
        )
        .chain((2..=MAX_K_SLICES.min(k_steps)).map(NarrowSplit::Slices))
        .chain(
            (2..=MAX_K_SLICES.min(k_steps))
                .map(NarrowSplit::WideSlices)
                .filter(|_| epilogue == Epilogue::Plain),
        )
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .unwrap_or(NarrowSplit::Slices(1))
}

/// The shape of the GEMM's tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tiling {
    /// 128 X rows a block.
    Narrow,
    /// 256 X rows a block: where its tiles fill the GPU twice over even then (a wider tile
    /// reads each weight tile half as often). H100, 512 rows: E4B's gate/up 87.3 µs against
    /// 97.5, 31B's 366 against 419; E4B's q/k/v 27.2 against 18.8.
    Wide,
    /// Wide tiles over the first `wide_outputs` outputs (whole waves of them), then narrow ones:
    /// where the last wide wave would be at most half full, twice as many narrow tiles finish the
    /// work in about two thirds of its time (a wave of narrow tiles ≈ 19.6 µs against ≈ 29.9 at
    /// E4B's gate/up, H100). E4B's gate/up at 512 rows leaves 56 of 132 in its third wave, 31B's
    /// 12 in its sixth.
    WideThenNarrow { wide_outputs: usize },
}

fn tiling(m: usize, outputs: usize, outputs_per_block: usize, multiprocessors: usize) -> Tiling {
    let x_tiles = m.div_ceil(WIDE_X_ROWS);
    let wide_tiles = x_tiles * outputs.div_ceil(outputs_per_block);
    if wide_tiles < 2 * multiprocessors {
        return Tiling::Narrow;
    }
    let last_wave = wide_tiles % multiprocessors;
    if last_wave == 0 || 2 * last_wave > multiprocessors {
        return Tiling::Wide;
    }
    let wide_outputs = (wide_tiles - last_wave) / x_tiles * outputs_per_block;
    if wide_outputs < outputs {
        Tiling::WideThenNarrow { wide_outputs }
    } else {
        Tiling::Wide
    }
}

impl Epilogue {
    /// `(outputs, outputs a block)` of a GEMM over `n` weight rows: 128 weight rows' own, or 64
    /// gate rows' and their up rows' product.
    fn outputs(self, n: usize) -> (usize, usize) {
        match self {
            Epilogue::Plain => (n, WEIGHT_ROWS),
            Epilogue::GeluAndMul => (n / 2, WEIGHT_ROWS / 2),
        }
    }
}

/// How a GEMM launches: its tiling, how 128-row tiles share the work out (`Slices(1)` for the
/// wide tilings), the entry point (less the suffix that names X's dtype), the X rows of its
/// (first) tiles, stages and blocks (of one slice of K).
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    tiling: Tiling,
    split: NarrowSplit,
    kernel: String,
    x_rows: usize,
    stages: usize,
    blocks: usize,
}

/// The launch of an `[m, k] · [n, k]ᵀ` GEMM on `multiprocessors`; `None` where the GEMM does not
/// run it (the GeGLU epilogue over slices of K).
fn plan(m: usize, n: usize, k: usize, epilogue: Epilogue, multiprocessors: usize) -> Option<Plan> {
    let (outputs, outputs_per_block) = epilogue.outputs(n);
    let entry = match epilogue {
        Epilogue::Plain => "matmul_bt_fp8_channel_tma",
        Epilogue::GeluAndMul => "fp8_gelu_and_mul_tma",
    };
    let tiles_of =
        |x_rows: usize, outputs: usize| m.div_ceil(x_rows) * outputs.div_ceil(outputs_per_block);
    let k_steps = k.div_ceil(K_STEP);
    let w_tiles = outputs.div_ceil(outputs_per_block);
    let tiling = tiling(m, outputs, outputs_per_block, multiprocessors);
    let split = match tiling {
        Tiling::Narrow => narrow_split(m, n, w_tiles, k_steps, multiprocessors, epilogue),
        Tiling::Wide | Tiling::WideThenNarrow { .. } => NarrowSplit::Slices(1),
    };
    let (x_rows, stages, kernel, blocks) = match (tiling, split) {
        (_, NarrowSplit::Slices(slices)) if slices > 1 && epilogue == Epilogue::GeluAndMul => {
            return None
        }
        (Tiling::Narrow, NarrowSplit::Slices(_)) => (
            X_ROWS,
            STAGES,
            format!("g4_{entry}"),
            tiles_of(X_ROWS, outputs),
        ),
        (Tiling::Narrow, NarrowSplit::Rows(rows)) => (
            rows,
            STAGES,
            format!("g4_{entry}_rows{rows}"),
            tiles_of(rows, outputs),
        ),
        (Tiling::Wide, _) | (Tiling::Narrow, NarrowSplit::WideSlices(_)) => (
            WIDE_X_ROWS,
            WIDE_STAGES,
            format!("g4_{entry}_wide"),
            tiles_of(WIDE_X_ROWS, outputs),
        ),
        (Tiling::WideThenNarrow { wide_outputs }, _) => (
            WIDE_X_ROWS,
            WIDE_STAGES,
            format!("g4_{entry}_wide_then_narrow"),
            tiles_of(WIDE_X_ROWS, wide_outputs) + tiles_of(X_ROWS, outputs - wide_outputs),
        ),
    };
    Some(Plan {
        tiling,
        split,
        kernel,
        x_rows,
        stages,
        blocks,
    })
}

/// The launch of `[m, k] · weightᵀ` where the GEMM runs it: e4m3 weights `[n, k]`, K a
/// multiple of 16 and the outputs of 8, compute capability 9.0 (its machine code is sm_90a's);
/// with the GeGLU epilogue, where K needs no slices.
fn launch_plan(
    m: usize,
    k: usize,
    weight: &Tensor,
    epilogue: Epilogue,
    device: &Device,
) -> Option<Plan> {
    let (n, weight_k) = weight.dims2().ok()?;
    let runs = enabled()
        && weight.dtype() == DType::F8E4M3
        && weight_k == k
        && k.is_multiple_of(16)
        && epilogue.outputs(n).0.is_multiple_of(8)
        && (epilogue == Epilogue::Plain || n.is_multiple_of(2))
        && crate::device::compute_capability(device) == Some((9, 0));
    let multiprocessors = crate::device::multiprocessor_count(device).filter(|_| runs)?;
    plan(m, n, k, epilogue, multiprocessors)
}

/// Whether `gemm` runs `m` rows of f16 X of width `weight`'s against it (the norm before the
/// projection writes `F16Rows` only then).
pub fn takes_f16_rows(m: usize, weight: &Tensor, epilogue: Epilogue) -> bool {
    let k = weight.dim(1).unwrap_or(0);
    weight.is_contiguous()
        && vector_aligned(weight)
        && launch_plan(m, k, weight, epilogue, weight.device()).is_some()
}

/// `rows [m, k]` · (e4m3 `weight [n, k]` × `scale`)ᵀ through the GEMM, where it runs
/// (`launch_plan`) on contiguous 16-byte aligned operands, X bf16 or `F16Rows`. `None`
/// elsewhere.
pub fn gemm(
    rows: Rows,
    weight: &Tensor,
    scale: &Tensor,
    epilogue: Epilogue,
) -> Result<Option<Tensor>> {
    let (x, x_scale) = match rows {
        Rows::Bf16(rows) => (rows, None),
        Rows::F16(rows) => (&rows.rows, Some(rows.row_scale.contiguous()?)),
    };
    let (m, k) = x.dims2()?;
    let n = weight.dim(0)?;
    let device = x.device();
    let (outputs, outputs_per_block) = epilogue.outputs(n);
    let x_dtype_runs = match rows {
        Rows::Bf16(_) => x.dtype() == DType::BF16,
        Rows::F16(_) => x.dtype() == DType::F16,
    };
    let operands_run = x_dtype_runs
        && x.is_contiguous()
        && weight.is_contiguous()
        && vector_aligned(x)
        && vector_aligned(weight);
    let Some(Plan {
        tiling,
        split,
        kernel,
        x_rows,
        stages,
        blocks,
    }) = launch_plan(m, k, weight, epilogue, device).filter(|_| operands_run)
    else {
        return Ok(None);
    };
    let kernel = match rows {
        Rows::Bf16(_) => format!("{kernel}_bf16"),
        Rows::F16(_) => format!("{kernel}_f16"),
    };
    let slices = match split {
        NarrowSplit::Slices(slices) | NarrowSplit::WideSlices(slices) => slices,
        NarrowSplit::Rows(_) => 1,
    };
    let shared_bytes = stages * (x_rows * K_STEP * 2 + WEIGHT_ROWS * K_STEP + 16) + 1024;
    let x_map = tensor_map(x, K_STEP, x_rows, Swizzle::Bytes128)?;
    // The narrow tiles' X map beside the wide one's, for the tiles after the wide ones.
    let narrow_x_map = match tiling {
        Tiling::WideThenNarrow { .. } => Some(tensor_map(x, K_STEP, X_ROWS, Swizzle::Bytes128)?),
        Tiling::Narrow | Tiling::Wide => None,
    };
    // The packed weight's gate and up rows arrive as two boxes of 64.
    let w_map = tensor_map(weight, K_STEP, outputs_per_block, Swizzle::Bytes64)?;
    let y = empty((m, outputs), DType::BF16, device)?;
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let partial = if slices > 1 {
        Some(empty((slices, m, n), DType::F32, device)?)
    } else {
        None
    };
    let mut args = vec![Arg::TensorMap(&x_map)];
    if let Some(narrow_x_map) = &narrow_x_map {
        args.push(Arg::TensorMap(narrow_x_map));
    }
    args.extend([Arg::TensorMap(&w_map), Arg::Tensor(&scale), Arg::Tensor(&y)]);
    // After Y, the plain entries take the partial sums (slices of K) and the slice count, the
    // wide-then-narrow ones the wide tiles' outputs, the GeGLU ones neither.
    let plain_entry =
        epilogue == Epilogue::Plain && !matches!(tiling, Tiling::WideThenNarrow { .. });
    if plain_entry {
        args.push(Arg::OptionalTensor(partial.as_ref()));
    }
    args.extend([Arg::I32(m as i32), Arg::I32(n as i32), Arg::I32(k as i32)]);
    if plain_entry {
        args.push(Arg::I32(slices as i32));
    } else if let Tiling::WideThenNarrow { wide_outputs } = tiling {
        args.push(Arg::I32(wide_outputs as i32));
    }
    // The f16 entries take X's row scales last.
    if let Some(x_scale) = &x_scale {
        args.push(Arg::Tensor(x_scale));
    }
    let grid = Grid::of_warps(blocks * slices, WARPS, warp_lanes(device));
    launch_with_shared(&kernel, device, grid, shared_bytes as u32, &args)?;
    if let Some(partial) = &partial {
        launch(
            "g4_tma_gemm_sum_slices_bf16",
            device,
            elementwise(m * n / 4),
            &[
                Arg::Tensor(partial),
                Arg::Tensor(&y),
                Arg::I32(slices as i32),
                Arg::Usize(m * n),
            ],
        )?;
    }
    Ok(Some(y))
}

#[cfg(test)]
mod tests {
    use super::NarrowSplit::{Rows, Slices, WideSlices};
    use super::Tiling::{Narrow, Wide, WideThenNarrow};
    use super::{narrow_split, plan, tiling, Epilogue};

    #[test]
    fn narrow_splits_as_measured_and_as_the_probe_needs() {
        // (m, n, weight tiles, steps of K, split) on 132 multiprocessors, plain epilogue: E4B's
        // q/k/v, o, a KV-sharing layer's q and down at 512 rows (measured best: 112 rows, 96
        // rows, 64 rows, wide tiles in 3 slices) and its per-layer-input projection (K 256: 96
        // rows); q/k/v with tiles for a wave (2,048 rows); 31B's down (wide in 3, not measured);
        // and the probe's cases: a few tiles (64 rows), one tile over a long K (slices), one over
        // a K too short to cut (its 24 rows in a 64-row tile), and the smallest the wide slices
        // take.
        for (m, n, w_tiles, steps, want) in [
            (512, 3072, 24, 40, Rows(112)),
            (512, 2560, 20, 32, Rows(96)),
            (512, 2048, 16, 40, Rows(64)),
            (512, 2560, 20, 160, WideSlices(3)),
            (512, 2560, 20, 4, Rows(96)),
            (2048, 3072, 24, 40, Slices(1)),
            (512, 5376, 42, 336, WideSlices(3)),
            (160, 200, 2, 3, Rows(64)),
            (24, 48, 1, 16, Slices(4)),
            (24, 48, 1, 2, Rows(64)),
            (129, 2944, 23, 67, WideSlices(4)),
        ] {
            assert_eq!(
                narrow_split(m, n, w_tiles, steps, 132, Epilogue::Plain),
                want,
                "[{m}, {n}]: {w_tiles} weight tiles, {steps} steps"
            );
        }
        // The GeGLU epilogue: whole K or slices only.
        assert_eq!(
            narrow_split(512, 3072, 24, 40, 132, Epilogue::GeluAndMul),
            Slices(1)
        );
    }

    #[test]
    fn e4b_prefill_gemms_launch_as_measured() {
        // E4B's FP8 projections at 512 rows on an H100 or H200 (132 multiprocessors): (n, k,
        // epilogue) → (entry point, X rows, blocks, split): q/k/v, o, a KV-sharing layer's q and
        // the per-layer-input projection in narrower tiles, down in wide tiles over 3 slices of K,
        // and the packed gate/up.
        let (plain, geglu) = (Epilogue::Plain, Epilogue::GeluAndMul);
        let (linear, gate_up) = (
            "matmul_bt_fp8_channel_tma",
            "fp8_gelu_and_mul_tma_wide_then_narrow",
        );
        for (n, k, epilogue, entry, x_rows, blocks, split) in [
            (
                3072,
                2560,
                plain,
                format!("{linear}_rows112"),
                112,
                120,
                Rows(112),
            ),
            (
                2560,
                2048,
                plain,
                format!("{linear}_rows96"),
                96,
                120,
                Rows(96),
            ),
            (
                2048,
                2560,
                plain,
                format!("{linear}_rows64"),
                64,
                128,
                Rows(64),
            ),
            (
                2560,
                256,
                plain,
                format!("{linear}_rows96"),
                96,
                120,
                Rows(96),
            ),
            (
                2560,
                10240,
                plain,
                format!("{linear}_wide"),
                256,
                40,
                WideSlices(3),
            ),
            (20480, 2560, geglu, gate_up.to_string(), 256, 376, Slices(1)),
        ] {
            let plan = plan(512, n, k, epilogue, 132).expect("the GEMM runs");
            assert_eq!(
                (plan.kernel, plan.x_rows, plan.blocks, plan.split),
                (format!("g4_{entry}"), x_rows, blocks, split),
                "[512, {k}] · [{n}, {k}]ᵀ"
            );
        }
    }

    #[test]
    fn wide_tiles_where_they_still_fill_the_gpu_twice_and_narrow_ones_for_a_thin_last_wave() {
        // (m, outputs, outputs a block, tiling) on 132 multiprocessors: E4B's gate/up at 512
        // rows, plain and as GeGLU (320 wide tiles: a third wave of 56), its q/k/v and down
        // (measured slower wide), 31B's gate/up (672: a sixth wave of 12), wide tiles whose last
        // wave is more than half full or full, and 257 rows (2 wide X tiles, 3 narrow ones).
        let split = |wide_outputs| WideThenNarrow { wide_outputs };
        for (m, outputs, per_block, want) in [
            (512, 20480, 128, split(132 * 128)),
            (512, 10240, 64, split(132 * 64)),
            (512, 3072, 128, Narrow),
            (512, 2560, 128, Narrow),
            (512, 43008, 128, split(330 * 128)),
            (512, 24576, 128, Wide),
            (512, 16896, 128, Wide),
            (257, 10240, 64, split(132 * 64)),
        ] {
            assert_eq!(tiling(m, outputs, per_block, 132), want, "[{m}, {outputs}]");
        }
    }
}
