//! What every fused op declares next to its arms: the dtypes it is checked in, how closely an
//! arm must match the f64 reference, which native kernels exist, which shapes a native arm
//! hands to another path, whether the model calls it, its check cases, how to run an arm, its
//! cost for `--perf`, and deliberately broken arms the check must reject. `check.rs` runs
//! these contracts; it knows nothing about any op.

use super::check::Case;
use super::native::{self, Arm, NativeKernel};
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
    /// An intermediate computed in the working dtype is rounded to e4m3 (three mantissa bits):
    /// where the arm's last bit differs from the reference's, an element moves a whole e4m3
    /// step (6–12 %). Rare in f32, whose band still rejects a missing rounding (NMSE ≥ 1e-4);
    /// common in bf16 and f16, whose bands only reject gross errors.
    RoundsToE4m3,
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
            (DType::F32, ToleranceClass::RoundsToE4m3) => (1e-5, 5e-2),
            (DType::F16, ToleranceClass::RoundsToE4m3) => (2e-3, 1e-1),
            (_, ToleranceClass::RoundsToE4m3) => (1e-2, 1.5e-1),
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

/// Fresh check cases of an op in one dtype: real and tiny shapes, odd sizes, every shape
/// path's range. The last case is the one `--perf` times.
pub type CasesFn = fn(&Device, DType, &mut StdRng) -> Result<Vec<Case>>;
/// Runs one arm on one case; the outputs are compared with the case's reference in order.
pub type RunFn = fn(Arm, &Case) -> Result<Vec<Tensor>>;

/// What an op declares about itself besides its cases, arms and mutants. The constructors
/// give the common answers; each op states only where it differs.
#[derive(Clone, Copy, Debug)]
pub struct OpSpec {
    /// Activation dtypes the op is checked in.
    pub dtypes: &'static [DType],
    pub tolerance: ToleranceClass,
    /// The native kernels written for the op.
    pub native_kernels: &'static [NativeKernel],
    /// Shapes a native arm hands to another path (empty: every shape runs natively).
    pub shape_paths: &'static [ShapePath],
    pub model_use: ModelUse,
    /// Floating-point operations of one call on a case, for ops worth a TFLOP/s figure.
    pub flops: Option<fn(&Case) -> Option<f64>>,
}

impl OpSpec {
    /// Checked in every float dtype, with a native kernel in each, called by the model.
    pub const fn floats(tolerance: ToleranceClass) -> OpSpec {
        OpSpec {
            dtypes: FLOATS,
            tolerance,
            native_kernels: native::GPU_FLOATS,
            shape_paths: &[],
            model_use: ModelUse::Used,
            flops: None,
        }
    }

    /// Runs on f32 only (logits, accumulators), natively too.
    pub const fn f32_only(self) -> OpSpec {
        OpSpec {
            dtypes: &[DType::F32],
            native_kernels: native::GPU_F32,
            ..self
        }
    }

    /// Native kernels other than g4's own GPU kernel in every float dtype.
    pub const fn native(self, native_kernels: &'static [NativeKernel]) -> OpSpec {
        OpSpec {
            native_kernels,
            ..self
        }
    }

    pub const fn shape_paths(self, shape_paths: &'static [ShapePath]) -> OpSpec {
        OpSpec {
            shape_paths,
            ..self
        }
    }

    pub const fn not_used_yet(self, why: &'static str) -> OpSpec {
        OpSpec {
            model_use: ModelUse::NotYet(why),
            ..self
        }
    }

    pub const fn flops(self, flops: fn(&Case) -> Option<f64>) -> OpSpec {
        OpSpec {
            flops: Some(flops),
            ..self
        }
    }
}

/// One fused op's whole contract; the registry in `mod.rs` holds one per op, and every field
/// must be given.
pub struct OpContract {
    pub spec: OpSpec,
    pub cases: CasesFn,
    pub run: RunFn,
    /// Broken arms the check must reject (at least one).
    pub mutants: &'static [Mutant],
}

/// `2·M·N·K` of a GEMM case whose first float input is `[M, K]` and second `[N, K]`.
pub fn gemm_flops(case: &Case) -> Option<f64> {
    let (m, k) = case.float(0).dims2().ok()?;
    let n = case.float(1).dim(0).ok()?;
    Some(2.0 * (m * n * k) as f64)
}
