//! A projection's weight `[N, K]` as the model holds it: dense in the compute dtype; packed into
//! the panels the CPU's GEMM reads (f32 on a CPU with the SIMD arm); or — for an FP8 checkpoint on
//! a device with a native FP8 arm — the stored e4m3 values and their per-row scales, so that the
//! weights take half of bf16's memory and decode reads half the bytes.

use crate::kernels::{
    linear::linear,
    linear_gelu_mul::{gelu_mul_after, linear_gelu_mul, Up, Weights},
    linear_panels::linear_panels,
    linear_panels_fp8::linear_panels_fp8,
    matmul_bt_fp8_channel::matmul_bt_fp8_channel,
};
use candle_core::{Result, Tensor};

pub enum Projection {
    Dense(Tensor),
    /// `linear_panels::pack`'s layout of a weight with `n` rows.
    Panels {
        panels: Tensor,
        n: usize,
    },
    /// compressed-tensors FP8: `weight [N, K]` e4m3, `scale [N]` f32.
    Fp8 {
        weight: Tensor,
        scale: Tensor,
    },
    /// FP8 on a CPU: `linear_panels_fp8::pack`'s e4m3 panels and padded scales of `n` rows.
    Fp8Panels {
        panels: Tensor,
        scale: Tensor,
        n: usize,
    },
}

impl Projection {
    /// `x [.., K]` → `[.., N]` in x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Projection::Dense(w) => linear(x, w),
            Projection::Panels { panels, n } => linear_panels(x, panels, *n),
            Projection::Fp8 { weight, scale } => matmul_bt_fp8_channel(x, weight, scale),
            Projection::Fp8Panels { panels, scale, n } => linear_panels_fp8(x, panels, scale, *n),
        }
    }

    /// `gelu_tanh(x·W_gateᵀ) ⊙ up` (`linear_gelu_mul`): one launch in decode on a GPU. The CPU's
    /// panel GEMMs have no epilogue, so there the product follows them.
    pub fn forward_gelu_mul(&self, x: &Tensor, up: Up) -> Result<Tensor> {
        match self {
            Projection::Dense(w) => linear_gelu_mul(x, Weights::Dense(w), up),
            Projection::Fp8 { weight, scale } => {
                linear_gelu_mul(x, Weights::Fp8 { weight, scale }, up)
            }
            Projection::Panels { .. } | Projection::Fp8Panels { .. } => {
                gelu_mul_after(&self.forward(x)?, up)
            }
        }
    }

    /// The tensors that hold it, for counting memory.
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        let (first, second) = match self {
            Projection::Dense(w) | Projection::Panels { panels: w, .. } => (w, None),
            Projection::Fp8 { weight, scale }
            | Projection::Fp8Panels {
                panels: weight,
                scale,
                ..
            } => (weight, Some(scale)),
        };
        std::iter::once(first).chain(second)
    }
}
