//! `rms_norm`: Gemma-4 RMSNorm — f32 internally, plain weight (not 1+w), optional weightless form.
//! The weight is applied in f32 before the cast back, as the reference does.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, reference, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::RmsNorm;

pub fn rms_norm(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    rms_norm_on(arm_for(OP, x.device(), x.dtype()), x, weight, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn rms_norm_on(arm: Arm, x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, weight, eps),
        Arm::Native(Backend::Cpu) => cpu_fwd(x, weight, None, eps),
        Arm::Native(_) => native_fwd(x, weight, eps),
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

/// CPU arm, shared with `rms_norm_plus_add`: one vectorised pass per row (`native/cpu.rs`), f32;
/// `residual` is added to the normed rows when given.
pub fn cpu_fwd(
    x: &Tensor,
    weight: Option<&Tensor>,
    residual: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let cols = x.dim(D::Minus1)?;
    let f32s = |t: Option<&Tensor>| t.is_none_or(|t| t.dtype() == DType::F32);
    let (Some(simd), DType::F32, true) = (
        cpu::simd(),
        x.dtype(),
        f32s(weight) && f32s(residual) && residual.is_none_or(|r| r.shape() == x.shape()),
    ) else {
        let normed = composed(x, weight, eps)?;
        return match residual {
            Some(r) => r + normed,
            None => Ok(normed),
        };
    };
    let out = cpu::with_f32(x, |x| {
        let with_weight = |w: Option<&[f32]>| match residual {
            Some(r) => cpu::with_f32(r, |r| {
                cpu::rms_norm_f32(simd, x, cols, w, Some(r), eps as f32)
            }),
            None => Ok(cpu::rms_norm_f32(simd, x, cols, w, None, eps as f32)),
        };
        match weight {
            Some(w) => cpu::with_f32(w, |w| with_weight(Some(w)))?,
            None => with_weight(None),
        }
    })??;
    Tensor::from_vec(out, x.shape(), x.device())
}

/// CUDA arm: one block per row, held in registers (src/kernels/cuda/norms.cu); rows wider than
/// a block holds take the composed arm.
fn native_fwd(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let cols = x.dim(D::Minus1)?;
    let Some(rows) = per_row(x.elem_count() / cols, cols, warp_lanes(x.device())) else {
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
        &rows.kernel("rms_norm", x.dtype())?,
        x.device(),
        rows.grid,
        &args,
    )?;
    Ok(out)
}

/// `x [rows, cols]` row-major; `weight [cols]` or none.
pub fn reference(x: &[f64], cols: usize, weight: Option<&[f64]>, eps: f64) -> Vec<f64> {
    reference::map_rows(x, cols, |row| reference::rms_norm_row(row, weight, eps))
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        .shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "epsilon 1e-2 instead of 1e-6",
            run: |c| {
                let weight = (c.float_count() > 1).then(|| c.float(1));
                Ok(vec![composed(c.float(0), weight, 1e-2)?])
            },
        },
        Mutant {
            what: "Gemma-3 style (1 + w) weight",
            run: |c| {
                if c.float_count() == 1 {
                    return Ok(vec![composed(c.float(0), None, c.eps)?]);
                }
                let w = (c.float(1).to_dtype(DType::F32)? + 1.0)?.to_dtype(c.float(1).dtype())?;
                Ok(vec![composed(c.float(0), Some(&w), c.eps)?])
            },
        },
    ],
};

/// Shapes the native arm hands to another path; the same for every norm that holds its rows in
/// registers (`native::per_row`), each of which has check cases named like these.
pub(super) const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "rows up to 8192 wide",
        path: "native: one block per row, the row held in registers (CUDA); one pass per row (CPU)",
        case: "[2, 8192]",
    },
    ShapePath {
        shapes: "rows wider than 8192",
        path: "composed on CUDA; the CPU arm takes them",
        case: "[1, 8200]",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (rows, cols, weighted) in [
        (1, 64, true),
        (3, 257, true),
        // The widest row the CUDA kernels hold in registers, and one past it.
        (2, 8192, true),
        (1, 8200, true),
        (5, 2560, true),
        (4, 33, false),
        // A prompt's worth of rows: the CPU arm's threaded path.
        (30, 2560, true),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
        let w = if weighted {
            Some(c.float(&[cols], norm_weight)?)
        } else {
            None
        };
        let label = format!(
            "[{rows}, {cols}]{}",
            if weighted { "" } else { " no weight" }
        );
        cases.push(c.finish(label, reference(&x, cols, w.as_deref(), 1e-6)));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    let weight = (c.float_count() > 1).then(|| f(1));
    Ok(vec![rms_norm_on(arm, f(0), weight, c.eps)?])
}
