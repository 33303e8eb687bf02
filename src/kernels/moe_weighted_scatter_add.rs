//! `moe_weighted_scatter_add`: `out[token[r]] += w[r] · y[r]`, accumulated in f32.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::MoeWeightedScatterAdd;

/// `out [N, H]` f32, `tokens [R]` u32, `weights [R]` f32, `y [R, H]` → the new `out`.
pub fn moe_weighted_scatter_add(
    out: &Tensor,
    tokens: &Tensor,
    weights: &Tensor,
    y: &Tensor,
) -> Result<Tensor> {
    moe_weighted_scatter_add_on(arm_for(OP, y.device(), y.dtype()), out, tokens, weights, y)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_weighted_scatter_add_on(
    arm: Arm,
    out: &Tensor,
    tokens: &Tensor,
    weights: &Tensor,
    y: &Tensor,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(out, tokens, weights, y),
        Arm::Native(_) => native_fwd(out, tokens, weights, y),
    }
}

pub fn composed(out: &Tensor, tokens: &Tensor, weights: &Tensor, y: &Tensor) -> Result<Tensor> {
    let weighted = y
        .to_dtype(DType::F32)?
        .broadcast_mul(&weights.unsqueeze(1)?)?;
    // candle 0.11.1's CUDA index_add applies the destination's layout, start offset included, to
    // a fresh buffer and panics (found by probe-ops on the H200): give it an offset-0 copy
    // (`copy` would keep the offset).
    let out = if out.layout().start_offset() > 0 {
        out.force_contiguous()?
    } else {
        out.clone()
    };
    out.index_add(tokens, &weighted, 0)
}

/// CUDA arm: copies `out`, then adds with f32 atomics (src/kernels/cuda/moe.cu); the order of
/// additions into one row may vary between runs.
fn native_fwd(out: &Tensor, tokens: &Tensor, weights: &Tensor, y: &Tensor) -> Result<Tensor> {
    use super::native::{elementwise, kernel_name, launch, Arg};
    let acc = out.to_dtype(DType::F32)?.copy()?;
    let tokens = tokens.to_dtype(DType::U32)?.contiguous()?;
    let weights = weights.to_dtype(DType::F32)?.contiguous()?;
    let y = y.contiguous()?;
    let (count, cols) = y.dims2()?;
    let args = [
        Arg::Tensor(&acc),
        Arg::Tensor(&tokens),
        Arg::Tensor(&weights),
        Arg::Tensor(&y),
        Arg::Usize(count),
        Arg::Usize(cols),
    ];
    launch(
        &kernel_name("moe_weighted_scatter_add", y.dtype())?,
        y.device(),
        elementwise(count * cols),
        &args,
    )?;
    Ok(acc)
}

pub fn reference(
    out: &[f64],
    cols: usize,
    tokens: &[usize],
    weights: &[f64],
    y: &[f64],
) -> Vec<f64> {
    let mut out = out.to_vec();
    for (r, (&t, &w)) in tokens.iter().zip(weights).enumerate() {
        for j in 0..cols {
            out[t * cols + j] += w * y[r * cols + j];
        }
    }
    out
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce),
    cases,
    run,
    mutants: &[Mutant {
        what: "the routing weights ignored",
        run: |c| {
            let ones = c.float(1).ones_like()?;
            Ok(vec![composed(c.float(0), c.raw(0), &ones, c.float(2))?])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (n, h, r) in [(1, 7, 2), (6, 65, 9), (32, 256, 64)] {
        let mut c = Builder::new(device, dtype, rng);
        let out = c.float_as(&[n, h], DType::F32, |r| r.random_range(-1.0..1.0))?;
        let tokens: Vec<usize> = (0..r).map(|_| c.rng.random_range(0..n)).collect();
        c.indices(&tokens.iter().map(|&i| i as u32).collect::<Vec<_>>())?;
        let w = c.float_as(&[r], DType::F32, |r| r.random_range(0.0..1.0))?;
        let y = c.uniform(&[r, h], -2.0, 2.0)?;
        let expected = reference(&out, h, &tokens, &w, &y);
        cases.push(c.finish(format!("{r} rows → [{n}, {h}]"), expected));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![moe_weighted_scatter_add_on(
        arm,
        f(0),
        c.raw(0),
        f(1),
        f(2),
    )?])
}
