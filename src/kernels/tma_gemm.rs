//! The Hopper GEMM behind FP8 prefill's projections: `Y = X · (W_e4m3 × scale[row])ᵀ` for many
//! rows of bf16 X on compute capability 9.0, a warp-specialised TMA + wgmma pipeline
//! (src/kernels/cuda/tma_gemm.cuh, its entry points in tma_gemm.cu).
//! The e4m3 weights (`matmul_bt_fp8_channel`) are widened and scaled in registers on their way
//! into the tensor cores, so no bf16 copy of the weight is written or read; for an MLP's packed
//! [gate ‖ up] (`linear_gelu_mul`) the GeGLU product can be the epilogue, so the [m, 2d]
//! projection never reaches memory. (Over bf16 weights the same pipeline takes 1.14× cuBLAS's
//! time, H100: bf16 checkpoints keep cuBLAS.)
//!
//! Not an op of its own: the ops that call it check its results through their contracts.
//! `G4_TMA_GEMM=0` turns it off, and those ops take their other paths.

use super::native::{
    elementwise, empty, launch, launch_with_shared, tensor_map, vector_aligned, warp_lanes, Arg,
    Grid, Swizzle,
};
use candle_core::{DType, Result, Tensor};

/// Blocks of 128 weight rows by 128 X rows (or 256, "wide"; or 64–112 where 128-row tiles fill
/// less than one wave), K in steps of 64 (one 128-byte row
/// of a bf16 tile), a producer warpgroup and two consumer ones; 6 stages of shared memory (5
/// wide), each an X tile (rows × 64 bf16), a W tile (128 × 64 e4m3) and two 8-byte barriers, and
/// 1 KiB to align them.
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

/// Stream-K (`Tiling::Stream`) takes tall tiles: 256 weight rows by 128 X rows, so each X byte
/// copied into shared memory serves twice the weight rows (the GEMM is bound by those copies:
/// H100, one block a tile, ≈ 5.5 TB/s of them however many multiprocessors run).
const STREAM_WEIGHT_ROWS: usize = 256;
/// A tall tile's step of K in steps of a 128 × 128 tile: 32 KiB copied against 24 (a guess
/// until measured).
const TALL_STEP: f64 = 1.4;
/// What a tile split between blocks costs besides its steps, in steps of a 128-row tile: the
/// other blocks' f32 sums written and counted, and the first block's wait and reads (64 KiB a
/// block from L2) — guesses until measured.
const STREAM_SPLIT_STEPS: f64 = 2.0;
const STREAM_PARTIAL_STEPS: f64 = 0.5;
/// Stream-K gives a block at least this many steps, so few blocks share a tile.
const STREAM_MIN_STEPS: usize = 4;
/// Tiles a stream-K GEMM may have: its arrival counters, one a tile, are allocated once.
const STREAM_MAX_TILES: usize = 4096;

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

/// Whether plain GEMMs may run as stream-K (`G4_STREAM_K=0` says no), read once.
fn streams() -> bool {
    static STREAMS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STREAMS.get_or_init(|| std::env::var("G4_STREAM_K").as_deref() != Ok("0"))
}

/// Blocks of a stream-K launch over `tall_tiles` tiles of 256 weight rows and `k_steps` steps
/// of K on `multiprocessors`, where it costs less than the `narrow_tiles` 128 × 128 tiles one a
/// block in waves: the steps shared evenly (at least [`STREAM_MIN_STEPS`] a block), plus a
/// block's fill and epilogue and, where a tile is split, the sums its other blocks leave and
/// its first block adds. E4B at 512 rows on 132: q/k/v (48 tall tiles × 40 steps), o (40 × 32),
/// a KV-sharing layer's q (32 × 40) and down (40 × 160) stream; the per-layer-input projection
/// (40 × 4) does not.
fn stream_blocks(
    tall_tiles: usize,
    narrow_tiles: usize,
    k_steps: usize,
    multiprocessors: usize,
) -> Option<usize> {
    let work = tall_tiles * k_steps;
    let blocks = multiprocessors.min(work / STREAM_MIN_STEPS).max(1);
    let per_block = work.div_ceil(blocks);
    let waves = narrow_tiles.div_ceil(multiprocessors);
    let one_a_block = (waves * k_steps) as f64 + waves as f64 * BLOCK_STEPS;
    // Whole tiles a block only where the steps divide evenly into them.
    let whole_tiles = work.is_multiple_of(blocks) && (work / blocks).is_multiple_of(k_steps);
    let sharing = if whole_tiles {
        0.0
    } else {
        let most_blocks_a_tile = k_steps.div_ceil(work / blocks) + 1;
        STREAM_SPLIT_STEPS + (most_blocks_a_tile - 1) as f64 * STREAM_PARTIAL_STEPS
    };
    let streamed = per_block as f64 * TALL_STEP + BLOCK_STEPS + sharing;
    // The kernel counts steps × blocks in 32 bits.
    let fits = work * blocks < 1 << 31;
    (tall_tiles <= STREAM_MAX_TILES && fits && streamed < one_a_block).then_some(blocks)
}

