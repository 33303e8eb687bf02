//! `gelu_mul`: `gelu_tanh(gate) ⊙ up` over two separate tensors (dense MLP, PLE gate, MoE experts).

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, reference, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::GeluMul;

pub fn gelu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    gelu_mul_on(arm_for(OP, gate.device(), gate.dtype()), gate, up)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn gelu_mul_on(arm: Arm, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(gate, up),
        Arm::Native(Backend::Cpu) => cpu_fwd(gate, up),
        Arm::Native(_) => native_fwd(gate, up),
    }
}

pub fn composed(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    // candle's `gelu` is the tanh approximation (`gelu_erf` is the exact one). It runs in f32
    // and rounds once, as torch does for bf16/f16: candle's CUDA bf16 gelu is less precise.
    gate.to_dtype(DType::F32)?.gelu()?.to_dtype(gate.dtype())? * up
}

/// CPU arm: a vectorised pass over rows (`native/cpu.rs`), f32.
fn cpu_fwd(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let (Some(simd), DType::F32, true) = (
        cpu::simd(),
        gate.dtype(),
        gate.shape() == up.shape() && up.dtype() == DType::F32,
    ) else {
        return composed(gate, up);
    };
    let width = gate.dims().last().copied().unwrap_or(1).max(1);
    let out = cpu::with_f32(gate, |g| {
        cpu::with_f32(up, |u| cpu::gelu_mul_f32(simd, g, u, width, width))
    })??;
    Tensor::from_vec(out, gate.shape(), gate.device())
}

/// CUDA arm: one elementwise kernel (src/kernels/cuda/elementwise.cu).
fn native_fwd(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    use super::native::{elementwise, empty, kernel_name, launch, Arg};
    let (gate, up) = (gate.contiguous()?, up.contiguous()?);
    if gate.shape() != up.shape() {
        candle_core::bail!(
            "gelu_mul: gate {:?} and up {:?} differ",
            gate.shape(),
            up.shape()
        );
    }
    let out = empty(gate.shape(), gate.dtype(), gate.device())?;
    let n = gate.elem_count();
    let args = [
        Arg::Tensor(&gate),
        Arg::Tensor(&up),
        Arg::Tensor(&out),
        Arg::Usize(n),
    ];
    launch(
        &kernel_name("gelu_mul", gate.dtype())?,
        gate.device(),
        elementwise(n),
        &args,
    )?;
    Ok(out)
}

pub fn reference(gate: &[f64], up: &[f64]) -> Vec<f64> {
    gate.iter()
        .zip(up)
        .map(|(g, u)| reference::gelu_tanh(*g) * u)
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).native(native::GPU_FLOATS_AND_CPU_F32),
    cases,
    run,
    mutants: &[Mutant {
        what: "gate and up swapped",
        run: |c| Ok(vec![(c.float(1).gelu()? * c.float(0))?]),
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // The last spans the CPU arm's threaded path (more than 2^16 elements).
    for (rows, cols) in [(1, 7), (3, 257), (17, 1024), (40, 2048)] {
        let mut c = Builder::new(device, dtype, rng);
        let gate = c.uniform(&[rows, cols], -4.0, 4.0)?;
        let up = c.uniform(&[rows, cols], -2.0, 2.0)?;
        cases.push(c.finish(format!("[{rows}, {cols}]"), reference(&gate, &up)));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![gelu_mul_on(arm, f(0), f(1))?])
}
