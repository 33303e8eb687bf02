//! A projection's weight `[N, K]` as the model holds it: dense in the compute dtype; packed into
//! the panels the CPU's GEMM reads (f32 on a CPU with the SIMD arm); or — for an FP8 checkpoint on
//! a device with a native FP8 arm — the stored e4m3 values and their per-row scales, so that the
//! weights take half of bf16's memory and decode reads half the bytes.

use crate::kernels::{
    linear::linear,
    linear_gelu_mul::{gelu_mul_after, linear_gelu_mul, Up, Weights},
    linear_panels::linear_panels,
    linear_panels_fp8::linear_panels_fp8,
    matmul_bt_fp8_channel::{matmul_bt_fp8_channel, GEMV_MAX_ROWS},
    matmul_bt_fp8_channel_f16_rows::{self as f16_rows, matmul_bt_fp8_channel_f16_rows},
    matmul_bt_fp8_dynamic::matmul_bt_fp8_dynamic,
    round_rows_e4m3::round_rows_e4m3,
    tma_gemm::{Epilogue, F16Rows},
};
use candle_core::{DType, Result, Tensor, D};

/// The rows of `x [.., K]`.
fn rows(x: &Tensor) -> Result<usize> {
    Ok(x.elem_count() / x.dim(D::Minus1)?.max(1))
}

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
    /// An FP8_DYNAMIC checkpoint's projection: its input rounded to e4m3 per row
    /// (`round_rows_e4m3`) before the projection it holds.
    E4m3Input(Box<Projection>),
}

impl Projection {
    /// `x [.., K]` → `[.., N]` in x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Projection::Dense(w) => linear(x, w),
            Projection::Panels { panels, n } => linear_panels(x, panels, *n),
            Projection::Fp8 { weight, scale } => matmul_bt_fp8_channel(x, weight, scale),
            Projection::Fp8Panels { panels, scale, n } => linear_panels_fp8(x, panels, scale, *n),
            Projection::E4m3Input(inner) => match &**inner {
                Projection::Fp8 { weight, scale } => matmul_bt_fp8_dynamic(x, weight, scale),
                inner => inner.forward(&round_rows_e4m3(x)?),
            },
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
            // Prefill's rows go through the FP8 GEMM of the projection alone, then the product.
            Projection::E4m3Input(inner) => match &**inner {
                Projection::Fp8 { weight, scale } if rows(x)? > GEMV_MAX_ROWS => {
                    gelu_mul_after(&matmul_bt_fp8_dynamic(x, weight, scale)?, up)
                }
                inner => inner.forward_gelu_mul(&round_rows_e4m3(x)?, up),
            },
        }
    }

    /// The projection to run on `rows` rows of input that the norm before it has already
    /// rounded to e4m3 per row (`dual_rms_norm_plus_res_e4m3`), for exactly what `self` gives on
    /// the unrounded rows: an FP8_DYNAMIC projection's inner one, except where its rows go to
    /// the FP8 tensor cores, whose GEMM quantises the unrounded rows itself. `None` where the
    /// norm must leave its output unrounded.
    pub fn after_rounding(&self, rows: usize) -> Option<&Projection> {
        match self {
            Projection::E4m3Input(inner)
                if rows <= GEMV_MAX_ROWS || !matches!(**inner, Projection::Fp8 { .. }) =>
            {
                Some(inner)
            }
            _ => None,
        }
    }

    /// Whether `rows` rows of input in `dtype` go through the Hopper GEMM's f16 entries with
    /// `epilogue` (an FP8 projection's prefill rows in bf16 on compute capability 9.0, with
    /// `G4_F16_ROWS=1`): then the norm before it writes them as `F16Rows`
    /// (`dual_rms_norm_plus_res_f16`).
    pub fn takes_f16_rows(&self, rows: usize, dtype: DType, epilogue: Epilogue) -> bool {
        match self {
            Projection::Fp8 { weight, .. } => {
                rows > GEMV_MAX_ROWS
                    && f16_rows::model_enabled()
                    && f16_rows::runs_natively(rows, weight, epilogue, dtype)
            }
            _ => false,
        }
    }

    /// `forward` (Plain) or `forward_gelu_mul` with the packed up (GeluAndMul) of rows given as
    /// `F16Rows`, the result in `dtype`.
    pub fn forward_f16_rows(
        &self,
        x: &F16Rows,
        epilogue: Epilogue,
        dtype: DType,
    ) -> Result<Tensor> {
        match (self, epilogue) {
            (Projection::Fp8 { weight, scale }, _) => {
                matmul_bt_fp8_channel_f16_rows(x, weight, scale, epilogue, dtype)
            }
            (_, Epilogue::Plain) => self.forward(&x.unscaled(dtype)?),
            (_, Epilogue::GeluAndMul) => self.forward_gelu_mul(&x.unscaled(dtype)?, Up::Packed),
        }
    }

    /// The tensors that hold it, for counting memory.
    pub fn tensors(&self) -> Box<dyn Iterator<Item = &Tensor> + '_> {
        match self {
            Projection::Dense(w) | Projection::Panels { panels: w, .. } => {
                Box::new(std::iter::once(w))
            }
            Projection::Fp8 { weight, scale }
            | Projection::Fp8Panels {
                panels: weight,
                scale,
                ..
            } => Box::new([weight, scale].into_iter()),
            Projection::E4m3Input(inner) => inner.tensors(),
        }
    }
}
