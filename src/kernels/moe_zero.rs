//! `moe_zero`: a zeroed f32 accumulation buffer for the experts' weighted sum.

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};

const OP: Op = Op::MoeZero;

pub fn moe_zero(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    moe_zero_on(arm_for(OP, device, DType::F32), rows, cols, device)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_zero_on(arm: Arm, rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(rows, cols, device),
        Arm::Native(Backend::Cuda) => cuda_fwd(rows, cols, device),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    Tensor::zeros((rows, cols), DType::F32, device)
}

/// CUDA arm: a fill kernel (src/kernels/cuda/moe.cu).
fn cuda_fwd(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let out = empty((rows, cols), DType::F32, device)?;
    let n = rows * cols;
    launch(
        &kernel_name("moe_zero", DType::F32)?,
        device,
        elementwise(n),
        &[Arg::Tensor(&out), Arg::Usize(n)],
    )?;
    Ok(out)
}

pub fn reference(rows: usize, cols: usize) -> Vec<f64> {
    vec![0.0; rows * cols]
}
