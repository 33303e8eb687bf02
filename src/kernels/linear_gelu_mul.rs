//! `linear_gelu_mul`: `gelu_tanh(x·W_gateᵀ) ⊙ up`, a projection whose output goes straight into
//! the GeGLU product — the MLP's packed gate/up projection (`W [gate ‖ up]`, `up = x·W_upᵀ`) and
//! the per-layer-input gate (`up` given). Its decode arm is one GEMV launch with the product as
//! the epilogue, where a GEMV and an elementwise kernel were (at batch 1 a step's short launches
//! cost about as much as its bytes). Dense weights and e4m3 weights with per-row scales alike.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::Grid;
use super::{
    arm_for, dequant_fp8_channel, gelu_and_mul, gelu_mul, linear, matmul_bt_fp8_channel, reference,
    tma_gemm, Arm, Op,
};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::LinearGeluMul;

/// A projection's weight `[N, K]`.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    /// Stored in the activations' dtype.
    Dense(&'a Tensor),
    /// compressed-tensors FP8: e4m3 values and one f32 scale per row.
    Fp8 {
        weight: &'a Tensor,
        scale: &'a Tensor,
    },
}

/// Where the GeLU's partner comes from.
#[derive(Clone, Copy)]
pub enum Up<'a> {
    /// The second half of the weight's rows: `W [2D, K]` is `[gate ‖ up]`.
    Packed,
    /// A tensor of the gate's shape `[.., N]`.
    Given(&'a Tensor),
}

/// `x [.., K]` → `[.., D]`, with D = N/2 (packed) or N (given).
pub fn linear_gelu_mul(x: &Tensor, weights: Weights, up: Up) -> Result<Tensor> {
    linear_gelu_mul_on(arm_for(OP, x.device(), x.dtype()), x, weights, up)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn linear_gelu_mul_on(arm: Arm, x: &Tensor, weights: Weights, up: Up) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weights, up),
        Arm::Native(_) => native_fwd(x, weights, up),
    }
}

pub fn composed(x: &Tensor, weights: Weights, up: Up) -> Result<Tensor> {
    let projected = composed_projection(x, weights)?;
    match up {
        Up::Packed => gelu_and_mul::composed(&projected),
        Up::Given(up) => gelu_mul::composed(&projected, up),
    }
}

/// `x·Wᵀ` by the weights' composed arm.
fn composed_projection(x: &Tensor, weights: Weights) -> Result<Tensor> {
    match weights {
        Weights::Dense(w) => linear::composed(x, w),
        Weights::Fp8 { weight, scale } => matmul_bt_fp8_channel::composed(x, weight, scale),
    }
}

/// The product after an already computed projection, through the registry (prefill, shapes the
/// fused GEMV does not take, and the CPU's panel GEMMs, which have no epilogue).
pub fn gelu_mul_after(projected: &Tensor, up: Up) -> Result<Tensor> {
    match up {
        Up::Packed => gelu_and_mul::gelu_and_mul(projected),
        Up::Given(up) => gelu_mul::gelu_mul(projected, up),
    }
}

/// The projection and then the product, each through the registry.
fn unfused(x: &Tensor, weights: Weights, up: Up) -> Result<Tensor> {
    let projected = match weights {
        Weights::Dense(w) => linear::linear(x, w)?,
        Weights::Fp8 { weight, scale } => {
            matmul_bt_fp8_channel::matmul_bt_fp8_channel(x, weight, scale)?
        }
    };
    gelu_mul_after(&projected, up)
}

/// X rows up to which the CUDA arm runs its fused GEMV (`linear`'s GEMV bound).
const GEMV_MAX_ROWS: usize = 8;

