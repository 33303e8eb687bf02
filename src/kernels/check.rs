//! The numerical check that `g4 probe-ops` and the tests share: every arm of every op against
//! its f64 reference, on fresh random inputs (several shapes, odd sizes included), in each dtype
//! the op supports. Metrics as llama.cpp's test-backend-ops: NMSE `Σ(a−b)²/Σa²` and max abs
//! error, plus a NaN/Inf check and a guard-band check (inputs live inside larger buffers whose
//! guard cells and input cells must be unchanged after the call).

use super::{
    argmax, attention, dequant_fp8_channel, dual_rms_norm_plus_res, gelu_and_mul, gelu_mul, linear,
    matmul_bt_alpha_beta, matmul_bt_fp8_channel, moe_gather_rows, moe_router_topk,
    moe_weighted_scatter_add, moe_zero, rms_norm, rms_norm_plus_add, rope, softcap, Arm, Op,
};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;

/// Pass thresholds, stated once: NMSE, and max abs error relative to the largest |reference|.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tolerance {
    pub nmse: f64,
    pub max_abs_relative: f64,
}

pub fn tolerance(op: Op, dtype: DType) -> Tolerance {
    // Ops that round an intermediate (gelu before the product, cos/sin, softmax probabilities,
    // dequantised weights) to the working dtype get a wider band in bf16/f16.
    let rounds_intermediate = matches!(
        op,
        Op::GeluMul
            | Op::GeluAndMul
            | Op::Rope
            | Op::Attention
            | Op::Softcap
            | Op::MatmulBtFp8Channel
    );
    match (dtype, rounds_intermediate) {
        (DType::F32, _) => Tolerance {
            nmse: 1e-9,
            max_abs_relative: 1e-5,
        },
        (DType::F16, false) => Tolerance {
            nmse: 1e-6,
            max_abs_relative: 2e-3,
        },
        (DType::F16, true) => Tolerance {
            nmse: 5e-6,
            max_abs_relative: 5e-3,
        },
        (_, false) => Tolerance {
            nmse: 5e-5,
            max_abs_relative: 1.6e-2,
        },
        (_, true) => Tolerance {
            nmse: 3e-4,
            max_abs_relative: 4e-2,
        },
    }
}

/// The dtypes an op is checked in (its activation dtype; FP8 weights are always e4m3).
pub fn dtypes(op: Op) -> &'static [DType] {
    match op {
        // Logits are f32. (candle's CUDA argmax does not keep the first index on bf16 ties.)
        Op::MoeZero | Op::Argmax => &[DType::F32],
        _ => &[DType::F32, DType::BF16, DType::F16],
    }
}

const GUARD: usize = 16;
const GUARD_VALUE: f64 = 1234.5;

/// One float input living inside a larger buffer with guard cells on both sides.
struct Guarded {
    buffer: Tensor,
    before: Vec<f64>,
    view: Tensor,
}

/// One check case: inputs on the device, scalar parameters, and the f64 reference.
pub struct Case {
    pub label: String,
    floats: Vec<Guarded>,
    raw: Vec<Tensor>,
    pub eps: f64,
    pub alpha: f64,
    pub beta: f64,
    pub scale: f64,
    pub k: usize,
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
    expected: Vec<f64>,
    expected_indices: Option<Vec<u32>>,
}

impl Case {
    /// The i-th float input (a view into its guarded buffer).
    pub fn float(&self, i: usize) -> &Tensor {
        &self.floats[i].view
    }

    /// How many float inputs the case has (e.g. a weightless norm has one).
    pub fn float_count(&self) -> usize {
        self.floats.len()
    }

    /// The i-th non-float input (indices, FP8 weights, masks).
    pub fn raw(&self, i: usize) -> &Tensor {
        &self.raw[i]
    }
}

