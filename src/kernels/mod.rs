//! The fused-op registry.
//!
//! Every op Gemma-4 needs lives in its own module with all of its arms side by side: an f64
//! reference (the semantics, written for clarity), a composed arm built from candle primitives
//! (runs wherever candle runs), and the native arms that exist. One predicate, [`arm_for`],
//! decides which arm runs; the model's dispatch and `g4 probe-ops` both call it, so the report
//! cannot disagree with what runs.

pub mod argmax;
pub mod attention;
pub mod check;
pub mod cuda_launch;
pub mod dequant_fp8_channel;
pub mod dual_rms_norm_plus_res;
pub mod gelu_and_mul;
pub mod gelu_mul;
pub mod linear;
pub mod matmul_bt_alpha_beta;
pub mod matmul_bt_fp8_channel;
pub mod moe_gather_rows;
pub mod moe_router_topk;
pub mod moe_weighted_scatter_add;
pub mod moe_zero;
pub mod probe;
pub mod reference;
pub mod rms_norm;
pub mod rms_norm_plus_add;
pub mod rope;
pub mod softcap;

use candle_core::{DType, Device};

/// A fused operator of the Gemma-4 forward pass (ARCHITECTURE.md, "The fused ops").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    GeluMul,
    GeluAndMul,
    RmsNorm,
    RmsNormPlusAdd,
    DualRmsNormPlusRes,
    MatmulBtAlphaBeta,
    DequantFp8Channel,
    MatmulBtFp8Channel,
    MoeRouterTopk,
    MoeGatherRows,
    MoeWeightedScatterAdd,
    MoeZero,
    Rope,
    Softcap,
    Attention,
    Linear,
    Argmax,
}

impl Op {
    pub const ALL: [Op; 17] = [
        Op::GeluMul,
        Op::GeluAndMul,
        Op::RmsNorm,
        Op::RmsNormPlusAdd,
        Op::DualRmsNormPlusRes,
        Op::MatmulBtAlphaBeta,
        Op::DequantFp8Channel,
        Op::MatmulBtFp8Channel,
        Op::MoeRouterTopk,
        Op::MoeGatherRows,
        Op::MoeWeightedScatterAdd,
        Op::MoeZero,
        Op::Rope,
        Op::Softcap,
        Op::Attention,
        Op::Linear,
        Op::Argmax,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::GeluMul => "gelu_mul",
            Op::GeluAndMul => "gelu_and_mul",
            Op::RmsNorm => "rms_norm",
            Op::RmsNormPlusAdd => "rms_norm_plus_add",
            Op::DualRmsNormPlusRes => "dual_rms_norm_plus_res",
            Op::MatmulBtAlphaBeta => "matmul_bt_alpha_beta",
            Op::DequantFp8Channel => "dequant_fp8_channel",
            Op::MatmulBtFp8Channel => "matmul_bt_fp8_channel",
            Op::MoeRouterTopk => "moe_router_topk",
            Op::MoeGatherRows => "moe_gather_rows",
            Op::MoeWeightedScatterAdd => "moe_weighted_scatter_add",
            Op::MoeZero => "moe_zero",
            Op::Rope => "rope",
            Op::Softcap => "softcap",
            Op::Attention => "attention",
            Op::Linear => "linear",
            Op::Argmax => "argmax",
        }
    }

    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The native kernels written for this op. Adding a kernel means adding it here and a
    /// dispatch arm in the op's module; call sites never change.
    pub fn native_kernels(self) -> &'static [NativeKernel] {
        const FLOATS: &[DType] = &[DType::F32, DType::BF16, DType::F16];
        // The PTX targets compute_80 at the lowest (bf16 conversions).
        const CUDA: &[NativeKernel] = &[NativeKernel {
            backend: Backend::Cuda,
            dtypes: FLOATS,
            min_compute_capability: Some((8, 0)),
        }];
        const CUDA_F32: &[NativeKernel] = &[NativeKernel {
            backend: Backend::Cuda,
            dtypes: &[DType::F32],
            min_compute_capability: Some((8, 0)),
        }];
        match self {
            Op::GeluMul
            | Op::GeluAndMul
            | Op::RmsNorm
            | Op::RmsNormPlusAdd
            | Op::DualRmsNormPlusRes
            | Op::DequantFp8Channel
            | Op::MoeRouterTopk
            | Op::MoeGatherRows
            | Op::MoeWeightedScatterAdd
            | Op::Rope
            | Op::Softcap
            | Op::Attention
            | Op::Linear
            | Op::MatmulBtAlphaBeta
            | Op::MatmulBtFp8Channel => CUDA,
            Op::MoeZero | Op::Argmax => CUDA_F32,
        }
    }
}