/// CUDA arm: up to 8 rows, `linear`'s (or `matmul_bt_fp8_channel`'s) GEMV with the same sums in
/// the same order and the GeGLU product as its epilogue (src/kernels/cuda/gemv.cuh, instantiated
/// in linear_gelu_mul.cu), so it rounds exactly as the two launches it replaces; more rows of a
/// packed e4m3 weight through the Hopper GEMM (`tma_gemm`) with the product as its epilogue where
/// that runs; otherwise those two launches.
fn native_fwd(x: &Tensor, weights: Weights, up: Up) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, vector_aligned, warp_lanes, Arg};
    let (w, scale, per_vector) = match weights {
        Weights::Dense(w) => (w, None, 16 / x.dtype().size_in_bytes()),
        Weights::Fp8 { weight, scale } => (weight, Some(scale), 16),
    };
    let (rows, mut out_shape) = linear::rows_of(x, w)?;
    let (m, k) = rows.dims2()?;
    let n = w.dim(0)?;
    let d = match up {
        Up::Packed => n / 2,
        Up::Given(_) => n,
    };
    let fits = m <= GEMV_MAX_ROWS
        && k.is_multiple_of(per_vector)
        && w.dim(1)? == k
        && match weights {
            Weights::Dense(w) => w.dtype() == x.dtype(),
            Weights::Fp8 { weight, .. } => weight.dtype() == DType::F8E4M3,
        }
        && match up {
            Up::Packed => n.is_multiple_of(2),
            Up::Given(up) => up.elem_count() == m * n && up.dtype() == x.dtype(),
        };
    if !fits {
        if let (Some(scale), Up::Packed, true) = (scale, up, m > GEMV_MAX_ROWS) {
            let (rows, w) = (rows.contiguous()?, w.contiguous()?);
            let epilogue = tma_gemm::Epilogue::GeluAndMul;
            if let Some(out) = tma_gemm::gemm(tma_gemm::Rows::Bf16(&rows), &w, scale, epilogue)? {
                *out_shape.last_mut().expect("rows_of appends N") = d;
                return out.reshape(out_shape);
            }
        }
        return unfused(x, weights, up);
    }
    let (rows, w) = (rows.contiguous()?, w.contiguous()?);
    if !vector_aligned(&rows) || !vector_aligned(&w) {
        return unfused(x, weights, up);
    }
    let up = match up {
        Up::Packed => None,
        Up::Given(up) => Some(up.contiguous()?),
    };
    let (vectors, lanes) = (k / per_vector, warp_lanes(x.device()));
    let (kernel, (grid, warps_per_col)) = match scale {
        None => {
            let gemv = linear::dense_gemv(m, n, vectors, lanes);
            let kernel = format!("linear_gelu_mul{}", gemv.entry);
            (
                kernel,
                pairs_geometry(n, d, vectors, lanes, gemv, up.is_none()),
            )
        }
        // One row (every decode step): `matmul_bt_fp8_channel`'s one-row GEMV, whose warp groups
        // each take a few weight rows: with W packed, half of them gate rows and half the
        // matching up rows, so that a group holds whole outputs.
        Some(_) if m == 1 => {
            let one_row = matmul_bt_fp8_channel::one_row_gemv(k);
            let outs_per_group = if up.is_none() {
                one_row.columns / 2
            } else {
                one_row.columns
            };
            let geometry = linear::gemv_geometry(
                d.div_ceil(outs_per_group),
                vectors,
                lanes,
                one_row.loads_per_column,
                linear::WARPS_PER_BLOCK,
            );
            (format!("fp8_gelu_mul{}", one_row.entry), geometry)
        }
        Some(_) => {
            let gemv = linear::DenseGemv {
                entry: "",
                loads_per_lane: linear::LOADS_PER_LANE,
                warps_per_block: linear::WARPS_PER_BLOCK,
            };
            let geometry = pairs_geometry(n, d, vectors, lanes, gemv, up.is_none());
            ("fp8_gelu_mul".to_string(), geometry)
        }
    };
    let out = empty((m, d), x.dtype(), x.device())?;
    let scale = scale
        .map(|s| s.to_dtype(DType::F32)?.contiguous())
        .transpose()?;
    let mut args = vec![Arg::Tensor(&rows), Arg::Tensor(&w)];
    if let Some(scale) = &scale {
        args.push(Arg::Tensor(scale));
    }
    args.extend([
        Arg::OptionalTensor(up.as_ref()),
        Arg::Tensor(&out),
        Arg::I32(m as i32),
        Arg::I32(d as i32),
        Arg::I32(k as i32),
        Arg::I32(warps_per_col as i32),
    ]);
    launch(&kernel_name(&kernel, x.dtype())?, x.device(), grid, &args)?;
    *out_shape.last_mut().expect("rows_of appends N") = d;
    out.reshape(out_shape)
}

/// The launch for `d` outputs of `n` weight rows, each output of one weight row (or two,
/// `packed`: gate and up) reduced by `linear`'s warps per column for the shape: blocks of
/// `linear`'s width, or wider where one output's warps need it. Returns the grid and the warps per
/// column.
fn pairs_geometry(
    n: usize,
    d: usize,
    vectors: usize,
    lanes: usize,
    gemv: linear::DenseGemv,
    packed: bool,
) -> (Grid, usize) {
    let warps_per_col =
        linear::gemv_warps_per_col(n, vectors, lanes, gemv.loads_per_lane, gemv.warps_per_block);
    let warps_per_out = warps_per_col * if packed { 2 } else { 1 };
    let warps = gemv.warps_per_block.max(warps_per_out);
    (
        Grid::of_warps(d.div_ceil(warps / warps_per_out), warps, lanes),
        warps_per_col,
    )
}

