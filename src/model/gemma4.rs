//! The Gemma-4 text decoder (GEMMA4_TEXT.md §2). Every fused op goes through the registry in
//! `crate::kernels`, the plain projections included (`linear`).

use super::config::{Config, Fp8Activations, KvSource, LayerKind, LayerSpec, MoeSpec};
use super::device_step::{DeviceStep, KindInputs};
use super::kv_cache::{attention_mask, AttendKv, KvCache};
use super::ple::{PerLayerEmbeddings, PlePlacement, TokenRows};
use super::projection::Projection;
use super::source::ModelSource;
use super::tensor_parallel::{self, AllReduce, Peers, Shard};
use super::weights::{Checkpoint, Part, Take};
use crate::kernels::{
    attention::{attention, Visible},
    dual_rms_norm_plus_res::{dual_rms_norm_plus_res, DualNorms},
    dual_rms_norm_plus_res_e4m3::dual_rms_norm_plus_res_e4m3,
    dual_rms_norm_plus_res_f16::{self, dual_rms_norm_plus_res_f16},
    linear::linear,
    linear_gelu_mul::Up,
    moe_experts::moe_experts,
    moe_experts_fp8::{moe_experts_fp8, Fp8Experts},
    moe_experts_fp8_dynamic::moe_experts_fp8_dynamic,
    moe_inputs::{moe_inputs, MoeInputs, RouterNorms},
    moe_mlps::{moe_mlps, RoutedExperts, SharedMlp},
    moe_output::{moe_output, OutputNorms},
    moe_router_topk::moe_router_topk,
    qkv_norm_rope::{qkv_norm_rope, AttentionInputs, CacheRow, KvPart, KvSlot, QkvLayout},
    rms_norm::rms_norm,
    rms_norm_plus_add::rms_norm_plus_add,
    softcap::softcap,
    tma_gemm::{Epilogue, F16Rows},
    Op,
};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::path::Path;
use std::sync::Arc;

pub struct Gemma4 {
    config: Config,
    device: Device,
    dtype: DType,
    embed_tokens: Tensor,
    embed_scale: f64,
    ple: Option<PerLayerEmbeddings>,
    layers: Vec<DecoderLayer>,
    final_norm: Tensor,
    lm_head: Tensor,
    rope_sliding: RopeTable,
    rope_full: RopeTable,
    /// With tensor parallelism: this rank's handle on the sum over ranks.
    all_reduce: Option<Arc<dyn AllReduce>>,
    /// On rank 0 of several: the other ranks, each on its own thread, stepped with this one.
    peers: Option<Peers>,
}

/// cos/sin rows of one layer kind's RoPE, computed in f32 on the host as the reference does and
/// kept on the device: a decode step narrows to its row instead of computing and uploading it.
struct RopeTable {
    inv_freq: Vec<f32>,
    max_positions: usize,
    device: Device,
    /// `(cos, sin)`, each `[positions, D/2]`, grown geometrically.
    rows: std::sync::Mutex<Option<(Tensor, Tensor)>>,
}

impl RopeTable {
    fn new(inv_freq: Vec<f32>, max_positions: usize, device: &Device) -> RopeTable {
        RopeTable {
            inv_freq,
            max_positions,
            device: device.clone(),
            rows: Default::default(),
        }
    }

    /// cos/sin `[seq, D/2]` for positions `start .. start + seq`.
    fn rows(&self, start: usize, seq: usize) -> Result<(Tensor, Tensor)> {
        let (cos, sin) = self.table(start + seq)?;
        Ok((cos.narrow(0, start, seq)?, sin.narrow(0, start, seq)?))
    }

    /// The whole table, covering at least `needed` positions.
    fn table(&self, needed: usize) -> Result<(Tensor, Tensor)> {
        let mut rows = self.rows.lock().expect("rope table lock");
        let have = rows.as_ref().map_or(0, |(cos, _)| cos.dim(0).unwrap_or(0));
        if needed > have {
            let positions = needed
                .next_power_of_two()
                .max(256)
                .min(self.max_positions.max(needed));
            let half = self.inv_freq.len();
            let angles: Vec<f32> = (0..positions)
                .flat_map(|pos| self.inv_freq.iter().map(move |&f| pos as f32 * f))
                .collect();
            let table = |f: fn(f32) -> f32| {
                Tensor::from_vec(
                    angles.iter().map(|&a| f(a)).collect(),
                    (positions, half),
                    &self.device,
                )
            };
            *rows = Some((table(f32::cos)?, table(f32::sin)?));
        }
        Ok(rows.clone().expect("filled above"))
    }
}

struct DecoderLayer {
    spec: LayerSpec,
    input_norm: Tensor,
    post_attention_norm: Tensor,
    pre_feedforward_norm: Tensor,
    post_feedforward_norm: Tensor,
    /// Read once at load: multiplying by a host scalar is one contiguous kernel, where a
    /// broadcast against a one-element tensor is a strided one.
    layer_scalar: f64,
    /// The attention's input projection: `[q ‖ k ‖ v]` rows stacked at load on layers that
    /// compute their own K/V (`[q ‖ k]` on k_eq_v layers), q alone on KV-consumer layers. One
    /// projection instead of three: at decode sizes each is one GEMV launch streaming its weights.
    qkv_proj: Projection,
    /// Where q, k and v sit in `qkv_proj`'s output.
    qkv_layout: QkvLayout,
    q_norm: Tensor,
    /// On layers that compute their own K/V.
    k_norm: Option<Tensor>,
    o_proj: Projection,
    mlp: Mlp,
    moe: Option<Moe>,
    ple: Option<LayerPle>,
}

struct Mlp {
    /// `[gate ‖ up]` stacked at load, `[2·width, H]`: one projection instead of two, which
    /// `linear_gelu_mul` takes packed.
    gate_up: Projection,
    down: Projection,
}

struct Moe {
    top_k: usize,
    router_proj: Tensor,
    router_scale: Tensor,
    per_expert_scale: Tensor,
    experts: Experts,
    pre_norm_2: Tensor,
    post_norm_1: Tensor,
    post_norm_2: Tensor,
}

/// Every expert's projections, `gate_up [E, 2W, H]` and `down [E, H, W]`: in the compute dtype,
/// or e4m3 with their row scales `[E, 2W]` and `[E, H]` — an FP8 checkpoint's where the registry
/// runs `moe_experts_fp8` natively, and an FP8_DYNAMIC checkpoint's everywhere (their inputs
/// are rounded to e4m3 per row, `inputs`).
enum Experts {
    Dense {
        gate_up: Tensor,
        down: Tensor,
    },
    Fp8 {
        gate_up: Tensor,
        gate_up_scale: Tensor,
        down: Tensor,
        down_scale: Tensor,
        inputs: Fp8Activations,
    },
}

