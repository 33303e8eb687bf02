//! `linear_panels_fp8`: `Y = X · (W_e4m3 × scale[row])ᵀ` — `matmul_bt_fp8_channel` — with the
//! e4m3 weights packed at load into `linear_panels`' panels (`[⌈N/16⌉, K, 16]`) and the scales
//! padded alike. On a CPU an FP8 checkpoint then keeps its weights in one byte each: the panel
//! GEMM dequantises a panel row at a time in registers, exactly as a dequantisation at load would
//! (e4m3 value × scale, rounded to f32), so the results equal those of the dequantised weights.

use super::check::Case;
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, dequant_fp8_channel, linear, linear_panels, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::LinearPanelsFp8;
const PANEL: usize = linear_panels::PANEL;

/// e4m3 `weight [N, K]` and f32 `scale [N]` → their panels `[⌈N/16⌉, K, 16]` and the scales
/// `[⌈N/16⌉·16]`, zero past N.
pub fn pack(weight: &Tensor, scale: &Tensor) -> Result<(Tensor, Tensor)> {
    let n = weight.dim(0)?;
    let padding = n.div_ceil(PANEL) * PANEL - n;
    let scale = scale
        .to_dtype(DType::F32)?
        .flatten_all()?
        .pad_with_zeros(0, 0, padding)?;
    let panels = on_host(weight, linear_panels::pack)?;
    Ok((panels, scale))
}

/// `f` over `t`'s host copy, the result moved back to `t`'s device: candle 0.11.1's CUDA copy
/// kernels for e4m3 are looked up under names its kernel module does not have (probe-ops on the
/// H200 found it), so packing, and unpacking with the dequantisation, happen in host memory
/// there (one round trip). Only the probe packs on a GPU; a model packs panels for CPUs alone.
fn on_host(t: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    if t.device().is_cpu() {
        return f(t);
    }
    f(&t.to_device(&Device::Cpu)?)?.to_device(t.device())
}

/// `x [.., K]`, `pack`'s panels and scales of an `[n, K]` weight → `[.., n]`.
pub fn linear_panels_fp8(x: &Tensor, panels: &Tensor, scale: &Tensor, n: usize) -> Result<Tensor> {
    linear_panels_fp8_on(arm_for(OP, x.device(), x.dtype()), x, panels, scale, n)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn linear_panels_fp8_on(
    arm: Arm,
    x: &Tensor,
    panels: &Tensor,
    scale: &Tensor,
    n: usize,
) -> Result<Tensor> {
    match arm {
        Arm::Native(Backend::Cpu) => cpu_fwd(x, panels, scale, n),
        _ => composed(x, panels, scale, n),
    }
}

/// The panels unpacked and dequantised with candle's ops, then `linear`'s composed arm.
pub fn composed(x: &Tensor, panels: &Tensor, scale: &Tensor, n: usize) -> Result<Tensor> {
    let scale = scale.narrow(0, 0, n)?.to_device(&Device::Cpu)?;
    let dense = on_host(panels, |panels| {
        dequant_fp8_channel::composed(&linear_panels::unpack(panels, n)?, &scale, x.dtype())
    })?;
    linear::composed(x, &dense)
}

/// CPU arm: the panel GEMM of `native/cpu/panels.rs` over e4m3 panels, every row count.
fn cpu_fwd(x: &Tensor, panels: &Tensor, scale: &Tensor, n: usize) -> Result<Tensor> {
    let Some(linear_panels::CpuCall {
        simd,
        m,
        k,
        out_shape,
    }) = linear_panels::cpu_call(x, panels, n, DType::F8E4M3)?
    else {
        return composed(x, panels, scale, n);
    };
    let y = cpu::with_f32(x, |x| {
        cpu::with_f32(scale, |scale| {
            cpu::with_e4m3_bits(panels, |bits| {
                cpu::panels::matmul_panels_e4m3_f32(simd, x, bits, scale, m, n, k)
            })
        })
    })???;
    Tensor::from_vec(y, out_shape, x.device())
}

/// The op's contract (`contract.rs`): checked against `matmul_bt_fp8_channel::reference`.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate)
        .native(native::CPU_F32)
        .shape_paths(SHAPE_PATHS)
        .flops(gemm_flops),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the row scales ignored",
            run: |c| {
                let ones = c.float(1).ones_like()?;
                Ok(vec![super::matmul_bt_fp8_channel::composed(
                    c.float(0),
                    c.raw(0),
                    &ones,
                )?])
            },
        },
        Mutant {
            what: "the columns of a last, partial panel dropped",
            run: |c| {
                let n = c.raw(0).dim(0)?;
                let whole = n / PANEL * PANEL;
                let kept = super::matmul_bt_fp8_channel::composed(
                    c.float(0),
                    &c.raw(0).narrow(0, 0, whole)?,
                    &c.float(1).narrow(0, 0, whole)?,
                )?;
                Ok(vec![kept.pad_with_zeros(1, 0, n - whole)?])
            },
        },
    ],
};

/// Shapes the CPU arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[ShapePath {
    shapes: "any rows (decode and prefill) in f32",
    path: "native panel GEMM, each panel row dequantised in registers",
    case: "M24 N48 K96",
}];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // One decode row, a few, a partial last panel and a partial last tile of rows, a prefill
    // block, and last (the one `--perf` times) a prefill piece of a model's projection.
    let shapes = [
        (1, 37, 64),
        (3, 130, 264),
        (13, 19, 27),
        (24, 48, 96),
        (64, 2048, 512),
    ];
    super::matmul_bt_fp8_channel::fp8_matmul_cases(device, dtype, rng, &shapes)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let (panels, scale) = pack(c.raw(0), c.float(1))?;
    let n = c.raw(0).dim(0)?;
    Ok(vec![linear_panels_fp8_on(
        arm,
        c.float(0),
        &panels,
        &scale,
        n,
    )?])
}
