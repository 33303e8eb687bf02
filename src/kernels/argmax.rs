//! `argmax`: the index of each row's largest value, the first one on ties — greedy decoding on
//! the device, so that only the chosen id comes back to the host, not 262,144 logits.

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{DType, Result, Tensor, D};

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
        Arm::Native(Backend::Cuda) => cuda_fwd(&rows),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor) -> Result<Tensor> {
    x.argmax(D::Minus1)
}

/// Elements per block of the first pass: a row of logits spreads over many SMs.
const CHUNK: usize = 4096;

/// CUDA arm: each block reduces a chunk of a row to (max, first index), then one block per row
/// merges the chunks (src/kernels/cuda/argmax.cu).
fn cuda_fwd(x: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{empty, kernel_name, launch, Arg, Grid};
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