impl Experts {
    /// This rank's columns of every expert (all of them on one device).
    fn load(
        ckpt: &Checkpoint,
        layer: usize,
        moe: &MoeSpec,
        hidden: usize,
        shard: Shard,
        inputs: Fp8Activations,
    ) -> Result<Experts> {
        let experts = ExpertLayer {
            ckpt,
            layer,
            experts: moe.num_experts,
            hidden,
            width: moe.expert_width,
            columns: shard.width(moe.expert_width),
        };
        // FP8_DYNAMIC experts stay e4m3 on every device: their inputs are rounded by
        // `moe_experts_fp8_dynamic`, whose composed arm dequantises only the routed experts.
        let rounded = inputs == Fp8Activations::DynamicPerToken
            && experts.exploded()
            && ckpt.stored_fp8(&experts.exploded_parts(ExpertTensor::GateUp))?;
        let (reader, inputs) = if rounded {
            (None, Fp8Activations::DynamicPerToken)
        } else {
            (Some(Op::MoeExpertsFp8), Fp8Activations::AsIs)
        };
        match (
            experts.e4m3(ExpertTensor::GateUp, reader)?,
            experts.e4m3(ExpertTensor::Down, reader)?,
        ) {
            (Some(gate_up), Some(down)) => Ok(Experts::Fp8 {
                gate_up: gate_up.0,
                gate_up_scale: gate_up.1,
                down: down.0,
                down_scale: down.1,
                inputs,
            }),
            (_, None) if rounded => bail!(
                "FP8_DYNAMIC experts store gate and up in FP8 but not down; g4 reads them all in FP8 or none"
            ),
            _ => Ok(Experts::Dense {
                gate_up: experts.dense(ExpertTensor::GateUp)?,
                down: experts.dense(ExpertTensor::Down)?,
            }),
        }
    }

    fn tensors(&self) -> Vec<&Tensor> {
        match self {
            Experts::Dense { gate_up, down } => vec![gate_up, down],
            Experts::Fp8 {
                gate_up,
                gate_up_scale,
                down,
                down_scale,
                ..
            } => vec![gate_up, gate_up_scale, down, down_scale],
        }
    }

    /// `moe_experts` (or `moe_experts_fp8`) of the routed `inputs`.
    fn forward(&self, inputs: &Tensor, ids: &Tensor, weights: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Experts::Dense { gate_up, down } => moe_experts(inputs, ids, weights, gate_up, down)?,
            Experts::Fp8 {
                gate_up,
                gate_up_scale,
                down,
                down_scale,
                inputs: rounding,
            } => {
                let gate_up = Fp8Experts {
                    weight: gate_up,
                    scale: gate_up_scale,
                };
                let down = Fp8Experts {
                    weight: down,
                    scale: down_scale,
                };
                match rounding {
                    Fp8Activations::AsIs => moe_experts_fp8(inputs, ids, weights, gate_up, down)?,
                    Fp8Activations::DynamicPerToken => {
                        moe_experts_fp8_dynamic(inputs, ids, weights, gate_up, down)?
                    }
                }
            }
        })
    }
}

struct LayerPle {
    gate: Projection,
    projection: Projection,
    post_norm: Tensor,
}

/// Rounds a scalar the way the reference does when it casts it to the weight dtype.
fn round_to(dtype: DType, value: f64) -> f64 {
    match dtype {
        DType::BF16 => half::bf16::from_f64(value).to_f64(),
        DType::F16 => half::f16::from_f64(value).to_f64(),
        DType::F32 => value as f32 as f64,
        _ => value,
    }
}

impl Gemma4 {
    /// Loads the model from a Hugging Face checkpoint directory.
    pub fn load(dir: &Path, device: &Device, dtype: DType, ple: PlePlacement) -> Result<Gemma4> {
        let config = Config::from_file(&dir.join("config.json"))?;
        let checkpoint = Checkpoint::open(dir, device, dtype)?;
        Gemma4::from_checkpoint(config, &checkpoint, ple)
    }

    /// Builds the model from an opened checkpoint, its per-layer table placed as `ple` says.
    pub fn from_checkpoint(config: Config, ckpt: &Checkpoint, ple: PlePlacement) -> Result<Gemma4> {
        Gemma4::rank(config, ckpt, ple, Shard::WHOLE, None)
    }

    /// Loads the model from `source` over `devices`: on one device as
    /// [`Gemma4::from_checkpoint`]; on several, split by tensor parallelism
    /// (`tensor_parallel.rs`), rank 0 on this thread and returned, every other rank loaded and
    /// then run on a thread of its own, stepped by rank 0's forward calls. `progress` follows
    /// rank 0's loading.
    pub fn load_on(
        source: &ModelSource,
        config: Config,
        devices: &[Device],
        dtype: DType,
        ple: PlePlacement,
        progress: Option<indicatif::ProgressBar>,
    ) -> Result<Gemma4> {
        let open = |device: &Device| -> Result<Checkpoint> {
            let mut checkpoint = source.checkpoint(device, dtype)?;
            if let Some(bar) = &progress {
                bar.set_length(checkpoint.total_bytes());
                checkpoint.set_progress(bar.clone());
            }
            Ok(checkpoint)
        };
        let [device] = devices else {
            return Gemma4::load_ranks(source, config, devices, dtype, ple, &open);
        };
        Gemma4::from_checkpoint(config, &open(device)?, ple)
    }

    fn load_ranks(
        source: &ModelSource,
        config: Config,
        devices: &[Device],
        dtype: DType,
        ple: PlePlacement,
        open: &dyn Fn(&Device) -> Result<Checkpoint>,
    ) -> Result<Gemma4> {
        let ranks = devices.len();
        tensor_parallel::check(&config, ranks)?;
        let mut handles = tensor_parallel::all_reduce_group(devices)?.into_iter();
        let own_handle = handles.next().context("no device")?;
        let peers = Peers::spawn(devices[1..].iter().zip(handles).enumerate().map(
            |(i, (device, handle))| {
                let (source, config, device) = (source.clone(), config.clone(), device.clone());
                let shard = Shard { rank: i + 1, ranks };
                move || {
                    let checkpoint = source.checkpoint(&device, dtype)?;
                    Gemma4::rank(config, &checkpoint, ple, shard, Some(handle))
                        .with_context(|| format!("{} on rank {}", source.name(), shard.rank))
                }
            },
        ))?;
        let shard = Shard { rank: 0, ranks };
        let own = open(&devices[0])
            .and_then(|checkpoint| Gemma4::rank(config, &checkpoint, ple, shard, Some(own_handle)));
        let mut model = match (own, peers.loaded()) {
            (Ok(model), Ok(())) => model,
            (Err(e), _) | (Ok(_), Err(e)) => return Err(e),
        };
        model.peers = Some(peers);
        Ok(model)
    }

