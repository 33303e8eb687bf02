//! `round_rows_e4m3`: each row of x rounded to e4m3 on its own scale and scaled back, in x's
//! dtype — the input of an FP8_DYNAMIC ("W8A8") checkpoint's projection. As compressed-tensors
//! computes it: `scale = max|x| / 448`, `x' = e4m3(clamp(x / scale, ±448)) · scale`, every step
//! rounded to x's dtype; an all-zero row stays zero.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ToleranceClass};
use super::native;
use super::{arm_for, Arm, Op};
use candle_core::{DType, Device, Result, Tensor, D};
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::RoundRowsE4m3;

/// e4m3's largest finite value.
pub const E4M3_MAX: f64 = 448.0;

/// `x [.., K]` → the same shape and dtype, each row of K rounded to e4m3 on its own scale.
pub fn round_rows_e4m3(x: &Tensor) -> Result<Tensor> {
    round_rows_e4m3_on(arm_for(OP, x.device(), x.dtype()), x)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn round_rows_e4m3_on(arm: Arm, x: &Tensor) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(x),
        Arm::Native(_) => native_fwd(x),
    }
}

pub fn composed(x: &Tensor) -> Result<Tensor> {
    let dtype = x.dtype();
    // A true division, as the reference's: candle's `tensor / f64` multiplies by the reciprocal.
    let e4m3_max = Tensor::new(E4M3_MAX as f32, x.device())?.to_dtype(dtype)?;
    let scale = x.abs()?.max_keepdim(D::Minus1)?.broadcast_div(&e4m3_max)?;
    // An all-zero row divides by 1 instead of 0: it stays zero either way.
    let scale = scale.eq(0.0)?.where_cond(&scale.ones_like()?, &scale)?;
    let scaled = x.broadcast_div(&scale)?.clamp(-E4M3_MAX, E4M3_MAX)?;
    // Through the host and f32: candle 0.11.1's CUDA casts to e4m3 are looked up under names its
    // kernels do not have (see dequant_fp8_channel), and its CPU casts from f64 never return.
    let rounded = scaled
        .to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .to_dtype(DType::F8E4M3)?
        .to_dtype(DType::F32)?
        .to_dtype(dtype)?
        .to_device(x.device())?;
    rounded.broadcast_mul(&scale)
}

/// GPU arm: one block per row (src/kernels/cuda/fp8.cu).
fn native_fwd(x: &Tensor) -> Result<Tensor> {
    use super::native::{empty, Arg};
    let x = x.contiguous()?;
    let cols = x.dim(D::Minus1)?;
    let rows = x.elem_count() / cols.max(1);
    let out = empty(x.shape(), x.dtype(), x.device())?;
    if rows == 0 || cols == 0 {
        return Ok(out);
    }
    let args = [Arg::Tensor(&x), Arg::Tensor(&out), Arg::I32(cols as i32)];
    launch_per_row("round_rows_e4m3", &x, rows, &args)?;
    Ok(out)
}

/// `kernel` in x's dtype over `rows` rows of x, one block a row: `round_rows_e4m3`'s kernel, and
/// `quantize_rows_e4m3` (the same rounding, written as e4m3 bits and scales) for
/// `matmul_bt_fp8_dynamic`.
pub(super) fn launch_per_row(
    kernel: &str,
    x: &Tensor,
    rows: usize,
    args: &[native::Arg],
) -> Result<()> {
    use super::native::{kernel_name, launch, warp_lanes, Grid};
    let lanes = warp_lanes(x.device());
    let grid = Grid::of_warps(rows, warps_per_row(rows, lanes), lanes);
    launch(&kernel_name(kernel, x.dtype())?, x.device(), grid, args)
}

/// Warps of `lanes` in the block that rounds one row: a decode step's few rows are each a
/// launch's whole work, on its critical path, so they get the most threads a block can have
/// (1,024); prefill's many rows fill the GPU with blocks of 256.
fn warps_per_row(rows: usize, lanes: usize) -> usize {
    let threads = if rows <= super::matmul_bt_fp8_channel::GEMV_MAX_ROWS {
        1024
    } else {
        256
    };
    threads / lanes
}

/// `x [rows, cols]`; `round(values, dtype)` rounds to a dtype, for the steps that the reference
/// implementation rounds to x's dtype (`dtype`) and to e4m3.
pub fn reference(
    x: &[f64],
    cols: usize,
    dtype: DType,
    round: impl Fn(Vec<f64>, DType) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let absmax = row.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        if absmax == 0.0 {
            out.extend(row.iter().map(|_| 0.0));
            continue;
        }
        let scale = round(vec![absmax / E4M3_MAX], dtype)?[0];
        let scaled = round(row.iter().map(|v| v / scale).collect(), dtype)?;
        let clamped = scaled
            .iter()
            .map(|v| v.clamp(-E4M3_MAX, E4M3_MAX))
            .collect();
        let rounded = round(clamped, DType::F8E4M3)?;
        out.extend(round(rounded.iter().map(|q| q * scale).collect(), dtype)?);
    }
    Ok(out)
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsOnce).native(native::GPU_FLOATS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "the input passed through unrounded",
            run: |c| Ok(vec![c.float(0).clone()]),
        },
        Mutant {
            what: "one scale for the whole tensor",
            run: |c| {
                let x = c.float(0);
                let whole = x.flatten_all()?.unsqueeze(0)?;
                Ok(vec![composed(&whole)?.reshape(x.shape())?])
            },
        },
    ],
};

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Rows of like magnitude, so that one scale for all would move their rounding grids, then a
    // zero row and a row 10^5 smaller (its values reach e4m3's subnormals only on a shared
    // scale); widths of a decode row up to E4B's MLP down input.
    const ROW_MAGNITUDES: [f64; 6] = [1.0, 0.7, 0.55, 0.9, 0.0, 1e-5];
    for (rows, cols) in [(1, 16), (3, 257), (6, 2560), (2, 10240)] {
        let mut c = Builder::new(device, dtype, rng);
        let magnitudes = &ROW_MAGNITUDES[..rows];
        let raw: Vec<f64> = magnitudes
            .iter()
            .flat_map(|&m| {
                (0..cols)
                    .map(|_| m * c.rng.random_range(-1.0..1.0))
                    .collect::<Vec<_>>()
            })
            .collect();
        let x = c.values_as(&[rows, cols], dtype, raw)?;
        let expected = reference(&x, cols, dtype, |v, d| c.round(v, d))?;
        cases.push(c.finish(format!("[{rows}, {cols}]"), expected));
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    Ok(vec![round_rows_e4m3_on(arm, c.float(0))?])
}
