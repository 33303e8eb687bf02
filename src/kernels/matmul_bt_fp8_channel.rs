//! `matmul_bt_fp8_channel`: `Y = X · (W_e4m3 × scale[row])ᵀ`. The composed arm materialises the
//! dequantised weight; a native arm exists to avoid exactly that.

use super::check::{Builder, Case};
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, dequant_fp8_channel, reference, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MatmulBtFp8Channel;

/// `x [M, K]`, `weight [N, K]` F8E4M3, `scale [N]` → `[M, N]` in x's dtype.
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
    x.matmul(&w.t()?)
}

/// CUDA arm: one warp per output, e4m3 decoded on the fly (src/kernels/cuda/fp8.cu).
fn native_fwd(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, warp_lanes, Arg};
    let (x, weight) = (x.contiguous()?, weight.contiguous()?);
    let (m, k) = x.dims2()?;
    let n = weight.dim(0)?;
    let scale = scale.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let y = empty((m, n), x.dtype(), x.device())?;
    let grid = output_grid(m * n, warp_lanes(x.device()));
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&weight),
        Arg::Tensor(&scale),
        Arg::Tensor(&y),
        Arg::I32(m as i32),
        Arg::I32(n as i32),
        Arg::I32(k as i32),
    ];
    launch(
        &kernel_name("matmul_bt_fp8_channel", x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    Ok(y)
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
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).not_used_yet("meant for FP8 checkpoints run in FP8; weights are dequantised at load today (dequant_fp8_channel)").flops(gemm_flops),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the row scales ignored",
            run: |c| Ok(vec![composed(c.float(0), c.raw(0), &c.float(1).ones_like()?)?]),
        },
    ],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (m, n, k) in [(1, 3, 5), (3, 17, 129), (8, 64, 256)] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[m, k], -1.0, 1.0)?;
        let (weight, scale) = dequant_fp8_channel::fp8_weight(&mut c, n, k)?;
        let expected = reference(&x, &weight, &scale, m, n, k);
        cases.push(c.finish(format!("M{m} N{n} K{k}"), expected));
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![matmul_bt_fp8_channel_on(arm, f(0), c.raw(0), f(1))?])
}

/// Warps per block of the kernel, which gives each warp one output.
const WARPS_PER_BLOCK: usize = 8;

/// One warp per output, `WARPS_PER_BLOCK` per block, on `lanes`-wide warps.
fn output_grid(outputs: usize, lanes: usize) -> super::native::Grid {
    super::native::Grid::of_warps(outputs.div_ceil(WARPS_PER_BLOCK), WARPS_PER_BLOCK, lanes)
}

#[cfg(test)]
mod tests {
    use crate::kernels::native::WARP_WIDTHS;

    /// The kernel's output index is its global thread index over warpSize.
    #[test]
    fn the_grid_covers_every_output_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for outputs in [1, 7, 8, 9, 4096 * 3] {
                let grid = super::output_grid(outputs, lanes);
                assert!(grid.blocks as usize * grid.warps(lanes) >= outputs);
            }
        }
    }
}