    /// Builds rank `shard.rank`'s part of the model; `all_reduce` sums over the ranks.
    fn rank(
        config: Config,
        ckpt: &Checkpoint,
        ple: PlePlacement,
        shard: Shard,
        all_reduce: Option<Arc<dyn AllReduce>>,
    ) -> Result<Gemma4> {
        let h = config.hidden_size;
        let v = config.vocab_size;
        let dtype = ckpt.dtype();
        let embed_tokens = ckpt.tensor("embed_tokens.weight", &[v, h])?;
        let ple_scale = config.ple.as_ref().map_or(1.0, |s| (s.width as f64).sqrt());
        let ple = PerLayerEmbeddings::load(&config, ckpt, ple, round_to(dtype, ple_scale))?;
        let mut layers = Vec::with_capacity(config.num_layers());
        for (i, spec) in config.layers.iter().enumerate() {
            layers.push(
                DecoderLayer::load(&config, spec, i, ckpt, shard)
                    .with_context(|| format!("layer {i}"))?,
            );
        }
        let lm_head = if !config.tie_word_embeddings && ckpt.contains_absolute("lm_head.weight") {
            ckpt.absolute_tensor("lm_head.weight", &[v, h])?
        } else if !config.tie_word_embeddings {
            bail!("tie_word_embeddings is false but the checkpoint has no lm_head.weight");
        } else {
            embed_tokens.clone()
        };
        crate::device::release_cached_memory(embed_tokens.device())?;
        Ok(Gemma4 {
            embed_scale: round_to(dtype, (h as f64).sqrt()),
            rope_sliding: rope_table(&config, &layers, LayerKind::Sliding, embed_tokens.device()),
            rope_full: rope_table(&config, &layers, LayerKind::Full, embed_tokens.device()),
            final_norm: ckpt.tensor("norm.weight", &[h])?,
            device: embed_tokens.device().clone(),
            dtype,
            embed_tokens,
            ple,
            layers,
            lm_head,
            config: shard.local_config(&config),
            all_reduce,
            peers: None,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of the weights kept in host memory instead (a per-layer table placed there).
    pub fn host_weight_bytes(&self) -> usize {
        self.ple
            .as_ref()
            .map_or(0, PerLayerEmbeddings::host_table_bytes)
    }

    /// Bytes of the weights held on the model's device (each tensor once; a tied head is the
    /// embedding).
    pub fn device_weight_bytes(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut bytes = 0;
        let mut count = |t: &Tensor| {
            if seen.insert(t.id()) {
                bytes += t.elem_count() * t.dtype().size_in_bytes();
            }
        };
        for t in [&self.embed_tokens, &self.lm_head, &self.final_norm] {
            count(t);
        }
        if let Some(ple) = &self.ple {
            ple.device_weights().for_each(&mut count);
        }
        for layer in &self.layers {
            layer.weights().for_each(&mut count);
        }
        bytes
    }

    /// Runs `ids` (one sequence) after what `cache` holds and returns the f32 logits of the last
    /// position, `[vocab]`.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.head(&self.extend(ids, cache)?)
    }

    /// Runs `ids` after what `cache` holds, as [`Gemma4::forward`] does, but returns the last
    /// position's hidden state `[1, 1, H]` without the head: a prefill piece before the last
    /// needs no logits.
    pub fn extend(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let start = cache.len();
        let seq = ids.len();
        self.check_ids(ids, start)?;
        let ids_t = Tensor::new(ids, &self.device)?;
        let ple_ids: Vec<u32> = ids.iter().map(|&id| self.ple_id(id)).collect();
        // A device table gathers by ids on the device: the remapped ids go up only when they
        // differ; a host table never needs them there.
        let ple_ids_t = match self.ple_placement() {
            Some(PlePlacement::Device) if ple_ids != ids => {
                Some(Tensor::new(ple_ids.as_slice(), &self.device)?)
            }
            _ => None,
        };
        let ple_rows = match self.ple_placement() {
            Some(PlePlacement::Host) => TokenRows::HostIds(&ple_ids),
            _ => TokenRows::Ids(ple_ids_t.as_ref().unwrap_or(&ids_t)),
        };
        let rope = [
            self.rope_sliding.rows(start, seq)?,
            self.rope_full.rows(start, seq)?,
        ];
        let positions = Positions::Host {
            start,
            rope,
            cache,
            masks: [None, None],
        };
        let hidden = self.decoder_stack(&ids_t, ple_rows, positions)?;
        cache.advance(seq);
        Ok(hidden.narrow(1, seq - 1, 1)?)
    }

    /// Whether `ids` can follow `start` positions: some tokens, each in the vocabulary, and room
    /// for them in the context.
    pub fn check_ids(&self, ids: &[u32], start: usize) -> Result<()> {
        if ids.is_empty() {
            bail!("forward needs at least one token");
        }
        if let Some(&bad) = ids.iter().find(|&&id| !self.in_vocab(id)) {
            bail!(
                "token id {bad} is outside the model's vocabulary of {}",
                self.config.vocab_size
            );
        }
        if start + ids.len() > self.config.max_position_embeddings {
            bail!(
                "{} tokens exceed the model's context of {} positions",
                start + ids.len(),
                self.config.max_position_embeddings
            );
        }
        Ok(())
    }

    /// Whether the model is split over several devices.
    pub fn is_parallel(&self) -> bool {
        self.peers.is_some()
    }

    /// On rank 0 of a split model: the other ranks.
    pub(super) fn peers(&self) -> Option<&Peers> {
        self.peers.as_ref()
    }

    /// Releases the other ranks from the all-reduce this rank will not reach.
    pub(super) fn abort_all_reduce(&self) {
        if let Some(all_reduce) = &self.all_reduce {
            all_reduce.abort();
        }
    }

    /// `x` summed over the ranks (itself on one device).
    fn summed(&self, x: Tensor) -> Result<Tensor> {
        summed(self.all_reduce.as_deref(), x)
    }

    /// One decode token whose id and position `step` holds on the device; returns the f32
    /// logits `[vocab]`. Writes K/V into `cache`'s reserved buffers but leaves its host
    /// bookkeeping to the caller (`KvCache::record_device_token`), as a captured step runs later.
    pub fn forward_device(&self, step: &DeviceStep, cache: &KvCache) -> Result<Tensor> {
        self.head(&self.step_hidden(step, cache)?)
    }

    /// [`Gemma4::forward_device`] without the head: the hidden state `[1, 1, H]`.
    pub(super) fn step_hidden(&self, step: &DeviceStep, cache: &KvCache) -> Result<Tensor> {
        let kinds = [
            step.kind_inputs(LayerKind::Sliding)?,
            step.kind_inputs(LayerKind::Full)?,
        ];
        let ple_token = step.ple_token()?;
        let ple_rows = match step.ple_row() {
            Some(row) => TokenRows::Gathered(row),
            None => TokenRows::Ids(&ple_token),
        };
        self.decoder_stack(&step.token()?, ple_rows, Positions::Device { kinds, cache })
    }

    pub fn in_vocab(&self, id: u32) -> bool {
        (id as usize) < self.config.vocab_size
    }

    /// The id whose per-layer embedding token `id` reads: ids past the PLE vocabulary
    /// (multimodal placeholders) read the pad row.
    pub fn ple_id(&self, id: u32) -> u32 {
        match &self.ple {
            Some(ple) if id as usize >= ple.vocab_size() => self.config.pad_token_id,
            _ => id,
        }
    }

    /// Where the per-layer table is, for a model that has one.
    pub fn ple_placement(&self) -> Option<PlePlacement> {
        self.ple.as_ref().map(PerLayerEmbeddings::placement)
    }

    /// Dtype and length of the per-layer row a decode step must be given before it runs,
    /// when the table is in host memory.
    pub fn ple_step_row(&self) -> Option<(DType, usize)> {
        self.ple
            .as_ref()
            .and_then(PerLayerEmbeddings::host_row_layout)
    }

    /// Writes token `id`'s per-layer row into a decode step (host tables only).
    pub fn stage_ple_row(&self, id: u32, step: &DeviceStep) -> Result<()> {
        match (&self.ple, step.ple_row()) {
            (Some(ple), Some(buffer)) => ple.stage_row(self.ple_id(id), buffer),
            _ => Ok(()),
        }
    }

    /// Both layer kinds' RoPE tables `(cos, sin)`, each `[positions, D/2]` covering at least
    /// `positions` rows, indexed by `LayerKind as usize`.
    pub fn rope_tables(&self, positions: usize) -> Result<[(Tensor, Tensor); 2]> {
        Ok([
            self.rope_sliding.table(positions)?,
            self.rope_full.table(positions)?,
        ])
    }

    /// Embedding, PLE inputs and every decoder layer; returns the hidden states `[1, S, H]`.
    fn decoder_stack(
        &self,
        ids: &Tensor,
        ple_rows: TokenRows,
        mut positions: Positions,
    ) -> Result<Tensor> {
        let x = (self.embed_tokens.index_select(ids, 0)? * self.embed_scale)?.unsqueeze(0)?;
        let seq = x.dim(1)?;
        let ple = self
            .ple
            .as_ref()
            .map(|ple| ple.inputs(ple_rows, &x, &self.config))
            .transpose()?;
        // K/V published by each producer layer for its consumers, in this same call.
        let mut published: Vec<Option<(Tensor, Tensor)>> = vec![None; self.layers.len()];

        let eps = self.config.rms_norm_eps;
        let mut x = x;
        // Each layer's normed input: the first layer's here, later ones from the previous
        // layer's last launch (`feed_forward`).
        let mut h = match self.layers.first() {
            Some(first) => Some(NormedInput::of((
                first,
                rms_norm(&x, Some(&first.input_norm), eps)?,
            ))),
            None => None,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let kind = layer.spec.kind;
            let input = h
                .take()
                .context("internal: a layer without its normed input")?;
            let in_cache = positions.prepare_kv(i, &layer.spec, &x)?;
            let (cos, sin) = positions.rope(kind);
            let kv_slot = positions.kv_slot(i, &layer.spec, in_cache)?;
            let (q, own_kv) = layer.attention_inputs(&input, cos, sin, eps, kv_slot)?;
            let (k, v) = match (own_kv, layer.spec.kv_source) {
                (Some((k, v)), _) => {
                    let attend =
                        positions.store(i, &layer.spec, &k, &v, seq, in_cache, &self.config)?;
                    published[i] = Some((attend.k.clone(), attend.v.clone()));
                    (attend.k, attend.v)
                }
                (None, KvSource::SharedFrom(producer)) => published[producer]
                    .clone()
                    .context("internal: producer ran after consumer")?,
                (None, KvSource::Own) => {
                    bail!("internal: layer {i} owns its K/V but has no projections")
                }
            };
            let attn = attention(&q, &k, &v, positions.visible(kind), 1.0)?;
            let attn = attn.transpose(1, 2)?.reshape((1, seq, ()))?;
            let attn = self.summed(layer.o_proj.forward(&attn)?)?;
            let layer_ple = ple.as_ref().map(|p| p.layer(i)).transpose()?;
            let (out, next_input) = layer.feed_forward(
                &x,
                &attn,
                layer_ple,
                self.layers.get(i + 1),
                &self.config,
                self.all_reduce.as_deref(),
            )?;
            h = next_input;
            x = out;
        }
        Ok(x)
    }

    /// Final norm, tied head and softcap over `[1, 1, H]`: f32 logits `[vocab]`.
    pub(super) fn head(&self, last: &Tensor) -> Result<Tensor> {
        let normed = rms_norm(last, Some(&self.final_norm), self.config.rms_norm_eps)?;
        let logits = linear(&normed, &self.lm_head)?;
        let logits = match self.config.final_logit_softcapping {
            Some(cap) => softcap(&logits, cap)?,
            None => logits,
        };
        Ok(logits.flatten_all()?.to_dtype(DType::F32)?)
    }
}

/// Where a forward call's positions live, and so how it meets the cache.
enum Positions<'c> {
    /// `start ..`, known on the host; RoPE rows per layer kind (`LayerKind as usize`). K/V are
    /// appended, which updates the cache's bookkeeping.
    Host {
        start: usize,
        rope: [(Tensor, Tensor); 2],
        cache: &'c mut KvCache,
        /// Per kind, built from the first append's key positions: `Some(None)` when every key
        /// is visible to every query.
        masks: [Option<Option<Tensor>>; 2],
    },
    /// One token whose position is on the device; what each layer kind derives from it. K/V
    /// are written at the device-held slot as they are made (`qkv_norm_rope`); the bookkeeping
    /// is the caller's.
    Device {
        kinds: [KindInputs; 2],
        cache: &'c KvCache,
    },
}

impl Positions<'_> {
    fn rope(&self, kind: LayerKind) -> (&Tensor, &Tensor) {
        match self {
            Positions::Host { rope, .. } => (&rope[kind as usize].0, &rope[kind as usize].1),
            Positions::Device { kinds, .. } => {
                (&kinds[kind as usize].cos, &kinds[kind as usize].sin)
            }
        }
    }

