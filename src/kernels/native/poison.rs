//! Poisoned outputs for numerical checks. A kernel that leaves output cells unwritten could
//! pass on recycled memory that happens to hold the right values (a zeroing kernel that does
//! nothing passes on zeroed memory). While a check is armed on this thread, every native output
//! is allocated inside a larger buffer: the output cells hold poison (NaN, or an impossible
//! index) and guard cells on both sides hold a known value, so that an unwritten cell shows up
//! in the result and a write past either end shows up in the guards.

use candle_core::{DType, Device, Result, Shape, Tensor};
use std::cell::RefCell;

/// Guard cells on each side of an output.
pub const GUARD: usize = 16;
const FLOAT_GUARD: f64 = -7777.0;
const INDEX_POISON: u32 = u32::MAX - 1;
const INDEX_GUARD: u32 = 0xA5A5_A5A5;

/// One poisoned output: its whole buffer, and the guard cells as they were written.
pub struct GuardedOutput {
    buffer: Tensor,
    len: usize,
    guards_before: Vec<f64>,
}

thread_local! {
    static ARMED: RefCell<Option<Vec<GuardedOutput>>> = const { RefCell::new(None) };
}

/// From now on, native outputs allocated on this thread are poisoned and guarded.
pub fn arm() {
    ARMED.with(|armed| *armed.borrow_mut() = Some(Vec::new()));
}

/// Stops poisoning; returns the outputs allocated since [`arm`].
pub fn disarm() -> Vec<GuardedOutput> {
    ARMED.with(|armed| armed.borrow_mut().take().unwrap_or_default())
}

/// A poisoned, guarded output when a check is armed; `None` otherwise.
pub(super) fn allocate(shape: &Shape, dtype: DType, device: &Device) -> Option<Result<Tensor>> {
    if ARMED.with(|armed| armed.borrow().is_none()) {
        return None;
    }
    Some(poisoned(shape, dtype, device))
}

fn poisoned(shape: &Shape, dtype: DType, device: &Device) -> Result<Tensor> {
    let len = shape.elem_count();
    let (poison, guard) = match dtype {
        DType::U32 => (INDEX_POISON as f64, INDEX_GUARD as f64),
        _ => (f64::NAN, FLOAT_GUARD),
    };
    let mut host = vec![guard; GUARD];
    host.extend(std::iter::repeat_n(poison, len));
    host.extend(std::iter::repeat_n(guard, GUARD));
    let buffer = Tensor::new(host, &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(device)?;
    let guarded = GuardedOutput {
        guards_before: guard_values(&buffer, len)?,
        buffer: buffer.clone(),
        len,
    };
    ARMED.with(|armed| {
        if let Some(outputs) = armed.borrow_mut().as_mut() {
            outputs.push(guarded);
        }
    });
    buffer.narrow(0, GUARD, len)?.reshape(shape)
}

fn guard_values(buffer: &Tensor, len: usize) -> Result<Vec<f64>> {
    let as_f64 = |t: Tensor| {
        t.to_device(&Device::Cpu)?
            .to_dtype(DType::F64)?
            .to_vec1::<f64>()
    };
    let mut values = as_f64(buffer.narrow(0, 0, GUARD)?)?;
    values.extend(as_f64(buffer.narrow(0, GUARD + len, GUARD)?)?);
    Ok(values)
}

impl GuardedOutput {
    /// Whether every guard cell still holds what was written there.
    pub fn guards_intact(&self) -> Result<bool> {
        Ok(guard_values(&self.buffer, self.len)? == self.guards_before)
    }
}
