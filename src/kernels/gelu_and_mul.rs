//! `gelu_and_mul`: `gelu_tanh(gate) ⊙ up` over one packed `[rows, 2D]` tensor laid out
//! `[gate ‖ up]` (the MoE experts' `gate_up_proj` output).

use super::{arm_for, gelu_mul, missing_dispatch, reference, Arm, Backend, Op};
use candle_core::{Result, Tensor, D};

const OP: Op = Op::GeluAndMul;

pub fn gelu_and_mul(packed: &Tensor) -> Result<Tensor> {
    gelu_and_mul_on(arm_for(OP, packed.device(), packed.dtype()), packed)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn gelu_and_mul_on(arm: Arm, packed: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(packed),
        Arm::Native(Backend::Cuda) => cuda_fwd(packed),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(packed: &Tensor) -> Result<Tensor> {
    let half = packed.dim(D::Minus1)? / 2;
    let gate = packed.narrow(D::Minus1, 0, half)?;
    let up = packed.narrow(D::Minus1, half, half)?;
    gelu_mul::composed(&gate, &up)
}

/// CUDA arm: one elementwise kernel over the packed rows (src/kernels/cuda/elementwise.cu).
fn cuda_fwd(packed: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let packed = packed.contiguous()?;
    let d = packed.dim(D::Minus1)? / 2;
    let rows = packed.elem_count() / (2 * d);
    let mut shape = packed.dims().to_vec();
    *shape.last_mut().expect("at least one dim") = d;
    let out = empty(shape, packed.dtype(), packed.device())?;
    let args = [
        Arg::Tensor(&packed),
        Arg::Tensor(&out),
        Arg::Usize(rows),
        Arg::Usize(d),
    ];
    launch(
        &kernel_name("gelu_and_mul", packed.dtype())?,
        packed.device(),
        elementwise(rows * d),
        &args,
    )?;
    Ok(out)
}

/// `packed [rows, 2·d]` → `[rows, d]`.
pub fn reference(packed: &[f64], d: usize) -> Vec<f64> {
    packed
        .chunks(2 * d)
        .flat_map(|row| (0..d).map(move |j| reference::gelu_tanh(row[j]) * row[d + j]))
        .collect()
}