    /// Readies layer `i`'s cache for this call's own K/V to go straight into it as
    /// `qkv_norm_rope` makes them, and says whether they will: a device-held position's always,
    /// a host chunk of several tokens where the cache admits it ([`KvCache::prepare_chunk`]).
    /// Single host tokens (eager decode) append after.
    fn prepare_kv(&mut self, i: usize, spec: &LayerSpec, h: &Tensor) -> Result<bool> {
        let seq = h.dim(1)?;
        if spec.kv_source != KvSource::Own {
            return Ok(false);
        }
        match self {
            Positions::Host { cache, .. } if seq > 1 => {
                Ok(cache.prepare_chunk(i, seq, h.dtype(), h.device())?)
            }
            Positions::Host { .. } => Ok(false),
            Positions::Device { .. } => Ok(true),
        }
    }

    /// Where layer `i`'s own K/V go as `qkv_norm_rope` makes them, when `prepared` says they go
    /// into the cache: the row of a device-held position, or a host chunk's first row.
    fn kv_slot(&self, i: usize, spec: &LayerSpec, prepared: bool) -> Result<Option<KvSlot<'_>>> {
        if !prepared {
            return Ok(None);
        }
        Ok(Some(match self {
            Positions::Host { cache, .. } => {
                let (k, v, first) = cache.chunk_rows(i)?;
                KvSlot {
                    k,
                    v,
                    row: CacheRow::Host(first),
                }
            }
            Positions::Device { kinds, cache } => {
                let (k, v) = cache.reserved_buffers(i)?;
                KvSlot {
                    k,
                    v,
                    row: CacheRow::Device(&kinds[spec.kind as usize].slot),
                }
            }
        }))
    }

    /// Stores layer `i`'s new K/V `[1, kv_heads, S, D]` and returns what the layer attends with
    /// (`in_cache`: already written there, `k` and `v` are the cache's buffers).
    fn store(
        &mut self,
        i: usize,
        spec: &LayerSpec,
        k: &Tensor,
        v: &Tensor,
        seq: usize,
        in_cache: bool,
        config: &Config,
    ) -> Result<AttendKv> {
        let kind = spec.kind;
        match self {
            Positions::Host {
                start,
                cache,
                masks,
                ..
            } => {
                let attend = match in_cache {
                    true => cache.commit_chunk(i, seq)?,
                    false => cache.append(i, k, v)?,
                };
                if masks[kind as usize].is_none() {
                    let window = (kind == LayerKind::Sliding).then_some(config.sliding_window);
                    masks[kind as usize] = Some(match &attend.key_positions {
                        Some(keys) => attention_mask(*start, seq, keys, window, k.device())?,
                        None => None,
                    });
                }
                Ok(attend)
            }
            Positions::Device { kinds, .. } => {
                // The step attends over its kind's buffer length; an eager prefill may have
                // grown the buffers past it.
                let keys = kinds[kind as usize].keys;
                Ok(AttendKv {
                    k: k.narrow(2, 0, keys)?,
                    v: v.narrow(2, 0, keys)?,
                    key_positions: None,
                })
            }
        }
    }

    /// The keys `kind`'s layers see: host positions' additive mask (set by the kind's first
    /// `store`), if any; a device-held position as the last visible slot.
    fn visible(&self, kind: LayerKind) -> Visible<'_> {
        match self {
            Positions::Host { masks, .. } => Visible {
                mask: masks[kind as usize].as_ref().and_then(Option::as_ref),
                last_slot: None,
            },
            Positions::Device { kinds, .. } => Visible {
                mask: None,
                last_slot: Some(&kinds[kind as usize].last_slot),
            },
        }
    }
}