/// Slices of K for a GEMM of `tiles` 128 × 128 output tiles of an [m, n] result and `k_steps`
/// steps of K, one block a multiprocessor on `multiprocessors`: the count that costs least,
/// waves of blocks × a block's steps plus the partial sums' traffic, the fewest among equals.
/// E4B at 512 rows on 132 (H100, fp8_gemm_bench, µs in 1 / 2 / 3 / 4 slices): q/k/v 18.8 /
/// 26.4 / 30.9 / 30.3 and o 15.5 / 22.3 / 20.1 / 25.2 take 1; down (K 10,240) 66.5 / 76.1 /
/// 55.5 / 65.0 takes 3.
fn k_slices(m: usize, n: usize, tiles: usize, k_steps: usize, multiprocessors: usize) -> usize {
    let partial_mib = (m * n * 4) as f64 / (1 << 20) as f64;
    let cost = |s: usize| {
        let steps = ((tiles * s).div_ceil(multiprocessors) * k_steps.div_ceil(s)) as f64;
        steps
            + if s > 1 {
                s as f64 * partial_mib * SLICE_STEPS_PER_MIB + SLICES_LAUNCH_STEPS
            } else {
                0.0
            }
    };
    (1..=MAX_K_SLICES.min(k_steps))
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)).then(a.cmp(&b)))
        .unwrap_or(1)
}

/// X rows of a one-slice GEMM's narrow tiles over `w_tiles` weight tiles and `k_steps` steps:
/// 128 where those fill a wave; otherwise the choice among 128 and [`SUB_WAVE_X_ROWS`] that
/// costs least, waves × a block's steps (each a step's share for its rows) and overhead, the
/// widest among equals. E4B at 512 rows on 132: q/k/v takes 112 (120 tiles), o 96 (120), a
/// KV-sharing layer's q 64 (128).
fn narrow_x_rows(m: usize, w_tiles: usize, k_steps: usize, multiprocessors: usize) -> usize {
    if m.div_ceil(X_ROWS) * w_tiles >= multiprocessors {
        return X_ROWS;
    }
    let cost = |rows: usize| {
        let waves = (m.div_ceil(rows) * w_tiles).div_ceil(multiprocessors) as f64;
        let step = (1.0 - FIXED_STEP_SHARE) * rows as f64 / X_ROWS as f64 + FIXED_STEP_SHARE;
        waves * (k_steps as f64 * step + BLOCK_STEPS)
    };
    std::iter::once(X_ROWS)
        .chain(SUB_WAVE_X_ROWS)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)).then(b.cmp(&a)))
        .unwrap_or(X_ROWS)
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
    /// Stream-K over tall tiles, 256 weight rows by 128 X rows (plain epilogue): the blocks
    /// share the tiles' steps of K evenly, so no multiprocessor idles in a part-filled wave; a
    /// tile split between blocks is finished by the block that ran its first steps.
    Stream { blocks: usize },
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

