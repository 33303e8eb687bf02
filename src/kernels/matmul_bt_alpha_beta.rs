//! `matmul_bt_alpha_beta`: `C = α·A·Bᵀ + β·C`, the accumulating GEMM (MoE expert accumulation).

use super::{arm_for, missing_dispatch, reference, Arm, Backend, Op};
use candle_core::{Result, Tensor};

const OP: Op = Op::MatmulBtAlphaBeta;

/// `a [M, K]`, `b [N, K]`, `c [M, N]` → the new `C`.
pub fn matmul_bt_alpha_beta(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f64,
    beta: f64,
) -> Result<Tensor> {
    matmul_bt_alpha_beta_on(arm_for(OP, a.device(), a.dtype()), a, b, c, alpha, beta)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn matmul_bt_alpha_beta_on(
    arm: Arm,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f64,
    beta: f64,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(a, b, c, alpha, beta),
        Arm::Native(Backend::Cuda) => cuda_fwd(a, b, c, alpha, beta),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(a: &Tensor, b: &Tensor, c: &Tensor, alpha: f64, beta: f64) -> Result<Tensor> {
    a.matmul(&b.t()?)?.affine(alpha, 0.0)? + c.affine(beta, 0.0)?
}

/// CUDA arm: cuBLAS GEMM with β on candle's handle.
fn cuda_fwd(a: &Tensor, b: &Tensor, c: &Tensor, alpha: f64, beta: f64) -> Result<Tensor> {
    let (a, b, c) = (a.contiguous()?, b.contiguous()?, c.contiguous()?);
    super::cuda_launch::gemm_bt_accumulate(&a, &b, &c, alpha, beta)
}

pub fn reference(
    a: &[f64],
    b: &[f64],
    c: &[f64],
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    beta: f64,
) -> Vec<f64> {
    reference::matmul_bt(a, b, m, n, k)
        .into_iter()
        .zip(c)
        .map(|(ab, c)| alpha * ab + beta * c)
        .collect()
}
