//! `matmul_bt_fp8_channel`: `Y = X · (W_e4m3 × scale[row])ᵀ`, the projection of an FP8 checkpoint
//! whose weights stay e4m3 on the device. The composed arm materialises the dequantised weight on
//! every call; the native arm decodes e4m3 in registers for decode's few rows (half of bf16's
//! bytes read) and dequantises into a scratch weight for cuBLAS when there are many.

use super::check::{Builder, Case};
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::Grid;
use super::{arm_for, dequant_fp8_channel, linear, reference, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MatmulBtFp8Channel;

/// `x [.., K]`, `weight [N, K]` F8E4M3, `scale [N]` → `[.., N]` in x's dtype.
pub fn matmul_bt_fp8_channel(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    matmul_bt_fp8_channel_on(arm_for(OP, x.device(), x.dtype()), x, weight, scale)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn matmul_bt_fp8_channel_on(
    arm: Arm,
    x: &Tensor,
    weight: &Tensor,
    scale: &Tensor,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weight, scale),
        Arm::Native(_) => native_fwd(x, weight, scale),
    }
}

pub fn composed(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let w = dequant_fp8_channel::composed(weight, scale, x.dtype())?;
    linear::composed(x, &w)
}

/// X rows up to which the native arm runs its GEMV; beyond, a GEMM reuses each weight across
/// rows, and cuBLAS on a dequantised copy wins.
pub const GEMV_MAX_ROWS: usize = 8;
/// e4m3 weights per 16-byte load of the GEMV.
const WEIGHTS_PER_VECTOR: usize = 16;
/// Decode's single-row GEMV over e4m3 weights (gemv.cuh; `linear_gelu_mul`'s FP8 one-row launch
/// has the same three).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum OneRowGemv {
    /// `gemv_stream` (entry `_one_row_stream`): resident warps, `STREAM_COLUMNS` weight rows each
    /// at a time over the whole K, the next rows' loads in flight while the current ones are summed.
    Stream,
    /// `gemv_columns`: groups of warps splitting K, `columns` weight rows a group with
    /// `loads_per_column` loads of each in flight a lane.
    Columns {
        entry: &'static str,
        columns: usize,
        loads_per_column: usize,
    },
}

/// The streaming GEMV's weight rows per warp and most 16-byte vectors a lane holds of each
/// (`G4_FP8_STREAM_COLUMNS`, `G4_FP8_STREAM_VECTORS` in gemv.cuh).
pub(super) const STREAM_COLUMNS: usize = 2;
const STREAM_VECTORS_PER_LANE: usize = 5;
/// The streaming GEMV runs where a lane's share of K is 4 or 5 vectors (K 2,048–2,560 on 32-lane
/// warps: E4B's q/k/v, sliding o, gate/up and PLE gate), the shapes it was measured on
/// (fp8_gemv_bench, H100, µs, against the best column kernel: E4B gate/up GeGLU 21.46 / 23.86,
/// q/k/v 5.30 / 5.54, PLE gate 2.56 / 2.92).
const STREAM_MIN_VECTORS_PER_LANE: usize = 4;
/// The streaming GEMV's warps (blocks of `linear::WARPS_PER_BLOCK`): about 16 a multiprocessor
/// on an H100 or H200, as for `linear`'s GEMV. A group's sums do not depend on the grid.
const STREAM_WARPS: usize = 2048;

/// K from which the column GEMV takes four weight rows per group rather than two. fp8_gemv_bench
/// (µs, two rows against four): H100 E4B q/k/v (K 2,560) 5.55 / 5.64, gate/up 21.97 / 23.84, down
/// (K 10,240) 13.45 / 11.46; H200 31B q/k/v (K 5,376) 28.42 / 25.14, gate/up 67.27 / 59.22.
const ONE_ROW_FOUR_COLUMNS_MIN_K: usize = 4096;

/// The one-row GEMV for K e4m3 weights a row on `lanes`-wide warps.
pub(super) fn one_row_gemv(k: usize, lanes: usize) -> OneRowGemv {
    let vectors = k / WEIGHTS_PER_VECTOR;
    if (STREAM_MIN_VECTORS_PER_LANE * lanes..=STREAM_VECTORS_PER_LANE * lanes).contains(&vectors) {
        OneRowGemv::Stream
    } else if k >= ONE_ROW_FOUR_COLUMNS_MIN_K {
        OneRowGemv::Columns {
            entry: "_one_row_cols4",
            columns: 4,
            loads_per_column: 2,
        }
    } else {
        OneRowGemv::Columns {
            entry: "_one_row_cols2",
            columns: 2,
            loads_per_column: 4,
        }
    }
}

