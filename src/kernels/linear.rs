//! `linear`: `Y = X·Wᵀ`, the plain projection (q/k/v/o, MLP, PLE, the tied head). Decode multiplies
//! a handful of rows by each weight once, which makes it a matrix-vector product bound by reading
//! W: the native arms (CUDA, and the CPU's SIMD units) stream W once with wide loads for every row
//! of X at the same time.

use super::check::{Builder, Case};
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::{self, cpu, Grid};
use super::{arm_for, reference, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::Linear;

/// `x [.., K]`, `w [N, K]` → `[.., N]`.
pub fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    linear_on(arm_for(OP, x.device(), x.dtype()), x, w)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn linear_on(arm: Arm, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, w),
        Arm::Native(Backend::Cpu) => cpu_fwd(x, w),
        Arm::Native(_) => native_fwd(x, w),
    }
}

/// `x` flattened to rows, with the output shape `[.., N]`.
pub(super) fn rows_of(x: &Tensor, w: &Tensor) -> Result<(Tensor, Vec<usize>)> {
    let dims = x.dims();
    let k = *dims.last().unwrap_or(&0);
    let mut out_shape = dims[..dims.len().saturating_sub(1)].to_vec();
    out_shape.push(w.dim(0)?);
    Ok((x.reshape((x.elem_count() / k.max(1), k))?, out_shape))
}

pub fn composed(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (rows, out_shape) = rows_of(x, w)?;
    rows.matmul(&w.t()?)?.reshape(out_shape)
}

/// X rows up to which the CUDA arm uses its own kernel; beyond, cuBLAS GEMMs reuse W from cache
/// across rows and win.
const CUDA_GEMV_MAX_ROWS: usize = 8;

/// Warps per block of the GEMV kernel (a power of two), and the warps a launch aims to keep
/// streaming W: about 16 per SM of an H100/H200. (Measured on E4B, H200, graph decode: 4 and
/// 2,048 decode 2-3 % faster than 8 and 4,096, bf16 and FP8 alike; 8,192 is slower.)
pub(super) const WARPS_PER_BLOCK: usize = 4;
const MIN_WARPS: usize = 2048;
/// W loads each lane issues before using them (`G4_GEMV_BATCH`).
pub(super) const LOADS_PER_LANE: usize = 8;
/// Single-row projections up to this many columns take the narrow kernel: half the loads per
/// lane (`G4_GEMV_NARROW_BATCH`), so more warps share each column. Measured per shape on the H200
/// (bf16, one row, a graph of launches on distinct weights): faster for every projection of
/// E4B, 26B-A4B and 31B up to 5,376 columns (E4B down 2560 × 10240: 17.0 µs against 18.7;
/// 26B-A4B o 2816 × 4096: 8.7 against 10.3), slower from 6,144 up (E4B's full-layer q/k/v,
/// gate/up, the head).
const NARROW_MAX_COLUMNS: usize = 5376;
const NARROW_LOADS_PER_LANE: usize = 4;
/// Narrow single-row projections whose K needs 8 or more warps for one batch per lane (K ≥ 8,192
/// in bf16 on 32-lane warps: 31B's o and down, E4B's down) take blocks of 8 warps, all on one
/// column, where 4-warp blocks had each lane loop over 2–3 batches. Where a lane's share is then
/// 5 or 6 vectors, a batch of 6 (`G4_GEMV_LONG_BATCH`) loads it at once. H200, bf16,
/// `gemv_bench` (stop 42, µs, 4-warp blocks → 8): 31B o 25.03 → 23.56, 31B down 61.11 → 57.49
/// (both at a batch of 4; 6 gave 24.82 and 57.95), E4B down 17.40 → 16.27 (a batch of 6; 4 gave
/// 17.77).
const LONG_K_WARPS_PER_BLOCK: usize = 8;
const LONG_K_LOADS_PER_LANE: usize = 6;

