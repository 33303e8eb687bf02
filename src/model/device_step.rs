//! The inputs of a device-resident decode step. Everything that changes from one token to the
//! next (the token, its position, its ring slot) lives in one small device buffer that the host
//! overwrites before each step; everything derived from it (RoPE rows, cache slots) is
//! computed on the device inside the step, and attention reads the position itself as the last
//! visible slot. A per-layer embedding table kept in host memory
//! adds one more input: the token's row, copied into a buffer of the step. So the step issues the same launches with the same
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
    /// Per layer kind, indexed by `LayerKind as usize`.
    kinds: [KindBuffers; 2],
    /// `[1, L·Dp]`: the token's per-layer row, when the table is in host memory.
    ple_row: Option<Tensor>,
}

/// What a step computes once per layer kind from the device-held position.
pub struct KindInputs {
    pub cos: Tensor,
    pub sin: Tensor,
    /// The cache slots the step attends over (the kind's buffer length).
    pub keys: usize,
    /// The last slot a query sees (u32 `[1]`): the position. Slots past it are empty: in a ring
    /// every filled slot is within the window, and unfilled slots come after the position.
    pub last_slot: Tensor,
    /// The cache slot this token's K/V go to (u32 `[1]`): the position, or position mod W.
    pub slot: Tensor,
}

impl DeviceStep {
    pub fn new(
        sliding: KindBuffers,
        full: KindBuffers,
        window: usize,
        ple_row: Option<(DType, usize)>,
        device: &Device,
    ) -> Result<DeviceStep> {
        Ok(DeviceStep {
            inputs: Tensor::zeros(INPUTS, DType::U32, device)?,
            window,
            kinds: [sliding, full],
            ple_row: ple_row
                .map(|(dtype, len)| Tensor::zeros((1, len), dtype, device))
                .transpose()?,
        })
    }

    /// Full layers' room: the step is valid for positions below this.
    pub fn capacity(&self) -> usize {
        self.kinds[LayerKind::Full as usize].keys
    }

    /// Sets the next step's token (and the id its per-layer embedding reads) and position.
    pub fn set(&self, token: u32, ple_token: u32, position: usize) -> Result<()> {
        let ring_slot = position % self.window.max(1);
        let values = [token, ple_token, position as u32, ring_slot as u32];
        // Through the same staging as every host-to-device input: no allocation per token.
        crate::kernels::native::upload_rows(&self.inputs, &mut |range, out| {
            for (bytes, value) in out.chunks_exact_mut(4).zip(&values[range]) {
                bytes.copy_from_slice(&value.to_le_bytes());
            }
            Ok(())
        })?;
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

    /// The buffer the host writes the token's per-layer row into (host tables only).
    pub fn ple_row(&self) -> Option<&Tensor> {
        self.ple_row.as_ref()
    }

    /// RoPE rows, last visible slot and write slot of `kind` for this step, on the device.
    pub fn kind_inputs(&self, kind: LayerKind) -> candle_core::Result<KindInputs> {
        let k = kind as usize;
        let position = self.input(POSITION)?;
        Ok(KindInputs {
            cos: self.kinds[k].rope_cos.index_select(&position, 0)?,
            sin: self.kinds[k].rope_sin.index_select(&position, 0)?,
            keys: self.kinds[k].keys,
            last_slot: position.clone(),
            slot: match kind {
                LayerKind::Full => position,
                LayerKind::Sliding => self.input(RING_SLOT)?,
            },
        })
    }
}
