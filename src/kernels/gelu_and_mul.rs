//! `gelu_and_mul`: `gelu_tanh(gate) ⊙ up` over one packed `[rows, 2D]` tensor laid out
//! `[gate ‖ up]` (the MoE experts' `gate_up_proj` output).

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, gelu_mul, reference, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::rngs::StdRng;

const OP: Op = Op::GeluAndMul;

pub fn gelu_and_mul(packed: &Tensor) -> Result<Tensor> {
    gelu_and_mul_on(arm_for(OP, packed.device(), packed.dtype()), packed)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn gelu_and_mul_on(arm: Arm, packed: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(packed),
        Arm::Native(Backend::Cpu) => cpu_fwd(packed),
        Arm::Native(_) => native_fwd(packed),
    }
}

pub fn composed(packed: &Tensor) -> Result<Tensor> {
    let half = packed.dim(D::Minus1)? / 2;
    let gate = packed.narrow(D::Minus1, 0, half)?;
    let up = packed.narrow(D::Minus1, half, half)?;
    gelu_mul::composed(&gate, &up)
}

/// CPU arm: a vectorised pass over the packed rows (`native/cpu.rs`), f32.
fn cpu_fwd(packed: &Tensor) -> Result<Tensor> {
    let d = packed.dim(D::Minus1)? / 2;
    let (Some(simd), DType::F32, true) = (cpu::simd(), packed.dtype(), d > 0) else {
        return composed(packed);
    };
    let mut shape = packed.dims().to_vec();
    *shape.last_mut().expect("at least one dim") = d;
    let out = cpu::with_f32(packed, |p| cpu::gelu_mul_f32(simd, p, &p[d..], d, 2 * d))?;
    Tensor::from_vec(out, shape, packed.device())
}

/// CUDA arm: one elementwise kernel over the packed rows (src/kernels/cuda/elementwise.cu),
/// indexed in 32 bits, a 16-byte vector per thread where the rows allow it; larger tensors take
/// the composed arm.
fn native_fwd(packed: &Tensor) -> Result<Tensor> {
    use super::native::{elementwise, empty, kernel_name, launch, vector_aligned, Arg};
    let d = packed.dim(D::Minus1)? / 2;
    if d == 0 || u32::try_from(packed.elem_count()).is_err() {
        return composed(packed);
    }
    let packed = packed.contiguous()?;
    let rows = packed.elem_count() / (2 * d);
    let mut shape = packed.dims().to_vec();
    *shape.last_mut().expect("at least one dim") = d;
    let out = empty(shape, packed.dtype(), packed.device())?;
    let args = [
        Arg::Tensor(&packed),
        Arg::Tensor(&out),
        Arg::U32(rows as u32),
        Arg::U32(d as u32),
    ];
    let per_vector = 16 / packed.dtype().size_in_bytes();
    let vectors = d.is_multiple_of(per_vector) && vector_aligned(&packed) && vector_aligned(&out);
    let (kernel, threads) = if vectors {
        ("gelu_and_mul_vec", rows * d / per_vector)
    } else {
        ("gelu_and_mul", rows * d)
    };
    launch(
        &kernel_name(kernel, packed.dtype())?,
        packed.device(),
        elementwise(threads),
        &args,
    )?;
    Ok(out)
}

/// `packed [rows, 2·d]` → `[rows, d]`.
pub fn reference(packed: &[f64], d: usize) -> Vec<f64> {
    packed
        .chunks(2 * d)
        .flat_map(|row| (0..d).map(move |j| reference::gelu_tanh(row[j]) * row[d + j]))
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate).native(native::GPU_FLOATS_AND_CPU_F32),
    cases,
    run,
    mutants: &[Mutant {
        what: "halves swapped (up ‖ gate)",
        run: |c| {
            let d = c.float(0).dim(1)? / 2;
            let (gate, up) = (c.float(0).narrow(1, 0, d)?, c.float(0).narrow(1, d, d)?);
            Ok(vec![super::gelu_mul::composed(&up, &gate)?])
        },
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // The last spans the CPU arm's threaded path (more than 2^16 elements).
    for (rows, d) in [(1, 7), (3, 129), (9, 704), (33, 2048)] {
        let mut c = Builder::new(device, dtype, rng);
        let packed = c.uniform(&[rows, 2 * d], -3.0, 3.0)?;
        cases.push(c.finish(format!("[{rows}, 2×{d}]"), reference(&packed, d)));
    }

    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![gelu_and_mul_on(arm, f(0))?])
}
