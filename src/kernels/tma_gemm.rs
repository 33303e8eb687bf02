//! The Hopper GEMM behind prefill's projections where cuBLAS alone does not do all of it:
//! `Y = X · Wᵀ` for many rows of bf16 X on compute capability 9.0, a warp-specialised TMA + wgmma
//! pipeline (src/kernels/cuda/tma_gemm.cuh, its entry points in tma_gemm.cu).
//! - e4m3 weights with one scale per row (`matmul_bt_fp8_channel`): widened and scaled in
//!   registers on their way into the tensor cores, so no bf16 copy of the weight is written or
//!   read;
//! - an MLP's packed [gate ‖ up] (`linear_gelu_mul`, e4m3 or bf16): the GeGLU product as the
//!   epilogue, so the [m, 2d] projection never reaches memory.
//!
//! Not an op of its own: the ops that call it check its results through their contracts.
//! `G4_TMA_GEMM=0` turns it off, and those ops take their other paths.

use super::native::{
    elementwise, empty, launch, launch_with_shared, tensor_map, vector_aligned, warp_lanes, Arg,
    Grid, Swizzle,
};
use candle_core::{DType, Result, Tensor};

/// Blocks of 128 X rows by 128 weight rows, K in steps of 64 (one 128-byte row of a bf16 tile),
/// a producer warpgroup and two consumer ones, six stages of shared memory (X 128 × 64 bf16 and
/// W 128 × 64 of the weight's type each) with two 8-byte barriers each, and 1 KiB to align them.
const TILE: usize = 128;
const K_STEP: usize = 64;
const WARPS: usize = 12;
const STAGES: usize = 6;
/// At most this many slices of K, each at least this many steps of it (a slice fills and drains
/// its pipeline and writes [m, n] f32 sums that a second launch adds).
const MAX_K_SLICES: usize = 4;
const MIN_STEPS_PER_SLICE: usize = 4;

/// The weight of a projection.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    /// e4m3 `[n, k]` with one f32 scale per row.
    E4m3 {
        weight: &'a Tensor,
        scale: &'a Tensor,
    },
    /// bf16 `[n, k]` (the GeGLU epilogue only: cuBLAS runs the plain GEMM).
    Bf16(&'a Tensor),
}

impl Weights<'_> {
    fn tensor(&self) -> &Tensor {
        match self {
            Weights::E4m3 { weight, .. } => weight,
            Weights::Bf16(weight) => weight,
        }
    }
}

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

/// Slices of K for a GEMM of `tiles` output tiles and `k_steps` steps of K, one block a
/// multiprocessor on `multiprocessors`: the count whose blocks finish soonest (waves of blocks
/// × a block's steps), the fewest among equals. E4B at 512 rows on 132: q/k/v (96 tiles, 40
/// steps) 4, o (80, 32) 3, down (80, 160) 3, gate/up (640, 40) 1.
fn k_slices(tiles: usize, k_steps: usize, multiprocessors: usize) -> usize {
    (1..=MAX_K_SLICES)
        .filter(|&s| s == 1 || k_steps >= s * MIN_STEPS_PER_SLICE)
        .min_by_key(|&s| {
            (
                (tiles * s).div_ceil(multiprocessors) * k_steps.div_ceil(s),
                s,
            )
        })
        .unwrap_or(1)
}