/// The streaming GEMV's launch for `groups` groups of weight rows.
pub(super) fn stream_grid(groups: usize, lanes: usize) -> Grid {
    let warps = groups.clamp(1, STREAM_WARPS);
    Grid::of_warps(
        warps.div_ceil(linear::WARPS_PER_BLOCK),
        linear::WARPS_PER_BLOCK,
        lanes,
    )
}

/// CUDA arm: up to 8 rows, `linear`'s GEMV with e4m3 weights decoded in registers
/// (src/kernels/cuda/gemv.cuh, instantiated in fp8.cu; `linear`'s launch geometry); otherwise the native dequantisation into a scratch weight of
/// x's dtype and cuBLAS.
fn native_fwd(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, vector_aligned, warp_lanes, Arg};
    let (rows, out_shape) = linear::rows_of(x, weight)?;
    let (m, k) = rows.dims2()?;
    let n = weight.dim(0)?;
    let (rows, weight) = (rows.contiguous()?, weight.contiguous()?);
    let gemv = m <= GEMV_MAX_ROWS
        && k.is_multiple_of(WEIGHTS_PER_VECTOR)
        && weight.dim(1)? == k
        && vector_aligned(&rows)
        && vector_aligned(&weight);
    if !gemv {
        let dense = dequant_fp8_channel::dequant_fp8_channel(&weight, scale, x.dtype())?;
        return linear::composed(x, &dense);
    }
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let lanes = warp_lanes(x.device());
    let y = empty((m, n), x.dtype(), x.device())?;
    let (n_arg, k_arg) = (Arg::I32(n as i32), Arg::I32(k as i32));
    // One row (every decode step) has its own entry points, whose warps take a few weight rows
    // each; more rows take `linear`'s GEMV.
    let one_row = (m == 1).then(|| one_row_gemv(k, lanes));
    if let Some(OneRowGemv::Stream) = one_row {
        let grid = stream_grid(n.div_ceil(STREAM_COLUMNS), lanes);
        let args = [
            Arg::Tensor(&rows),
            Arg::Tensor(&weight),
            Arg::Tensor(&scale),
            Arg::Tensor(&y),
            n_arg,
            k_arg,
        ];
        let kernel = kernel_name("matmul_bt_fp8_channel_one_row_stream", x.dtype())?;
        launch(&kernel, x.device(), grid, &args)?;
        return y.reshape(out_shape);
    }
    let (kernel, (grid, warps_per_col)) = match one_row {
        Some(OneRowGemv::Columns {
            entry,
            columns,
            loads_per_column,
        }) => {
            let geometry = linear::gemv_geometry(
                n.div_ceil(columns),
                k / WEIGHTS_PER_VECTOR,
                lanes,
                loads_per_column,
                linear::WARPS_PER_BLOCK,
            );
            (format!("matmul_bt_fp8_channel{entry}"), geometry)
        }
        _ => {
            let geometry = linear::gemv_geometry(
                n,
                k / WEIGHTS_PER_VECTOR,
                lanes,
                linear::LOADS_PER_LANE,
                linear::WARPS_PER_BLOCK,
            );
            ("matmul_bt_fp8_channel".to_string(), geometry)
        }
    };
    let args = [
        Arg::Tensor(&rows),
        Arg::Tensor(&weight),
        Arg::Tensor(&scale),
        Arg::Tensor(&y),
        Arg::I32(m as i32),
        n_arg,
        k_arg,
        Arg::I32(warps_per_col as i32),
    ];
    launch(&kernel_name(&kernel, x.dtype())?, x.device(), grid, &args)?;
    y.reshape(out_shape)
}

