//! `moe_combine`: each token's weighted sum of its routed rows, `out[t] = Σ_s w[t, s] ·
//! y[position[t, s]]` in f32, the slots in order. `y` holds the experts' outputs in expert order
//! (the grouped GEMMs' rows); `position[t, s]` is where token t's slot s landed there.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, seq::SliceRandom, Rng};

const OP: Op = Op::MoeCombine;

/// `y [R, H]`, `positions [N, k]` u32, `weights [N, k]` f32 → `[N, H]` f32.
pub fn moe_combine(y: &Tensor, positions: &Tensor, weights: &Tensor) -> Result<Tensor> {
    moe_combine_on(arm_for(OP, y.device(), y.dtype()), y, positions, weights)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_combine_on(
    arm: Arm,
    y: &Tensor,
    positions: &Tensor,
    weights: &Tensor,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(y, positions, weights),
        Arm::Native(_) => native_fwd(y, positions, weights),
    }
}

pub fn composed(y: &Tensor, positions: &Tensor, weights: &Tensor) -> Result<Tensor> {
    let (tokens, slots) = positions.dims2()?;
    let hidden = y.dim(1)?;
    let routed = y
        .to_dtype(DType::F32)?
        .index_select(&positions.flatten_all()?, 0)?
        .reshape((tokens, slots, hidden))?;
    routed
        .broadcast_mul(&weights.to_dtype(DType::F32)?.unsqueeze(2)?)?
        .sum(1)
}

/// CUDA arm: one block per token reading its rows in place, one write per output, no atomics
/// and no zeroed buffer (src/kernels/cuda/moe.cu).
fn native_fwd(y: &Tensor, positions: &Tensor, weights: &Tensor) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, Arg, Grid};
    let y = y.contiguous()?;
    let positions = positions.to_dtype(DType::U32)?.contiguous()?;
    let weights = weights.to_dtype(DType::F32)?.contiguous()?;
    let (tokens, slots) = positions.dims2()?;
    let (_, cols) = y.dims2()?;
    let out = empty((tokens, cols), DType::F32, y.device())?;
    let args = [
        Arg::Tensor(&y),
        Arg::Tensor(&positions),
        Arg::Tensor(&weights),
        Arg::Tensor(&out),
        Arg::I32(slots as i32),
        Arg::Usize(cols),
    ];
    let grid = Grid {
        blocks: tokens.max(1) as u32,
        threads: THREADS,
    };
    launch(
        &kernel_name("moe_combine", y.dtype())?,
        y.device(),
        grid,
        &args,
    )?;
    Ok(out)
}

/// Threads per token's block of the CUDA arm.
const THREADS: u32 = 256;

pub fn reference(
    y: &[f64],
    cols: usize,
    positions: &[usize],
    slots: usize,
    weights: &[f64],
) -> Vec<f64> {
    positions
        .chunks(slots)
        .zip(weights.chunks(slots))
        .flat_map(|(rows, ws)| {
            (0..cols).map(move |j| rows.iter().zip(ws).map(|(&r, w)| w * y[r * cols + j]).sum())
        })
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the routing weights ignored",
            run: |c| {
                let ones = c.float(1).ones_like()?;
                Ok(vec![composed(c.float(0), c.raw(0), &ones)?])
            },
        },
        Mutant {
            what: "each token's last slot left out",
            run: |c| {
                let slots = c.raw(0).dim(1)? - 1;
                let positions = c.raw(0).narrow(1, 0, slots)?;
                let weights = c.float(1).narrow(1, 0, slots)?;
                Ok(vec![composed(c.float(0), &positions, &weights)?])
            },
        },
    ],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (tokens, hidden, slots): every routed row used once, as a routing's permutation places
    // them; last (the one `--perf` times) a 64-token prefill piece of 26B-A4B's top-8.
    for (n, h, k) in [(1, 7, 2), (6, 65, 3), (9, 300, 8), (64, 2816, 8)] {
        let mut c = Builder::new(device, dtype, rng);
        let y = c.uniform(&[n * k, h], -2.0, 2.0)?;
        let mut positions: Vec<usize> = (0..n * k).collect();
        positions.shuffle(c.rng);
        let stored: Vec<u32> = positions.iter().map(|&i| i as u32).collect();
        c.raw(Tensor::from_vec(stored, (n, k), device)?);
        let w = c.float_as(&[n, k], DType::F32, |r| r.random_range(0.0..1.0))?;
        let expected = reference(&y, h, &positions, k, &w);
        cases.push(c.finish(format!("{} rows → [{n}, {h}] top-{k}", n * k), expected));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    Ok(vec![moe_combine_on(arm, c.float(0), c.raw(0), c.float(1))?])
}