fn rope_table(
    config: &Config,
    layers: &[DecoderLayer],
    kind: LayerKind,
    device: &Device,
) -> RopeTable {
    // Both kinds' tables exist; a kind without layers never reads its table.
    let head_dim = layers
        .iter()
        .find(|l| l.spec.kind == kind)
        .map_or(2, |l| l.spec.head_dim);
    RopeTable::new(
        config.rope(kind).inv_freq(head_dim),
        config.max_position_embeddings,
        device,
    )
}

/// `x` summed over the ranks when the model is split, else `x`.
fn summed(all_reduce: Option<&dyn AllReduce>, x: Tensor) -> Result<Tensor> {
    Ok(match all_reduce {
        Some(all_reduce) => all_reduce.sum(&x)?,
        None => x,
    })
}

impl DecoderLayer {
    fn weights(&self) -> impl Iterator<Item = &Tensor> {
        let norms = [
            &self.input_norm,
            &self.post_attention_norm,
            &self.pre_feedforward_norm,
            &self.post_feedforward_norm,
            &self.q_norm,
        ];
        let projections = [
            &self.qkv_proj,
            &self.o_proj,
            &self.mlp.gate_up,
            &self.mlp.down,
        ]
        .into_iter()
        .chain(self.ple.iter().flat_map(|p| [&p.gate, &p.projection]))
        .flat_map(Projection::tensors);
        let moe = self.moe.iter().flat_map(|m| {
            [
                &m.router_proj,
                &m.router_scale,
                &m.per_expert_scale,
                &m.pre_norm_2,
                &m.post_norm_1,
                &m.post_norm_2,
            ]
            .into_iter()
            .chain(m.experts.tensors())
        });
        let ple_norm = self.ple.iter().map(|p| &p.post_norm);
        norms
            .into_iter()
            .chain(self.k_norm.iter())
            .chain(projections)
            .chain(moe)
            .chain(ple_norm)
    }