/// `gelu_tanh(x·W_gateᵀ) ⊙ up` over `m` rows, W's rows already dequantised: `[gate ‖ up]` when
/// `given_up` is `None`.
pub fn reference(
    x: &[f64],
    w: &[f64],
    given_up: Option<&[f64]>,
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f64> {
    let projected = reference::matmul_bt(x, w, m, n, k);
    match given_up {
        None => gelu_and_mul::reference(&projected, n / 2),
        Some(up) => gelu_mul::reference(&projected, up),
    }
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "gate and up swapped",
            run: |c| {
                let (x, weights, up) = inputs(c);
                let projected = composed_projection(x, weights)?;
                let (gate, up) = match up {
                    Up::Packed => {
                        let d = projected.dim(1)? / 2;
                        (projected.narrow(1, 0, d)?, projected.narrow(1, d, d)?)
                    }
                    Up::Given(up) => (projected, up.clone()),
                };
                Ok(vec![gelu_mul::composed(&up, &gate)?])
            },
        },
        Mutant {
            what: "the row scales ignored",
            run: |c| {
                let (x, weights, up) = inputs(c);
                let ones;
                let weights = match weights {
                    Weights::Fp8 { weight, scale } => {
                        ones = scale.ones_like()?;
                        Weights::Fp8 {
                            weight,
                            scale: &ones,
                        }
                    }
                    dense => dense,
                };
                Ok(vec![composed(x, weights, up)?])
            },
        },
    ],
};

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "one row, dense weights of up to 5,376 rows",
        path: "fused GEMV, narrow (`linear`'s narrow batch)",
        case: "M1 D2112 K2816 packed dense",
    },
    ShapePath {
        shapes: "one row, dense weights of more rows",
        path: "fused GEMV, one-row entry point",
        case: "M1 D10240 K2560 packed dense",
    },
    ShapePath {
        shapes: "one row, e4m3 weights, K a multiple of 16 below 4,096",
        path: "fused GEMV decoding e4m3 in registers, 2 weight rows per warp group (an output's gate and up rows, or two gate rows)",
        case: "M1 D256 K2560 given e4m3",
    },
    ShapePath {
        shapes: "one row, e4m3 weights, K a multiple of 16 from 4,096",
        path: "fused GEMV decoding e4m3 in registers, 4 weight rows per warp group (two outputs' gate and up rows, or four gate rows)",
        case: "M1 D31 K4112 packed e4m3",
    },
    ShapePath {
        shapes: "2 to 8 rows, K a whole number of 16-byte vectors",
        path: "fused GEMV: W streamed once for all rows",
        case: "M3 D65 K264 packed dense",
    },
    ShapePath {
        shapes: "more than 8 rows of bf16, packed e4m3 weights, compute capability 9.0, D a multiple of 8, K of 16, K in one slice",
        path: "the TMA + wgmma GEMM (tma_gemm) widening e4m3 in registers, the GeGLU product as its epilogue",
        case: "M160 D200 K160 packed e4m3",
    },
    ShapePath {
        shapes: "the same with tiles of 256 X rows filling the GPU twice over, their last wave at most half full",
        path: "the same GEMM: wide tiles for the whole waves, then tiles of 128 X rows",
        case: "M257 D10240 K16 packed e4m3",
    },
    ShapePath {
        shapes: "more than 8 rows (prefill) otherwise",
        path: "unfused: `linear` or `matmul_bt_fp8_channel`, then `gelu_and_mul` or `gelu_mul`",
        case: "M24 D24 K96 packed dense",
    },
    ShapePath {
        shapes: "K not a whole number of 16-byte vectors",
        path: "unfused, as for prefill",
        case: "M2 D9 K27 given dense",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // (rows, outputs, K, packed, e4m3): tiny and odd shapes on every path (the e4m3 one-row
    // GEMV's warp groups take 2 weight rows below K 4,096 and 4 from there, so 1 or 2 outputs
    // packed and 2 or 4 given: 31 and 37 leave a partial group; fewer outputs would make the
    // error metric noisy), the
    // per-layer-input gate of E4B (256 × 2560, up given) in both weight formats, E4B's MLP
    // gate/up in e4m3, a prefill block of packed e4m3 (the Hopper GEMM's GeGLU epilogue, its
    // tiles part-filled; then one with enough outputs for wide tiles and a narrow last wave on
    // 132 multiprocessors, an H100's or H200's), 26B-A4B's shared gate/up (the narrow batch),
    // and last (the one `--perf` times) E4B's MLP gate/up, whose 105 MB of bf16 outgrow the L2
    // cache.
    let shapes = [
        (1, 5, 64, true, false),
        (3, 65, 264, true, false),
        (8, 32, 512, false, false),
        (2, 9, 27, false, false),
        (24, 24, 96, true, false),
        (1, 40, 256, true, true),
        (5, 33, 512, false, true),
        (24, 16, 96, false, true),
        (160, 200, 160, true, true),
        (1, 45, 96, true, true),
        (1, 31, 272, false, true),
        (1, 31, 4112, true, true),
        (1, 37, 4112, false, true),
        (1, 256, 2560, false, true),
        (1, 256, 2560, false, false),
        (1, 10240, 2560, true, true),
        (257, 10240, 16, true, true),
        (1, 2112, 2816, true, false),
        (1, 10240, 2560, true, false),
    ];
    shapes
        .iter()
        .map(|&(m, d, k, packed, e4m3)| {
            let n = if packed { 2 * d } else { d };
            let mut c = Builder::new(device, dtype, rng);
            // Inputs sized so that the gate's sums fall where the GeLU bends.
            let bound = 2.0 / (k as f64).sqrt();
            let (x, w) = if e4m3 {
                let x = c.uniform(&[m, k], -0.01 * bound, 0.01 * bound)?;
                let (weight, scale) = dequant_fp8_channel::fp8_weight(&mut c, n, k)?;
                (x, dequant_fp8_channel::reference(&weight, &scale, k))
            } else {
                let x = c.uniform(&[m, k], -1.0, 1.0)?;
                (x, c.uniform(&[n, k], -bound, bound)?)
            };
            let up = (!packed)
                .then(|| c.uniform(&[m, n], -1.0, 1.0))
                .transpose()?;
            let expected = reference(&x, &w, up.as_deref(), m, n, k);
            let label = format!(
                "M{m} D{d} K{k} {} {}",
                if packed { "packed" } else { "given" },
                if e4m3 { "e4m3" } else { "dense" }
            );
            Ok(c.finish(label, expected))
        })
        .collect()
}

