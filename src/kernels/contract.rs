//! What every fused op declares next to its arms: the dtypes it is checked in, how closely an
//! arm must match the f64 reference, which native kernels exist, which shapes a native arm
//! hands to another path, whether the model calls it, its check cases, how to run an arm, its
//! cost for `--perf`, and deliberately broken arms the check must reject. `check.rs` runs
//! these contracts; it knows nothing about any op.

use super::check::Case;
use super::native::{Arm, NativeKernel};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;
use serde::Serialize;

/// Every float activation dtype.
pub const FLOATS: &[DType] = &[DType::F32, DType::BF16, DType::F16];

/// How far an arm may drift from the f64 reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToleranceClass {
    /// The result is computed in f32 and rounded once to the working dtype.
    RoundsOnce,
    /// An intermediate (gelu before the product, cos/sin, softmax probabilities, dequantised
    /// weights) is rounded to the working dtype: a wider band in bf16/f16.
    RoundsIntermediate,
}

/// Pass thresholds, stated once: NMSE, and max abs error relative to the largest |reference|.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    pub nmse: f64,
    pub max_abs_relative: f64,
}

impl ToleranceClass {
    pub fn in_dtype(self, dtype: DType) -> Tolerance {
        let (nmse, max_abs_relative) = match (dtype, self) {
            (DType::F32, _) => (1e-9, 1e-5),
            (DType::F16, ToleranceClass::RoundsOnce) => (1e-6, 2e-3),
            (DType::F16, ToleranceClass::RoundsIntermediate) => (5e-6, 5e-3),
            (_, ToleranceClass::RoundsOnce) => (5e-5, 1.6e-2),
            (_, ToleranceClass::RoundsIntermediate) => (3e-4, 4e-2),
        };
        Tolerance {
            nmse,
            max_abs_relative,
        }
    }
}

/// A range of shapes in which a native arm hands the work to another path (rule 6 of
/// ARCHITECTURE.md); `case` names the check case that covers the range.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ShapePath {
    pub shapes: &'static str,
    pub path: &'static str,
    pub case: &'static str,
}

/// Whether the model's forward pass calls the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "used", content = "why", rename_all = "kebab-case")]
pub enum ModelUse {
    Used,
    /// Checked and ready, but no model path calls it yet; the reason says where it is meant
    /// to be used.
    NotYet(&'static str),
}

/// A deliberately broken stand-in for an arm, which the check must reject.
pub struct Mutant {
    pub what: &'static str,
    pub run: fn(&Case) -> Result<Vec<Tensor>>,
}

/// One fused op's whole contract; the registry in `mod.rs` holds one per op.
pub trait OpContract: Sync {
    /// Activation dtypes the op is checked in.
    fn dtypes(&self) -> &'static [DType];
    fn tolerance(&self) -> ToleranceClass;
    /// The native kernels written for the op.
    fn native_kernels(&self) -> &'static [NativeKernel];
    /// Shapes a native arm hands to another path (empty: every shape runs natively).
    fn shape_paths(&self) -> &'static [ShapePath];
    fn model_use(&self) -> ModelUse;
    /// Fresh check cases: real and tiny shapes, odd sizes, every shape path's range. The last
    /// case is the one `--perf` times.
    fn cases(&self, device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>>;
    /// Runs `arm` on `case`; the outputs are compared with the case's reference in order.
    fn run(&self, arm: Arm, case: &Case) -> Result<Vec<Tensor>>;
    /// Floating-point operations of one call on `case`, for ops worth a TFLOP/s figure.
    fn flops(&self, case: &Case) -> Option<f64> {
        let _ = case;
        None
    }
    /// Broken arms the check must reject (at least one).
    fn mutants(&self) -> &'static [Mutant];
}
