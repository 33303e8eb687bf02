//! `matmul_bt_fp8_channel`: `Y = X · (W_e4m3 × scale[row])ᵀ`, the projection of an FP8 checkpoint
//! whose weights stay e4m3 on the device. The composed arm materialises the dequantised weight on
//! every call; the native arm decodes e4m3 in registers for decode's few rows (half of bf16's
//! bytes read); for many rows of bf16 on Hopper it widens e4m3 to bf16 on the way into the
//! tensor cores (TMA + wgmma), and elsewhere dequantises into a scratch weight for cuBLAS.

use super::check::{Builder, Case};
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::{arm_for, dequant_fp8_channel, linear, reference, tma_gemm, Arm, Op};
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
/// Decode's single-row GEMV over e4m3 weights (`gemv_columns` in gemv.cuh; `linear_gelu_mul`'s
/// FP8 one-row launch has the same two): the entry point's suffix, the weight rows each warp
/// group takes, and the loads of each row a lane keeps in flight (`G4_FP8_COLS2` and
/// `G4_FP8_COLS4` in gemv.cuh).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct OneRowGemv {
    pub entry: &'static str,
    pub columns: usize,
    pub loads_per_column: usize,
}

/// K from which the one-row GEMV takes four weight rows per group rather than two. fp8_gemv_bench
/// (µs, two rows against four): H100 E4B q/k/v (K 2,560) 5.55 / 5.64, gate/up 21.97 / 23.84, down
/// (K 10,240) 13.45 / 11.46; H200 31B q/k/v (K 5,376) 28.42 / 25.14, gate/up 67.27 / 59.22.
const ONE_ROW_FOUR_COLUMNS_MIN_K: usize = 4096;

/// The one-row GEMV for rows of `k` e4m3 weights.
pub(super) fn one_row_gemv(k: usize) -> OneRowGemv {
    if k >= ONE_ROW_FOUR_COLUMNS_MIN_K {
        OneRowGemv {
            entry: "_one_row_cols4",
            columns: 4,
            loads_per_column: 2,
        }
    } else {
        OneRowGemv {
            entry: "_one_row_cols2",
            columns: 2,
            loads_per_column: 4,
        }
    }
}

/// CUDA arm: up to 8 rows, `linear`'s GEMV with e4m3 weights decoded in registers
/// (src/kernels/cuda/gemv.cuh, instantiated in fp8.cu; `linear`'s launch geometry); more rows
/// through the Hopper GEMM where it runs (`tma_gemm`); otherwise the native dequantisation into
/// a scratch weight of x's dtype and cuBLAS.
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
        if let Some(y) = tma_gemm::gemm(
            tma_gemm::Rows::Bf16(&rows),
            &weight,
            scale,
            tma_gemm::Epilogue::Plain,
        )? {
            return y.reshape(out_shape);
        }
        let dense = dequant_fp8_channel::dequant_fp8_channel(&weight, scale, x.dtype())?;
        return linear::composed(x, &dense);
    }
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let lanes = warp_lanes(x.device());
    // One row (every decode step) has its own entry points, whose warp groups each take a few
    // weight rows (`gemv_columns` in gemv.cuh); more rows take `linear`'s GEMV.
    let (kernel, (grid, warps_per_col)) = if m == 1 {
        let one_row = one_row_gemv(k);
        let geometry = linear::gemv_geometry(
            n.div_ceil(one_row.columns),
            k / WEIGHTS_PER_VECTOR,
            lanes,
            one_row.loads_per_column,
            linear::WARPS_PER_BLOCK,
        );
        (format!("matmul_bt_fp8_channel{}", one_row.entry), geometry)
    } else {
        let geometry = linear::gemv_geometry(
            n,
            k / WEIGHTS_PER_VECTOR,
            lanes,
            linear::LOADS_PER_LANE,
            linear::WARPS_PER_BLOCK,
        );
        ("matmul_bt_fp8_channel".to_string(), geometry)
    };
    let y = empty((m, n), x.dtype(), x.device())?;
    let args = [
        Arg::Tensor(&rows),
        Arg::Tensor(&weight),
        Arg::Tensor(&scale),
        Arg::Tensor(&y),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
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
        shapes: "one row (a decode step), K a multiple of 16 below 4,096",
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
        shapes: "more than 8 rows of bf16 on compute capability 9.0, K a multiple of 16, N of 8, tiles of 128 X rows filling a wave",
        path: "native TMA + wgmma GEMM: e4m3 widened to bf16 in registers on its way into the tensor cores, each row's scale on its sums",
        case: "M512 N4224 K16",
    },
    ShapePath {
        shapes: "the same where tiles of 128 X rows fill less than one wave (132 multiprocessors: E4B's q/k/v at 512 rows)",
        path: "the same GEMM in tiles of 112 X rows",
        case: "M512 N3072 K16",
    },
    ShapePath {
        shapes: "the same, E4B's o at 512 rows",
        path: "the same GEMM in tiles of 96 X rows",
        case: "M512 N2560 K16",
    },
    ShapePath {
        shapes: "the same, a few tiles (E4B's KV-sharing q at 512 rows)",
        path: "the same GEMM in tiles of 64 X rows, part-filled",
        case: "M160 N200 K160",
    },
    ShapePath {
        shapes: "the same with tiles of 256 X rows filling the GPU twice over, their last wave at most half full",
        path: "the same GEMM: wide tiles for the whole waves, then tiles of 128 X rows",
        case: "M257 N20480 K16",
    },
    ShapePath {
        shapes: "the same where slices of K pay for their partial sums (few tiles over a long K)",
        path: "native TMA + wgmma GEMM over slices of K, their f32 sums added in order",
        case: "M24 N48 K1024",
    },
    ShapePath {
        shapes: "the same where tiles of 128 X rows over slices of K would need a second wave and tiles of 256 would not (E4B's and 31B's down at 512 rows)",
        path: "the same GEMM in tiles of 256 X rows over slices of K",
        case: "M129 N2944 K4288",
    },
    ShapePath {
        shapes: "more than 8 rows (prefill) elsewhere: f32 or f16, another GPU, N not a multiple of 8",
        path: "native dequantisation into a scratch weight, then cuBLAS",
        case: "M24 N44 K96",
    },
    ShapePath {
        shapes: "K not a multiple of 16",
        path: "native dequantisation into a scratch weight, then cuBLAS",
        case: "M2 N17 K129",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // Decode rows (the GEMV: one row over a short and a long K, several rows, column counts no
    // warp group or block divides), prefill blocks (the Hopper GEMM's, on 132 multiprocessors:
    // a few tiles that rows and columns part-fill, with a last step of K half filled; 128-row
    // tiles filling one wave, and leaving it 73 % and 61 % full over a K too short to share;
    // wide tiles leaving a last wave at most half full; slices of K in tiles of 128 X rows and
    // of 256 (the smallest case the chooser sends there, 1.6 G multiply-adds); one that takes the
    // dequantisation everywhere), K off the 16-weight vectors, and last (the one `--perf` times)
    // a decode GEMV of E4B's MLP down projection, whose 26 MB of e4m3 outgrow the L2 cache.
    let shapes = [
        (1, 35, 32),
        (1, 131, 272),
        (1, 130, 4112),
        (3, 130, 272),
        (8, 64, 512),
        (160, 200, 160),
        (512, 4224, 16),
        (512, 3072, 16),
        (512, 2560, 16),
        (257, 20480, 16),
        (24, 48, 1024),
        (129, 2944, 4288),
        (24, 44, 96),
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