/// A case's inputs: `x`, then the weight (a float input, or raw e4m3 with its scales as the
/// next float input), then `up` when given.
fn inputs(c: &Case) -> (&Tensor, Weights<'_>, Up<'_>) {
    let weights = match c.optional_raw(0) {
        Some(weight) => Weights::Fp8 {
            weight,
            scale: c.float(1),
        },
        None => Weights::Dense(c.float(1)),
    };
    let up = if c.float_count() > 2 {
        Up::Given(c.float(2))
    } else {
        Up::Packed
    };
    (c.float(0), weights, up)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (x, weights, up) = inputs(c);
    Ok(vec![linear_gelu_mul_on(arm, x, weights, up)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::native::WARP_WIDTHS;

    /// The kernel gives each block `warps / (warps_per_col · halves)` outputs (its warp count
    /// read from blockDim and warpSize): every output must fall in some block, on 32- and
    /// 64-lane warps, with W packed or not.
    #[test]
    fn the_fused_grid_covers_every_output_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for (d, vectors) in [
                (1, 8),
                (5, 8),
                (256, 320),
                (2112, 352),
                (10240, 320),
                (1280, 2688),
            ] {
                for packed in [false, true] {
                    let n = if packed { 2 * d } else { d };
                    for m in [1, 2] {
                        let gemv = linear::dense_gemv(m, n, vectors, lanes);
                        let (grid, warps_per_col) =
                            pairs_geometry(n, d, vectors, lanes, gemv, packed);
                        let per_out = warps_per_col * if packed { 2 } else { 1 };
                        let outs_per_block = grid.warps(lanes) / per_out;
                        assert!(outs_per_block >= 1, "d {d} lanes {lanes} packed {packed}");
                        assert!(grid.blocks as usize * outs_per_block >= d);
                        assert_eq!(grid.warps(lanes) % per_out, 0);
                        assert!(grid.threads <= 1024 && grid.warps(lanes) <= 32);
                    }
                }
            }
        }
    }
}
