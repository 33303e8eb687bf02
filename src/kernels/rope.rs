//! `rope`: rotate-half (NeoX) RoPE over the whole head, `x [B, S, heads, D]` with
//! `cos, sin [S, D/2]`. Proportional RoPE is the same op fed zero-padded frequencies
//! (cos 1, sin 0 on the pass-through pairs).

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::Rope;

pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    rope_on(arm_for(OP, x.device(), x.dtype()), x, cos, sin)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn rope_on(arm: Arm, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, cos, sin),
        Arm::Native(_) => native_fwd(x, cos, sin),
    }
}

/// Mirrors the reference's `x·cos + rotate_half(x)·sin` with full-width tables, so the
/// rounding order in bf16 is the reference's too.
pub fn composed(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (_, seq, _, head_dim) = x.dims4()?;
    let half = head_dim / 2;
    let widen = |t: &Tensor| -> Result<Tensor> {
        Tensor::cat(&[t, t], D::Minus1)?
            .to_dtype(x.dtype())?
            .reshape((1, seq, 1, head_dim))
    };
    let (cos, sin) = (widen(cos)?, widen(sin)?);
    let first = x.narrow(D::Minus1, 0, half)?;
    let second = x.narrow(D::Minus1, half, half)?;
    let rotated = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
    x.broadcast_mul(&cos)? + rotated.broadcast_mul(&sin)?
}

/// CUDA arm: one thread per rotated pair (src/kernels/cuda/rope.cu).
fn native_fwd(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    use super::native::{elementwise, empty, kernel_name, launch, Arg};
    let x = x.contiguous()?;
    let (batch, seq, heads, head_dim) = x.dims4()?;
    let cos = cos.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let sin = sin.to_dtype(candle_core::DType::F32)?.contiguous()?;
    if cos.dims() != [seq, head_dim / 2] || sin.dims() != [seq, head_dim / 2] {
        candle_core::bail!(
            "rope: cos/sin {:?} do not fit x {:?}",
            cos.shape(),
            x.shape()
        );
    }
    let out = empty(x.shape(), x.dtype(), x.device())?;
    let rows = batch * seq * heads;
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&cos),
        Arg::Tensor(&sin),
        Arg::Tensor(&out),
        Arg::Usize(rows),
        Arg::I32(seq as i32),
        Arg::I32(heads as i32),
        Arg::I32(head_dim as i32),
    ];
    launch(
        &kernel_name("rope", x.dtype())?,
        x.device(),
        elementwise(rows * head_dim / 2),
        &args,
    )?;
    Ok(out)
}

/// `x [seq, heads, d]` row-major, `cos, sin [seq, d/2]`.
pub fn reference(
    x: &[f64],
    seq: usize,
    heads: usize,
    d: usize,
    cos: &[f64],
    sin: &[f64],
) -> Vec<f64> {
    let half = d / 2;
    let mut out = vec![0.0; x.len()];
    for s in 0..seq {
        for h in 0..heads {
            let base = (s * heads + h) * d;
            for j in 0..half {
                let (c, sn) = (cos[s * half + j], sin[s * half + j]);
                let (a, b) = (x[base + j], x[base + j + half]);
                out[base + j] = a * c - b * sn;
                out[base + j + half] = b * c + a * sn;
            }
        }
    }
    out
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate),
    cases,
    run,
    mutants: &[Mutant {
        what: "the rotation reversed (sin negated)",
        run: |c| Ok(vec![composed(c.float(0), c.float(1), &c.float(2).neg()?)?]),
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (seq, heads, d, proportional) in [
        (3, 4, 16, false),
        (7, 2, 256, false),
        (5, 2, 512, true),
        (1, 8, 64, false),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[1, seq, heads, d], -2.0, 2.0)?;
        let (cos, sin) = case_tables(&mut c, seq, d, proportional)?;
        let expected = reference(&x, seq, heads, d, &cos, &sin);
        let label = format!(
            "[1, {seq}, {heads}, {d}]{}",
            if proportional { " proportional" } else { "" }
        );
        cases.push(c.finish(label, expected));
    }

    Ok(cases)
}

/// cos/sin `[seq, d/2]` (f32 inputs of the case) for positions 37.., a quarter of the pairs
/// rotated when `proportional` (the rest pass through, as full layers' zero frequencies do).
pub fn case_tables(
    c: &mut Builder,
    seq: usize,
    d: usize,
    proportional: bool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let half = d / 2;
    let rotated = if proportional { d / 8 } else { half };
    let start = 37;
    let angles: Vec<f64> = (0..seq)
        .flat_map(|s| {
            (0..half).map(move |j| {
                let inv = if j < rotated {
                    10000f64.powf(-2.0 * j as f64 / d as f64)
                } else {
                    0.0
                };
                (start + s) as f64 * inv
            })
        })
        .collect();
    let cos = c.values_as(
        &[seq, half],
        DType::F32,
        angles.iter().map(|a| a.cos()).collect(),
    )?;
    let sin = c.values_as(
        &[seq, half],
        DType::F32,
        angles.iter().map(|a| a.sin()).collect(),
    )?;
    Ok((cos, sin))
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![rope_on(arm, f(0), f(1), f(2))?])
}
