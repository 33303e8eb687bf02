//! Per-layer embeddings (GEMMA4_TEXT.md §2.2) and where their table lives.
//!
//! The table (`[vocab, L·Dp]`; 2.8 B parameters in E4B, 5.6 GB in bf16) is read one row per
//! token. On a GPU it can stay in host memory, memory-mapped from the checkpoint, so the GPU
//! holds only the rows in flight. On CUDA the mapping is also page-locked and mapped into the
//! device's address space: a prompt's rows are gathered by the GPU, reading host memory in
//! place. (Gathered by host threads and copied through pinned staging, see `native::upload`,
//! the GPU sat idle for 1–2 ms at the start of every E4B prompt.) Elsewhere, or where the driver
//! cannot lock the pages, the host gathers. A decode step's row is an input of the step,
//! written before it runs like its token and position are.

use super::config::Config;
use super::projection::Projection;
use super::weights::{Checkpoint, HostRows, Part};
use crate::kernels::{native, rms_norm::rms_norm};
use anyhow::{bail, Result};
use candle_core::{DType, Device, Tensor};

/// Where the table is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlePlacement {
    Host,
    Device,
}

/// What the user asked for with `--ple`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PleChoice {
    /// Host memory on GPUs (it saves their memory), the device's on the CPU (the same memory).
    Auto,
    Host,
    Device,
}

impl std::str::FromStr for PleChoice {
    type Err = anyhow::Error;
    fn from_str(spec: &str) -> Result<PleChoice> {
        match spec {
            "auto" => Ok(PleChoice::Auto),
            "host" => Ok(PleChoice::Host),
            "device" => Ok(PleChoice::Device),
            _ => bail!("--ple {spec}: expected auto, host or device"),
        }
    }
}

impl PleChoice {
    pub fn resolve(self, device: &Device) -> PlePlacement {
        match self {
            PleChoice::Host => PlePlacement::Host,
            PleChoice::Device => PlePlacement::Device,
            PleChoice::Auto if device.is_cpu() => PlePlacement::Device,
            PleChoice::Auto => PlePlacement::Host,
        }
    }
}

impl PlePlacement {
    pub fn name(self) -> &'static str {
        match self {
            PlePlacement::Host => "host",
            PlePlacement::Device => "device",
        }
    }
}

enum Table {
    Device(Tensor),
    Host {
        /// The rows locked and mapped for the GPU, where it can read them in place. Declared
        /// before `rows` so that it is unregistered before their mapping goes.
        mapped: Option<native::MappedTable>,
        rows: HostRows,
    },
}

pub struct PerLayerEmbeddings {
    width: usize,
    vocab_size: usize,
    table: Table,
    table_scale: f64,
    /// `[L·Dp, H]`; e4m3 where the checkpoint stores it so (and the device runs FP8 natively).
    model_projection: Projection,
    projection_norm: Tensor,
    device: Device,
    dtype: DType,
}

