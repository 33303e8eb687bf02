//! `moe_zero`: a zeroed f32 accumulation buffer for the experts' weighted sum.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::MoeZero;

pub fn moe_zero(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    moe_zero_on(arm_for(OP, device, DType::F32), rows, cols, device)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn moe_zero_on(arm: Arm, rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(rows, cols, device),
        Arm::Native(_) => native_fwd(rows, cols, device),
    }
}

pub fn composed(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    Tensor::zeros((rows, cols), DType::F32, device)
}

/// CUDA arm: a fill kernel (src/kernels/cuda/moe.cu).
fn native_fwd(rows: usize, cols: usize, device: &Device) -> Result<Tensor> {
    use super::native::{elementwise, empty, kernel_name, launch, Arg};
    let out = empty((rows, cols), DType::F32, device)?;
    let n = rows * cols;
    launch(
        &kernel_name("moe_zero", DType::F32)?,
        device,
        elementwise(n),
        &[Arg::Tensor(&out), Arg::Usize(n)],
    )?;
    Ok(out)
}

pub fn reference(rows: usize, cols: usize) -> Vec<f64> {
    vec![0.0; rows * cols]
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce).f32_only(),
    cases,
    run,
    mutants: &[Mutant {
        what: "writes nothing (its output left as allocated)",
        run: |c| {
            Ok(vec![super::native::empty(
                (c.rows, c.cols),
                DType::F32,
                c.raw(0).device(),
            )?])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    for (rows, cols) in [(1, 64), (7, 33), (128, 2560)] {
        let mut c = Builder::new(device, dtype, rng);
        c.raw(Tensor::zeros(1, DType::U32, device)?);
        let mut case = c.finish(format!("[{rows}, {cols}]"), reference(rows, cols));
        (case.rows, case.cols) = (rows, cols);
        cases.push(case);
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    Ok(vec![moe_zero_on(arm, c.rows, c.cols, c.raw(0).device())?])
}
