//! `dequant_fp8_channel`: `W = f32(W_e4m3) × scale[row]`, cast to the compute dtype
//! (compressed-tensors FP8 checkpoints store one scale per output channel).

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor};
use float8::F8E4M3;
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::DequantFp8Channel;

/// `weight [N, K]` in F8E4M3, `scale [N]` or `[N, 1]` → `[N, K]` in `dtype`.
pub fn dequant_fp8_channel(weight: &Tensor, scale: &Tensor, dtype: DType) -> Result<Tensor> {
    dequant_fp8_channel_on(arm_for(OP, weight.device(), dtype), weight, scale, dtype)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn dequant_fp8_channel_on(
    arm: Arm,
    weight: &Tensor,
    scale: &Tensor,
    dtype: DType,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(weight, scale, dtype),
        Arm::Native(_) => native_fwd(weight, scale, dtype),
    }
}

pub fn composed(weight: &Tensor, scale: &Tensor, dtype: DType) -> Result<Tensor> {
    let rows = weight.dim(0)?;
    let scale = scale.to_dtype(DType::F32)?.reshape((rows, 1))?;
    let decoded = if weight.device().is_cuda() {
        // candle 0.11.1 looks up `cast_f8e4m3_*` on CUDA but its kernels are named
        // `cast_f8_e4m3_*` (probe-ops on the H200 found it), so decode on the host there.
        let host = weight.to_device(&candle_core::Device::Cpu)?;
        host.to_dtype(DType::F32)?.to_device(weight.device())?
    } else {
        weight.to_dtype(DType::F32)?
    };
    decoded.broadcast_mul(&scale)?.to_dtype(dtype)
}

/// CUDA arm: decodes e4m3 in the kernel (src/kernels/cuda/fp8.cu).
fn native_fwd(weight: &Tensor, scale: &Tensor, dtype: DType) -> Result<Tensor> {
    use super::native::{elementwise, empty, kernel_name, launch, Arg};
    let weight = weight.contiguous()?;
    let (rows, cols) = weight.dims2()?;
    let scale = scale.to_dtype(DType::F32)?.contiguous()?;
    let out = empty((rows, cols), dtype, weight.device())?;
    let args = [
        Arg::Tensor(&weight),
        Arg::Tensor(&scale),
        Arg::Tensor(&out),
        Arg::Usize(rows),
        Arg::Usize(cols),
    ];
    launch(
        &kernel_name("dequant_fp8_channel", dtype)?,
        weight.device(),
        elementwise(threads_for(rows, cols)),
        &args,
    )?;
    Ok(out)
}

/// The kernel's piece: e4m3 weights per load (fp8.cu).
const WEIGHTS_PER_PIECE: usize = 8;
/// Pieces a thread loads before it decodes them (`G4_DEQUANT_LOADS` in fp8.cu).
const PIECES_PER_THREAD: usize = 4;

/// Threads for the kernel: rows of whole pieces go `PIECES_PER_THREAD` pieces per thread, other
/// rows one weight per thread; the grid-stride loop covers any rest.
fn threads_for(rows: usize, cols: usize) -> usize {
    if cols.is_multiple_of(WEIGHTS_PER_PIECE) {
        (rows * cols).div_ceil(WEIGHTS_PER_PIECE * PIECES_PER_THREAD)
    } else {
        rows * cols
    }
}

/// `weight [n, k]` (already decoded e4m3 values), `scale [n]`.
pub fn reference(weight: &[f64], scale: &[f64], k: usize) -> Vec<f64> {
    weight
        .chunks(k)
        .zip(scale)
        .flat_map(|(row, s)| row.iter().map(move |w| w * s))
        .collect()
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce),
    cases,
    run,
    mutants: &[Mutant {
        what: "the row scales ignored",
        run: |c| Ok(vec![c.raw(0).to_dtype(DType::F32)?.to_dtype(c.dtype)?]),
    }],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Widths off the kernel's 8-byte pieces (one weight a thread), one of 5 pieces a row, and wider.
    for (n, k) in [(3, 5), (17, 129), (9, 40), (64, 256), (130, 272)] {
        let mut c = Builder::new(device, dtype, rng);
        let (weight, scale) = fp8_weight(&mut c, n, k)?;
        cases.push(c.finish(format!("[{n}, {k}]"), reference(&weight, &scale, k)));
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(vec![dequant_fp8_channel_on(arm, c.raw(0), f(0), c.dtype)?])
}

/// A check input: an e4m3 weight `[n, k]` (a raw input) and its f32 row scales (a float
/// input), returned as the values the reference sees.
pub(super) fn fp8_weight(c: &mut Builder, n: usize, k: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    // Every e4m3 code but NaN equally likely: each binade of magnitudes up to the largest
    // normal (448) as likely as the next, subnormals and both zeros included. Drawing codes
    // (not rounding drawn floats) keeps real-size cases cheap to build.
    let codes: Vec<F8E4M3> = (0..n * k)
        .map(|_| loop {
            let code = F8E4M3::from_bits(c.rng.random());
            if !code.is_nan() {
                break code;
            }
        })
        .collect();
    let value: [f64; 256] = std::array::from_fn(|b| F8E4M3::from_bits(b as u8).to_f64());
    let weight = codes
        .iter()
        .map(|code| value[code.to_bits() as usize])
        .collect();
    let w8 = Tensor::from_vec(codes, (n, k), &Device::Cpu)?.to_device(c.device())?;
    c.raw(w8);
    let scale = c.float_as(&[n], DType::F32, |r| r.random_range(0.01..0.1))?;
    Ok((weight, scale))
}
