//! `dequant_fp8_channel`: `W = f32(W_e4m3) × scale[row]`, cast to the compute dtype
//! (compressed-tensors FP8 checkpoints store one scale per output channel).

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{DType, Result, Tensor};

const OP: Op = Op::DequantFp8Channel;

/// `weight [N, K]` in F8E4M3, `scale [N]` or `[N, 1]` → `[N, K]` in `dtype`.
pub fn dequant_fp8_channel(weight: &Tensor, scale: &Tensor, dtype: DType) -> Result<Tensor> {
    dequant_fp8_channel_on(arm_for(OP, weight.device(), dtype), weight, scale, dtype)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn dequant_fp8_channel_on(
    arm: Arm,
    weight: &Tensor,
    scale: &Tensor,
    dtype: DType,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(weight, scale, dtype),
        Arm::Native(Backend::Cuda) => cuda_fwd(weight, scale, dtype),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(weight: &Tensor, scale: &Tensor, dtype: DType) -> Result<Tensor> {
    let rows = weight.dim(0)?;
    let scale = scale.to_dtype(DType::F32)?.reshape((rows, 1))?;
    let decoded = if weight.device().is_cuda() {
        // candle 0.11.1 looks up `cast_f8e4m3_*` on CUDA but its kernels are named
        // `cast_f8_e4m3_*` (probe-ops on the H200 found it), so decode on the host there.
        let host = weight.to_device(&candle_core::Device::Cpu)?;
        host.to_dtype(DType::F32)?.to_device(weight.device())?
    } else {
        weight.to_dtype(DType::F32)?
    };
    decoded.broadcast_mul(&scale)?.to_dtype(dtype)
}

/// CUDA arm: decodes e4m3 in the kernel (src/kernels/cuda/fp8.cu).
fn cuda_fwd(weight: &Tensor, scale: &Tensor, dtype: DType) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let weight = weight.contiguous()?;
    let (rows, cols) = weight.dims2()?;
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let out = empty((rows, cols), dtype, weight.device())?;
    let args = [
        Arg::Tensor(&weight),
        Arg::Tensor(&scale),
        Arg::Tensor(&out),
        Arg::Usize(rows),
        Arg::Usize(cols),
    ];
    launch(
        &kernel_name("dequant_fp8_channel", dtype)?,
        weight.device(),
        elementwise(rows * cols),
        &args,
    )?;
    Ok(out)
}

/// `weight [n, k]` (already decoded e4m3 values), `scale [n]`.
pub fn reference(weight: &[f64], scale: &[f64], k: usize) -> Vec<f64> {
    weight
        .chunks(k)
        .zip(scale)
        .flat_map(|(row, s)| row.iter().map(move |w| w * s))
        .collect()
}