/// The outcome of checking one arm of one op in one dtype over all its cases.
#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    pub ok: bool,
    pub dtype: String,
    pub cases: usize,
    pub nmse: f64,
    pub max_abs: f64,
    pub tolerance: Tolerance,
    /// What failed first, if anything.
    pub failure: Option<String>,
}

/// Runs `op` through `arm` on one case.
pub fn run_arm(op: Op, arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    Ok(match op {
        Op::GeluMul => vec![gelu_mul::gelu_mul_on(arm, f(0), f(1))?],
        Op::GeluAndMul => vec![gelu_and_mul::gelu_and_mul_on(arm, f(0))?],
        Op::RmsNorm => {
            let weight = (c.float_count() > 1).then(|| f(1));
            vec![rms_norm::rms_norm_on(arm, f(0), weight, c.eps)?]
        }
        Op::RmsNormPlusAdd => vec![rms_norm_plus_add::rms_norm_plus_add_on(
            arm,
            f(0),
            f(1),
            f(2),
            c.eps,
        )?],
        Op::DualRmsNormPlusRes => {
            let (r, y) = dual_rms_norm_plus_res::dual_rms_norm_plus_res_on(
                arm,
                f(0),
                f(1),
                f(2),
                f(3),
                c.eps,
            )?;
            vec![r, y]
        }
        Op::Linear => vec![linear::linear_on(arm, f(0), f(1))?],
        Op::Argmax => {
            // The chosen indices, and the values there (which must be the row maxima).
            let indices = argmax::argmax_on(arm, f(0))?;
            let values = f(0).gather(&indices.unsqueeze(1)?, 1)?;
            vec![values, indices]
        }
        Op::MatmulBtAlphaBeta => {
            vec![matmul_bt_alpha_beta::matmul_bt_alpha_beta_on(
                arm,
                f(0),
                f(1),
                f(2),
                c.alpha,
                c.beta,
            )?]
        }
        Op::DequantFp8Channel => {
            vec![dequant_fp8_channel::dequant_fp8_channel_on(
                arm,
                c.raw(0),
                f(0),
                c.dtype,
            )?]
        }
        Op::MatmulBtFp8Channel => vec![matmul_bt_fp8_channel::matmul_bt_fp8_channel_on(
            arm,
            f(0),
            c.raw(0),
            f(1),
        )?],
        Op::MoeRouterTopk => {
            let (w, idx) = moe_router_topk::moe_router_topk_on(arm, f(0), c.k, f(1))?;
            vec![w, idx]
        }
        Op::MoeGatherRows => vec![moe_gather_rows::moe_gather_rows_on(arm, f(0), c.raw(0))?],
        Op::MoeWeightedScatterAdd => {
            vec![moe_weighted_scatter_add::moe_weighted_scatter_add_on(
                arm,
                f(0),
                c.raw(0),
                f(1),
                f(2),
            )?]
        }
        Op::MoeZero => vec![moe_zero::moe_zero_on(
            arm,
            c.rows,
            c.cols,
            c.raw(0).device(),
        )?],
        Op::Rope => vec![rope::rope_on(arm, f(0), f(1), f(2))?],
        Op::Softcap => vec![softcap::softcap_on(arm, f(0), c.scale)?],
        Op::Attention => vec![attention::attention_on(
            arm,
            f(0),
            f(1),
            f(2),
            Some(c.raw(0)),
            c.scale,
        )?],
    })
}