pub fn reference(
    x: &[f64],
    weight: &[f64],
    scale: &[f64],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let w = dequant_fp8_channel::reference(weight, scale, k);
    reference::matmul_bt(x, &w, m, n, k)
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate)
        .shape_paths(SHAPE_PATHS)
        .flops(gemm_flops),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the row scales ignored",
            run: |c| {
                Ok(vec![composed(
                    c.float(0),
                    c.raw(0),
                    &c.float(1).ones_like()?,
                )?])
            },
        },
        Mutant {
            what: "the last weight of each row dropped (a tail bug)",
            run: |c| {
                let k = c.float(0).dim(1)?;
                Ok(vec![composed(
                    &c.float(0).narrow(1, 0, k - 1)?,
                    &c.raw(0).narrow(1, 0, k - 1)?,
                    c.float(1),
                )?])
            },
        },
    ],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "one row (a decode step), K 2,048–2,560 on 32-lane warps (4–5 vectors a lane)",
        path: "native streaming GEMV: resident warps, 2 weight rows each over the whole K, the next rows' loads in flight",
        case: "M1 N131 K2304",
    },
    ShapePath {
        shapes: "one row (a decode step), other K a multiple of 16 below 4,096",
        path: "native GEMV, 2 weight rows per warp group: e4m3 decoded in registers",
        case: "M1 N131 K272",
    },
    ShapePath {
        shapes: "one row (a decode step), K a multiple of 16 from 4,096",
        path: "native GEMV, 4 weight rows per warp group: e4m3 decoded in registers",
        case: "M1 N130 K4112",
    },
    ShapePath {
        shapes: "2 to 8 rows, K a multiple of 16",
        path: "native GEMV: e4m3 decoded in registers, W streamed once for all rows",
        case: "M8 N64 K512",
    },
    ShapePath {
        shapes: "more than 8 rows (prefill)",
        path: "native dequantisation into a scratch weight, then cuBLAS",
        case: "M24 N48 K96",
    },
    ShapePath {
        shapes: "K not a multiple of 16",
        path: "native dequantisation into a scratch weight, then cuBLAS",
        case: "M2 N17 K129",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // Decode rows (the GEMV: one row over a short, a streamed (4.5 and 5 vectors a lane) and a
    // long K, several rows, column counts no warp group or block divides), a prefill block, K off the 16-weight vectors, and last (the
    // one `--perf` times) a decode GEMV of E4B's MLP down projection, whose 26 MB of e4m3
    // outgrow the L2 cache.
    let shapes = [
        (1, 3, 32),
        (1, 131, 272),
        (1, 131, 2304),
        (1, 37, 2560),
        (1, 130, 4112),
        (3, 130, 272),
        (8, 64, 512),
        (24, 48, 96),
        (2, 17, 129),
        (1, 2560, 10240),
    ];
    fp8_matmul_cases(device, dtype, rng, &shapes)
}

/// One case per `(m, n, k)`: `x [m, k]` uniform in ±1 (a float input), an e4m3 `weight [n, k]`
/// (raw input 0) and its scales (float input 1), `x · (weight × scale)ᵀ` expected.
pub(super) fn fp8_matmul_cases(
    device: &Device,
    dtype: DType,
    rng: &mut StdRng,
    shapes: &[(usize, usize, usize)],
) -> Result<Vec<Case>> {
    fp8_matmul_cases_with(
        device,
        dtype,
        rng,
        shapes,
        |_, x, weight, scale, (m, n, k)| Ok(reference(x, weight, scale, m, n, k)),
    )
}

/// `fp8_matmul_cases` with another expected value: `expected(builder, x, weight, scale, (m, n,
/// k))`, the weight as its decoded e4m3 values.
pub(super) fn fp8_matmul_cases_with(
    device: &Device,
    dtype: DType,
    rng: &mut StdRng,
    shapes: &[(usize, usize, usize)],
    expected: impl Fn(&Builder, &[f64], &[f64], &[f64], (usize, usize, usize)) -> Result<Vec<f64>>,
) -> Result<Vec<Case>> {
    shapes
        .iter()
        .map(|&(m, n, k)| {
            let mut c = Builder::new(device, dtype, rng);
            let x = c.uniform(&[m, k], -1.0, 1.0)?;
            let (weight, scale) = dequant_fp8_channel::fp8_weight(&mut c, n, k)?;
            let expected = expected(&c, &x, &weight, &scale, (m, n, k))?;
            Ok(c.finish(format!("M{m} N{n} K{k}"), expected))
        })
        .collect()
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![matmul_bt_fp8_channel_on(arm, f(0), c.raw(0), f(1))?])
}
