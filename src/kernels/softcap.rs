//! `softcap`: `c · tanh(x / c)` (final logits, c = 30).

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{Result, Tensor};

const OP: Op = Op::Softcap;

pub fn softcap(x: &Tensor, cap: f64) -> Result<Tensor> {
    softcap_on(arm_for(OP, x.device(), x.dtype()), x, cap)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn softcap_on(arm: Arm, x: &Tensor, cap: f64) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, cap),
        Arm::Native(Backend::Cuda) => cuda_fwd(x, cap),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor, cap: f64) -> Result<Tensor> {
    (x / cap)?.tanh()? * cap
}

/// CUDA arm: one elementwise kernel (src/kernels/cuda/elementwise.cu).
fn cuda_fwd(x: &Tensor, cap: f64) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let x = x.contiguous()?;
    let out = empty(x.shape(), x.dtype(), x.device())?;
    let n = x.elem_count();
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&out),
        Arg::Usize(n),
        Arg::F32(cap as f32),
    ];
    launch(
        &kernel_name("softcap", x.dtype())?,
        x.device(),
        elementwise(n),
        &args,
    )?;
    Ok(out)
}

pub fn reference(x: &[f64], cap: f64) -> Vec<f64> {
    x.iter().map(|v| cap * (v / cap).tanh()).collect()
}