/// Checks `run` (an arm, or a deliberately broken stand-in in tests) for `op` in `dtype`.
pub fn check_with(
    op: Op,
    device: &Device,
    dtype: DType,
    seed: u64,
    run: &dyn Fn(&Case) -> Result<Vec<Tensor>>,
) -> Result<CheckResult> {
    let tolerance = tolerance(op, dtype);
    let mut result = CheckResult {
        ok: true,
        dtype: crate::device::dtype_name(dtype).to_string(),
        cases: 0,
        nmse: 0.0,
        max_abs: 0.0,
        tolerance,
        failure: None,
    };
    let cases = match build_cases(op, device, dtype, &mut StdRng::seed_from_u64(seed)) {
        Ok(cases) => cases,
        Err(e) => {
            result.ok = false;
            result.failure = Some(format!(
                "cannot build inputs on this device: {}",
                first_line(&e.to_string())
            ));
            return Ok(result);
        }
    };
    result.cases = cases.len();
    for case in &cases {
        if let Some(problem) = check_case(case, run, tolerance, &mut result)? {
            result.ok = false;
            result
                .failure
                .get_or_insert(format!("{}: {problem}", case.label));
        }
    }
    Ok(result)
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Checks one arm of `op` in `dtype`.
pub fn check_arm(
    op: Op,
    arm: Arm,
    device: &Device,
    dtype: DType,
    seed: u64,
) -> Result<CheckResult> {
    check_with(op, device, dtype, seed, &|case| run_arm(op, arm, case))
}

/// A probe reports a crashing arm like a wrong one: as a failed check, never by crashing.
fn check_case(
    case: &Case,
    run: &dyn Fn(&Case) -> Result<Vec<Tensor>>,
    tolerance: Tolerance,
    result: &mut CheckResult,
) -> Result<Option<String>> {
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        compare(case, run, tolerance, result)
    }));
    match checked {
        Ok(Ok(problem)) => Ok(problem),
        Ok(Err(e)) => Ok(Some(format!(
            "reading the results failed: {}",
            first_line(&e.to_string())
        ))),
        Err(panic) => Ok(Some(format!("the arm panicked: {}", panic_message(&panic)))),
    }
}

fn compare(
    case: &Case,
    run: &dyn Fn(&Case) -> Result<Vec<Tensor>>,
    tolerance: Tolerance,
    result: &mut CheckResult,
) -> Result<Option<String>> {
    let outputs = match run(case) {
        Ok(outputs) => outputs,
        Err(e) => {
            return Ok(Some(format!(
                "the arm failed: {}",
                first_line(&e.to_string())
            )))
        }
    };
    let mut got = Vec::new();
    let mut indices = None;
    for out in &outputs {
        if out.dtype() == DType::U32 {
            indices = Some(out.flatten_all()?.to_vec1::<u32>()?);
        } else {
            got.extend(
                out.flatten_all()?
                    .to_dtype(DType::F32)?
                    .to_dtype(DType::F64)?
                    .to_vec1::<f64>()?,
            );
        }
    }
    for guarded in &case.floats {
        if guarded
            .buffer
            .to_dtype(DType::F32)?
            .to_dtype(DType::F64)?
            .to_vec1::<f64>()?
            != guarded.before
        {
            return Ok(Some(
                "wrote outside its output (an input or a guard cell changed)".into(),
            ));
        }
    }
    if got.len() != case.expected.len() {
        return Ok(Some(format!(
            "produced {} values, expected {}",
            got.len(),
            case.expected.len()
        )));
    }
    if got.iter().any(|v| !v.is_finite()) {
        return Ok(Some("produced NaN or Inf".into()));
    }
    if let Some(expected) = &case.expected_indices {
        if indices.as_ref() != Some(expected) {
            return Ok(Some(format!("chose {indices:?}, expected {expected:?}")));
        }
    }
    let (err, norm, max_abs, max_ref) =
        got.iter()
            .zip(&case.expected)
            .fold((0.0, 0.0, 0.0f64, 0.0f64), |acc, (g, e)| {
                (
                    acc.0 + (g - e) * (g - e),
                    acc.1 + e * e,
                    acc.2.max((g - e).abs()),
                    acc.3.max(e.abs()),
                )
            });
    let nmse = if norm > 0.0 { err / norm } else { err };
    result.nmse = result.nmse.max(nmse);
    result.max_abs = result.max_abs.max(max_abs);
    if nmse > tolerance.nmse {
        return Ok(Some(format!("NMSE {nmse:.3e} > {:.0e}", tolerance.nmse)));
    }
    if max_abs > tolerance.max_abs_relative * max_ref.max(1.0) {
        return Ok(Some(format!(
            "max abs error {max_abs:.3e} > {:.0e} × {:.3}",
            tolerance.max_abs_relative,
            max_ref.max(1.0)
        )));
    }
    Ok(None)
}

