//! Tensor parallelism over several devices of one host (Megatron-style): every rank holds a slice
//! of each layer's projections, and the ranks sum their partial outputs twice per layer (three
//! times on MoE layers: the dense MLP's output and the experts' f32 sum are separate).
//!
//! q/k/v and gate/up are split by output rows (each rank computes its own query heads and its own
//! part of the MLP width, with no communication); o and down by input columns (each rank's product
//! is a partial sum, all-reduced). KV heads follow the query heads they serve: split when each
//! rank's queries cover whole GQA groups, otherwise replicated, each rank keeping the KV head its
//! queries read (the 26B/31B full layers have 2–4 KV heads). MoE experts are split like the dense
//! MLP, each expert's width across the ranks, not whole experts per rank: routing stays identical
//! on every rank, every rank does the same work whatever the router picks, and the expert kernels
//! run unchanged on narrower experts. Norms, the router, PLE (narrow projections) and the tied
//! embedding and head are replicated: a split head would need its logits gathered every token.

use super::config::{Config, Fp8Activations};
use super::session::{DecodePath, Session};
use super::Gemma4;
pub use crate::kernels::native::collective::{group as all_reduce_group, AllReduce};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// One rank's part of a model split over `ranks` devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub ranks: usize,
}

impl Shard {
    /// The whole model on one device.
    pub const WHOLE: Shard = Shard { rank: 0, ranks: 1 };

    /// This rank's part of `n` items divided evenly ([`check`] proved `n` divides).
    fn even(&self, n: usize) -> Range<usize> {
        let per = n / self.ranks;
        self.rank * per..(self.rank + 1) * per
    }

    /// This rank's query heads.
    pub fn q_heads(&self, heads: usize) -> Range<usize> {
        self.even(heads)
    }

    /// The KV heads this rank's query heads read (query head `h` reads KV head `h / group`).
    pub fn kv_heads(&self, heads: usize, kv_heads: usize) -> Range<usize> {
        let group = heads / kv_heads;
        let q = self.q_heads(heads);
        q.start / group..(q.end - 1) / group + 1
    }

    /// This rank's columns of an MLP (or expert) of `width`.
    pub fn width(&self, width: usize) -> Range<usize> {
        self.even(width)
    }

    /// The model as this rank holds it: its heads, KV heads and widths.
    pub fn local_config(&self, config: &Config) -> Config {
        let mut local = config.clone();
        let heads = config.num_attention_heads;
        local.num_attention_heads = self.q_heads(heads).len();
        for spec in &mut local.layers {
            spec.kv_heads = self.kv_heads(heads, spec.kv_heads).len();
            spec.mlp_width = self.width(spec.mlp_width).len();
        }
        if let Some(moe) = &mut local.moe {
            moe.expert_width = self.width(moe.expert_width).len();
        }
        local
    }
}

/// Whether `config` splits over `ranks`: heads, every layer's GQA groups and every width must
/// divide evenly. The error names the first thing that does not.
pub fn check(config: &Config, ranks: usize) -> Result<()> {
    if ranks == 0 {
        bail!("tensor parallelism needs at least one device");
    }
    // A rank holds only its slice of o_proj's and down_proj's input rows, and FP8_DYNAMIC scales
    // each row by its largest value over all of them.
    if ranks > 1 && config.fp8_activations == Fp8Activations::DynamicPerToken {
        bail!("FP8_DYNAMIC checkpoints (inputs quantised per token) run on one device: a rank holds only part of each row it would scale");
    }
    let heads = config.num_attention_heads;
    if !heads.is_multiple_of(ranks) {
        bail!("{heads} attention heads do not split evenly over {ranks} devices");
    }
    let per_rank = heads / ranks;
    for (i, spec) in config.layers.iter().enumerate() {
        let kv = spec.kv_heads;
        if kv == 0 || !heads.is_multiple_of(kv) {
            bail!("layer {i}: {heads} query heads do not form groups over {kv} KV heads");
        }
        let group = heads / kv;
        if !per_rank.is_multiple_of(group) && !group.is_multiple_of(per_rank) {
            bail!(
                "layer {i}: {per_rank} query heads per device split GQA groups of {group} \
                 across devices ({ranks} devices, {kv} KV heads)"
            );
        }
        if !spec.mlp_width.is_multiple_of(ranks) {
            bail!(
                "layer {i}: MLP width {} does not split evenly over {ranks} devices",
                spec.mlp_width
            );
        }
    }
    if let Some(moe) = &config.moe {
        if !moe.expert_width.is_multiple_of(ranks) {
            bail!(
                "expert width {} does not split evenly over {ranks} devices",
                moe.expert_width
            );
        }
    }
    Ok(())
}

/// The ranks after the first, each on a thread of its own with its own model, mirroring every
/// decoding session rank 0 opens: each call a session makes on rank 0 runs on every rank at the
/// same time (they meet in the all-reduces), and only rank 0 computes logits.
pub struct Peers {
    workers: Vec<Worker>,
    next_session: AtomicU64,
}