/// The dense GEMV's kernel for one shape: its entry point (a suffix of the kernel's name), the W
/// loads each lane batches, and the warps of a block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct DenseGemv {
    pub entry: &'static str,
    pub loads_per_lane: usize,
    pub warps_per_block: usize,
}

/// CUDA arm: for up to 8 rows, warps stream each W row once with batches of 16-byte loads and
/// keep one f32 sum per X row (src/kernels/cuda/gemv.cuh, instantiated in linear.cu); otherwise
/// cuBLAS.
fn native_fwd(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, vector_aligned, warp_lanes, Arg};
    let (rows, out_shape) = rows_of(x, w)?;
    let (m, k) = rows.dims2()?;
    let n = w.dim(0)?;
    // 16-byte loads need K to fill whole vectors (8 bf16/f16 or 4 f32).
    let per_vector = 16 / x.dtype().size_in_bytes();
    if m > CUDA_GEMV_MAX_ROWS || !k.is_multiple_of(per_vector) || w.dim(1)? != k {
        return composed(x, w);
    }
    let (rows, w_rows) = (rows.contiguous()?, w.contiguous()?);
    if !vector_aligned(&rows) || !vector_aligned(&w_rows) {
        return composed(x, w);
    }
    let (vectors, lanes) = (k / per_vector, warp_lanes(x.device()));
    let gemv = dense_gemv(m, n, vectors, lanes);
    let (grid, warps_per_col) =
        gemv_geometry(n, vectors, lanes, gemv.loads_per_lane, gemv.warps_per_block);
    let out = empty((m, n), x.dtype(), x.device())?;
    let args = [
        Arg::Tensor(&rows),
        Arg::Tensor(&w_rows),
        Arg::Tensor(&out),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
        Arg::I32(warps_per_col as i32),
    ];
    launch(
        &kernel_name(&format!("linear{}", gemv.entry), x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    out.reshape(out_shape)
}

/// The dense GEMV for `m` rows of a weight of `n` rows of `vectors` 16-byte vectors, on
/// `lanes`-wide warps. One row (every decode step) has its own entry points: fewer registers,
/// more warps in flight.
pub(super) fn dense_gemv(m: usize, n: usize, vectors: usize, lanes: usize) -> DenseGemv {
    let gemv = |entry, loads_per_lane, warps_per_block| DenseGemv {
        entry,
        loads_per_lane,
        warps_per_block,
    };
    let narrow = m == 1 && n <= NARROW_MAX_COLUMNS;
    let long_k = vectors >= LONG_K_WARPS_PER_BLOCK * lanes * NARROW_LOADS_PER_LANE;
    // A lane's vectors of K once 8-warp blocks split it.
    let share = vectors.div_ceil(LONG_K_WARPS_PER_BLOCK * lanes);
    let one_long_batch = (NARROW_LOADS_PER_LANE + 1..=LONG_K_LOADS_PER_LANE).contains(&share);
    match m {
        1 if narrow && long_k && one_long_batch => gemv(
            "_one_row_long",
            LONG_K_LOADS_PER_LANE,
            LONG_K_WARPS_PER_BLOCK,
        ),
        1 if narrow && long_k => gemv(
            "_one_row_narrow",
            NARROW_LOADS_PER_LANE,
            LONG_K_WARPS_PER_BLOCK,
        ),
        1 if narrow => gemv("_one_row_narrow", NARROW_LOADS_PER_LANE, WARPS_PER_BLOCK),
        1 => gemv("_one_row", LOADS_PER_LANE, WARPS_PER_BLOCK),
        _ => gemv("", LOADS_PER_LANE, WARPS_PER_BLOCK),
    }
}

/// The GEMV's launch for `n` columns of `vectors` 16-byte vectors on `lanes`-wide warps whose
/// lanes issue `loads_per_lane` W loads at a time, in blocks of `warps_per_block` warps, and the
/// warps that share a column. Each column's K is split over enough warps that every lane issues
/// all its W loads in one batch (one memory round trip), and narrow projections over more, so
/// that at least `MIN_WARPS` warps stream W. A block holds `warps_per_block / warps_per_col`
/// columns, whatever the warp width.
pub(super) fn gemv_geometry(
    n: usize,
    vectors: usize,
    lanes: usize,
    loads_per_lane: usize,
    warps_per_block: usize,
) -> (Grid, usize) {
    let warps_per_col = gemv_warps_per_col(n, vectors, lanes, loads_per_lane, warps_per_block);
    let blocks = n.div_ceil(warps_per_block / warps_per_col);
    (
        Grid::of_warps(blocks, warps_per_block, lanes),
        warps_per_col,
    )
}

/// The warps that share each of `n` columns in `gemv_geometry`'s launch (a power of two, at most
/// `warps_per_block`); the order of a column's sums depends on it alone.
pub(super) fn gemv_warps_per_col(
    n: usize,
    vectors: usize,
    lanes: usize,
    loads_per_lane: usize,
    warps_per_block: usize,
) -> usize {
    let one_batch = vectors.div_ceil(lanes * loads_per_lane);
    one_batch
        .max(MIN_WARPS.div_ceil(n))
        .next_power_of_two()
        .clamp(1, warps_per_block)
}

/// CPU arm: for up to 8 f32 rows, a SIMD GEMV over threads (`native/cpu.rs`); otherwise
/// candle's GEMM, which reuses W from cache across rows.
fn cpu_fwd(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (rows, out_shape) = rows_of(x, w)?;
    let (m, k) = rows.dims2()?;
    let n = w.dim(0)?;
    let simd = cpu::simd();
    let (Some(simd), DType::F32, DType::F32, true) = (
        simd,
        x.dtype(),
        w.dtype(),
        m <= cpu::GEMV_MAX_ROWS && w.dim(1)? == k && x.device().is_cpu(),
    ) else {
        return composed(x, w);
    };
    let out = cpu::with_f32(&rows, |x| {
        cpu::with_f32(w, |w| cpu::gemv_f32(simd, x, w, m, n, k))
    })??;
    Tensor::from_vec(out, out_shape, x.device())
}

pub fn reference(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    reference::matmul_bt(x, w, m, n, k)
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        .shape_paths(SHAPE_PATHS)
        .flops(gemm_flops),
    cases,
    run,
    mutants: &[Mutant {
        what: "the last element of K dropped (a tail bug)",
        run: |c| {
            let k = c.float(0).dim(1)?;
            Ok(vec![composed(
                &c.float(0).narrow(1, 0, k - 1)?,
                &c.float(1).narrow(1, 0, k - 1)?,
            )?])
        },
    }],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "one row (decode), up to 5,376 columns, K a whole number of 16-byte vectors",
        path: "native GEMV, narrow: half the loads per lane, more warps per column",
        case: "M1 N2816 K4096",
    },
    ShapePath {
        shapes: "one row (decode), up to 5,376 columns, K needing 8 warps or more for one batch \
                 per lane (K ≥ 8,192 in bf16, 4,096 in f32, on 32-lane warps)",
        path: "native GEMV, narrow, in 8-warp blocks (a batch of 6 where a lane's share is 5 or 6 \
               vectors)",
        case: "M1 N2560 K10240",
    },
    ShapePath {
        shapes: "one row (decode), more than 5,376 columns, K a whole number of 16-byte vectors",
        path: "native GEMV, one-row entry point",
        case: "M1 N8192 K4096",
    },
    ShapePath {
        shapes: "2 to 8 rows, K a whole number of 16-byte vectors",
        path: "native GEMV: W streamed once for all rows",
        case: "M8 N64 K512",
    },
    ShapePath {
        shapes: "more than 8 rows (prefill)",
        path: "composed (candle's matmul: cuBLAS on CUDA)",
        case: "M24 N48 K96",
    },
    ShapePath {
        shapes: "K not a whole number of 16-byte vectors",
        path: "composed on CUDA; the CPU GEMV finishes K in scalar",
        case: "M2 N19 K27",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // Decode rows (the CUDA arm's GEMV, K whole vectors or not), a prefill block, a wide
    // decode GEMV with 5 rows, narrow one-row projections of 26B-A4B's o and E4B's down, and last
    // (the one `--perf` times) a decode GEMV of a model's size whose W (64 MiB in bf16) is
    // larger than the L2 cache, so its time is HBM's.
    let shapes = [
        (1, 37, 64),
        (3, 130, 264),
        (8, 64, 512),
        (2, 19, 27),
        (24, 48, 96),
        (5, 9000, 200),
        (1, 2816, 4096),
        (1, 2560, 10240),
        (1, 8192, 4096),
    ];
    matmul_cases(device, dtype, rng, &shapes)
}

/// One case per `(m, n, k)`: `x [m, k]` and `w [n, k]` uniform in ±1, `x·wᵀ` expected (the
/// cases of every op that computes a plain projection).
pub(super) fn matmul_cases(
    device: &Device,
    dtype: DType,
    rng: &mut StdRng,
    shapes: &[(usize, usize, usize)],
) -> Result<Vec<Case>> {
    shapes
        .iter()
        .map(|&(m, n, k)| {
            let mut c = Builder::new(device, dtype, rng);
            let x = c.uniform(&[m, k], -1.0, 1.0)?;
            let w = c.uniform(&[n, k], -1.0, 1.0)?;
            let expected = reference(&x, &w, m, n, k);
            Ok(c.finish(format!("M{m} N{n} K{k}"), expected))
        })
        .collect()
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![linear_on(arm, f(0), f(1))?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::native::WARP_WIDTHS;

    /// The kernel gives each block `warps / warps_per_col` columns (its warp count read from
    /// blockDim and warpSize): every column must fall in some block, on 32- and 64-lane warps.
    #[test]
    fn the_gemv_grid_covers_every_column_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for (n, vectors) in [
                (1, 8),
                (37, 8),
                (2560, 320),
                (2560, 1280),
                (20480, 320),
                (262144, 320),
                (128, 2688),
            ] {
                for m in [1, 2] {
                    let gemv = dense_gemv(m, n, vectors, lanes);
                    let (grid, warps_per_col) =
                        gemv_geometry(n, vectors, lanes, gemv.loads_per_lane, gemv.warps_per_block);
                    let columns_per_block = grid.warps(lanes) / warps_per_col;
                    assert!(columns_per_block >= 1, "n {n} lanes {lanes} {gemv:?}");
                    assert!(
                        grid.blocks as usize * columns_per_block >= n,
                        "n {n} lanes {lanes} {gemv:?}"
                    );
                    assert!(grid.threads <= 1024 && grid.warps(lanes) <= 32);
                }
            }
        }
    }

    /// The 8-warp blocks go to the measured shapes (31B's o and down, E4B's down in bf16 on
    /// 32-lane warps; E4B's at a batch of 6) and to no wide or multi-row projection.
    #[test]
    fn only_long_narrow_single_rows_take_eight_warp_blocks() {
        let bf16_vectors = |k: usize| k / 8;
        for (n, k, loads) in [(5376, 8192, 4), (5376, 21504, 4), (2560, 10240, 6)] {
            let gemv = dense_gemv(1, n, bf16_vectors(k), 32);
            assert_eq!(gemv.warps_per_block, LONG_K_WARPS_PER_BLOCK, "{n} × {k}");
            assert_eq!(gemv.loads_per_lane, loads, "{n} × {k}");
            assert_eq!(
                dense_gemv(2, n, bf16_vectors(k), 32).warps_per_block,
                WARPS_PER_BLOCK
            );
        }
        for (n, k) in [(2560, 2048), (2816, 4096), (43008, 5376), (262144, 5376)] {
            let gemv = dense_gemv(1, n, bf16_vectors(k), 32);
            assert_eq!(gemv.warps_per_block, WARPS_PER_BLOCK, "{n} × {k}");
        }
    }
}