/// Case construction: inputs are rounded to the dtype first, so the f64 reference sees exactly
/// what the arm sees.
struct Builder<'a> {
    device: &'a Device,
    dtype: DType,
    rng: &'a mut StdRng,
    floats: Vec<Guarded>,
    raw: Vec<Tensor>,
}

impl<'a> Builder<'a> {
    fn new(device: &'a Device, dtype: DType, rng: &'a mut StdRng) -> Builder<'a> {
        Builder {
            device,
            dtype,
            rng,
            floats: vec![],
            raw: vec![],
        }
    }

    fn round(&self, values: Vec<f64>, dtype: DType) -> Result<Vec<f64>> {
        let n = values.len();
        // Via f32: candle 0.11.1's CPU conversion between F8E4M3 and F64 never returns.
        let rounded = Tensor::from_vec(values, n, &Device::Cpu)?
            .to_dtype(DType::F32)?
            .to_dtype(dtype)?;
        rounded
            .to_dtype(DType::F32)?
            .to_dtype(DType::F64)?
            .to_vec1()
    }

    /// A float input of `shape` in `dtype` holding `values` (rounded to `dtype`).
    fn values_as(&mut self, shape: &[usize], dtype: DType, values: Vec<f64>) -> Result<Vec<f64>> {
        let n: usize = shape.iter().product();
        let values = self.round(values, dtype)?;
        let mut host = vec![GUARD_VALUE; GUARD];
        host.extend(&values);
        host.extend(vec![GUARD_VALUE; GUARD]);
        let host = self.round(host, dtype)?;
        let buffer = Tensor::from_vec(host.clone(), host.len(), &Device::Cpu)?
            .to_dtype(dtype)?
            .to_device(self.device)?;
        let view = buffer.narrow(0, GUARD, n)?.reshape(shape)?;
        self.floats.push(Guarded {
            buffer,
            before: host,
            view,
        });
        Ok(values)
    }

    fn float_as(
        &mut self,
        shape: &[usize],
        dtype: DType,
        draw: impl Fn(&mut StdRng) -> f64,
    ) -> Result<Vec<f64>> {
        let n: usize = shape.iter().product();
        let values: Vec<f64> = (0..n).map(|_| draw(self.rng)).collect();
        self.values_as(shape, dtype, values)
    }

    fn float(&mut self, shape: &[usize], draw: impl Fn(&mut StdRng) -> f64) -> Result<Vec<f64>> {
        self.float_as(shape, self.dtype, draw)
    }

    fn uniform(&mut self, shape: &[usize], lo: f64, hi: f64) -> Result<Vec<f64>> {
        self.float(shape, move |r| r.random_range(lo..hi))
    }

    fn indices(&mut self, values: &[u32]) -> Result<()> {
        self.raw.push(Tensor::new(values, self.device)?);
        Ok(())
    }

    fn finish(self, label: String, expected: Vec<f64>) -> Case {
        Case {
            label,
            floats: self.floats,
            raw: self.raw,
            eps: 1e-6,
            alpha: 1.0,
            beta: 1.0,
            scale: 1.0,
            k: 0,
            rows: 0,
            cols: 0,
            dtype: self.dtype,
            expected,
            expected_indices: None,
        }
    }
}

fn norm_weight(r: &mut StdRng) -> f64 {
    1.0 + 0.2 * (r.random::<f64>() * 2.0 - 1.0) * 1.7
}

