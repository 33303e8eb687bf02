//! `moe_output`: the end of an MoE layer's feed-forward block (§2.7) —
//! `out = (r + rms_norm(rms_norm(dense; w1) + rms_norm(experts; w2); w3)) · s`, with the dense
//! MLP's output in the working dtype and the experts' f32 sum (`moe_experts`) cast to it first,
//! `s` the layer's scalar — and, where the next layer's input norm `w4` is given, its output
//! `rms_norm(out; w4)` too. One pass over the row per layer, where the composed ops take eight
//! launches (four norms, a cast, a sum, the residual add, the scalar).

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::dual_rms_norm_plus_res::scaled;
use super::native::{self, cpu};
use super::{arm_for, reference, rms_norm, rms_norm_plus_add, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::MoeOutput;

/// The post-norm weights of the dense branch, the experts' branch and the whole block; the
/// scale of the block's output (rounded to the working dtype, as a scalar multiply of a tensor
/// in it is); and the next layer's input norm, if its output is wanted too.
pub struct OutputNorms<'a> {
    pub dense: &'a Tensor,
    pub experts: &'a Tensor,
    pub block: &'a Tensor,
    pub output_scale: f64,
    pub next: Option<&'a Tensor>,
}

/// `residual`, `dense [.., H]` in the working dtype, `experts [.., H]` f32. Returns the block's
/// output and, with `norms.next`, the next layer's normed input.
pub fn moe_output(
    residual: &Tensor,
    dense: &Tensor,
    experts: &Tensor,
    norms: &OutputNorms,
    eps: f64,
) -> Result<(Tensor, Option<Tensor>)> {
    let arm = arm_for(OP, residual.device(), residual.dtype());
    moe_output_on(arm, residual, dense, experts, norms, eps)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_output_on(
    arm: Arm,
    residual: &Tensor,
    dense: &Tensor,
    experts: &Tensor,
    norms: &OutputNorms,
    eps: f64,
) -> Result<(Tensor, Option<Tensor>)> {
    match arm {
        Arm::Composed => composed(residual, dense, experts, norms, eps),
        Arm::Native(Backend::Cpu) => cpu_fwd(residual, dense, experts, norms, eps),
        Arm::Native(_) => native_fwd(residual, dense, experts, norms, eps),
    }
}

pub fn composed(
    residual: &Tensor,
    dense: &Tensor,
    experts: &Tensor,
    norms: &OutputNorms,
    eps: f64,
) -> Result<(Tensor, Option<Tensor>)> {
    let dense = rms_norm::composed(dense, Some(norms.dense), eps)?;
    let experts = experts.to_dtype(residual.dtype())?;
    let experts = rms_norm::composed(&experts, Some(norms.experts), eps)?;
    let out = rms_norm_plus_add::composed(residual, &(dense + experts)?, norms.block, eps)?;
    let out = scaled(out, norms.output_scale)?;
    let next = norms
        .next
        .map(|w| rms_norm::composed(&out, Some(w), eps))
        .transpose()?;
    Ok((out, next))
}

/// CPU arm (f32): the norms by the SIMD row kernel `rms_norm` uses.
fn cpu_fwd(
    residual: &Tensor,
    dense: &Tensor,
    experts: &Tensor,
    norms: &OutputNorms,
    eps: f64,
) -> Result<(Tensor, Option<Tensor>)> {
    let all_f32 = [
        residual,
        dense,
        experts,
        norms.dense,
        norms.experts,
        norms.block,
    ]
    .into_iter()
    .chain(norms.next)
    .all(|t| t.dtype() == DType::F32);
    let Some(simd) = cpu::simd().filter(|_| all_f32) else {
        return composed(residual, dense, experts, norms, eps);
    };
    let cols = residual.dim(D::Minus1)?;
    let eps = eps as f32;
    let norm = |x: &Tensor, w: &Tensor, add: Option<&[f32]>| {
        cpu::with_f32(x, |x| {
            cpu::with_f32(w, |w| cpu::rms_norm_f32(simd, x, cols, Some(w), add, eps))
        })
    };
    let mut summed = norm(dense, norms.dense, None)??;
    for (s, e) in summed.iter_mut().zip(norm(experts, norms.experts, None)??) {
        *s += e;
    }
    let summed = Tensor::from_vec(summed, residual.shape(), residual.device())?;
    let out = cpu::with_f32(residual, |r| norm(&summed, norms.block, Some(r)))???;
    let out = scaled(
        Tensor::from_vec(out, residual.shape(), residual.device())?,
        norms.output_scale,
    )?;
    let next = norms
        .next
        .map(|w| rms_norm::cpu_fwd(&out, Some(w), None, eps as f64))
        .transpose()?;
    Ok((out, next))
}

/// CUDA arm: one block per row, rounded to T wherever the composed arm stores an intermediate
/// (src/kernels/cuda/norms.cu); rows wider than a block holds take the composed arm.
fn native_fwd(
    residual: &Tensor,
    dense: &Tensor,
    experts: &Tensor,
    norms: &OutputNorms,
    eps: f64,
) -> Result<(Tensor, Option<Tensor>)> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let cols = residual.dim(D::Minus1)?;
    let Some(rows) = per_row(
        residual.elem_count() / cols,
        cols,
        warp_lanes(residual.device()),
    ) else {
        return composed(residual, dense, experts, norms, eps);
    };
    let dtype = residual.dtype();
    let (residual, dense) = (residual.contiguous()?, dense.contiguous()?);
    let experts = experts.to_dtype(DType::F32)?.contiguous()?;
    let weight = |w: &Tensor| w.to_dtype(dtype)?.contiguous();
    let (w1, w2, w3) = (
        weight(norms.dense)?,
        weight(norms.experts)?,
        weight(norms.block)?,
    );
    let w4 = norms.next.map(weight).transpose()?;
    let out = empty(residual.shape(), dtype, residual.device())?;
    let next = w4
        .as_ref()
        .map(|_| empty(residual.shape(), dtype, residual.device()))
        .transpose()?;
    let args = [
        Arg::Tensor(&residual),
        Arg::Tensor(&dense),
        Arg::Tensor(&experts),
        Arg::Tensor(&w1),
        Arg::Tensor(&w2),
        Arg::Tensor(&w3),
        Arg::OptionalTensor(w4.as_ref()),
        Arg::Tensor(&out),
        Arg::OptionalTensor(next.as_ref()),
        Arg::I32(cols as i32),
        Arg::F32(norms.output_scale as f32),
        Arg::F32(eps as f32),
    ];
    launch(
        &rows.kernel("moe_output", dtype)?,
        residual.device(),
        rows.grid,
        &args,
    )?;
    Ok((out, next))
}

