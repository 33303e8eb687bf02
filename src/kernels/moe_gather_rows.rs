//! `moe_gather_rows`: the rows of X assigned to one expert.

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{Result, Tensor};

const OP: Op = Op::MoeGatherRows;

/// `x [N, H]`, `rows [R]` (u32) → `[R, H]`.
pub fn moe_gather_rows(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    moe_gather_rows_on(arm_for(OP, x.device(), x.dtype()), x, rows)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_gather_rows_on(arm: Arm, x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, rows),
        Arm::Native(Backend::Cuda) => cuda_fwd(x, rows),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    x.index_select(rows, 0)
}

/// CUDA arm: one gather kernel (src/kernels/cuda/moe.cu).
fn cuda_fwd(x: &Tensor, rows: &Tensor) -> Result<Tensor> {
    use super::cuda_launch::{elementwise, empty, kernel_name, launch, Arg};
    let x = x.contiguous()?;
    let rows = rows.to_dtype(candle_core::DType::U32)?.contiguous()?;
    let (_, cols) = x.dims2()?;
    let count = rows.elem_count();
    let out = empty((count, cols), x.dtype(), x.device())?;
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&rows),
        Arg::Tensor(&out),
        Arg::Usize(count),
        Arg::Usize(cols),
    ];
    launch(
        &kernel_name("moe_gather_rows", x.dtype())?,
        x.device(),
        elementwise(count * cols),
        &args,
    )?;
    Ok(out)
}

pub fn reference(x: &[f64], cols: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|&r| x[r * cols..(r + 1) * cols].iter().copied())
        .collect()
}
