//! A decoding session: one sequence's KV cache and the way its decode steps run.
//!
//! Eager steps run the forward with host-known positions, as prefill does. Graph steps run the
//! device-resident step (`device_step.rs`): on CUDA it is run once for real and captured into a
//! CUDA graph in the same call, then each later token is one graph launch instead of hundreds of
//! kernel launches from the host; on other devices the same step runs directly, which is how CI
//! proves its arithmetic against the goldens.

use super::device_step::{DeviceStep, KindBuffers};
use super::tensor_parallel::Call;
use super::{Gemma4, KvCache};
use crate::kernels::native::{self, CapturedGraph};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodePath {
    Eager,
    Graph,
}

/// What the user asked for with `--decode`; resolved against the model once it is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeChoice {
    Auto,
    Eager,
    Graph,
}

impl DecodeChoice {
    /// Parses `auto`, `eager` or `graph` (before any model is loaded, so a typo costs nothing).
    pub fn parse(spec: &str) -> Result<DecodeChoice> {
        match spec {
            "auto" => Ok(DecodeChoice::Auto),
            "eager" => Ok(DecodeChoice::Eager),
            "graph" => Ok(DecodeChoice::Graph),
            _ => bail!("--decode {spec}: expected auto, eager or graph"),
        }
    }

    /// `auto` picks graph steps where they are captured (CUDA), on one device: a split model's
    /// captured steps would hold NCCL's all-reduces, which no GPU run has checked yet, so there
    /// graph steps are for asking (`--decode graph`).
    pub fn resolve(self, model: &Gemma4) -> Result<DecodePath> {
        match self {
            DecodeChoice::Eager => Ok(DecodePath::Eager),
            DecodeChoice::Auto if model.is_parallel() => Ok(DecodePath::Eager),
            DecodeChoice::Graph => Ok(DecodePath::Graph),
            DecodeChoice::Auto if can_capture(model.device()) => Ok(DecodePath::Graph),
            DecodeChoice::Auto => Ok(DecodePath::Eager),
        }
    }
}

impl std::str::FromStr for DecodeChoice {
    type Err = anyhow::Error;
    fn from_str(spec: &str) -> Result<DecodeChoice> {
        DecodeChoice::parse(spec)
    }
}

impl DecodePath {
    pub fn name(self, device: &candle_core::Device) -> &'static str {
        match self {
            DecodePath::Eager => "eager",
            DecodePath::Graph if can_capture(device) => "graph",
            DecodePath::Graph => "graph (uncaptured: no CUDA graphs here)",
        }
    }
}

/// Longer prompts are prefilled in pieces of this many tokens: attention's score matrices then
/// take memory for one piece against the context, not for the whole prompt against itself
/// (E4B at 12,001 tokens needed 39 GB in one piece), for the same arithmetic.
pub const PREFILL_PIECE: usize = 512;

/// Smallest full-layer capacity reserved for graph steps.
const MIN_GRAPH_CAPACITY: usize = 256;
/// A graph step's full layers attend over its whole capacity (masked-off keys included), so the
/// capacity grows in steps of 1/16 of the next power of two instead of doubling: under 1/8 of
/// the keys a step walks are masked off, for a re-capture every 1/16 octave (one every 2,048
/// tokens from 16k to 32k). Doubling left a step after 16,384 tokens walking 32,768 keys.
const GRAPH_CAPACITY_STEPS_PER_OCTAVE: usize = 16;

/// The full-layer capacity a graph step reserves for a token at `position`.
fn graph_capacity(position: usize, context: usize) -> usize {
    let granule = ((position + 1).next_power_of_two() / GRAPH_CAPACITY_STEPS_PER_OCTAVE)
        .max(MIN_GRAPH_CAPACITY);
    (position + 1).next_multiple_of(granule).min(context)
}

struct GraphStep {
    step: DeviceStep,
    /// f32 `[vocab]`, written by every step.
    logits: Tensor,
    captured: Option<CapturedGraph>,
}

pub struct Session<'m> {
    model: &'m Gemma4,
    cache: KvCache,
    path: DecodePath,
    logits: Option<Tensor>,
    graph: Option<GraphStep>,
    /// False on the ranks after the first of a split model: rank 0 alone needs logits.
    wants_logits: bool,
    /// On rank 0 of a split model: this session's name on the other ranks, which mirror it.
    mirrored_as: Option<u64>,
}

