//! `rms_norm`: Gemma-4 RMSNorm — f32 internally, plain weight (not 1+w), optional weightless form.
//! The weight is applied in f32 before the cast back, as the reference does.

use super::{arm_for, missing_dispatch, reference, Arm, Backend, Op};
use candle_core::{DType, Result, Tensor, D};

const OP: Op = Op::RmsNorm;

pub fn rms_norm(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    rms_norm_on(arm_for(OP, x.device(), x.dtype()), x, weight, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn rms_norm_on(arm: Arm, x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weight, eps),
        Arm::Native(Backend::Cuda) => cuda_fwd(x, weight, eps),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let xf = x.to_dtype(DType::F32)?;
    let inv = xf
        .sqr()?
        .mean_keepdim(D::Minus1)?
        .affine(1.0, eps)?
        .sqrt()?
        .recip()?;
    let normed = xf.broadcast_mul(&inv)?;
    let normed = match weight {
        Some(w) => normed.broadcast_mul(&w.to_dtype(DType::F32)?)?,
        None => normed,
    };
    normed.to_dtype(x.dtype())
}

/// CUDA arm: one block per row, held in registers (src/kernels/cuda/norms.cu); rows wider than
/// a block holds take the composed arm.
fn cuda_fwd(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    use super::cuda_launch::{empty, kernel_name, launch, per_row, Arg};
    let cols = x.dim(D::Minus1)?;
    let Some(grid) = per_row(x.elem_count() / cols, cols) else {
        return composed(x, weight, eps);
    };
    let x = x.contiguous()?;
    let weight = weight
        .map(|w| w.to_dtype(x.dtype())?.contiguous())
        .transpose()?;
    let out = empty(x.shape(), x.dtype(), x.device())?;
    let args = [
        Arg::Tensor(&x),
        Arg::OptionalTensor(weight.as_ref()),
        Arg::Tensor(&out),
        Arg::I32(cols as i32),
        Arg::F32(eps as f32),
    ];
    launch(
        &kernel_name("rms_norm", x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    Ok(out)
}

/// `x [rows, cols]` row-major; `weight [cols]` or none.
pub fn reference(x: &[f64], cols: usize, weight: Option<&[f64]>, eps: f64) -> Vec<f64> {
    reference::map_rows(x, cols, |row| reference::rms_norm_row(row, weight, eps))
}
