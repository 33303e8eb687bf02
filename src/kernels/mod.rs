//! The fused-op registry.
//!
//! Every op Gemma-4 needs lives in its own module with all of its arms side by side — an f64
//! reference (the semantics, written for clarity), a composed arm built from candle primitives
//! (runs wherever candle runs), and a native arm behind the [`native`] seam — and its whole
//! contract ([`contract::OpContract`]: dtypes, tolerance, check cases, mutants, shape paths).
//! One predicate, [`arm_for`], decides which arm runs; the model's dispatch and `g4 probe-ops`
//! both call it, so the report cannot disagree with what runs.
//!
//! Adding an op: write its module (arms + `pub const CONTRACT: OpContract`), its kernel source
//! under `cuda/`, its `pub mod` line and one line in the `fused_ops!` table below. The compiler
//! rejects a module without a complete contract (and a module that names an `Op` not in the
//! table); `Op::ALL` is generated from the table.

pub mod check;
pub mod contract;
pub mod native;
pub mod probe;
pub mod reference;

// The op modules (declared here, outside the macro below, so that rustfmt reaches them).
pub mod argmax;
pub mod attention;
pub mod dequant_fp8_channel;
pub mod dual_rms_norm_plus_res;
pub mod dual_rms_norm_plus_res_e4m3;
pub mod dual_rms_norm_plus_res_f16;
pub mod gelu_and_mul;
pub mod gelu_mul;
pub mod linear;
pub mod linear_gelu_mul;
pub mod linear_panels;
pub mod linear_panels_fp8;
pub mod matmul_bt_alpha_beta;
pub mod matmul_bt_fp8_channel;
pub mod matmul_bt_fp8_channel_f16_rows;
pub mod matmul_bt_fp8_dynamic;
pub mod moe_combine;
pub mod moe_experts;
pub mod moe_experts_fp8;
pub mod moe_experts_fp8_dynamic;
pub mod moe_gather_rows;
pub mod moe_inputs;
pub mod moe_mlps;
pub mod moe_output;
pub mod moe_router_topk;
pub mod qkv_norm_rope;
pub mod rms_norm;
pub mod rms_norm_plus_add;
pub mod rope;
pub mod round_rows_e4m3;
pub mod softcap;
pub mod tma_gemm;

pub use native::{Arm, Backend, NativeKernel, Unavailable};

use candle_core::{DType, Device};
use contract::OpContract;

/// Registers the fused ops: `Variant => module` per op. Generates the `Op` enum, `Op::ALL`,
/// each op's name (its module's name) and its contract.
macro_rules! fused_ops {
    ($($variant:ident => $module:ident),+ $(,)?) => {
        /// A fused operator of the Gemma-4 forward pass (ARCHITECTURE.md, "The fused ops").
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Op {
            $($variant),+
        }

        impl Op {
            pub const ALL: [Op; [$(stringify!($variant)),+].len()] = [$(Op::$variant),+];

            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$variant => stringify!($module)),+
                }
            }

            /// Everything the op declares about itself (`contract.rs`).
            pub fn contract(self) -> &'static OpContract {
                match self {
                    $(Op::$variant => &$module::CONTRACT),+
                }
            }
        }
    };
}

fused_ops! {
    GeluMul => gelu_mul,
    GeluAndMul => gelu_and_mul,
    RmsNorm => rms_norm,
    RmsNormPlusAdd => rms_norm_plus_add,
    DualRmsNormPlusRes => dual_rms_norm_plus_res,
    DualRmsNormPlusResE4m3 => dual_rms_norm_plus_res_e4m3,
    DualRmsNormPlusResF16 => dual_rms_norm_plus_res_f16,
    MatmulBtAlphaBeta => matmul_bt_alpha_beta,
    DequantFp8Channel => dequant_fp8_channel,
    MatmulBtFp8Channel => matmul_bt_fp8_channel,
    MatmulBtFp8ChannelF16Rows => matmul_bt_fp8_channel_f16_rows,
    MatmulBtFp8Dynamic => matmul_bt_fp8_dynamic,
    RoundRowsE4m3 => round_rows_e4m3,
    MoeRouterTopk => moe_router_topk,
    MoeGatherRows => moe_gather_rows,
    MoeCombine => moe_combine,
    MoeExperts => moe_experts,
    MoeExpertsFp8 => moe_experts_fp8,
    MoeExpertsFp8Dynamic => moe_experts_fp8_dynamic,
    MoeInputs => moe_inputs,
    MoeMlps => moe_mlps,
    MoeOutput => moe_output,
    Rope => rope,
    QkvNormRope => qkv_norm_rope,
    Softcap => softcap,
    Attention => attention,
    Linear => linear,
    LinearGeluMul => linear_gelu_mul,
    LinearPanels => linear_panels,
    LinearPanelsFp8 => linear_panels_fp8,
    Argmax => argmax,
}

impl Op {
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The native kernels written for this op.
    pub fn native_kernels(self) -> &'static [NativeKernel] {
        self.contract().spec.native_kernels
    }
}

/// The one predicate that decides which arm of `op` runs on `device` for `dtype`. It runs on
/// every op call and allocates nothing.
pub fn arm_for(op: Op, device: &Device, dtype: DType) -> Arm {
    if forced_composed().is_ok_and(|ops| ops.contains(&op)) {
        return Arm::Composed;
    }
    native::select(op.native_kernels(), device, dtype).map_or(Arm::Composed, Arm::Native)
}

/// The ops `G4_COMPOSED` puts on their composed arm (op names separated by commas, or `all`):
/// a user whose result differs between devices finds which native arm changes it. Read once;
/// an unknown name is an error every command reports at start.
pub fn forced_composed() -> std::result::Result<&'static [Op], &'static str> {
    static FORCED: std::sync::OnceLock<std::result::Result<Vec<Op>, String>> =
        std::sync::OnceLock::new();
    let parsed = FORCED.get_or_init(|| {
        let Ok(value) = std::env::var("G4_COMPOSED") else {
            return Ok(Vec::new());
        };
        if value.trim() == "all" {
            return Ok(Op::ALL.to_vec());
        }
        value
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                Op::from_name(name).ok_or_else(|| {
                    let known: Vec<&str> = Op::ALL.iter().map(|op| op.name()).collect();
                    format!(
                        "G4_COMPOSED: unknown op '{name}' (expected `all` or op names among {})",
                        known.join(", ")
                    )
                })
            })
            .collect()
    });
    parsed.as_deref().map_err(String::as_str)
}

/// Whether `backend`'s native arm of `op` can run on `device` in `dtype`, and if not, why.
pub fn native_status(
    op: Op,
    backend: Backend,
    device: &Device,
    dtype: DType,
) -> Result<(), Unavailable> {
    native::native_status(op.native_kernels(), backend, device, dtype)
}

/// The value of `#define NAME <number>` in a kernel source: tests compare the host's copy of a
/// kernel's launch geometry with the source's own.
#[cfg(test)]
pub(crate) fn source_define(source: &str, name: &str) -> u32 {
    source
        .lines()
        .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("the kernel source defines {name}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is a number"))
}
