//! `argmax`: the index of each row's largest value, the first one on ties — greedy decoding on
//! the device, so that only the chosen id comes back to the host, not 262,144 logits.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::Argmax;

/// `x [rows, n]` (or `[n]`) → u32 `[rows]` (or `[1]`).
pub fn argmax(x: &Tensor) -> Result<Tensor> {
    argmax_on(arm_for(OP, x.device(), x.dtype()), x)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn argmax_on(arm: Arm, x: &Tensor) -> Result<Tensor> {
    let rows = if x.rank() == 1 {
        x.unsqueeze(0)?
    } else {
        x.clone()
    };
    match arm {
        Arm::Composed => composed(&rows),
        Arm::Native(_) => native_fwd(&rows),
    }
}

pub fn composed(x: &Tensor) -> Result<Tensor> {
    x.argmax(D::Minus1)
}

/// Elements per block of the first pass: a row of logits spreads over many SMs.
const CHUNK: usize = 4096;

/// CUDA arm: each block reduces a chunk of a row to (max, first index), then one block per row
/// merges the chunks (src/kernels/cuda/argmax.cu).
fn native_fwd(x: &Tensor) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, Arg, Grid};
    let x = x.contiguous()?;
    let (rows, n) = x.dims2()?;
    let chunks = n.div_ceil(CHUNK).max(1);
    let partial_values = empty(rows * chunks, DType::F32, x.device())?;
    let partial_indices = empty(rows * chunks, DType::U32, x.device())?;
    let out = empty(rows, DType::U32, x.device())?;
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&partial_values),
        Arg::Tensor(&partial_indices),
        Arg::I32(n as i32),
        Arg::I32(CHUNK as i32),
        Arg::I32(chunks as i32),
    ];
    let grid = Grid {
        blocks: (rows * chunks) as u32,
        threads: 256,
    };
    launch(
        &kernel_name("argmax_chunks", x.dtype())?,
        x.device(),
        grid,
        &args,
    )?;
    let args = [
        Arg::Tensor(&partial_values),
        Arg::Tensor(&partial_indices),
        Arg::Tensor(&out),
        Arg::I32(chunks as i32),
    ];
    let grid = Grid {
        blocks: rows as u32,
        threads: 256,
    };
    // The merge reads f32 partials whatever the input dtype.
    launch("g4_argmax_merge", x.device(), grid, &args)?;
    Ok(out)
}

/// `x [rows, n]` → each row's first largest index.
pub fn reference(x: &[f64], n: usize) -> Vec<u32> {
    x.chunks(n)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce).f32_only(),
    cases,
    run,
    mutants: &[Mutant {
        what: "the largest magnitude instead of the largest value",
        run: |c| {
            let indices = composed(&c.float(0).abs()?)?;
            Ok(vec![c.float(0).gather(&indices.unsqueeze(1)?, 1)?, indices])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // One row of logits-sized vocabulary, several short rows (ties go to the first).
    for (rows, n) in [(1, 262_144), (3, 1000), (2, 7)] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[rows, n], -30.0, 30.0)?;
        let indices = reference(&x, n);
        let maxima = indices
            .iter()
            .enumerate()
            .map(|(r, &i)| x[r * n + i as usize])
            .collect();
        let mut case = c.finish(format!("[{rows}, {n}]"), maxima);
        case.expected_indices = Some(indices);
        cases.push(case);
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    // The chosen indices, and the values there (which must be the row maxima).
    let indices = argmax_on(arm, f(0))?;
    let values = f(0).gather(&indices.unsqueeze(1)?, 1)?;
    Ok(vec![values, indices])
}
