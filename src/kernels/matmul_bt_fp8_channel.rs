//! `matmul_bt_fp8_channel`: `Y = X · (W_e4m3 × scale[row])ᵀ`. The composed arm materialises the
//! dequantised weight; a native arm exists to avoid exactly that.

use super::{arm_for, dequant_fp8_channel, missing_dispatch, reference, Arm, Op};
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
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor, weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let w = dequant_fp8_channel::composed(weight, scale, x.dtype())?;
    x.matmul(&w.t()?)
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
