//! The inputs of a device-resident decode step. Everything that changes from one token to the
//! next (the token, its position, its ring slot) lives in one small device buffer that the host
//! overwrites before each step; everything derived from it (RoPE rows, masks, cache slots) is
//! computed on the device inside the step. So the step issues the same launches with the same
//! arguments every time, which is what lets CUDA capture it once and replay it (see
//! `session.rs`), and on other devices it is the same computation run directly.

use super::config::LayerKind;
use anyhow::Result;
use candle_core::{DType, Device, Tensor};

/// Slots of the u32 input buffer.
const TOKEN: usize = 0;
const PLE_TOKEN: usize = 1;
const POSITION: usize = 2;
const RING_SLOT: usize = 3;
const INPUTS: usize = 4;

/// What one layer kind attends over: its cache length (full layers: the reserved capacity;
/// sliding layers: the ring) and its RoPE table, kept alive here because a captured step
/// reads these buffers by address.
pub struct KindBuffers {
    pub keys: usize,
    pub rope_cos: Tensor,
    pub rope_sin: Tensor,
}

pub struct DeviceStep {
    inputs: Tensor,
    window: usize,
    kinds: [KindBuffers; 2],
    /// Per kind: key slot numbers `0..keys` (u32), and the mask values for open and hidden slots.
    key_slots: [Tensor; 2],
    open: [Tensor; 2],
    hidden: [Tensor; 2],
}

/// What a step computes once per layer kind from the device-held position.
pub struct KindInputs {
    pub cos: Tensor,
    pub sin: Tensor,
    /// `[1, keys]`: 0 for slots at or before the position, −∞ after it. In a ring every
    /// filled slot is within the window, and unfilled slots come after the position.
    pub mask: Tensor,
    /// The cache slot this token's K/V go to (u32 `[1]`): the position, or position mod W.
    pub slot: Tensor,
}

impl DeviceStep {
    pub fn new(
        sliding: KindBuffers,
        full: KindBuffers,
        window: usize,
        device: &Device,
    ) -> Result<DeviceStep> {
        // Indexed by `LayerKind as usize`.
        let kinds = [sliding, full];
        let per_kind = |f: &dyn Fn(usize) -> candle_core::Result<Tensor>| -> Result<[Tensor; 2]> {
            Ok([f(kinds[0].keys)?, f(kinds[1].keys)?])
        };
        Ok(DeviceStep {
            inputs: Tensor::zeros(INPUTS, DType::U32, device)?,
            window,
            key_slots: per_kind(&|keys| Tensor::arange(0u32, keys as u32, device))?,
            open: per_kind(&|keys| Tensor::zeros(keys, DType::F32, device))?,
            hidden: per_kind(&|keys| {
                Tensor::from_vec(vec![f32::NEG_INFINITY; keys], keys, device)
            })?,
            kinds,
        })
    }

    /// Full layers' room: the step is valid for positions below this.
    pub fn capacity(&self) -> usize {
        self.kinds[LayerKind::Full as usize].keys
    }

    /// Sets the next step's token (and the id its per-layer embedding reads) and position.
    pub fn set(&self, token: u32, ple_token: u32, position: usize) -> Result<()> {
        let ring_slot = position % self.window.max(1);
        let host = Tensor::new(
            &[token, ple_token, position as u32, ring_slot as u32],
            self.inputs.device(),
        )?;
        self.inputs.slice_set(&host, 0, 0)?;
        Ok(())
    }

    fn input(&self, slot: usize) -> candle_core::Result<Tensor> {
        self.inputs.narrow(0, slot, 1)
    }

    pub fn token(&self) -> candle_core::Result<Tensor> {
        self.input(TOKEN)
    }

    pub fn ple_token(&self) -> candle_core::Result<Tensor> {
        self.input(PLE_TOKEN)
    }

    /// RoPE rows, mask and write slot of `kind` for this step, computed on the device.
    pub fn kind_inputs(&self, kind: LayerKind) -> candle_core::Result<KindInputs> {
        let k = kind as usize;
        let position = self.input(POSITION)?;
        let keys = self.kinds[k].keys;
        let visible = self.key_slots[k].le(&position.broadcast_as(keys)?)?;
        let mask = visible
            .where_cond(&self.open[k], &self.hidden[k])?
            .reshape((1, keys))?;
        Ok(KindInputs {
            cos: self.kinds[k].rope_cos.index_select(&position, 0)?,
            sin: self.kinds[k].rope_sin.index_select(&position, 0)?,
            mask,
            slot: match kind {
                LayerKind::Full => position,
                LayerKind::Sliding => self.input(RING_SLOT)?,
            },
        })
    }
}