/// Row-major `[rows, cols]` inputs; `w1`, `w2`, `w3` the dense, experts' and block norms, `s`
/// the output's scale and `w4` the next layer's input norm. Returns the output, then (with
/// `w4`) the next layer's input.
pub fn reference(
    residual: &[f64],
    dense: &[f64],
    experts: &[f64],
    cols: usize,
    ([w1, w2, w3], s, w4): ([&[f64]; 3], f64, Option<&[f64]>),
    eps: f64,
) -> Vec<f64> {
    let dense = reference::map_rows(dense, cols, |row| {
        reference::rms_norm_row(row, Some(w1), eps)
    });
    let experts = reference::map_rows(experts, cols, |row| {
        reference::rms_norm_row(row, Some(w2), eps)
    });
    let summed: Vec<f64> = dense.iter().zip(&experts).map(|(d, e)| d + e).collect();
    let normed = reference::map_rows(&summed, cols, |row| {
        reference::rms_norm_row(row, Some(w3), eps)
    });
    let out: Vec<f64> = residual
        .iter()
        .zip(normed)
        .map(|(r, n)| (r + n) * s)
        .collect();
    let next = w4.map(|w4| {
        reference::map_rows(&out, cols, |row| {
            reference::rms_norm_row(row, Some(w4), eps)
        })
    });
    out.into_iter().chain(next.into_iter().flatten()).collect()
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
            what: "the dense and experts' post-norms swapped",
            run: |c| {
                let norms = OutputNorms {
                    dense: c.float(4),
                    experts: c.float(3),
                    ..norms_of(c)
                };
                outputs(composed(c.float(0), c.float(1), c.float(2), &norms, c.eps)?)
            },
        },
        Mutant {
            what: "the residual left out",
            run: |c| {
                let norms = norms_of(c);
                let (out, next) = composed(c.float(0), c.float(1), c.float(2), &norms, c.eps)?;
                outputs(((out - c.float(0))?, next))
            },
        },
        Mutant {
            what: "the output's scale left out",
            run: |c| {
                let norms = OutputNorms {
                    output_scale: 1.0,
                    ..norms_of(c)
                };
                outputs(composed(c.float(0), c.float(1), c.float(2), &norms, c.eps)?)
            },
        },
    ],
};