    /// Layer `i` as rank `shard.rank` holds it (`config` and `spec` describe the whole model).
    fn load(
        config: &Config,
        spec: &LayerSpec,
        i: usize,
        ckpt: &Checkpoint,
        shard: Shard,
    ) -> Result<DecoderLayer> {
        let h = config.hidden_size;
        let nh = config.num_attention_heads;
        let (hd, kvh) = (spec.head_dim, spec.kv_heads);
        let (q_heads, kv_heads) = (shard.q_heads(nh), shard.kv_heads(nh, kvh));
        let head_rows = |heads: &std::ops::Range<usize>, of: usize| {
            Take::rows(heads.start * hd..heads.end * hd, of * hd)
        };
        let p = |name: &str| format!("layers.{i}.{name}");
        let norm = |name: &str| ckpt.tensor(&p(name), &[h]);
        let mut projections = vec![Part::whole(p("self_attn.q_proj.weight"), &[nh * hd, h])
            .taking(head_rows(&q_heads, nh))];
        let kv = match spec.kv_source {
            // Released checkpoints still ship k/v weights for consumer layers; they are dead.
            KvSource::SharedFrom(_) => KvPart::None,
            KvSource::Own if spec.k_eq_v => KvPart::KAsV,
            KvSource::Own => KvPart::KAndV,
        };
        let kv_part =
            |name: &str| Part::whole(p(name), &[kvh * hd, h]).taking(head_rows(&kv_heads, kvh));
        if kv != KvPart::None {
            projections.push(kv_part("self_attn.k_proj.weight"));
        }
        if kv == KvPart::KAndV {
            projections.push(kv_part("self_attn.v_proj.weight"));
        }
        let k_norm = (kv != KvPart::None)
            .then(|| ckpt.tensor(&p("self_attn.k_norm.weight"), &[hd]))
            .transpose()?;
        let inputs = config.fp8_activations;
        let qkv_proj = ckpt.concat_projection(&projections, inputs)?;
        let moe = match &config.moe {
            Some(m) => Some(Moe {
                top_k: m.top_k,
                router_proj: ckpt.tensor(&p("router.proj.weight"), &[m.num_experts, h])?,
                router_scale: ckpt.tensor(&p("router.scale"), &[h])?,
                per_expert_scale: ckpt.tensor(&p("router.per_expert_scale"), &[m.num_experts])?,
                experts: Experts::load(ckpt, i, m, h, shard, inputs)?,
                pre_norm_2: norm("pre_feedforward_layernorm_2.weight")?,
                post_norm_1: norm("post_feedforward_layernorm_1.weight")?,
                post_norm_2: norm("post_feedforward_layernorm_2.weight")?,
            }),
            None => None,
        };
        let ple = match &config.ple {
            Some(s) => Some(LayerPle {
                gate: ckpt.projection(
                    Part::whole(p("per_layer_input_gate.weight"), &[s.width, h]),
                    inputs,
                )?,
                projection: ckpt.projection(
                    Part::whole(p("per_layer_projection.weight"), &[h, s.width]),
                    inputs,
                )?,
                post_norm: norm("post_per_layer_input_norm.weight")?,
            }),
            None => None,
        };
        let width = spec.mlp_width;
        let columns = shard.width(width);
        let mlp_rows = |name: &str| {
            Part::whole(p(name), &[width, h]).taking(Take::rows(columns.clone(), width))
        };
        Ok(DecoderLayer {
            spec: spec.clone(),
            input_norm: norm("input_layernorm.weight")?,
            post_attention_norm: norm("post_attention_layernorm.weight")?,
            pre_feedforward_norm: norm("pre_feedforward_layernorm.weight")?,
            post_feedforward_norm: norm("post_feedforward_layernorm.weight")?,
            layer_scalar: ckpt
                .tensor(&p("layer_scalar"), &[1])?
                .to_dtype(DType::F64)?
                .squeeze(0)?
                .to_scalar::<f64>()?,
            qkv_proj,
            qkv_layout: QkvLayout {
                q_heads: q_heads.len(),
                kv_heads: kv_heads.len(),
                head_dim: hd,
                kv,
            },
            q_norm: ckpt.tensor(&p("self_attn.q_norm.weight"), &[hd])?,
            k_norm,
            o_proj: ckpt.projection(
                Part::whole(p("self_attn.o_proj.weight"), &[h, nh * hd])
                    .taking(Take::cols(q_heads.start * hd..q_heads.end * hd, nh * hd)),
                inputs,
            )?,
            mlp: Mlp {
                gate_up: ckpt.concat_projection(
                    &[
                        mlp_rows("mlp.gate_proj.weight"),
                        mlp_rows("mlp.up_proj.weight"),
                    ],
                    inputs,
                )?,
                down: ckpt.projection(
                    Part::whole(p("mlp.down_proj.weight"), &[h, width])
                        .taking(Take::cols(columns.clone(), width)),
                    inputs,
                )?,
            },
            moe,
            ple,
        })
    }

    /// q `[1, heads, S, D]`, and this layer's own k and v `[1, kv_heads, S, D]` when it has
    /// them: one projection, then per-head norms (k_eq_v: v is k's raw projection, normed
    /// without weight) and RoPE on q and k.
    fn attention_inputs(
        &self,
        h: &NormedInput,
        cos: &Tensor,
        sin: &Tensor,
        eps: f64,
        kv_slot: Option<KvSlot>,
    ) -> Result<AttentionInputs> {
        let qkv = h.project(Epilogue::Plain)?;
        Ok(qkv_norm_rope(
            &qkv,
            self.qkv_layout,
            &self.q_norm,
            self.k_norm.as_ref(),
            cos,
            sin,
            eps,
            kv_slot,
        )?)
    }