impl<'m> Session<'m> {
    pub fn new(model: &'m Gemma4, path: DecodePath) -> Session<'m> {
        Session::opened(model, path, true)
    }

    /// A rank's mirror of rank 0's session: the same steps, without the head.
    pub(super) fn without_logits(model: &'m Gemma4, path: DecodePath) -> Session<'m> {
        Session::opened(model, path, false)
    }

    fn opened(model: &'m Gemma4, path: DecodePath, wants_logits: bool) -> Session<'m> {
        Session {
            model,
            cache: KvCache::new(model.config()),
            path,
            logits: None,
            graph: None,
            wants_logits,
            mirrored_as: model.peers().map(|peers| peers.open(path)),
        }
    }

    /// Tokens processed so far (the position of the next one).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Runs `ids` after what the session holds, in pieces of at most [`PREFILL_PIECE`] tokens;
    /// returns the last position's f32 logits.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<&Tensor> {
        // Checked before the other ranks start: a bad request must not stop the group.
        self.model.check_ids(ids, self.cache.len())?;
        self.on_every_rank(
            |session| Call::Prefill {
                session,
                ids: ids.to_vec(),
            },
            |s| s.prefill_ids(ids),
        )
    }

    /// Runs `here` on this rank and, on a split model, `call` on the others at the same time;
    /// the logits it left.
    fn on_every_rank(
        &mut self,
        call: impl Fn(u64) -> Call,
        here: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<&Tensor> {
        let model = self.model;
        match (model.peers(), self.mirrored_as) {
            (Some(peers), Some(session)) => {
                peers.lockstep(|| call(session), || here(self), || model.abort_all_reduce())?
            }
            _ => here(self)?,
        }
        self.logits
            .as_ref()
            .context("internal: a step left no logits")
    }

    /// [`Session::prefill`] on this rank alone.
    pub(super) fn prefill_ids(&mut self, ids: &[u32]) -> Result<()> {
        // A captured step addresses the cache buffers an eager append may replace.
        self.graph = None;
        let pieces: Vec<&[u32]> = ids.chunks(PREFILL_PIECE).collect();
        let Some((last, earlier)) = pieces.split_last() else {
            bail!("nothing to prefill: no token ids");
        };
        for piece in earlier {
            self.model.extend(piece, &mut self.cache)?;
        }
        if self.wants_logits {
            self.logits = Some(self.model.forward(last, &mut self.cache)?);
        } else {
            self.model.extend(last, &mut self.cache)?;
        }
        Ok(())
    }

    /// Runs one token; returns its f32 logits `[vocab]`, valid until the next call.
    pub fn decode(&mut self, token: u32) -> Result<&Tensor> {
        self.model.check_ids(&[token], self.cache.len())?;
        self.on_every_rank(
            |session| Call::Decode { session, token },
            |s| s.decode_id(token),
        )
    }

    /// [`Session::decode`] on this rank alone, `token` checked by [`Session::decode`] (on rank 0,
    /// before the other ranks were asked).
    pub(super) fn decode_id(&mut self, token: u32) -> Result<()> {
        if self.path == DecodePath::Eager {
            return self.prefill_ids(&[token]);
        }
        let model = self.model;
        let position = self.cache.len();
        let context = model.config().max_position_embeddings;
        if self
            .graph
            .as_ref()
            .is_none_or(|g| g.step.capacity() <= position)
        {
            self.graph = None;
            self.graph = Some(self.reserve(graph_capacity(position, context))?);
        }
        let graph = self.graph.as_mut().expect("reserved above");
        graph.step.set(token, model.ple_id(token), position)?;
        model.stage_ple_row(token, &graph.step)?;
        let wants_logits = self.wants_logits;
        let run = || -> Result<()> {
            let hidden = model.step_hidden(&graph.step, &self.cache)?;
            if wants_logits {
                graph.logits.slice_set(&model.head(&hidden)?, 0, 0)?;
            }
            Ok(())
        };
        match &graph.captured {
            Some(captured) => captured.replay()?,
            None if can_capture(model.device()) => {
                let step = || run().map_err(|e| candle_core::Error::Msg(format!("{e:#}")));
                let captured = native::run_and_capture(model.device(), &step).context(
                    "capturing the decode step as a CUDA graph (--decode eager avoids it)",
                )?;
                graph.captured = Some(captured);
            }
            None => run()?,
        }
        self.cache.record_device_token();
        if wants_logits {
            self.logits = Some(graph.logits.clone());
        }
        Ok(())
    }

    /// Reserves the cache and the step's buffers for positions below `capacity`; the step
    /// attends over that many keys even where an eager prefill grew the cache further.
    fn reserve(&mut self, capacity: usize) -> Result<GraphStep> {
        let model = self.model;
        let device = model.device();
        self.cache.reserve(capacity, model.dtype(), device)?;
        let [(sliding_cos, sliding_sin), (full_cos, full_sin)] = model.rope_tables(capacity)?;
        let window = model.config().sliding_window;
        let sliding = KindBuffers {
            keys: window,
            rope_cos: sliding_cos,
            rope_sin: sliding_sin,
        };
        let full = KindBuffers {
            keys: capacity,
            rope_cos: full_cos,
            rope_sin: full_sin,
        };
        Ok(GraphStep {
            step: DeviceStep::new(sliding, full, window, model.ple_step_row(), device)?,
            logits: Tensor::zeros(model.config().vocab_size, DType::F32, device)?,
            captured: None,
        })
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if let (Some(peers), Some(session)) = (self.model.peers(), self.mirrored_as) {
            peers.close(session);
        }
    }
}

fn can_capture(device: &candle_core::Device) -> bool {
    native::can_capture(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_capacity_masks_off_under_an_eighth_of_its_keys() {
        let context = 131_072;
        let mut last = 0;
        for position in 0..context {
            let capacity = graph_capacity(position, context);
            assert!(
                capacity > position && capacity <= context,
                "{position}: {capacity}"
            );
            assert!(capacity >= last, "{position}: capacity shrank");
            last = capacity;
            let masked = capacity - (position + 1);
            assert!(
                masked < MIN_GRAPH_CAPACITY || masked * 8 < capacity,
                "{position}: {masked} of {capacity} keys masked off"
            );
        }
        assert_eq!(graph_capacity(16_384, context), 18_432);
        // Never past a context that is no power of two.
        assert_eq!(graph_capacity(999, 1_000), 1_000);
    }
}