/// A case's norms: inputs 3 to 5, the scale, and input 6 where the case has the next norm.
fn norms_of(c: &Case) -> OutputNorms<'_> {
    OutputNorms {
        dense: c.float(3),
        experts: c.float(4),
        block: c.float(5),
        output_scale: c.scale,
        next: (c.float_count() > 6).then(|| c.float(6)),
    }
}

/// The op's outputs in the order the reference lists them.
fn outputs((out, next): (Tensor, Option<Tensor>)) -> Result<Vec<Tensor>> {
    Ok(std::iter::once(out).chain(next).collect())
}

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Decode and prefill rows, an odd width, the widest row held in registers and one wider
    // (composed); last (the one `--perf` times) 26B-A4B's hidden size, one token. Inside a
    // model every layer but the last has the next layer's norm and a scale (0.375 is exact in
    // every dtype).
    for (rows, cols, scale, with_next) in [
        (1, 64, 1.0, false),
        (3, 257, 0.375, true),
        (2, 8192, 1.0, false),
        (2, 8192, 0.375, true),
        (1, 8200, 1.0, false),
        (1, 8200, 0.375, true),
        (7, 2816, 1.0, false),
        (7, 2816, 0.375, true),
        (1, 2816, 0.375, true),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let r = c.uniform(&[rows, cols], -5.0, 5.0)?;
        let dense = c.uniform(&[rows, cols], -3.0, 3.0)?;
        let experts = c.float_as(&[rows, cols], DType::F32, |r| {
            rand::Rng::random_range(r, -2.0..2.0)
        })?;
        let w: Vec<Vec<f64>> = (0..3)
            .map(|_| c.float(&[cols], norm_weight))
            .collect::<Result<_>>()?;
        let next = with_next
            .then(|| c.float(&[cols], norm_weight))
            .transpose()?;
        // The reference reads the experts' sum as the op does: cast to the working dtype.
        let experts = c.round(experts, dtype)?;
        let norms = ([&w[0][..], &w[1], &w[2]], scale, next.as_deref());
        let expected = reference(&r, &dense, &experts, cols, norms, 1e-6);
        let label = match (scale == 1.0, with_next) {
            (true, false) => format!("[{rows}, {cols}]"),
            (false, false) => format!("[{rows}, {cols}] scaled by {scale}"),
            (_, true) => format!("[{rows}, {cols}] scaled by {scale}, then the next norm"),
        };
        let mut case = c.finish(label, expected);
        case.scale = scale;
        cases.push(case);
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    outputs(moe_output_on(arm, f(0), f(1), f(2), &norms_of(c), c.eps)?)
}
