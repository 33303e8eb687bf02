//! `moe_gather_rows`: the rows of X assigned to one expert.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::MoeGatherRows;

/// `x [N, H]`, `rows [R]` (u32) → `[R, H]`.
pub fn moe_gather_rows(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    moe_gather_rows_on(arm_for(OP, x.device(), x.dtype()), x, rows)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_gather_rows_on(arm: Arm, x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, rows),
        Arm::Native(_) => native_fwd(x, rows),
    }
}

pub fn composed(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    x.index_select(rows, 0)
}

/// Threads per routed row's block of the CUDA arm.
const THREADS: u32 = 256;

/// CUDA arm: one block per routed row, 16-byte copies where the rows allow
/// (src/kernels/cuda/moe.cu).
fn native_fwd(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, Arg, Grid};
    let x = x.contiguous()?;
    let rows = rows.to_dtype(candle_core::DType::U32)?.contiguous()?;
    let (_, cols) = x.dims2()?;
    let count = rows.elem_count();
    let out = empty((count, cols), x.dtype(), x.device())?;
    if count == 0 {
        return Ok(out);
    }
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&rows),
        Arg::Tensor(&out),
        Arg::Usize(cols),
    ];
    let grid = Grid {
        blocks: count as u32,
        threads: THREADS,
    };
    launch(
        &kernel_name("moe_gather_rows", x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    Ok(out)
}

pub fn reference(x: &[f64], cols: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|&r| x[r * cols..(r + 1) * cols].iter().copied())
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce),
    cases,
    run,
    mutants: &[Mutant {
        what: "the row list read backwards",
        run: |c| {
            let mut rows = c.raw(0).to_vec1::<u32>()?;
            rows.reverse();
            let reversed = Tensor::new(rows, c.raw(0).device())?;
            Ok(vec![composed(c.float(0), &reversed)?])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Odd widths (element copies) and whole 16-byte vectors; last (the one `--perf` times) a
    // 64-token prefill piece of 26B-A4B's top-8.
    for (n, h, r) in [(1, 7, 1), (6, 65, 9), (32, 256, 40), (64, 2816, 512)] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[n, h], -2.0, 2.0)?;
        let rows: Vec<usize> = (0..r).map(|_| c.rng.random_range(0..n)).collect();
        c.indices(&rows.iter().map(|&i| i as u32).collect::<Vec<_>>())?;
        cases.push(c.finish(format!("[{n}, {h}] → {r} rows"), reference(&x, h, &rows)));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![moe_gather_rows_on(arm, f(0), c.raw(0))?])
}