struct Worker {
    rank: usize,
    calls: Option<mpsc::Sender<Call>>,
    replies: mpsc::Receiver<Result<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What rank 0's sessions ask of the other ranks; sessions are named by rank 0.
pub enum Call {
    Open { session: u64, path: DecodePath },
    Prefill { session: u64, ids: Vec<u32> },
    Decode { session: u64, token: u32 },
    Close { session: u64 },
}

impl Peers {
    /// Starts one thread per rank (1, 2, …), each building its model with its `load`.
    pub fn spawn<L>(loads: impl Iterator<Item = L>) -> Result<Peers>
    where
        L: FnOnce() -> Result<Gemma4> + Send + 'static,
    {
        let mut workers = Vec::new();
        for (i, load) in loads.enumerate() {
            let rank = i + 1;
            let (calls, inbox) = mpsc::channel::<Call>();
            let (outbox, replies) = mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("g4-rank-{rank}"))
                .spawn(move || serve(rank, load, &inbox, &outbox))
                .with_context(|| format!("cannot start the thread of rank {rank}"))?;
            workers.push(Worker {
                rank,
                calls: Some(calls),
                replies,
                thread: Some(thread),
            });
        }
        Ok(Peers {
            workers,
            next_session: AtomicU64::new(0),
        })
    }

    /// Waits until every rank has loaded its part; the first failure, if any.
    pub fn loaded(&self) -> Result<()> {
        self.replies()
    }

    /// Opens a session on every rank; its name for later calls. A rank that has stopped says
    /// so at the session's first call.
    pub fn open(&self, path: DecodePath) -> u64 {
        let session = self.next_session.fetch_add(1, Ordering::Relaxed);
        let _ = self.send(|| Call::Open { session, path });
        session
    }

    pub fn close(&self, session: u64) {
        let _ = self.send(|| Call::Close { session });
    }

    /// Runs `call` on every rank while `own` runs here; `abort` releases the other ranks when
    /// `own` fails. A rank's own failure explains the others' (released by its abort), so
    /// rank 0's comes first.
    pub fn lockstep(
        &self,
        call: impl Fn() -> Call,
        own: impl FnOnce() -> Result<()>,
        abort: impl FnOnce(),
    ) -> Result<()> {
        self.send(call)?;
        let own = own();
        if own.is_err() {
            abort();
        }
        let others = self.replies();
        own.context("rank 0")?;
        others
    }

    fn send(&self, call: impl Fn() -> Call) -> Result<()> {
        for worker in &self.workers {
            let sent = worker.calls.as_ref().map(|c| c.send(call()));
            if !matches!(sent, Some(Ok(()))) {
                bail!("rank {} has stopped", worker.rank);
            }
        }
        Ok(())
    }

    fn replies(&self) -> Result<()> {
        let mut first_error = None;
        for worker in &self.workers {
            let reply = worker
                .replies
                .recv()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("rank {} has stopped", worker.rank)));
            if let Err(e) = reply {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            // Closing the channel ends the rank's loop.
            worker.calls.take();
            // Unwinding from a panic on rank 0, a rank may be waiting in a sum rank 0 never
            // reaches: leave it to the process's exit rather than wait for it.
            if let Some(thread) = worker.thread.take().filter(|_| !std::thread::panicking()) {
                let _ = thread.join();
            }
        }
    }
}

/// Releases the other ranks if this rank's thread panics, as a failed call does.
struct AbortOnPanic<'m>(&'m Gemma4);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort_all_reduce();
        }
    }
}

/// A rank's thread: load, then mirror rank 0's sessions, replying to each prefill and decode.
fn serve(
    rank: usize,
    load: impl FnOnce() -> Result<Gemma4>,
    inbox: &mpsc::Receiver<Call>,
    outbox: &mpsc::Sender<Result<()>>,
) {
    let model = match load() {
        Ok(model) => {
            let _ = outbox.send(Ok(()));
            model
        }
        Err(e) => {
            let _ = outbox.send(Err(e));
            return;
        }
    };
    let _abort_on_panic = AbortOnPanic(&model);
    let mut sessions: HashMap<u64, Session> = HashMap::new();
    for call in inbox.iter() {
        let (session, ran) = match call {
            Call::Open { session, path } => {
                sessions.insert(session, Session::without_logits(&model, path));
                continue;
            }
            Call::Close { session } => {
                sessions.remove(&session);
                continue;
            }
            Call::Prefill { session, ids } => (
                session,
                sessions.get_mut(&session).map(|s| s.prefill_ids(&ids)),
            ),
            Call::Decode { session, token } => (
                session,
                sessions.get_mut(&session).map(|s| s.decode_id(token)),
            ),
        };
        let ran = ran.unwrap_or_else(|| Err(anyhow::anyhow!("has no session {session}")));
        if ran.is_err() {
            model.abort_all_reduce();
        }
        let _ = outbox.send(ran.with_context(|| format!("rank {rank}")));
    }
}

#[cfg(test)]
mod tests {
    use super::{check, AllReduce, Shard};
    use crate::kernels::native::collective::HostAllReduce;
    use crate::model::weights::Take;
    use crate::model::Config;
    use candle_core::{Device, Tensor};

