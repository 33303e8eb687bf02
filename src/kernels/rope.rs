//! `rope`: rotate-half (NeoX) RoPE over the whole head, `x [B, S, heads, D]` with
//! `cos, sin [S, D/2]`. Proportional RoPE is the same op fed zero-padded frequencies
//! (cos 1, sin 0 on the pass-through pairs).

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{Result, Tensor, D};

const OP: Op = Op::Rope;

pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    rope_on(arm_for(OP, x.device(), x.dtype()), x, cos, sin)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn rope_on(arm: Arm, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, cos, sin),
        Arm::Native(Backend::Cuda) => cuda_fwd(x, cos, sin),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

/// Mirrors the reference's `x·cos + rotate_half(x)·sin` with full-width tables, so the
/// rounding order in bf16 is the reference's too.
pub fn composed(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (_, seq, _, head_dim) = x.dims4()?;
    let half = head_dim / 2;
    let widen = |t: &Tensor| -> Result<Tensor> {
        Tensor::cat(&[t, t], D::Minus1)?
            .to_dtype(x.dtype())?
            .reshape((1, seq, 1, head_dim))
    };
    let (cos, sin) = (widen(cos)?, widen(sin)?);
    let first = x.narrow(D::Minus1, 0, half)?;
    let second = x.narrow(D::Minus1, half, half)?;
    let rotated = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
    x.broadcast_mul(&cos)? + rotated.broadcast_mul(&sin)?
}

/// CUDA arm: one thread per rotated pair (src/kernels/cuda/rope.cu).
fn cuda_fwd(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let x = x.contiguous()?;
    let (batch, seq, heads, head_dim) = x.dims4()?;
    let cos = cos.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let sin = sin.to_dtype(candle_core::DType::F32)?.contiguous()?;
    if cos.dims() != [seq, head_dim / 2] || sin.dims() != [seq, head_dim / 2] {
        candle_core::bail!(
            "rope: cos/sin {:?} do not fit x {:?}",
            cos.shape(),
            x.shape()
        );
    }
    let out = empty(x.shape(), x.dtype(), x.device())?;
    let rows = batch * seq * heads;
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&cos),
        Arg::Tensor(&sin),
        Arg::Tensor(&out),
        Arg::Usize(rows),
        Arg::I32(seq as i32),
        Arg::I32(heads as i32),
        Arg::I32(head_dim as i32),
    ];
    launch(
        &kernel_name("rope", x.dtype())?,
        x.device(),
        elementwise(rows * head_dim / 2),
        &args,
    )?;
    Ok(out)
}

/// `x [seq, heads, d]` row-major, `cos, sin [seq, d/2]`.
pub fn reference(
    x: &[f64],
    seq: usize,
    heads: usize,
    d: usize,
    cos: &[f64],
    sin: &[f64],
) -> Vec<f64> {
    let half = d / 2;
    let mut out = vec![0.0; x.len()];
    for s in 0..seq {
        for h in 0..heads {
            let base = (s * heads + h) * d;
            for j in 0..half {
                let (c, sn) = (cos[s * half + j], sin[s * half + j]);
                let (a, b) = (x[base + j], x[base + j + half]);
                out[base + j] = a * c - b * sn;
                out[base + j + half] = b * c + a * sn;
            }
        }
    }
    out
}