/// How a GEMM launches: its tiling and entry point, the X rows of its (first) tiles, stages,
/// blocks and slices of K.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    tiling: Tiling,
    kernel: String,
    x_rows: usize,
    stages: usize,
    blocks: usize,
    slices: usize,
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
    let tiling = match tiling(m, outputs, outputs_per_block, multiprocessors) {
        Tiling::Narrow if epilogue == Epilogue::Plain && streams() => {
            let tall_tiles = m.div_ceil(X_ROWS) * outputs.div_ceil(STREAM_WEIGHT_ROWS);
            stream_blocks(
                tall_tiles,
                tiles_of(X_ROWS, outputs),
                k_steps,
                multiprocessors,
            )
            .map_or(Tiling::Narrow, |blocks| Tiling::Stream { blocks })
        }
        tiling => tiling,
    };
    let slices = match tiling {
        Tiling::Narrow => k_slices(m, n, tiles_of(X_ROWS, outputs), k_steps, multiprocessors),
        Tiling::Wide | Tiling::WideThenNarrow { .. } | Tiling::Stream { .. } => 1,
    };
    if epilogue == Epilogue::GeluAndMul && slices > 1 {
        return None;
    }
    let (x_rows, stages, kernel, blocks) = match tiling {
        Tiling::Narrow if slices == 1 && epilogue == Epilogue::Plain => {
            let w_tiles = outputs.div_ceil(outputs_per_block);
            let x_rows = narrow_x_rows(m, w_tiles, k_steps, multiprocessors);
            let kernel = if x_rows == X_ROWS {
                format!("g4_{entry}_bf16")
            } else {
                format!("g4_{entry}_rows{x_rows}_bf16")
            };
            (x_rows, STAGES, kernel, tiles_of(x_rows, outputs))
        }
        Tiling::Narrow => (
            X_ROWS,
            STAGES,
            format!("g4_{entry}_bf16"),
            tiles_of(X_ROWS, outputs),
        ),
        Tiling::Wide => (
            WIDE_X_ROWS,
            WIDE_STAGES,
            format!("g4_{entry}_wide_bf16"),
            tiles_of(WIDE_X_ROWS, outputs),
        ),
        Tiling::WideThenNarrow { wide_outputs } => (
            WIDE_X_ROWS,
            WIDE_STAGES,
            format!("g4_{entry}_wide_then_narrow_bf16"),
            tiles_of(WIDE_X_ROWS, wide_outputs) + tiles_of(X_ROWS, outputs - wide_outputs),
        ),
        Tiling::Stream { blocks } => (X_ROWS, STAGES, format!("g4_{entry}_stream_bf16"), blocks),
    };
    Some(Plan {
        tiling,
        kernel,
        x_rows,
        stages,
        blocks,
        slices,
    })
}