    fn config(heads: usize, kv_heads: &[usize], width: usize) -> Config {
        let layers: Vec<serde_json::Value> = kv_heads
            .iter()
            .map(|_| serde_json::json!("sliding_attention"))
            .collect();
        let mut config = Config::from_json(&serde_json::json!({
            "vocab_size": 64, "hidden_size": 32, "intermediate_size": width,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads[0], "head_dim": 8,
            "num_hidden_layers": kv_heads.len(), "layer_types": layers,
            "sliding_window": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        }))
        .unwrap();
        for (spec, &kv) in config.layers.iter_mut().zip(kv_heads) {
            spec.kv_heads = kv;
        }
        config
    }

    /// KV heads are split where a rank's queries cover whole groups, and each rank keeps the
    /// one KV head its queries read where a group spans ranks.
    #[test]
    fn kv_heads_follow_the_query_heads_they_serve() {
        let rank = |rank, ranks| Shard { rank, ranks };
        // 8 query heads, 4 KV heads (groups of 2), 2 ranks: 2 KV heads each.
        assert_eq!(rank(1, 2).q_heads(8), 4..8);
        assert_eq!(rank(1, 2).kv_heads(8, 4), 2..4);
        // 16 query heads, 2 KV heads (groups of 8), 4 ranks: rank 1 reads KV head 0, rank 2 head 1.
        assert_eq!(rank(1, 4).kv_heads(16, 2), 0..1);
        assert_eq!(rank(2, 4).kv_heads(16, 2), 1..2);
        let local = rank(2, 4).local_config(&config(16, &[2, 8], 64));
        assert_eq!(local.num_attention_heads, 4);
        assert_eq!(
            local.layers.iter().map(|l| l.kv_heads).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(local.layers[0].mlp_width, 16);
    }

    #[test]
    fn a_model_that_does_not_split_is_refused_with_the_reason() {
        let refused = |c: &Config, ranks| check(c, ranks).unwrap_err().to_string();
        assert!(refused(&config(4, &[1], 64), 3).contains("4 attention heads"));
        // 6 query heads in groups of 3 over 2 KV heads, 3 ranks of 2: a group spans ranks
        // unevenly.
        assert!(refused(&config(6, &[2], 60), 3).contains("GQA groups of 3"));
        assert!(refused(&config(4, &[2], 66), 4).contains("MLP width 66"));
        check(&config(32, &[16, 4], 64), 4).unwrap();
    }

    /// The split arithmetic of one layer: q/k/v and gate/up by output rows (each rank's outputs
    /// are the unsplit output's columns), o and down by input columns (the ranks' products,
    /// summed by the all-reduce, are the unsplit product), on 2 and 4 ranks.
    #[test]
    fn split_projections_sum_to_the_unsplit_layer() {
        let dev = Device::Cpu;
        let (m, k, n) = (3, 16, 8);
        let x = Tensor::randn(0f32, 1.0, (m, k), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, (n, k), &dev).unwrap();
        let whole = x.matmul(&w.t().unwrap()).unwrap();
        for ranks in [2, 4] {
            let handles = HostAllReduce::group(ranks);
            let (row_parts, col_sums): (Vec<Tensor>, Vec<Tensor>) = std::thread::scope(|s| {
                let threads: Vec<_> = handles
                    .iter()
                    .enumerate()
                    .map(|(rank, handle)| {
                        let (x, w) = (&x, &w);
                        s.spawn(move || {
                            let shard = Shard { rank, ranks };
                            let rows = Take::rows(shard.width(n), n).apply(w).unwrap();
                            let cols = Take::cols(shard.width(k), k).apply(w).unwrap();
                            let x_cols = Take::cols(shard.width(k), k).apply(x).unwrap();
                            let partial = x_cols.matmul(&cols.t().unwrap()).unwrap();
                            (
                                x.matmul(&rows.t().unwrap()).unwrap(),
                                handle.sum(&partial).unwrap(),
                            )
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).unzip()
            });
            let joined = Tensor::cat(&row_parts, 1).unwrap();
            let max_error = |a: &Tensor| {
                (a - &whole)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap()
            };
            assert!(max_error(&joined) < 1e-5, "{ranks} ranks, column-parallel");
            for sum in &col_sums {
                assert!(max_error(sum) < 1e-5, "{ranks} ranks, row-parallel");
                // Every rank gets the same bits: their next layers must agree exactly.
                let same = (sum - &col_sums[0]).unwrap().abs().unwrap();
                assert_eq!(same.max_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
            }
        }
    }

    /// A rank that fails releases the others from the sum they wait in, with an error, instead
    /// of leaving them waiting forever.
    #[test]
    fn an_aborted_group_releases_its_waiting_ranks() {
        let handles = HostAllReduce::group(2);
        let x = Tensor::ones(4, candle_core::DType::F32, &Device::Cpu).unwrap();
        std::thread::scope(|s| {
            let waiting = s.spawn(|| handles[0].sum(&x));
            std::thread::sleep(std::time::Duration::from_millis(50));
            handles[1].abort();
            let released = waiting.join().unwrap();
            assert!(released.unwrap_err().to_string().contains("rank failed"));
        });
        assert!(handles[1].sum(&x).is_err());
    }
}