fn build_cases(op: Op, device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    match op {
        Op::GeluMul => {
            for (rows, cols) in [(1, 7), (3, 257), (17, 1024)] {
                let mut c = Builder::new(device, dtype, rng);
                let gate = c.uniform(&[rows, cols], -4.0, 4.0)?;
                let up = c.uniform(&[rows, cols], -2.0, 2.0)?;
                cases.push(c.finish(format!("[{rows}, {cols}]"), gelu_mul::reference(&gate, &up)));
            }
        }
        Op::GeluAndMul => {
            for (rows, d) in [(1, 7), (3, 129), (9, 704)] {
                let mut c = Builder::new(device, dtype, rng);
                let packed = c.uniform(&[rows, 2 * d], -3.0, 3.0)?;
                cases.push(c.finish(
                    format!("[{rows}, 2×{d}]"),
                    gelu_and_mul::reference(&packed, d),
                ));
            }
        }
        Op::RmsNorm => {
            for (rows, cols, weighted) in [
                (1, 64, true),
                (3, 257, true),
                // The widest row the CUDA kernels hold in registers, and one past it.
                (2, 8192, true),
                (1, 8200, true),
                (5, 2560, true),
                (4, 33, false),
            ] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
                let w = if weighted {
                    Some(c.float(&[cols], norm_weight)?)
                } else {
                    None
                };
                let label = format!(
                    "[{rows}, {cols}]{}",
                    if weighted { "" } else { " no weight" }
                );
                cases.push(c.finish(label, rms_norm::reference(&x, cols, w.as_deref(), 1e-6)));
            }
        }
        Op::RmsNormPlusAdd => {
            for (rows, cols) in [(1, 64), (3, 257), (2, 8192), (1, 8200), (5, 2560)] {
                let mut c = Builder::new(device, dtype, rng);
                let r = c.uniform(&[rows, cols], -5.0, 5.0)?;
                let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
                let w = c.float(&[cols], norm_weight)?;
                cases.push(c.finish(
                    format!("[{rows}, {cols}]"),
                    rms_norm_plus_add::reference(&r, &x, cols, &w, 1e-6),
                ));
            }
        }
        Op::DualRmsNormPlusRes => {
            // 5376 is the 31B model's hidden size; 8192 the widest row held in registers.
            for (rows, cols) in [
                (1, 64),
                (3, 257),
                (2, 8192),
                (1, 8200),
                (2, 5376),
                (5, 2560),
            ] {
                let mut c = Builder::new(device, dtype, rng);
                let r = c.uniform(&[rows, cols], -5.0, 5.0)?;
                let x = c.uniform(&[rows, cols], -3.0, 3.0)?;
                let w1 = c.float(&[cols], norm_weight)?;
                let w2 = c.float(&[cols], norm_weight)?;
                let expected = dual_rms_norm_plus_res::reference(&r, &x, cols, &w1, &w2, 1e-6);
                cases.push(c.finish(format!("[{rows}, {cols}]"), expected));
            }
        }
        Op::Argmax => {
            // One row of logits-sized vocabulary, several short rows (ties go to the first).
            for (rows, n) in [(1, 262_144), (3, 1000), (2, 7)] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[rows, n], -30.0, 30.0)?;
                let indices = argmax::reference(&x, n);
                let maxima = indices
                    .iter()
                    .enumerate()
                    .map(|(r, &i)| x[r * n + i as usize])
                    .collect();
                let mut case = c.finish(format!("[{rows}, {n}]"), maxima);
                case.expected_indices = Some(indices);
                cases.push(case);
            }
        }
        Op::Linear => {
            // Decode rows (the CUDA arm's GEMV, K whole vectors or not), a prefill block, and last
            // (the one `--perf` times) a decode GEMV of a model's size, bound by reading W.
            for (m, n, k) in [
                (1, 37, 64),
                (3, 130, 264),
                (8, 64, 512),
                (2, 19, 27),
                (24, 48, 96),
                (1, 4096, 4096),
            ] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[m, k], -1.0, 1.0)?;
                let w = c.uniform(&[n, k], -1.0, 1.0)?;
                let expected = linear::reference(&x, &w, m, n, k);
                cases.push(c.finish(format!("M{m} N{n} K{k}"), expected));
            }
        }
        Op::MatmulBtAlphaBeta => {
            for (m, n, k, alpha, beta) in [
                (1, 7, 9, 1.0, 1.0),
                (5, 33, 65, 0.5, 1.0),
                (16, 64, 128, 1.0, 0.0),
            ] {
                let mut c = Builder::new(device, dtype, rng);
                let a = c.uniform(&[m, k], -1.0, 1.0)?;
                let bt = c.uniform(&[n, k], -1.0, 1.0)?;
                let acc = c.uniform(&[m, n], -2.0, 2.0)?;
                let expected = matmul_bt_alpha_beta::reference(&a, &bt, &acc, m, n, k, alpha, beta);
                let mut case = c.finish(format!("M{m} N{n} K{k} α{alpha} β{beta}"), expected);
                (case.alpha, case.beta) = (alpha, beta);
                cases.push(case);
            }
        }
        Op::DequantFp8Channel | Op::MatmulBtFp8Channel => {
            for (m, n, k) in [(1, 3, 5), (3, 17, 129), (8, 64, 256)] {
                let mut c = Builder::new(device, dtype, rng);
                let x = if op == Op::MatmulBtFp8Channel {
                    Some(c.uniform(&[m, k], -1.0, 1.0)?)
                } else {
                    None
                };
                let raw: Vec<f64> = (0..n * k).map(|_| c.rng.random_range(-3.0..3.0)).collect();
                let weight = c.round(raw.clone(), DType::F8E4M3)?;
                let w8 = Tensor::from_vec(raw, (n, k), &Device::Cpu)?
                    .to_dtype(DType::F32)?
                    .to_dtype(DType::F8E4M3)?
                    .to_device(device)?;
                c.raw.push(w8);
                let scale = c.float_as(&[n], DType::F32, |r| r.random_range(0.01..0.1))?;
                let (label, expected) = match x {
                    Some(x) => (
                        format!("M{m} N{n} K{k}"),
                        matmul_bt_fp8_channel::reference(&x, &weight, &scale, m, n, k),
                    ),
                    None => (
                        format!("[{n}, {k}]"),
                        dequant_fp8_channel::reference(&weight, &scale, k),
                    ),
                };
                cases.push(c.finish(label, expected));
            }
        }
        Op::MoeRouterTopk => {
            for (rows, experts, k) in [(1, 4, 2), (3, 16, 4), (5, 128, 8)] {
                let mut c = Builder::new(device, dtype, rng);
                // Distinct, well-separated logits: rounding can never create a tie.
                let mut logits = Vec::with_capacity(rows * experts);
                for _ in 0..rows {
                    let mut row: Vec<f64> = (0..experts)
                        .map(|e| e as f64 * 0.1 - experts as f64 * 0.05)
                        .collect();
                    for i in (1..row.len()).rev() {
                        row.swap(i, c.rng.random_range(0..=i));
                    }
                    logits.extend(row);
                }
                let logits = c.values_as(&[rows, experts], dtype, logits)?;
                let scale = c.float(&[experts], norm_weight)?;
                let picked = moe_router_topk::reference(&logits, experts, k, &scale);
                let weights = picked.iter().flatten().map(|&(_, w)| w).collect();
                let mut case = c.finish(format!("[{rows}, {experts}] top-{k}"), weights);
                case.k = k;
                case.expected_indices =
                    Some(picked.iter().flatten().map(|&(e, _)| e as u32).collect());
                cases.push(case);
            }
        }
        Op::MoeGatherRows => {
            for (n, h, r) in [(1, 7, 1), (6, 65, 9), (32, 256, 40)] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[n, h], -2.0, 2.0)?;
                let rows: Vec<usize> = (0..r).map(|_| c.rng.random_range(0..n)).collect();
                c.indices(&rows.iter().map(|&i| i as u32).collect::<Vec<_>>())?;
                cases.push(c.finish(
                    format!("[{n}, {h}] → {r} rows"),
                    moe_gather_rows::reference(&x, h, &rows),
                ));
            }
        }
        Op::MoeWeightedScatterAdd => {
            for (n, h, r) in [(1, 7, 2), (6, 65, 9), (32, 256, 64)] {
                let mut c = Builder::new(device, dtype, rng);
                let out = c.float_as(&[n, h], DType::F32, |r| r.random_range(-1.0..1.0))?;
                let tokens: Vec<usize> = (0..r).map(|_| c.rng.random_range(0..n)).collect();
                c.indices(&tokens.iter().map(|&i| i as u32).collect::<Vec<_>>())?;
                let w = c.float_as(&[r], DType::F32, |r| r.random_range(0.0..1.0))?;
                let y = c.uniform(&[r, h], -2.0, 2.0)?;
                let expected = moe_weighted_scatter_add::reference(&out, h, &tokens, &w, &y);
                cases.push(c.finish(format!("{r} rows → [{n}, {h}]"), expected));
            }
        }
        Op::MoeZero => {
            for (rows, cols) in [(1, 64), (7, 33), (128, 2560)] {
                let mut c = Builder::new(device, dtype, rng);
                c.raw.push(Tensor::zeros(1, DType::U32, device)?);
                let mut case =
                    c.finish(format!("[{rows}, {cols}]"), moe_zero::reference(rows, cols));
                (case.rows, case.cols) = (rows, cols);
                cases.push(case);
            }
        }
        Op::Rope => {
            for (seq, heads, d, proportional) in [
                (3, 4, 16, false),
                (7, 2, 256, false),
                (5, 2, 512, true),
                (1, 8, 64, false),
            ] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[1, seq, heads, d], -2.0, 2.0)?;
                let half = d / 2;
                let rotated = if proportional { d / 8 } else { half };
                let start = 37;
                let angles: Vec<f64> = (0..seq)
                    .flat_map(|s| {
                        (0..half).map(move |j| {
                            let inv = if j < rotated {
                                10000f64.powf(-2.0 * j as f64 / d as f64)
                            } else {
                                0.0
                            };
                            (start + s) as f64 * inv
                        })
                    })
                    .collect();
                let cos = c.values_as(
                    &[seq, half],
                    DType::F32,
                    angles.iter().map(|a| a.cos()).collect(),
                )?;
                let sin = c.values_as(
                    &[seq, half],
                    DType::F32,
                    angles.iter().map(|a| a.sin()).collect(),
                )?;
                let expected = rope::reference(&x, seq, heads, d, &cos, &sin);
                let label = format!(
                    "[1, {seq}, {heads}, {d}]{}",
                    if proportional { " proportional" } else { "" }
                );
                cases.push(c.finish(label, expected));
            }
        }
        Op::Softcap => {
            for (rows, cols) in [(1, 11), (4, 262), (2, 4096)] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[rows, cols], -100.0, 100.0)?;
                let mut case = c.finish(
                    format!("[{rows}, {cols}] cap 30"),
                    softcap::reference(&x, 30.0),
                );
                case.scale = 30.0;
                cases.push(case);
            }
        }
        Op::Attention => {
            // (heads, kv heads, queries, keys, head dim, sliding window, first query position);
            // queries sit at the end of the keys unless a position is given.
            for (h, kvh, s, t, d, window, first) in [
                (4, 4, 5, 5, 16, None, None),
                (8, 2, 3, 11, 256, Some(8), None),
                (4, 1, 1, 9, 512, None, None),
                (2, 1, 13, 13, 64, Some(4), None),
                // Decode over many keys: the CUDA arm splits them into chunks and merges.
                (8, 2, 1, 300, 256, None, None),
                // A graph step's whole cache buffer: only slots up to the position are visible,
                // so whole chunks are hidden.
                (8, 2, 1, 256, 512, None, Some(69)),
                // Longer than a decode block: the CUDA arm's GEMM path.
                (4, 2, 24, 30, 128, Some(8), None),
            ] {
                let mut c = Builder::new(device, dtype, rng);
                let spread = (d as f64).powf(-0.25) * 1.5;
                let q = c.uniform(&[1, h, s, d], -spread, spread)?;
                let k = c.uniform(&[1, kvh, t, d], -spread, spread)?;
                let v = c.uniform(&[1, kvh, t, d], -1.0, 1.0)?;
                let first_query = first.unwrap_or(t - s);
                let mask: Vec<f64> = (0..s)
                    .flat_map(|i| {
                        (0..t).map(move |j| {
                            if crate::model::kv_cache::visible(first_query + i, j, window) {
                                0.0
                            } else {
                                f64::NEG_INFINITY
                            }
                        })
                    })
                    .collect();
                let mask_f32: Vec<f32> = mask.iter().map(|&m| m as f32).collect();
                c.raw.push(Tensor::from_vec(mask_f32, (s, t), device)?);
                let expected = attention::reference(&q, &k, &v, &mask, h, kvh, s, t, d, 1.0);
                let label = format!(
                    "q[{h}×{s}×{d}] kv[{kvh}×{t}]{}{}",
                    window.map_or(String::new(), |w| format!(" window {w}")),
                    first.map_or(String::new(), |p| format!(" at position {p}"))
                );
                cases.push(c.finish(label, expected));
            }
        }
    }
    Ok(cases)
}

