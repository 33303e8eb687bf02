//! `matmul_bt_alpha_beta`: `C = α·A·Bᵀ + β·C`, the accumulating GEMM (MoE expert accumulation).

use super::check::{Builder, Case};
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, native, reference, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

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
        Arm::Native(_) => native_fwd(a, b, c, alpha, beta),
    }
}

pub fn composed(a: &Tensor, b: &Tensor, c: &Tensor, alpha: f64, beta: f64) -> Result<Tensor> {
    a.matmul(&b.t()?)?.affine(alpha, 0.0)? + c.affine(beta, 0.0)?
}

/// CUDA arm: cuBLAS GEMM with β on candle's handle.
fn native_fwd(a: &Tensor, b: &Tensor, c: &Tensor, alpha: f64, beta: f64) -> Result<Tensor> {
    let (a, b, c) = (a.contiguous()?, b.contiguous()?, c.contiguous()?);
    super::native::gemm_bt_accumulate(&a, &b, &c, alpha, beta)
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

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce)
        .native(native::CUDA_BLAS_FLOATS)
        .not_used_yet("meant for accumulating MoE expert outputs in one GEMM; the MoE path uses moe_combine today").flops(gemm_flops),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "β ignored (C overwritten)",
            run: |c| Ok(vec![composed(c.float(0), c.float(1), c.float(2), c.alpha, 0.0)?]),
        },
    ],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (m, n, k, alpha, beta) in [
        (1, 7, 9, 1.0, 1.0),
        (5, 33, 65, 0.5, 1.0),
        (16, 64, 128, 1.0, 0.0),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let a = c.uniform(&[m, k], -1.0, 1.0)?;
        let bt = c.uniform(&[n, k], -1.0, 1.0)?;
        let acc = c.uniform(&[m, n], -2.0, 2.0)?;
        let expected = reference(&a, &bt, &acc, m, n, k, alpha, beta);
        let mut case = c.finish(format!("M{m} N{n} K{k} α{alpha} β{beta}"), expected);
        (case.alpha, case.beta) = (alpha, beta);
        cases.push(case);
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![matmul_bt_alpha_beta_on(
        arm,
        f(0),
        f(1),
        f(2),
        c.alpha,
        c.beta,
    )?])
}
