//! `moe_inputs`: an MoE layer's two inputs from its post-attention residual `r [.., H]` (§2.7):
//! the router's, `rms_norm(r) × router_scale × H^−½`, and the experts', `rms_norm(r; w)`. One
//! pass over the row instead of four launches (two norms, a product, a scale) per layer.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, reference, rms_norm, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::MoeInputs;

/// Returns `(router input, experts' input)`, both shaped like `residual`.
pub fn moe_inputs(
    residual: &Tensor,
    router_scale: &Tensor,
    experts_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let arm = arm_for(OP, residual.device(), residual.dtype());
    moe_inputs_on(arm, residual, router_scale, experts_norm, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_inputs_on(
    arm: Arm,
    residual: &Tensor,
    router_scale: &Tensor,
    experts_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    match arm {
        Arm::Composed => composed(residual, router_scale, experts_norm, eps),
        Arm::Native(Backend::Cpu) => cpu_fwd(residual, router_scale, experts_norm, eps),
        Arm::Native(_) => native_fwd(residual, router_scale, experts_norm, eps),
    }
}

/// The router's constant factor, `H^−½`.
fn router_factor(hidden: usize) -> f64 {
    (hidden as f64).powf(-0.5)
}

pub fn composed(
    residual: &Tensor,
    router_scale: &Tensor,
    experts_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let hidden = residual.dim(D::Minus1)?;
    let router = rms_norm::composed(residual, None, eps)?
        .broadcast_mul(router_scale)?
        .affine(router_factor(hidden), 0.0)?;
    let experts = rms_norm::composed(residual, Some(experts_norm), eps)?;
    Ok((router, experts))
}

/// CPU arm (f32): both norms by the SIMD row kernel `rms_norm` uses, the router's products in
/// the composed arm's order.
fn cpu_fwd(
    residual: &Tensor,
    router_scale: &Tensor,
    experts_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let all_f32 = [residual, router_scale, experts_norm]
        .iter()
        .all(|t| t.dtype() == DType::F32);
    let Some(simd) = cpu::simd().filter(|_| all_f32) else {
        return composed(residual, router_scale, experts_norm, eps);
    };
    let cols = residual.dim(D::Minus1)?;
    let factor = router_factor(cols) as f32;
    let (router, experts) = cpu::with_f32(residual, |r| {
        cpu::with_f32(router_scale, |scale| {
            cpu::with_f32(experts_norm, |w| {
                let mut router = cpu::rms_norm_f32(simd, r, cols, None, None, eps as f32);
                for (i, v) in router.iter_mut().enumerate() {
                    *v = *v * scale[i % cols] * factor;
                }
                (
                    router,
                    cpu::rms_norm_f32(simd, r, cols, Some(w), None, eps as f32),
                )
            })
        })
    })???;
    Ok((
        Tensor::from_vec(router, residual.shape(), residual.device())?,
        Tensor::from_vec(experts, residual.shape(), residual.device())?,
    ))
}

/// CUDA arm: one block per row, rounded to T wherever the composed arm stores an intermediate
/// (src/kernels/cuda/norms.cu); rows wider than a block holds take the composed arm.
fn native_fwd(
    residual: &Tensor,
    router_scale: &Tensor,
    experts_norm: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let cols = residual.dim(D::Minus1)?;
    let Some(rows) = per_row(
        residual.elem_count() / cols,
        cols,
        warp_lanes(residual.device()),
    ) else {
        return composed(residual, router_scale, experts_norm, eps);
    };
    let dtype = residual.dtype();
    let residual = residual.contiguous()?;
    let router_scale = router_scale.to_dtype(dtype)?.contiguous()?;
    let experts_norm = experts_norm.to_dtype(dtype)?.contiguous()?;
    let router = empty(residual.shape(), dtype, residual.device())?;
    let experts = empty(residual.shape(), dtype, residual.device())?;
    let args = [
        Arg::Tensor(&residual),
        Arg::Tensor(&router_scale),
        Arg::Tensor(&experts_norm),
        Arg::Tensor(&router),
        Arg::Tensor(&experts),
        Arg::I32(cols as i32),
        Arg::F32(router_factor(cols) as f32),
        Arg::F32(eps as f32),
    ];
    launch(
        &rows.kernel("moe_inputs", dtype)?,
        residual.device(),
        rows.grid,
        &args,
    )?;
    Ok((router, experts))
}

/// `residual [rows, cols]` row-major: the router's inputs, then the experts'.
pub fn reference(
    residual: &[f64],
    cols: usize,
    router_scale: &[f64],
    experts_norm: &[f64],
    eps: f64,
) -> Vec<f64> {
    let factor = router_factor(cols);
    let router = reference::map_rows(residual, cols, |row| {
        reference::rms_norm_row(row, None, eps)
            .iter()
            .zip(router_scale)
            .map(|(v, s)| v * s * factor)
            .collect()
    });
    let experts = reference::map_rows(residual, cols, |row| {
        reference::rms_norm_row(row, Some(experts_norm), eps)
    });
    router.into_iter().chain(experts).collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        // Its native arms hand rows to the composed arm where `rms_norm`'s do.
        .shape_paths(rms_norm::SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the router scale and the experts' norm weight swapped",
            run: |c| {
                let (r, e) = composed(c.float(0), c.float(2), c.float(1), c.eps)?;
                Ok(vec![r, e])
            },
        },
        Mutant {
            what: "the router's H^-1/2 left out",
            run: |c| {
                let (r, e) = composed(c.float(0), c.float(1), c.float(2), c.eps)?;
                let hidden = c.float(0).dim(D::Minus1)?;
                Ok(vec![r.affine(1.0 / router_factor(hidden), 0.0)?, e])
            },
        },
    ],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Decode and prefill rows, an odd width, the widest row held in registers and one wider
    // (composed); last (the one `--perf` times) 26B-A4B's hidden size, one token.
    for (rows, cols) in [
        (1, 64),
        (3, 257),
        (2, 8192),
        (1, 8200),
        (7, 2816),
        (1, 2816),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let r = c.uniform(&[rows, cols], -3.0, 3.0)?;
        let scale = c.float(&[cols], norm_weight)?;
        let w = c.float(&[cols], norm_weight)?;
        let expected = reference(&r, cols, &scale, &w, 1e-6);
        cases.push(c.finish(format!("[{rows}, {cols}]"), expected));
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    let (router, experts) = moe_inputs_on(arm, f(0), f(1), f(2), c.eps)?;
    Ok(vec![router, experts])
}
