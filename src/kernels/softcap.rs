//! `softcap`: `c · tanh(x / c)` (final logits, c = 30).

use super::{arm_for, missing_dispatch, Arm, Op};
use candle_core::{Result, Tensor};

const OP: Op = Op::Softcap;

pub fn softcap(x: &Tensor, cap: f64) -> Result<Tensor> {
    softcap_on(arm_for(OP, x.device(), x.dtype()), x, cap)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn softcap_on(arm: Arm, x: &Tensor, cap: f64) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, cap),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor, cap: f64) -> Result<Tensor> {
    (x / cap)?.tanh()? * cap
}

pub fn reference(x: &[f64], cap: f64) -> Vec<f64> {
    x.iter().map(|v| cap * (v / cap).tanh()).collect()
}
