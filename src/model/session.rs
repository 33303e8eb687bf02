//! A decoding session: one sequence's KV cache and the way its decode steps run.
//!
//! Eager steps run the forward with host-known positions, as prefill does. Graph steps run the
//! device-resident step (`device_step.rs`): on CUDA it is run once for real and captured into a
//! CUDA graph in the same call, then each later token is one graph launch instead of hundreds of
//! kernel launches from the host; on other devices the same step runs directly, which is how CI
//! proves its arithmetic against the goldens.

use super::device_step::{DeviceStep, KindBuffers};
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

    /// `auto` picks graph steps where they are captured (CUDA) and the model allows them: on
    /// one device (a split model's ranks meet in all-reduces the captured step does not hold).
    pub fn resolve(self, model: &Gemma4) -> Result<DecodePath> {
        match self {
            DecodeChoice::Eager => Ok(DecodePath::Eager),
            DecodeChoice::Graph if model.is_parallel() => bail!(
                "--decode graph runs on one device; a model split over several decodes eagerly (--decode eager or auto)"
            ),
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

/// Smallest full-layer capacity reserved for graph steps; it doubles as the sequence grows
/// (each growth re-captures), so masked-off slots never exceed the live ones.
const MIN_GRAPH_CAPACITY: usize = 256;

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
}

impl<'m> Session<'m> {
    pub fn new(model: &'m Gemma4, path: DecodePath) -> Session<'m> {
        Session {
            model,
            cache: KvCache::new(model.config()),
            path,
            logits: None,
            graph: None,
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
        if ids.is_empty() {
            bail!("nothing to prefill: no token ids");
        }
        // A captured step addresses the cache buffers an eager append may replace.
        self.graph = None;
        let pieces: Vec<&[u32]> = ids.chunks(PREFILL_PIECE).collect();
        let (last, earlier) = pieces.split_last().expect("ids is not empty");
        for piece in earlier {
            self.model.extend(piece, &mut self.cache)?;
        }
        let logits = self.model.forward(last, &mut self.cache)?;
        Ok(self.logits.insert(logits))
    }

    /// Runs one token; returns its f32 logits `[vocab]`, valid until the next call.
    pub fn decode(&mut self, token: u32) -> Result<&Tensor> {
        if self.path == DecodePath::Eager {
            return self.prefill(&[token]);
        }
        let model = self.model;
        if !model.in_vocab(token) {
            bail!(
                "token id {token} is outside the model's vocabulary of {}",
                model.config().vocab_size
            );
        }
        let position = self.cache.len();
        let context = model.config().max_position_embeddings;
        if position >= context {
            bail!(
                "{} tokens exceed the model's context of {context} positions",
                position + 1
            );
        }
        if self
            .graph
            .as_ref()
            .is_none_or(|g| g.step.capacity() <= position)
        {
            self.graph = None;
            let capacity = (position + 1)
                .next_power_of_two()
                .max(MIN_GRAPH_CAPACITY)
                .min(context);
            self.graph = Some(self.reserve(capacity)?);
        }
        let graph = self.graph.as_mut().expect("reserved above");
        graph.step.set(token, model.ple_id(token), position)?;
        model.stage_ple_row(token, &graph.step)?;
        let run = || -> Result<()> {
            let logits = model.forward_device(&graph.step, &self.cache)?;
            graph.logits.slice_set(&logits, 0, 0)?;
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
        Ok(&graph.logits)
    }

    /// Reserves the cache and the step's buffers for positions below `capacity` (or more,
    /// when an eager prefill already grew the cache further).
    fn reserve(&mut self, capacity: usize) -> Result<GraphStep> {
        let model = self.model;
        let device = model.device();
        self.cache.reserve(capacity, model.dtype(), device)?;
        let capacity = self.cache.reserved_capacity().unwrap_or(capacity);
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

fn can_capture(device: &candle_core::Device) -> bool {
    native::can_capture(device)
}