/// `rows [m, k]` · (e4m3 `weight [n, k]` × `scale`)ᵀ through the GEMM, where it runs: bf16 rows,
/// K a multiple of 16 and the outputs of 8, contiguous 16-byte aligned operands, compute
/// capability 9.0 (its machine code is sm_90a's); with the GeGLU epilogue, where K needs no
/// slices. `None` elsewhere.
pub fn gemm(
    rows: &Tensor,
    weight: &Tensor,
    scale: &Tensor,
    epilogue: Epilogue,
) -> Result<Option<Tensor>> {
    let (m, k) = rows.dims2()?;
    let (n, weight_k) = weight.dims2()?;
    let device = rows.device();
    let (outputs, outputs_per_block) = epilogue.outputs(n);
    let runs = enabled()
        && rows.dtype() == DType::BF16
        && weight.dtype() == DType::F8E4M3
        && weight_k == k
        && k.is_multiple_of(16)
        && outputs.is_multiple_of(8)
        && (epilogue == Epilogue::Plain || n.is_multiple_of(2))
        && rows.is_contiguous()
        && weight.is_contiguous()
        && vector_aligned(rows)
        && vector_aligned(weight)
        && crate::device::compute_capability(device) == Some((9, 0));
    let Some(multiprocessors) = crate::device::multiprocessor_count(device).filter(|_| runs) else {
        return Ok(None);
    };
    let Some(Plan {
        tiling,
        kernel,
        x_rows,
        stages,
        blocks,
        slices,
    }) = plan(m, n, k, epilogue, multiprocessors)
    else {
        return Ok(None);
    };
    // Stream-K's tall tiles take 256 weight rows a stage, and each consumer warpgroup keeps a
    // bf16 Y tile (128 X rows × 64 weight rows).
    let (weight_rows, y_tiles_bytes) = match tiling {
        Tiling::Stream { .. } => (STREAM_WEIGHT_ROWS, 2 * X_ROWS * 64 * 2),
        Tiling::Narrow | Tiling::Wide | Tiling::WideThenNarrow { .. } => (WEIGHT_ROWS, 0),
    };
    let shared_bytes =
        stages * (x_rows * K_STEP * 2 + weight_rows * K_STEP + 16) + 1024 + y_tiles_bytes;
    let x_map = tensor_map(rows, K_STEP, x_rows, Swizzle::Bytes128)?;
    // The narrow tiles' X map beside the wide one's, for the tiles after the wide ones.
    let narrow_x_map = match tiling {
        Tiling::WideThenNarrow { .. } => Some(tensor_map(rows, K_STEP, X_ROWS, Swizzle::Bytes128)?),
        Tiling::Narrow | Tiling::Wide | Tiling::Stream { .. } => None,
    };
    // The packed weight's gate and up rows arrive as two boxes of 64; a tall tile's as one of 256.
    let w_box_rows = match tiling {
        Tiling::Stream { .. } => STREAM_WEIGHT_ROWS,
        Tiling::Narrow | Tiling::Wide | Tiling::WideThenNarrow { .. } => outputs_per_block,
    };
    let w_map = tensor_map(weight, K_STEP, w_box_rows, Swizzle::Bytes64)?;
    let y = empty((m, outputs), DType::BF16, device)?;
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let partial = if slices > 1 {
        Some(empty((slices, m, n), DType::F32, device)?)
    } else {
        None
    };
    // Stream-K's sums of split tiles (a tall tile's, a slot a block) and its arrival counts (one
    // a tile).
    let stream_buffers = match tiling {
        Tiling::Stream { blocks } => Some((
            empty(blocks * X_ROWS * STREAM_WEIGHT_ROWS, DType::F32, device)?,
            super::native::lasting_counters(device, STREAM_MAX_TILES)?,
        )),
        Tiling::Narrow | Tiling::Wide | Tiling::WideThenNarrow { .. } => None,
    };
    let mut args = vec![Arg::TensorMap(&x_map)];
    if let Some(narrow_x_map) = &narrow_x_map {
        args.push(Arg::TensorMap(narrow_x_map));
    }
    args.extend([Arg::TensorMap(&w_map), Arg::Tensor(&scale), Arg::Tensor(&y)]);
    // After Y, the plain entries take the partial sums (slices of K) and the slice count, the
    // wide-then-narrow ones the wide tiles' outputs, the stream-K one its sums and arrivals
    // before the shape, the GeGLU ones nothing more.
    let plain_entry =
        epilogue == Epilogue::Plain && matches!(tiling, Tiling::Narrow | Tiling::Wide);
    if plain_entry {
        args.push(Arg::OptionalTensor(partial.as_ref()));
    }
    if let Some((sums, arrivals)) = &stream_buffers {
        args.extend([Arg::Tensor(sums), Arg::Tensor(arrivals)]);
    }
    args.extend([Arg::I32(m as i32), Arg::I32(n as i32), Arg::I32(k as i32)]);
    if plain_entry {
        args.push(Arg::I32(slices as i32));
    } else if let Tiling::WideThenNarrow { wide_outputs } = tiling {
        args.push(Arg::I32(wide_outputs as i32));
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
    use super::Tiling::{Narrow, Wide, WideThenNarrow};
    use super::{k_slices, narrow_x_rows, plan, stream_blocks, tiling, Epilogue};

    #[test]
    fn k_slices_only_where_they_pay_for_their_partial_sums() {
        // (m, n, tiles, steps of K, multiprocessors, slices): E4B's q/k/v, o and down at 512 rows
        // on an H100 or H200 (132; measured best: 1, 1, 3), 31B's down (K 21,504), one tile
        // over a long K, and K too short to cut.
        let table = [
            (512, 3072, 96, 40, 132, 1),
            (512, 2560, 80, 32, 132, 1),
            (512, 2560, 80, 160, 132, 3),
            (512, 5376, 168, 336, 132, 3),
            (24, 48, 1, 16, 132, 4),
            (24, 48, 1, 2, 132, 1),
        ];
        for (m, n, tiles, steps, multiprocessors, want) in table {
            assert_eq!(
                k_slices(m, n, tiles, steps, multiprocessors),
                want,
                "[{m}, {n}]: {tiles} tiles, {steps} steps, {multiprocessors} multiprocessors"
            );
        }
    }

    #[test]
    fn e4b_prefill_gemms_launch_as_measured() {
        // E4B's FP8 projections at 512 rows on an H100 or H200 (132 multiprocessors): (n, k,
        // epilogue) → (entry point, X rows, blocks, slices): q/k/v, o, a KV-sharing layer's q and
        // down as stream-K, the per-layer-input projection (K 256, too short to share out) in
        // 96-row tiles, and the packed gate/up.
        let (plain, geglu) = (Epilogue::Plain, Epilogue::GeluAndMul);
        let (linear, gate_up) = (
            "matmul_bt_fp8_channel_tma",
            "fp8_gelu_and_mul_tma_wide_then_narrow",
        );
        let stream = format!("{linear}_stream");
        for (n, k, epilogue, entry, x_rows, blocks, slices) in [
            (3072, 2560, plain, stream.clone(), 128, 132, 1),
            (2560, 2048, plain, stream.clone(), 128, 132, 1),
            (2048, 2560, plain, stream.clone(), 128, 132, 1),
            (2560, 10240, plain, stream.clone(), 128, 132, 1),
            (2560, 256, plain, format!("{linear}_rows96"), 96, 120, 1),
            (20480, 2560, geglu, gate_up.to_string(), 256, 376, 1),
        ] {
            let plan = plan(512, n, k, epilogue, 132).expect("the GEMM runs");
            assert_eq!(
                (plan.kernel, plan.x_rows, plan.blocks, plan.slices),
                (format!("g4_{entry}_bf16"), x_rows, blocks, slices),
                "[512, {k}] · [{n}, {k}]ᵀ"
            );
        }
    }

    #[test]
    fn stream_k_where_sharing_the_steps_beats_a_part_idle_wave() {
        // (tall tiles, 128 × 128 tiles, steps of K, blocks) on 132 multiprocessors: E4B's q/k/v,
        // o, a KV-sharing layer's q and down at 512 rows stream; its per-layer-input projection
        // (K 256) and one step over a whole wave do not; the probe's stream-K cases (2 tall tiles
        // of 17 steps, 168 of 2, 1 of 16) do, and its 64-row case (4 tiles of 3 steps) does not.
        for (tall, narrow, steps, want) in [
            (48, 96, 40, Some(132)),
            (40, 80, 32, Some(132)),
            (32, 64, 40, Some(132)),
            (40, 80, 160, Some(132)),
            (40, 80, 4, None),
            (68, 132, 1, None),
            (2, 4, 17, Some(8)),
            (168, 336, 2, Some(84)),
            (1, 1, 16, Some(4)),
            (2, 4, 3, None),
        ] {
            assert_eq!(
                stream_blocks(tall, narrow, steps, 132),
                want,
                "{tall} tall tiles ({narrow} narrow) × {steps} steps"
            );
        }
    }

    #[test]
    fn narrower_tiles_where_128_rows_leave_the_wave_part_idle() {
        // (m, weight tiles, steps of K, X rows) on 132 multiprocessors: E4B's q/k/v, o, a
        // KV-sharing layer's q and the per-layer-input projection (K 256) at 512 rows; q/k/v
        // with tiles enough for a wave (2,048 rows); the probe's M160 N200 K160.
        for (m, w_tiles, steps, want) in [
            (512, 24, 40, 112),
            (512, 20, 32, 96),
            (512, 16, 40, 64),
            (512, 20, 4, 96),
            (2048, 24, 40, 128),
            (160, 2, 3, 64),
        ] {
            assert_eq!(
                narrow_x_rows(m, w_tiles, steps, 132),
                want,
                "[{m}] × {w_tiles} tiles"
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