    /// Everything after attention: post-norm and residual, MLP (+ MoE), PLE, layer_scalar.
    /// Returns the layer's output and, given the next layer, its input norm's output with the
    /// projection to run on it — fused with the layer's last residual add where one kernel does
    /// both (`dual_rms_norm_plus_res`, `moe_output`: one launch instead of three).
    fn feed_forward<'n>(
        &self,
        x: &Tensor,
        attn: &Tensor,
        ple: Option<Tensor>,
        next_layer: Option<&'n DecoderLayer>,
        config: &Config,
        all_reduce: Option<&dyn AllReduce>,
    ) -> Result<(Tensor, Option<NormedInput<'n>>)> {
        let eps = config.rms_norm_eps;
        let next_input_norm = next_layer.map(|next| &next.input_norm);
        let norms = DualNorms::unscaled(&self.post_attention_norm, &self.pre_feedforward_norm);
        // The residual after attention, the dense MLP's output, and the MoE block with its
        // experts' sum where there is one.
        let (residual, mlp_out, moe_branch) = match &self.moe {
            Some(moe) => {
                let router = RouterNorms {
                    router_scale: &moe.router_scale,
                    experts_norm: &moe.pre_norm_2,
                };
                let inputs = moe_inputs(x, attn, norms, router, eps)?;
                let (mlp_out, experts) = moe.forward(&inputs, &self.mlp)?;
                let experts = summed(all_reduce, experts)?;
                (inputs.residual, mlp_out, Some((moe, experts)))
            }
            None => {
                let (residual, normed) =
                    dual_norm_into(x, attn, norms, eps, &self.mlp.gate_up, Epilogue::GeluAndMul)?;
                (residual, self.mlp.forward(&normed)?, None)
            }
        };
        let mlp_out = summed(all_reduce, mlp_out)?;
        // The layer's last residual add `(residual, branch, post-norm)`, left pending so that it
        // can fuse with the scalar and the next layer's input norm.
        let (mut x, mut last_add) = match moe_branch {
            Some((moe, experts)) => {
                // The block ends the layer unless a PLE branch follows it.
                let ends_layer = self.ple.is_none();
                let norms = OutputNorms {
                    dense: &moe.post_norm_1,
                    experts: &moe.post_norm_2,
                    block: &self.post_feedforward_norm,
                    output_scale: if ends_layer { self.layer_scalar } else { 1.0 },
                    next: next_input_norm.filter(|_| ends_layer),
                };
                let (out, next_input) = moe_output(&residual, &mlp_out, &experts, &norms, eps)?;
                if ends_layer {
                    return Ok((out, next_layer.zip(next_input).map(NormedInput::of)));
                }
                (out, None)
            }
            None => (residual, Some((mlp_out, &self.post_feedforward_norm))),
        };
        if let (Some(layer_ple), Some(ple)) = (&self.ple, ple) {
            if let Some((branch, norm)) = last_add.take() {
                x = rms_norm_plus_add(&x, &branch, norm, eps)?;
            }
            let ple = ple.squeeze(2)?;
            let gated = layer_ple.gate.forward_gelu_mul(&x, Up::Given(&ple))?;
            let projected = layer_ple.projection.forward(&gated)?;
            last_add = Some((projected, &layer_ple.post_norm));
        }
        match (last_add, next_layer) {
            (Some((branch, post_norm)), Some(next)) => {
                let norms = DualNorms {
                    post_norm,
                    residual_scale: self.layer_scalar,
                    next_pre_norm: &next.input_norm,
                };
                let (x, h) =
                    dual_norm_into(&x, &branch, norms, eps, &next.qkv_proj, Epilogue::Plain)?;
                Ok((x, Some(h)))
            }
            (last_add, next_layer) => {
                if let Some((branch, post_norm)) = last_add {
                    x = rms_norm_plus_add(&x, &branch, post_norm, eps)?;
                }
                let x = x.affine(self.layer_scalar, 0.0)?;
                let next_input = match next_layer {
                    Some(next) => {
                        let rows = rms_norm(&x, Some(&next.input_norm), eps)?;
                        Some(NormedInput::of((next, rows)))
                    }
                    None => None,
                };
                Ok((x, next_input))
            }
        }
    }
}

/// A projection's normed input rows and the projection to run on them: the layer's own, or —
/// where the norm has already rounded the rows to e4m3 (an FP8_DYNAMIC projection's decode rows)
/// — the projection behind that rounding.
struct NormedInput<'p> {
    rows: NormedRows,
    projection: &'p Projection,
}

/// Normed rows as the norm stored them: in the compute dtype, or — for an FP8 projection's
/// prefill rows on Hopper (`Projection::takes_f16_rows`) — in f16 on a power-of-two scale a row,
/// with the compute dtype of the projection's result.
enum NormedRows {
    Plain(Tensor),
    F16(F16Rows, DType),
}

impl<'p> NormedInput<'p> {
    /// `rows`, the input norm's output, for `layer`'s q/k/v projection as it is.
    fn of((layer, rows): (&'p DecoderLayer, Tensor)) -> NormedInput<'p> {
        NormedInput {
            rows: NormedRows::Plain(rows),
            projection: &layer.qkv_proj,
        }
    }

    /// The projection of the rows: plain, or the GeGLU product of a packed gate/up.
    fn project(&self, epilogue: Epilogue) -> Result<Tensor> {
        Ok(match (&self.rows, epilogue) {
            (NormedRows::Plain(rows), Epilogue::Plain) => self.projection.forward(rows)?,
            (NormedRows::Plain(rows), Epilogue::GeluAndMul) => {
                self.projection.forward_gelu_mul(rows, Up::Packed)?
            }
            (NormedRows::F16(rows, dtype), _) => {
                self.projection.forward_f16_rows(rows, epilogue, *dtype)?
            }
        })
    }
}

/// `dual_rms_norm_plus_res` whose `y` is `projection`'s input (run with `epilogue`). Where that
/// projection rounds its rows to e4m3 first and may take them rounded, the norm rounds them as
/// it stores them (`dual_rms_norm_plus_res_e4m3`: in a decode step one launch where there were
/// two); where its GEMM takes f16 rows, the norm stores them so (`dual_rms_norm_plus_res_f16`).
fn dual_norm_into<'p>(
    residual: &Tensor,
    x: &Tensor,
    norms: DualNorms,
    eps: f64,
    projection: &'p Projection,
    epilogue: Epilogue,
) -> Result<(Tensor, NormedInput<'p>)> {
    let rows = x.elem_count() / x.dim(candle_core::D::Minus1)?.max(1);
    let f16_rows = projection.takes_f16_rows(rows, x.dtype(), epilogue)
        && dual_rms_norm_plus_res_f16::runs_natively(x);
    let (residual, rows, projection) = match projection.after_rounding(rows) {
        Some(inner) => {
            let (residual, y) = dual_rms_norm_plus_res_e4m3(residual, x, norms, eps)?;
            (residual, NormedRows::Plain(y), inner)
        }
        None if f16_rows => {
            let (residual, y) = dual_rms_norm_plus_res_f16(residual, x, norms, eps)?;
            (residual, NormedRows::F16(y, x.dtype()), projection)
        }
        None => {
            let (residual, y) = dual_rms_norm_plus_res(residual, x, norms, eps)?;
            (residual, NormedRows::Plain(y), projection)
        }
    };
    Ok((residual, NormedInput { rows, projection }))
}

/// The two expert tensors, as transformers packs them: `gate_up_proj [E, 2W, H]` (gate rows then
/// up rows) and `down_proj [E, H, W]`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpertTensor {
    GateUp,
    Down,
}

impl ExpertTensor {
    fn name(self) -> &'static str {
        match self {
            ExpertTensor::GateUp => "gate_up_proj",
            ExpertTensor::Down => "down_proj",
        }
    }
}