/// A GPU backend for which native kernels can exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Cuda,
    Hip,
    Metal,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Cuda, Backend::Hip, Backend::Metal];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Hip => "hip",
            Backend::Metal => "metal",
        }
    }

    /// The cargo feature that compiles this backend's kernels into g4, if g4 has one.
    fn feature(self) -> Option<&'static str> {
        match self {
            Backend::Cuda => Some("cuda"),
            Backend::Metal => Some("metal"),
            // candle has no ROCm backend, so no build of g4 can launch a HIP kernel yet.
            Backend::Hip => None,
        }
    }

    fn built(self) -> bool {
        match self {
            Backend::Cuda => cfg!(feature = "cuda"),
            Backend::Metal => cfg!(feature = "metal"),
            Backend::Hip => false,
        }
    }

    fn drives(self, device: &Device) -> bool {
        matches!(
            (self, device),
            (Backend::Cuda, Device::Cuda(_)) | (Backend::Metal, Device::Metal(_))
        )
    }
}

/// One native kernel: which backend, which dtypes, and what the device must offer.
#[derive(Clone, Copy, Debug)]
pub struct NativeKernel {
    pub backend: Backend,
    pub dtypes: &'static [DType],
    /// Minimum CUDA compute capability (major, minor), e.g. FP8 tensor cores need (8, 9).
    pub min_compute_capability: Option<(u32, u32)>,
}

/// Which implementation of an op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    Native(Backend),
    Composed,
}

impl Arm {
    pub fn name(self) -> String {
        match self {
            Arm::Native(backend) => backend.name().to_string(),
            Arm::Composed => "composed".to_string(),
        }
    }
}

/// Why a native arm cannot run here. Distinct causes stay distinct: a user told to write a
/// kernel that already exists goes to fix the wrong thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// The kernel exists but this build lacks the cargo feature that compiles it.
    NotBuilt { feature: &'static str },
    /// No native implementation exists for this backend (or for this dtype on it).
    NoKernel { detail: String },
    /// The device is present but lacks a capability the kernel needs.
    DeviceUnsupported { need: String },
    /// No device of this backend is in use.
    NoDevice,
}

impl Unavailable {
    pub fn kind(&self) -> &'static str {
        match self {
            Unavailable::NotBuilt { .. } => "not-built",
            Unavailable::NoKernel { .. } => "no-kernel",
            Unavailable::DeviceUnsupported { .. } => "device-unsupported",
            Unavailable::NoDevice => "no-device",
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NotBuilt { feature } => write!(
                f,
                "not-built: the kernel exists but this build lacks it; rebuild with --features {feature}"
            ),
            Unavailable::NoKernel { detail } => write!(f, "no-kernel: {detail}"),
            Unavailable::DeviceUnsupported { need } => {
                write!(f, "device-unsupported: needs {need}")
            }
            Unavailable::NoDevice => write!(f, "no-device: the selected device is not of this backend"),
        }
    }
}

/// Whether the native arm of `op` for `backend` can run on `device` in `dtype`, and if not, why.
pub fn native_status(
    op: Op,
    backend: Backend,
    device: &Device,
    dtype: DType,
) -> Result<(), Unavailable> {
    // Runs on every op dispatch: iterate the static table, allocate nothing.
    let mut kernels = op
        .native_kernels()
        .iter()
        .filter(|k| k.backend == backend)
        .peekable();
    if kernels.peek().is_none() {
        let detail = match backend {
            Backend::Hip => "candle has no ROCm backend to launch a HIP kernel on".to_string(),
            _ => format!("no {} kernel is written for this op", backend.name()),
        };
        return Err(Unavailable::NoKernel { detail });
    }
    if !backend.built() {
        return Err(match backend.feature() {
            Some(feature) => Unavailable::NotBuilt { feature },
            None => Unavailable::NoKernel {
                detail: format!("g4 cannot build {} kernels", backend.name()),
            },
        });
    }
    if !backend.drives(device) {
        return Err(Unavailable::NoDevice);
    }
    let Some(kernel) = kernels.find(|k| k.dtypes.contains(&dtype)) else {
        return Err(Unavailable::NoKernel {
            detail: format!("the {} kernel has no {dtype:?} variant", backend.name()),
        });
    };
    if let Some((major, minor)) = kernel.min_compute_capability {
        let have = crate::device::compute_capability(device);
        if have.is_none_or(|cc| cc < (major, minor)) {
            return Err(Unavailable::DeviceUnsupported {
                need: format!("compute capability >= {major}.{minor}"),
            });
        }
    }
    Ok(())
}

/// The one predicate that decides which arm of `op` runs on `device` for `dtype`.
pub fn arm_for(op: Op, device: &Device, dtype: DType) -> Arm {
    Backend::ALL
        .into_iter()
        .find(|&backend| native_status(op, backend, device, dtype).is_ok())
        .map_or(Arm::Composed, Arm::Native)
}

/// Reached only if `arm_for` selected a native arm that the op's module does not dispatch —
/// a registry bug, reported as an error rather than a panic.
pub(crate) fn missing_dispatch(op: Op, backend: Backend) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "internal: {} lists a {} kernel but has no dispatch for it",
        op.name(),
        backend.name()
    ))
}
