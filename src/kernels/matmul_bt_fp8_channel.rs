//! `matmul_bt_fp8_channel`: `Y = X · (W_e4m3 × scale[row])ᵀ`. The composed arm materialises the
//! dequantised weight; a native arm exists to avoid exactly that.

use super::{arm_for, dequant_fp8_channel, missing_dispatch, reference, Arm, Backend, Op};
use candle_core::{Result, Tensor};

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
        Arm::Native(Backend::Cuda) => cuda_fwd(x, weight, scale),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let w = dequant_fp8_channel::composed(weight, scale, x.dtype())?;
    x.matmul(&w.t()?)
}

/// CUDA arm: one warp per output, e4m3 decoded on the fly (src/kernels/cuda/fp8.cu).
fn cuda_fwd(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{empty, kernel_name, launch, Arg, Grid};
    let (x, weight) = (x.contiguous()?, weight.contiguous()?);
    let (m, k) = x.dims2()?;
    let n = weight.dim(0)?;
    let scale = scale.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let y = empty((m, n), x.dtype(), x.device())?;
    // Eight warps per block; 256 threads covers both 32- and 64-wide warps.
    let grid = Grid {
        blocks: (m * n).div_ceil(8).max(1) as u32,
        threads: 256,
    };
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
