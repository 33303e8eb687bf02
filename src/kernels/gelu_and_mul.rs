//! `gelu_and_mul`: `gelu_tanh(gate) ⊙ up` over one packed `[rows, 2D]` tensor laid out
//! `[gate ‖ up]` (the MoE experts' `gate_up_proj` output).

use super::{arm_for, gelu_mul, missing_dispatch, reference, Arm, Op};
use candle_core::{Result, Tensor, D};

const OP: Op = Op::GeluAndMul;

pub fn gelu_and_mul(packed: &Tensor) -> Result<Tensor> {
    gelu_and_mul_on(arm_for(OP, packed.device(), packed.dtype()), packed)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn gelu_and_mul_on(arm: Arm, packed: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(packed),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(packed: &Tensor) -> Result<Tensor> {
    let half = packed.dim(D::Minus1)? / 2;
    let gate = packed.narrow(D::Minus1, 0, half)?;
    let up = packed.narrow(D::Minus1, half, half)?;
    gelu_mul::composed(&gate, &up)
}

/// `packed [rows, 2·d]` → `[rows, d]`.
pub fn reference(packed: &[f64], d: usize) -> Vec<f64> {
    packed
        .chunks(2 * d)
        .flat_map(|row| (0..d).map(move |j| reference::gelu_tanh(row[j]) * row[d + j]))
        .collect()
}