/// Speed of one arm on the op's largest check case.
#[derive(Clone, Debug, Serialize)]
pub struct Perf {
    pub case: String,
    pub dtype: String,
    pub us_per_call: f64,
    /// Bytes of every input and output, once each, per second.
    pub gb_per_s: f64,
    /// For the GEMMs: 2·M·N·K per second.
    pub tflop_per_s: Option<f64>,
}

pub fn time_arm(op: Op, arm: Arm, device: &Device, dtype: DType, seed: u64) -> Result<Perf> {
    let cases = build_cases(op, device, dtype, &mut StdRng::seed_from_u64(seed))?;
    let case = cases.last().expect("every op has check cases");
    let outputs = run_arm(op, arm, case)?;
    let bytes: usize = case
        .floats
        .iter()
        .map(|g| &g.view)
        .chain(&case.raw)
        .chain(&outputs)
        .map(|t| t.elem_count() * t.dtype().size_in_bytes())
        .sum();
    let flops = match op {
        Op::MatmulBtAlphaBeta | Op::MatmulBtFp8Channel | Op::Linear => {
            let (m, k) = case.float(0).dims2()?;
            let n = outputs[0].dim(1)?;
            Some(2.0 * (m * n * k) as f64)
        }
        _ => None,
    };
    for _ in 0..3 {
        run_arm(op, arm, case)?;
    }
    device.synchronize()?;
    let started = std::time::Instant::now();
    let mut calls = 0u32;
    while calls < 10 || (started.elapsed().as_secs_f64() < 0.05 && calls < 1000) {
        run_arm(op, arm, case)?;
        calls += 1;
        if calls.is_multiple_of(10) {
            device.synchronize()?;
        }
    }
    device.synchronize()?;
    let seconds = started.elapsed().as_secs_f64() / calls as f64;
    Ok(Perf {
        case: case.label.clone(),
        dtype: crate::device::dtype_name(dtype).to_string(),
        us_per_call: seconds * 1e6,
        gb_per_s: bytes as f64 / seconds / 1e9,
        tflop_per_s: flops.map(|f| f / seconds / 1e12),
    })
}