/// One layer's experts in a checkpoint, and the columns of each expert's width `W` this rank
/// keeps. Stored packed by transformers (`experts.gate_up_proj`, `experts.down_proj`), or
/// exploded per expert (`experts.{e}.gate_proj` / `up_proj` / `down_proj`, as FP8 repacks
/// store them).
struct ExpertLayer<'c> {
    ckpt: &'c Checkpoint,
    layer: usize,
    experts: usize,
    hidden: usize,
    width: usize,
    columns: std::ops::Range<usize>,
}

impl ExpertLayer<'_> {
    fn exploded(&self) -> bool {
        let exploded = format!("layers.{}.experts.0.down_proj.weight", self.layer);
        self.ckpt.contains(&exploded)
    }

    /// One expert's `[rows, cols]` as stored, and as this rank keeps it.
    fn shapes(&self, tensor: ExpertTensor) -> ([usize; 2], [usize; 2]) {
        let (h, w, kept) = (self.hidden, self.width, self.columns.len());
        match tensor {
            ExpertTensor::GateUp => ([2 * w, h], [2 * kept, h]),
            ExpertTensor::Down => ([h, w], [h, kept]),
        }
    }

    /// `tensor` as one `[E, rows, cols]` tensor (this rank's part) in the compute dtype.
    fn dense(&self, tensor: ExpertTensor) -> Result<Tensor> {
        let packed = format!("layers.{}.experts.{}", self.layer, tensor.name());
        let ([rows, cols], [kept_rows, kept_cols]) = self.shapes(tensor);
        if self.ckpt.contains(&packed) || !self.exploded() {
            // A rank keeps its gate rows and its up rows, or its columns.
            let (w, c) = (self.width, &self.columns);
            let take = match tensor {
                ExpertTensor::GateUp => {
                    Take::rows_joined(vec![c.clone(), w + c.start..w + c.end], 2 * w)
                }
                ExpertTensor::Down => Take::cols(c.clone(), w),
            };
            let part = Part::whole(packed, &[self.experts, rows, cols]).taking(take);
            return self.ckpt.part(&part);
        }
        let joined = self.ckpt.concat(&self.exploded_parts(tensor))?;
        Ok(joined.reshape((self.experts, kept_rows, kept_cols))?)
    }

    /// Exploded `tensor` kept e4m3, `[E, rows, cols]` with scales `[E, rows]` (this rank's
    /// part): where the registry runs `reader` natively, or with no `reader` whichever arm reads
    /// them; `None` otherwise, and where it is not stored in FP8.
    fn e4m3(&self, tensor: ExpertTensor, reader: Option<Op>) -> Result<Option<(Tensor, Tensor)>> {
        if !self.exploded() {
            return Ok(None);
        }
        let (_, [rows, cols]) = self.shapes(tensor);
        let parts = self.exploded_parts(tensor);
        let joined = match reader {
            Some(op) => self.ckpt.concat_fp8(&parts, op)?,
            None => self.ckpt.concat_e4m3(&parts)?,
        };
        Ok(match joined {
            Some((weight, scale)) => Some((
                weight.reshape((self.experts, rows, cols))?,
                scale.reshape((self.experts, rows))?,
            )),
            None => None,
        })
    }

    /// Exploded experts' tensors in expert order (gate then up for each), each cut to this
    /// rank's part: the rows of the packed `[E, rows, cols]` tensor.
    fn exploded_parts(&self, tensor: ExpertTensor) -> Vec<Part> {
        let (h, w, columns) = (self.hidden, self.width, &self.columns);
        let one = |e: usize, name: &str, shape: [usize; 2], take: Take| {
            let name = format!("layers.{}.experts.{e}.{name}.weight", self.layer);
            Part::whole(name, &shape).taking(take)
        };
        (0..self.experts)
            .flat_map(|e| match tensor {
                ExpertTensor::GateUp => ["gate_proj", "up_proj"]
                    .map(|name| one(e, name, [w, h], Take::rows(columns.clone(), w)))
                    .to_vec(),
                ExpertTensor::Down => {
                    vec![one(e, "down_proj", [h, w], Take::cols(columns.clone(), w))]
                }
            })
            .collect()
    }
}

impl Mlp {
    /// The dense MLP on its normed input.
    fn forward(&self, normed: &NormedInput) -> Result<Tensor> {
        let activated = normed.project(Epilogue::GeluAndMul)?;
        Ok(self.down.forward(&activated)?)
    }
}

impl Moe {
    /// The layer's two MLPs (§2.7) on their `inputs` (`moe_inputs`, each `[1, S, H]`): the
    /// dense `mlp` on the shared input, and the expert branch routed from the router's input —
    /// the dense output and the experts' f32 sum `[1, S, H]`. Both in `moe_mlps` where all four
    /// projections are plain tensors in the compute dtype (not CPU panels, not e4m3): its native
    /// arm runs them in two launches in decode.
    fn forward(&self, inputs: &MoeInputs, mlp: &Mlp) -> Result<(Tensor, Tensor)> {
        let (_, seq, hidden) = inputs.residual.dims3()?;
        let flat = |t: &Tensor| t.reshape((seq, hidden));
        let logits = linear(&flat(&inputs.router)?, &self.router_proj)?;
        let (weights, ids) = moe_router_topk(&logits, self.top_k, &self.per_expert_scale)?;
        let routed_x = flat(&inputs.experts)?;
        // An FP8_DYNAMIC shared MLP rounds its input rows to e4m3 itself.
        let normed = NormedInput {
            rows: NormedRows::Plain(inputs.shared.clone()),
            projection: &mlp.gate_up,
        };
        let (mlp_out, acc) = match (normed.projection, &mlp.down, &self.experts) {
            (
                Projection::Dense(shared_gate_up),
                Projection::Dense(shared_down),
                Experts::Dense { gate_up, down },
            ) => {
                let shared_x = flat(&inputs.shared)?;
                let shared = SharedMlp {
                    x: &shared_x,
                    gate_up: shared_gate_up,
                    down: shared_down,
                };
                let routed = RoutedExperts {
                    x: &routed_x,
                    ids: &ids,
                    weights: &weights,
                    gate_up,
                    down,
                };
                let (mlp_out, acc) = moe_mlps(shared, routed)?;
                (mlp_out.reshape(inputs.shared.dims())?, acc)
            }
            _ => (
                mlp.forward(&normed)?,
                self.experts.forward(&routed_x, &ids, &weights)?,
            ),
        };
        Ok((mlp_out, acc.reshape((1, seq, hidden))?))
    }
}
