//! `softcap`: `c · tanh(x / c)` (final logits, c = 30).

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::Softcap;

pub fn softcap(x: &Tensor, cap: f64) -> Result<Tensor> {
    softcap_on(arm_for(OP, x.device(), x.dtype()), x, cap)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn softcap_on(arm: Arm, x: &Tensor, cap: f64) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x, cap),
        Arm::Native(Backend::Cpu) => cpu_fwd(x, cap),
        Arm::Native(_) => native_fwd(x, cap),
    }
}

pub fn composed(x: &Tensor, cap: f64) -> Result<Tensor> {
    (x / cap)?.tanh()? * cap
}

/// CPU arm: one vectorised pass (`native/cpu.rs`), f32.
fn cpu_fwd(x: &Tensor, cap: f64) -> Result<Tensor> {
    let (Some(simd), DType::F32) = (cpu::simd(), x.dtype()) else {
        return composed(x, cap);
    };
    let out = cpu::with_f32(x, |v| cpu::softcap_f32(simd, v, cap as f32))?;
    Tensor::from_vec(out, x.shape(), x.device())
}

/// CUDA arm: one elementwise kernel (src/kernels/cuda/elementwise.cu).
fn native_fwd(x: &Tensor, cap: f64) -> Result<Tensor> {
    use super::native::{elementwise, empty, kernel_name, launch, Arg};
    let x = x.contiguous()?;
    let out = empty(x.shape(), x.dtype(), x.device())?;
    let n = x.elem_count();
    let args = [
        Arg::Tensor(&x),
        Arg::Tensor(&out),
        Arg::Usize(n),
        Arg::F32(cap as f32),
    ];
    launch(
        &kernel_name("softcap", x.dtype())?,
        x.device(),
        elementwise(n),
        &args,
    )?;
    Ok(out)
}

pub fn reference(x: &[f64], cap: f64) -> Vec<f64> {
    x.iter().map(|v| cap * (v / cap).tanh()).collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).native(native::GPU_FLOATS_AND_CPU_F32),
    cases,
    run,
    mutants: &[Mutant {
        what: "tanh without the cap",
        run: |c| Ok(vec![c.float(0).tanh()?]),
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // The last is a vocabulary's logits, split over threads by the CPU arm.
    for (rows, cols) in [(1, 11), (4, 262), (2, 4096), (1, 262_144)] {
        let mut c = Builder::new(device, dtype, rng);
        let x = c.uniform(&[rows, cols], -100.0, 100.0)?;
        let mut case = c.finish(format!("[{rows}, {cols}] cap 30"), reference(&x, 30.0));
        case.scale = 30.0;
        cases.push(case);
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![softcap_on(arm, f(0), c.scale)?])
}
