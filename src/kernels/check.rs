//! The numerical check that `g4 probe-ops` and the tests share, for any op's contract: every
//! arm against its f64 reference, on fresh random inputs (the contract's cases), in each dtype
//! the contract names. Metrics as llama.cpp's test-backend-ops: NMSE `Σ(a−b)²/Σa²` and max abs
//! error, plus a NaN/Inf check and guard bands: inputs live inside larger buffers whose guard
//! cells and input cells must be unchanged after the call, and native outputs are poisoned and
//! guarded (`native::poison`), so an unwritten output cell or a write past an output's end fails.

use super::contract::{OpContract, Tolerance};
use super::native::{poison, Arm};
use super::Op;
use candle_core::{DType, Device, Result, Tensor};
use float8::F8E4M3;
use half::{bf16, f16};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;

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
    /// Index outputs (u32) that must match exactly, in output order.
    pub expected_indices: Option<Vec<u32>>,
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

    /// The i-th non-float input, if the case has one (e.g. an optional mask).
    pub fn optional_raw(&self, i: usize) -> Option<&Tensor> {
        self.raw.get(i)
    }

    /// Every non-float input, in the order given.
    pub fn raws(&self) -> &[Tensor] {
        &self.raw
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

/// Checks `run` (an arm, or a deliberately broken stand-in in tests) against `contract`'s
/// cases in `dtype`.
pub fn check_with(
    contract: &OpContract,
    device: &Device,
    dtype: DType,
    seed: u64,
    run: &dyn Fn(&Case) -> Result<Vec<Tensor>>,
) -> Result<CheckResult> {
    let tolerance = contract.spec.tolerance.in_dtype(dtype);
    let mut result = CheckResult {
        ok: true,
        dtype: crate::device::dtype_name(dtype).to_string(),
        cases: 0,
        nmse: 0.0,
        max_abs: 0.0,
        tolerance,
        failure: None,
    };
    let cases = match (contract.cases)(device, dtype, &mut StdRng::seed_from_u64(seed)) {
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
    let contract = op.contract();
    check_with(contract, device, dtype, seed, &|case| {
        (contract.run)(arm, case)
    })
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
    poison::arm();
    let outputs = run(case);
    let poisoned = poison::disarm();
    let outputs = match outputs {
        Ok(outputs) => outputs,
        Err(e) => {
            return Ok(Some(format!(
                "the arm failed: {}",
                first_line(&e.to_string())
            )))
        }
    };
    for output in &poisoned {
        if !output.guards_intact()? {
            return Ok(Some(
                "wrote past the end of its output (a guard cell changed)".into(),
            ));
        }
    }
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
        if !unchanged(&guarded.buffer, &guarded.before)? {
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

/// A host tensor in `dtype` holding `values`, which `Builder::round` made exact in it.
fn exact_tensor(values: &[f64], dtype: DType) -> Result<Tensor> {
    let cpu = &Device::Cpu;
    match dtype {
        DType::F64 => Tensor::from_slice(values, values.len(), cpu),
        DType::F32 => Tensor::from_iter(values.iter().map(|&v| v as f32), cpu),
        DType::BF16 => Tensor::from_iter(values.iter().map(|&v| bf16::from_f64(v)), cpu),
        DType::F16 => Tensor::from_iter(values.iter().map(|&v| f16::from_f64(v)), cpu),
        other => candle_core::bail!("check inputs cannot be {other:?}"),
    }
}

/// Whether `buffer` still holds exactly `before` (an f32 copy is exact for every float dtype
/// the checks use but f64, and halves what a real-size case copies).
fn unchanged(buffer: &Tensor, before: &[f64]) -> Result<bool> {
    if buffer.dtype() == DType::F64 {
        return Ok(buffer.to_vec1::<f64>()? == before);
    }
    let now = buffer.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    Ok(now.len() == before.len() && now.iter().zip(before).all(|(&a, &b)| a as f64 == b))
}

/// Case construction: inputs are rounded to the dtype first, so the f64 reference sees exactly
/// what the arm sees.
pub struct Builder<'a> {
    device: &'a Device,
    dtype: DType,
    pub rng: &'a mut StdRng,
    floats: Vec<Guarded>,
    raw: Vec<Tensor>,
}

impl<'a> Builder<'a> {
    pub fn new(device: &'a Device, dtype: DType, rng: &'a mut StdRng) -> Builder<'a> {
        Builder {
            device,
            dtype,
            rng,
            floats: vec![],
            raw: vec![],
        }
    }

    /// `values` rounded to `dtype` as candle's conversion from f32 rounds them (the kernels
    /// round f32 results, so the references do too), in place: real-size cases hold tens of
    /// millions of values, and a round trip through tensors would copy them four times.
    pub fn round(&self, mut values: Vec<f64>, dtype: DType) -> Result<Vec<f64>> {
        let via_f32: fn(f32) -> f64 = match dtype {
            DType::F64 => return Ok(values),
            DType::F32 => |v| v as f64,
            DType::BF16 => |v| bf16::from_f32(v).to_f64(),
            DType::F16 => |v| f16::from_f32(v).to_f64(),
            DType::F8E4M3 => |v| F8E4M3::from_f32(v).to_f64(),
            other => candle_core::bail!("check inputs cannot be {other:?}"),
        };
        for v in &mut values {
            *v = via_f32(*v as f32);
        }
        Ok(values)
    }

    /// A float input of `shape` in `dtype` holding `values` (rounded to `dtype`).
    pub fn values_as(
        &mut self,
        shape: &[usize],
        dtype: DType,
        values: Vec<f64>,
    ) -> Result<Vec<f64>> {
        let n: usize = shape.iter().product();
        let mut host = Vec::with_capacity(n + 2 * GUARD);
        host.extend([GUARD_VALUE; GUARD]);
        host.extend(values);
        host.extend([GUARD_VALUE; GUARD]);
        let host = self.round(host, dtype)?;
        let buffer = exact_tensor(&host, dtype)?.to_device(self.device)?;
        let view = buffer.narrow(0, GUARD, n)?.reshape(shape)?;
        let values = host[GUARD..GUARD + n].to_vec();
        self.floats.push(Guarded {
            buffer,
            before: host,
            view,
        });
        Ok(values)
    }

    pub fn float_as(
        &mut self,
        shape: &[usize],
        dtype: DType,
        draw: impl Fn(&mut StdRng) -> f64,
    ) -> Result<Vec<f64>> {
        let n: usize = shape.iter().product();
        let values: Vec<f64> = (0..n).map(|_| draw(self.rng)).collect();
        self.values_as(shape, dtype, values)
    }

    pub fn float(
        &mut self,
        shape: &[usize],
        draw: impl Fn(&mut StdRng) -> f64,
    ) -> Result<Vec<f64>> {
        self.float_as(shape, self.dtype, draw)
    }

    pub fn uniform(&mut self, shape: &[usize], lo: f64, hi: f64) -> Result<Vec<f64>> {
        self.float(shape, move |r| r.random_range(lo..hi))
    }

    pub fn indices(&mut self, values: &[u32]) -> Result<()> {
        self.raw.push(Tensor::new(values, self.device)?);
        Ok(())
    }

    /// A non-float input (an FP8 weight, a mask), passed as it is.
    pub fn raw(&mut self, tensor: Tensor) {
        self.raw.push(tensor);
    }

    /// The dtype float inputs take.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device inputs live on.
    pub fn device(&self) -> &Device {
        self.device
    }

    pub fn finish(self, label: String, expected: Vec<f64>) -> Case {
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

/// A norm weight drawn around 1 (so that a Gemma-3 style `1 + w` shows).
pub fn norm_weight(r: &mut StdRng) -> f64 {
    1.0 + 0.2 * (r.random::<f64>() * 2.0 - 1.0) * 1.7
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
    let contract = op.contract();
    let cases = (contract.cases)(device, dtype, &mut StdRng::seed_from_u64(seed))?;
    let Some(case) = cases.last() else {
        candle_core::bail!("{} has no check cases", op.name());
    };
    let outputs = (contract.run)(arm, case)?;
    let bytes: usize = case
        .floats
        .iter()
        .map(|g| &g.view)
        .chain(&case.raw)
        .chain(&outputs)
        .map(|t| t.elem_count() * t.dtype().size_in_bytes())
        .sum();
    let flops = contract.spec.flops.and_then(|flops| flops(case));
    for _ in 0..3 {
        (contract.run)(arm, case)?;
    }
    device.synchronize()?;
    let started = std::time::Instant::now();
    let mut calls = 0u32;
    while calls < 10 || (started.elapsed().as_secs_f64() < 0.05 && calls < 1000) {
        (contract.run)(arm, case)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The references model a kernel's rounding with `Builder::round`, and real-size inputs are
    /// built from its values: it must round every value as candle's conversion from f32 does,
    /// across each dtype's range (e4m3's subnormals and saturation included).
    #[test]
    fn rounding_matches_candles_conversion_in_every_dtype() {
        let mut rng = StdRng::seed_from_u64(7);
        let values: Vec<f64> = (0..20_000)
            .map(|_| {
                let magnitude = 2f64.powf(rng.random_range(-20.0..17.0));
                if rng.random_bool(0.5) {
                    magnitude
                } else {
                    -magnitude
                }
            })
            .collect();
        let cpu = Device::Cpu;
        let builder = Builder::new(&cpu, DType::F32, &mut rng);
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::F8E4M3] {
            let ours = builder.round(values.clone(), dtype).unwrap();
            let candles: Vec<f32> = Tensor::from_iter(values.iter().map(|&v| v as f32), &cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec1()
                .unwrap();
            for ((&v, &a), &b) in values.iter().zip(&ours).zip(&candles) {
                let same = a == b as f64 || (a.is_nan() && b.is_nan());
                assert!(same, "{dtype:?}: {v} rounds to {a} here, {b} in candle");
            }
        }
    }
}