/// The token part's table rows for the tokens of one forward.
pub enum TokenRows<'a> {
    /// Ids to gather from a device table.
    Ids(&'a Tensor),
    /// Ids to gather from a host table: each token's whole row (contiguous), gathered and
    /// copied once per forward.
    HostIds(&'a [u32]),
    /// Whole rows already on the device (a decode step's staged row).
    Gathered(&'a Tensor),
}

/// One forward's per-layer inputs, `[1, S, 1, Dp]` for each layer: every layer's, combined in
/// one pass (two launches per forward rather than two per layer) into `[1, L, S, Dp]`, layer
/// by layer, so that each layer's input is one contiguous block (token-major, a layer's input
/// was a strided view that its consumer copied: 42 copies in an E4B prefill).
pub struct LayerInputs(Tensor);

/// (context + token part) × 2^−½ (§2.2).
fn combine(context: &Tensor, token_part: &Tensor) -> Result<Tensor> {
    Ok(((context + token_part)? * 2f64.powf(-0.5))?)
}

impl LayerInputs {
    /// Layer `i`'s input `[1, S, 1, Dp]`.
    pub fn layer(&self, i: usize) -> Result<Tensor> {
        let (_, _, seq, width) = self.0.dims4()?;
        Ok(self.0.narrow(1, i, 1)?.reshape((1, seq, 1, width))?)
    }
}

impl PerLayerEmbeddings {
    pub fn load(
        config: &Config,
        ckpt: &Checkpoint,
        placement: PlePlacement,
        table_scale: f64,
    ) -> Result<Option<PerLayerEmbeddings>> {
        let Some(spec) = &config.ple else {
            return Ok(None);
        };
        let total = config.num_layers() * spec.width;
        let h = config.hidden_size;
        let name = "embed_tokens_per_layer.weight";
        let table = match placement {
            PlePlacement::Device => Table::Device(ckpt.tensor(name, &[spec.vocab_size, total])?),
            PlePlacement::Host => {
                let rows = ckpt.host_rows(name, [spec.vocab_size, total])?;
                // A driver that cannot lock the pages (a memlock limit, no unified addressing)
                // leaves the gather to the host: slower to start a prompt, the same results.
                let mapped = native::MappedTable::register(ckpt.device(), rows.bytes())
                    .ok()
                    .flatten();
                Table::Host { mapped, rows }
            }
        };
        Ok(Some(PerLayerEmbeddings {
            width: spec.width,
            vocab_size: spec.vocab_size,
            table,
            table_scale,
            model_projection: ckpt.projection(
                Part::whole("per_layer_model_projection.weight", &[total, h]),
                config.fp8_activations,
            )?,
            projection_norm: ckpt.tensor("per_layer_projection_norm.weight", &[spec.width])?,
            device: ckpt.device().clone(),
            dtype: ckpt.dtype(),
        }))
    }

    /// The tensors on the model's device (the table only when it is placed there).
    pub fn device_weights(&self) -> impl Iterator<Item = &Tensor> {
        let table = match &self.table {
            Table::Device(table) => Some(table),
            Table::Host { .. } => None,
        };
        self.model_projection
            .tensors()
            .chain([&self.projection_norm])
            .chain(table)
    }

    /// Bytes of the table kept in host memory (0 when it is on the device).
    pub fn host_table_bytes(&self) -> usize {
        match &self.table {
            Table::Host { rows, .. } => rows.total_bytes(),
            Table::Device(_) => 0,
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn placement(&self) -> PlePlacement {
        match self.table {
            Table::Device(_) => PlePlacement::Device,
            Table::Host { .. } => PlePlacement::Host,
        }
    }

    /// Dtype and length of one host-gathered row (what a decode step's row buffer holds), for a
    /// table in host memory.
    pub fn host_row_layout(&self) -> Option<(DType, usize)> {
        match &self.table {
            Table::Host { rows, .. } => Some((rows.dtype(), rows.cols())),
            Table::Device(_) => None,
        }
    }

    /// Writes the row of `ple_id` of a host table into `buffer` (`[1, L·Dp]`, stored dtype).
    pub fn stage_row(&self, ple_id: u32, buffer: &Tensor) -> Result<()> {
        let Table::Host { rows, .. } = &self.table else {
            bail!("internal: the per-layer table is on the device; it has no rows to stage");
        };
        native::upload_rows(buffer, &mut |_, out| rows.gather(&[ple_id], out))?;
        Ok(())
    }

    /// The per-layer inputs of one forward over `x0 [1, S, H]` (§2.2).
    pub fn inputs(&self, rows: TokenRows, x0: &Tensor, config: &Config) -> Result<LayerInputs> {
        let layers = config.num_layers();
        let seq = x0.dim(1)?;
        let context = (self.model_projection.forward(x0)?
            * (config.hidden_size as f64).powf(-0.5))?
        .reshape((1, seq, layers, self.width))?;
        let context = rms_norm(&context, Some(&self.projection_norm), config.rms_norm_eps)?;
        let whole_rows = match (rows, &self.table) {
            (TokenRows::Ids(ids), Table::Device(table)) => table.index_select(ids, 0)?,
            (TokenRows::Gathered(rows), Table::Host { .. }) => rows.to_dtype(self.dtype)?,
            // Whole rows, one contiguous copy per token: gathering one layer's 512-byte slice of
            // every row per layer took 42 scattered passes over the table and three launches
            // per layer (E4B).
            (
                TokenRows::HostIds(ids),
                Table::Host {
                    mapped: Some(mapped),
                    rows,
                },
            ) => {
                rows.check_rows(ids)?;
                let ids = Tensor::new(ids, &self.device)?;
                mapped
                    .gather_rows(&ids, rows.row_bytes(), rows.dtype(), rows.cols())?
                    .to_dtype(self.dtype)?
            }
            (TokenRows::HostIds(ids), Table::Host { mapped: None, rows }) => {
                let shape = (ids.len(), rows.cols());
                native::upload_new(rows.dtype(), shape, &self.device, &mut |range, out| {
                    rows.gather(&ids[range], out)
                })?
                .to_dtype(self.dtype)?
            }
            _ => bail!("internal: per-layer rows do not match where the table is"),
        };
        let token_part = (whole_rows * self.table_scale)?.reshape((1, seq, layers, self.width))?;
        let layer_major = |t: &Tensor| t.transpose(1, 2);
        Ok(LayerInputs(combine(
            &layer_major(&context)?,
            &layer_major(&token_part)?,
        )?))
    }
}