/// `rows [m, k]` · `weights`ᵀ through the GEMM, where it runs: bf16 rows, K a multiple of 16 and
/// the outputs of 8, contiguous 16-byte aligned operands, compute capability 9.0 (its machine
/// code is sm_90a's); e4m3 weights, or bf16 ones with the GeGLU epilogue; with that epilogue,
/// where K needs no slices. `None` elsewhere.
pub fn gemm(rows: &Tensor, weights: Weights, epilogue: Epilogue) -> Result<Option<Tensor>> {
    let weight = weights.tensor();
    let (m, k) = rows.dims2()?;
    let (n, weight_k) = weight.dims2()?;
    let device = rows.device();
    // A block's outputs: 128 weight rows' own, or 64 gate rows' and their up rows' product.
    let (outputs, outputs_per_block) = match epilogue {
        Epilogue::Plain => (n, TILE),
        Epilogue::GeluAndMul => (n / 2, TILE / 2),
    };
    let (kernel, scale, weight_bytes, swizzle) = match (weights, epilogue) {
        (Weights::E4m3 { scale, .. }, Epilogue::Plain) => (
            "g4_matmul_bt_fp8_channel_tma_bf16",
            Some(scale),
            1,
            Swizzle::Bytes64,
        ),
        (Weights::E4m3 { scale, .. }, Epilogue::GeluAndMul) => (
            "g4_fp8_gelu_and_mul_tma_bf16",
            Some(scale),
            1,
            Swizzle::Bytes64,
        ),
        (Weights::Bf16(_), Epilogue::GeluAndMul) => {
            ("g4_linear_gelu_mul_tma_bf16", None, 2, Swizzle::Bytes128)
        }
        (Weights::Bf16(_), Epilogue::Plain) => return Ok(None),
    };
    let runs = enabled()
        && rows.dtype() == DType::BF16
        && weight.dtype()
            == if scale.is_some() {
                DType::F8E4M3
            } else {
                DType::BF16
            }
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
    let tiles = m.div_ceil(TILE) * outputs.div_ceil(outputs_per_block);
    let slices = k_slices(tiles, k.div_ceil(K_STEP), multiprocessors);
    if epilogue == Epilogue::GeluAndMul && slices > 1 {
        return Ok(None);
    }
    let shared_bytes = STAGES * (TILE * K_STEP * 2 + TILE * K_STEP * weight_bytes + 16) + 1024;
    let x_map = tensor_map(rows, K_STEP, TILE, Swizzle::Bytes128)?;
    // The packed weight's gate and up rows arrive as two boxes of 64.
    let w_map = tensor_map(weight, K_STEP, outputs_per_block, swizzle)?;
    let y = empty((m, outputs), DType::BF16, device)?;
    let scale = scale
        .map(|s| s.to_dtype(DType::F32)?.contiguous())
        .transpose()?;
    let partial = if slices > 1 {
        Some(empty((slices, m, n), DType::F32, device)?)
    } else {
        None
    };
    let mut args = vec![Arg::TensorMap(&x_map), Arg::TensorMap(&w_map)];
    if let Some(scale) = &scale {
        args.push(Arg::Tensor(scale));
    }
    args.push(Arg::Tensor(&y));
    if epilogue == Epilogue::Plain {
        args.push(Arg::OptionalTensor(partial.as_ref()));
    }
    args.extend([Arg::I32(m as i32), Arg::I32(n as i32), Arg::I32(k as i32)]);
    if epilogue == Epilogue::Plain {
        args.push(Arg::I32(slices as i32));
    }
    let grid = Grid::of_warps(tiles * slices, WARPS, warp_lanes(device));
    launch_with_shared(kernel, device, grid, shared_bytes as u32, &args)?;
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
    use super::k_slices;

    #[test]
    fn k_slices_fill_the_gpu_with_the_fewest_slices() {
        // (tiles, steps of K, multiprocessors, slices): E4B's projections at 512 rows on an H100
        // or H200 (132); q/k/v on a GPU of 114, where slices gain nothing; tiles enough already;
        // K too short to cut, cut in 4, and in 3 where 4 would leave slices under 4 steps.
        let table = [
            (96, 40, 132, 4),
            (80, 32, 132, 3),
            (80, 160, 132, 3),
            (640, 40, 132, 1),
            (96, 40, 114, 1),
            (264, 40, 132, 1),
            (1, 7, 132, 1),
            (1, 16, 132, 4),
            (1, 12, 132, 3),
        ];
        for (tiles, steps, multiprocessors, want) in table {
            assert_eq!(
                k_slices(tiles, steps, multiprocessors),
                want,
                "{tiles} tiles, {steps} steps, {multiprocessors} multiprocessors"
            );
        }
    }
}
