//! `gelu_mul`: `gelu_tanh(gate) ⊙ up` over two separate tensors (dense MLP, PLE gate, MoE experts).

use super::{arm_for, missing_dispatch, reference, Arm, Backend, Op};
use candle_core::{DType, Result, Tensor};

const OP: Op = Op::GeluMul;

pub fn gelu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    gelu_mul_on(arm_for(OP, gate.device(), gate.dtype()), gate, up)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn gelu_mul_on(arm: Arm, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(gate, up),
        Arm::Native(Backend::Cuda) => cuda_fwd(gate, up),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    // candle's `gelu` is the tanh approximation (`gelu_erf` is the exact one). It runs in f32
    // and rounds once, as torch does for bf16/f16: candle's CUDA bf16 gelu is less precise.
    gate.to_dtype(DType::F32)?.gelu()?.to_dtype(gate.dtype())? * up
}

/// CUDA arm: one elementwise kernel (src/kernels/cuda/elementwise.cu).
fn cuda_fwd(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let (gate, up) = (gate.contiguous()?, up.contiguous()?);
    if gate.shape() != up.shape() {
        candle_core::bail!(
            "gelu_mul: gate {:?} and up {:?} differ",
            gate.shape(),
            up.shape()
        );
    }
    let out = empty(gate.shape(), gate.dtype(), gate.device())?;
    let n = gate.elem_count();
    let args = [
        Arg::Tensor(&gate),
        Arg::Tensor(&up),
        Arg::Tensor(&out),
        Arg::Usize(n),
    ];
    launch(
        &kernel_name("gelu_mul", gate.dtype())?,
        gate.device(),
        elementwise(n),
        &args,
    )?;
    Ok(out)
}

pub fn reference(gate: &[f64], up: &[f64]) -> Vec<f64> {
    gate.iter()
        .zip(up)
        .map(|(g, u)| reference::gelu_tanh(*g) * u)
        .collect()
}
