//! `linear_panels`: `Y = X·Wᵀ` with W packed once at load into panels of 16 output columns,
//! `[⌈N/16⌉, K, 16]` (the layout `pack` writes). On a CPU a general GEMM packs both operands on
//! every call; a prefill's projections then spent as long packing as multiplying. With the
//! weights already in the layout the multiply reads, the CPU arm keeps a tile of Y in registers
//! and streams each panel once per tile of X rows — decode's one row included, so the model
//! keeps only the packed copy.

use super::check::Case;
use super::contract::{gemm_flops, Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, linear, reference, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::LinearPanels;

/// Output columns per panel.
pub const PANEL: usize = cpu::panels::PANEL;

/// W `[N, K]` → its panels `[⌈N/16⌉, K, 16]`, the columns past N zero.
pub fn pack(w: &Tensor) -> Result<Tensor> {
    let (n, k) = w.dims2()?;
    let count = n.div_ceil(PANEL);
    w.pad_with_zeros(0, 0, count * PANEL - n)?
        .reshape((count, PANEL, k))?
        .transpose(1, 2)?
        .contiguous()
}

/// `x [.., K]`, `panels` of an `[n, K]` weight → `[.., n]`.
pub fn linear_panels(x: &Tensor, panels: &Tensor, n: usize) -> Result<Tensor> {
    linear_panels_on(arm_for(OP, x.device(), x.dtype()), x, panels, n)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn linear_panels_on(arm: Arm, x: &Tensor, panels: &Tensor, n: usize) -> Result<Tensor> {
    match arm {
        Arm::Native(Backend::Cpu) => cpu_fwd(x, panels, n),
        _ => composed(x, panels, n),
    }
}

/// The panels unpacked back to W with candle's ops, then `linear`'s composed arm.
pub fn composed(x: &Tensor, panels: &Tensor, n: usize) -> Result<Tensor> {
    linear::composed(x, &unpack(panels, n)?)
}

/// Panels back to the `[n, K]` weight they were packed from.
pub(super) fn unpack(panels: &Tensor, n: usize) -> Result<Tensor> {
    let (count, k, _) = panels.dims3()?;
    panels
        .transpose(1, 2)?
        .reshape((count * PANEL, k))?
        .narrow(0, 0, n)
}

/// A call a CPU panel arm takes: the instruction set, X's rows `m` of `k`, and the output shape
/// `[.., n]`.
pub(super) struct CpuCall {
    pub simd: cpu::Simd,
    pub m: usize,
    pub k: usize,
    pub out_shape: Vec<usize>,
}

/// The CPU arms' terms: f32 X on a CPU with SIMD, panels of `panel_dtype` whose K is X's and
/// whose count fits `n`; `None` otherwise (the composed arm runs).
pub(super) fn cpu_call(
    x: &Tensor,
    panels: &Tensor,
    n: usize,
    panel_dtype: DType,
) -> Result<Option<CpuCall>> {
    let (count, k, _) = panels.dims3()?;
    let dims = x.dims();
    let (Some(simd), DType::F32, true, true, true) = (
        cpu::simd(),
        x.dtype(),
        panels.dtype() == panel_dtype,
        dims.last() == Some(&k),
        count == n.div_ceil(PANEL) && x.device().is_cpu(),
    ) else {
        return Ok(None);
    };
    let mut out_shape = dims[..dims.len() - 1].to_vec();
    out_shape.push(n);
    Ok(Some(CpuCall {
        simd,
        m: x.elem_count() / k.max(1),
        k,
        out_shape,
    }))
}

/// CPU arm: the panel GEMM of `native/cpu/panels.rs`, every row count.
fn cpu_fwd(x: &Tensor, panels: &Tensor, n: usize) -> Result<Tensor> {
    let Some(CpuCall {
        simd,
        m,
        k,
        out_shape,
    }) = cpu_call(x, panels, n, DType::F32)?
    else {
        return composed(x, panels, n);
    };
    let y = cpu::with_f32(x, |x| {
        cpu::with_f32(panels, |p| {
            cpu::panels::matmul_panels_f32(simd, x, p, m, n, k)
        })
    })??;
    Tensor::from_vec(y, out_shape, x.device())
}

pub fn reference(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    reference::matmul_bt(x, w, m, n, k)
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce)
        .native(native::CPU_F32)
        .shape_paths(SHAPE_PATHS)
        .flops(gemm_flops),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the last element of K dropped (a tail bug)",
            run: |c| {
                let k = c.float(0).dim(1)?;
                Ok(vec![linear::composed(
                    &c.float(0).narrow(1, 0, k - 1)?,
                    &c.float(1).narrow(1, 0, k - 1)?,
                )?])
            },
        },
        Mutant {
            what: "the columns of a last, partial panel dropped",
            run: |c| {
                let n = c.float(1).dim(0)?;
                let whole = n / PANEL * PANEL;
                let kept = linear::composed(c.float(0), &c.float(1).narrow(0, 0, whole)?)?;
                Ok(vec![kept.pad_with_zeros(1, 0, n - whole)?])
            },
        },
    ],
};

/// Shapes the CPU arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[ShapePath {
    shapes: "any rows (decode and prefill) in f32",
    path: "native panel GEMM: tiles of 8 X rows (AVX-512; 4 AVX2, 6 NEON) against each panel",
    case: "M24 N48 K96",
}];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // One decode row, a few, a partial last panel and a partial last tile of rows, a prefill
    // block, and last (the one `--perf` times) a prefill piece of a model's projection.
    let shapes = [
        (1, 37, 64),
        (3, 130, 264),
        (8, 64, 512),
        (13, 19, 27),
        (24, 48, 96),
        (64, 2048, 512),
    ];
    linear::matmul_cases(device, dtype, rng, &shapes)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let w = c.float(1);
    Ok(vec![linear_panels_on(
        arm,
        c.float(0),
        &pack(w)?,
        w.dim(0)?,
    )?])
}
