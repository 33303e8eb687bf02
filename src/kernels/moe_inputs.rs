//! `moe_inputs`: an MoE layer's inputs from its attention output `x` (§2.7) — first
//! `dual_rms_norm_plus_res`'s `residual' = (residual + rms_norm(x; w1)) · s` and the shared
//! MLP's input `rms_norm(residual'; w2)`, then from `residual'` the router's input,
//! `rms_norm(residual') × router_scale × H^−½`, and the experts', `rms_norm(residual'; w)`. One
//! pass over the row instead of two launches (26B-A4B decode: one fewer a layer), where the
//! norms of `residual'` share one reduction.

use super::check::{norm_weight, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::dual_rms_norm_plus_res::{self, DualNorms};
use super::native::{self, cpu};
use super::{arm_for, reference, rms_norm, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::MoeInputs;

/// The router's and the experts' own weights: the router's input scale and the experts'
/// pre-norm.
#[derive(Clone, Copy)]
pub struct RouterNorms<'a> {
    pub router_scale: &'a Tensor,
    pub experts_norm: &'a Tensor,
}

/// What `moe_inputs` returns, each shaped like `residual`.
pub struct MoeInputs {
    /// `residual'`, the layer's residual after attention.
    pub residual: Tensor,
    /// The shared (dense) MLP's input.
    pub shared: Tensor,
    pub router: Tensor,
    pub experts: Tensor,
}

/// The layer's residual before attention, attention's output `x`, the dual norm's weights and
/// the router's → `MoeInputs`.
pub fn moe_inputs(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    router: RouterNorms,
    eps: f64,
) -> Result<MoeInputs> {
    let arm = arm_for(OP, x.device(), x.dtype());
    moe_inputs_on(arm, residual, x, norms, router, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_inputs_on(
    arm: Arm,
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    router: RouterNorms,
    eps: f64,
) -> Result<MoeInputs> {
    match arm {
        Arm::Composed => composed(residual, x, norms, router, eps),
        Arm::Native(Backend::Cpu) => cpu_fwd(residual, x, norms, router, eps),
        Arm::Native(_) => native_fwd(residual, x, norms, router, eps),
    }
}

/// The router's constant factor, `H^−½`.
fn router_factor(hidden: usize) -> f64 {
    (hidden as f64).powf(-0.5)
}

pub fn composed(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    router: RouterNorms,
    eps: f64,
) -> Result<MoeInputs> {
    let (residual, shared) = dual_rms_norm_plus_res::composed(residual, x, norms, eps)?;
    let (router_input, experts) = composed_router_inputs(&residual, router, eps)?;
    Ok(MoeInputs {
        residual,
        shared,
        router: router_input,
        experts,
    })
}

/// The router's and the experts' inputs from `residual`, by the ops apart.
fn composed_router_inputs(
    residual: &Tensor,
    router: RouterNorms,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let hidden = residual.dim(D::Minus1)?;
    let router_input = rms_norm::composed(residual, None, eps)?
        .broadcast_mul(router.router_scale)?
        .affine(router_factor(hidden), 0.0)?;
    let experts = rms_norm::composed(residual, Some(router.experts_norm), eps)?;
    Ok((router_input, experts))
}

/// CPU arm (f32): `dual_rms_norm_plus_res`' CPU arm, then the router's and experts' norms by
/// the SIMD row kernel `rms_norm` uses, the router's products in the composed arm's order.
fn cpu_fwd(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    router: RouterNorms,
    eps: f64,
) -> Result<MoeInputs> {
    let all_f32 = [residual, x, router.router_scale, router.experts_norm]
        .iter()
        .all(|t| t.dtype() == DType::F32);
    let Some(simd) = cpu::simd().filter(|_| all_f32) else {
        return composed(residual, x, norms, router, eps);
    };
    let cpu_arm = Arm::Native(Backend::Cpu);
    let (residual, shared) =
        dual_rms_norm_plus_res::dual_rms_norm_plus_res_on(cpu_arm, residual, x, norms, eps)?;
    let cols = residual.dim(D::Minus1)?;
    let factor = router_factor(cols) as f32;
    let (router_input, experts) = cpu::with_f32(&residual, |r| {
        cpu::with_f32(router.router_scale, |scale| {
            cpu::with_f32(router.experts_norm, |w| {
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
    let (shape, device) = (residual.shape().clone(), residual.device().clone());
    Ok(MoeInputs {
        residual,
        shared,
        router: Tensor::from_vec(router_input, &shape, &device)?,
        experts: Tensor::from_vec(experts, &shape, &device)?,
    })
}

/// CUDA arm: one block per row, rounded to T wherever the composed arm stores an intermediate
/// (src/kernels/cuda/norms.cu); rows wider than a block holds take the composed arm.
fn native_fwd(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    router: RouterNorms,
    eps: f64,
) -> Result<MoeInputs> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let cols = x.dim(D::Minus1)?;
    let Some(rows) = per_row(x.elem_count() / cols, cols, warp_lanes(x.device())) else {
        return composed(residual, x, norms, router, eps);
    };
    let (dtype, device) = (x.dtype(), x.device());
    let (residual, x) = (residual.contiguous()?, x.contiguous()?);
    let weight = |w: &Tensor| w.to_dtype(dtype)?.contiguous();
    let weights = [
        weight(norms.post_norm)?,
        weight(norms.next_pre_norm)?,
        weight(router.router_scale)?,
        weight(router.experts_norm)?,
    ];
    let output = || empty(x.shape(), dtype, device);
    let outputs = MoeInputs {
        residual: output()?,
        shared: output()?,
        router: output()?,
        experts: output()?,
    };
    let mut args = vec![Arg::Tensor(&residual), Arg::Tensor(&x)];
    args.extend(weights.iter().map(Arg::Tensor));
    args.extend([
        Arg::Tensor(&outputs.residual),
        Arg::Tensor(&outputs.shared),
        Arg::Tensor(&outputs.router),
        Arg::Tensor(&outputs.experts),
        Arg::I32(cols as i32),
        Arg::F32(norms.residual_scale as f32),
        Arg::F32(router_factor(cols) as f32),
        Arg::F32(eps as f32),
    ]);
    launch(&rows.kernel("moe_inputs", dtype)?, device, rows.grid, &args)?;
    Ok(outputs)
}

/// Row-major `[rows, cols]` `residual` and `x`: `residual'`, the shared MLP's input, the
/// router's input, then the experts'.
pub fn reference(
    residual: &[f64],
    x: &[f64],
    cols: usize,
    dual_norms: (&[f64], f64, &[f64]),
    (router_scale, experts_norm): (&[f64], &[f64]),
    eps: f64,
) -> Vec<f64> {
    let mut out = dual_rms_norm_plus_res::reference(residual, x, cols, dual_norms, eps);
    let residual = out[..residual.len()].to_vec();
    let factor = router_factor(cols);
    out.extend(reference::map_rows(&residual, cols, |row| {
        reference::rms_norm_row(row, None, eps)
            .iter()
            .zip(router_scale)
            .map(|(v, s)| v * s * factor)
            .collect()
    }));
    out.extend(reference::map_rows(&residual, cols, |row| {
        reference::rms_norm_row(row, Some(experts_norm), eps)
    }));
    out
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
                let router = RouterNorms {
                    router_scale: c.float(5),
                    experts_norm: c.float(4),
                };
                outputs(composed(
                    c.float(0),
                    c.float(1),
                    dual_norms(c),
                    router,
                    c.eps,
                )?)
            },
        },
        Mutant {
            what: "the router's H^-1/2 left out",
            run: |c| {
                let mut inputs = composed_of(c)?;
                let hidden = c.float(0).dim(D::Minus1)?;
                inputs.router = inputs.router.affine(1.0 / router_factor(hidden), 0.0)?;
                outputs(inputs)
            },
        },
        Mutant {
            what: "the router's and experts' inputs taken of the residual before attention",
            run: |c| {
                let mut inputs = composed_of(c)?;
                (inputs.router, inputs.experts) =
                    composed_router_inputs(c.float(0), router_norms(c), c.eps)?;
                outputs(inputs)
            },
        },
    ],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    // Decode and prefill rows, an odd width, the widest row held in registers and one wider
    // (composed), a residual scale other than 1 (0.375 is exact in every dtype); last (the one
    // `--perf` times) 26B-A4B's hidden size, one token.
    let shapes = [
        (1, 64, 1.0),
        (3, 257, 1.0),
        (2, 8192, 1.0),
        (1, 8200, 1.0),
        (2, 300, 0.375),
        (7, 2816, 1.0),
        (1, 2816, 1.0),
    ];
    dual_rms_norm_plus_res::dual_cases(device, dtype, rng, &shapes, |c, r, x, cols, norms| {
        let router_scale = c.float(&[cols], norm_weight)?;
        let experts_norm = c.float(&[cols], norm_weight)?;
        let router = (router_scale.as_slice(), experts_norm.as_slice());
        Ok(reference(r, x, cols, norms, router, 1e-6))
    })
}

/// The composed arm on a case: the mutants' starting point.
fn composed_of(c: &Case) -> Result<MoeInputs> {
    composed(
        c.float(0),
        c.float(1),
        dual_norms(c),
        router_norms(c),
        c.eps,
    )
}

/// A case's inputs: `residual`, `x`, `w1`, `w2`, the router scale, the experts' norm.
fn dual_norms(c: &Case) -> DualNorms<'_> {
    DualNorms {
        post_norm: c.float(2),
        residual_scale: c.scale,
        next_pre_norm: c.float(3),
    }
}

fn router_norms(c: &Case) -> RouterNorms<'_> {
    RouterNorms {
        router_scale: c.float(4),
        experts_norm: c.float(5),
    }
}

fn outputs(inputs: MoeInputs) -> Result<Vec<Tensor>> {
    Ok(vec![
        inputs.residual,
        inputs.shared,
        inputs.router,
        inputs.experts,
    ])
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    outputs(moe_inputs_on(
        arm,
        f(0),
        f(1),
        dual_norms(c),
        router_norms(c),
        c.eps,
    )?)
}
