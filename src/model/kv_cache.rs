//! Per-layer KV caches. Full layers keep every position in a buffer that grows geometrically;
//! sliding layers keep a ring of W slots (slot = position mod W), which is all the strict
//! `q − k < W` rule can ever look at. KV-consumer layers own nothing: they read what their
//! producer attended with in the same forward call.
//!
//! A device-resident decode step (one token whose position lives in device memory, so that the
//! step can be captured once and replayed) writes into the buffers reserved up front with
//! [`KvCache::reserve`] ([`KvCache::reserved_buffers`]), and attends over whole buffers under a
//! mask.

use super::config::{Config, KvSource, LayerKind};
use crate::kernels::reference::visible;
use candle_core::{DType, Device, Result, Tensor};

/// What one layer attends with: keys and values `[B, kv_heads, T, D]` and, for a chunk of
/// several tokens, the absolute position of each of the T keys (to build its mask). A single
/// appended token needs none: every key returned for it is visible to it by construction.
pub struct AttendKv {
    pub k: Tensor,
    pub v: Tensor,
    pub key_positions: Option<Vec<usize>>,
}

enum LayerCache {
    Full(FullCache),
    Sliding(RingCache),
}

struct FullCache {
    kv_heads: usize,
    head_dim: usize,
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
}

struct RingCache {
    kv_heads: usize,
    head_dim: usize,
    window: usize,
    k: Option<Tensor>,
    v: Option<Tensor>,
    /// Absolute position held by each filled slot.
    slots: Vec<Option<usize>>,
}

pub struct KvCache {
    layers: Vec<Option<LayerCache>>,
    /// Tokens already processed (the absolute position of the next token).
    len: usize,
}

impl KvCache {
    pub fn new(config: &Config) -> KvCache {
        let layers = config
            .layers
            .iter()
            .map(|spec| match (spec.kv_source, spec.kind) {
                (KvSource::SharedFrom(_), _) => None,
                (KvSource::Own, LayerKind::Full) => Some(LayerCache::Full(FullCache {
                    kv_heads: spec.kv_heads,
                    head_dim: spec.head_dim,
                    k: None,
                    v: None,
                    len: 0,
                })),
                (KvSource::Own, LayerKind::Sliding) => Some(LayerCache::Sliding(RingCache {
                    kv_heads: spec.kv_heads,
                    head_dim: spec.head_dim,
                    window: config.sliding_window,
                    k: None,
                    v: None,
                    slots: vec![None; config.sliding_window],
                })),
            })
            .collect();
        KvCache { layers, len: 0 }
    }

    /// The number of tokens already in the cache.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Marks `count` new tokens as processed; called once per forward after every layer ran.
    pub fn advance(&mut self, count: usize) {
        self.len += count;
    }

    /// Adds layer `layer`'s new keys/values `[B, kv_heads, S, D]` for positions
    /// `len .. len + S` and returns what the layer attends with.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<AttendKv> {
        let start = self.len;
        match self.layers[layer].as_mut() {
            Some(LayerCache::Full(cache)) => cache.append(start, k, v),
            Some(LayerCache::Sliding(cache)) => cache.append(start, k, v),
            None => candle_core::bail!("internal: layer {layer} owns no KV cache"),
        }
    }
}

impl KvCache {
    /// Allocates every layer's buffers now, full layers with room for `capacity` positions (kept
    /// contents are copied), so that device-resident steps write into buffers that stay put.
    pub fn reserve(&mut self, capacity: usize, dtype: DType, device: &Device) -> Result<()> {
        let len = self.len;
        for layer in self.layers.iter_mut().flatten() {
            match layer {
                LayerCache::Full(cache) => {
                    let have = cache.k.as_ref().map_or(0, |t| t.dim(2).unwrap_or(0));
                    if have < capacity {
                        let shape = (1, cache.kv_heads, capacity, cache.head_dim);
                        let fresh = || Tensor::zeros(shape, dtype, device);
                        cache.k = Some(keep_first(cache.k.take(), fresh()?, len)?);
                        cache.v = Some(keep_first(cache.v.take(), fresh()?, len)?);
                    }
                }
                LayerCache::Sliding(cache) => cache.ensure_buffers(dtype, device)?,
            }
        }
        Ok(())
    }

    /// Layer `layer`'s whole reserved buffers `[1, kv_heads, rows, D]`, for a device-resident
    /// step to write one token's k and v into at its slot (the position in full layers, position
    /// mod W in rings; `qkv_norm_rope` writes them) and attend over. Host bookkeeping waits for
    /// [`KvCache::record_device_token`], because a captured step runs later.
    pub fn reserved_buffers(&self, layer: usize) -> Result<(&Tensor, &Tensor)> {
        let (kb, vb) = match self.layers[layer].as_ref() {
            Some(LayerCache::Full(FullCache { k, v, .. }))
            | Some(LayerCache::Sliding(RingCache { k, v, .. })) => (k, v),
            None => candle_core::bail!("internal: layer {layer} owns no KV cache"),
        };
        match (kb, vb) {
            (Some(kb), Some(vb)) => Ok((kb, vb)),
            _ => candle_core::bail!("internal: layer {layer}'s KV cache was not reserved"),
        }
    }

    /// Readies layer `layer` for a chunk of `count` new positions to be written straight into its
    /// buffers as they are made (`qkv_norm_rope` writes them, where appends copied them), and
    /// says whether it can: a full layer always (its buffer grows first), a sliding layer while
    /// its ring is empty and the chunk fits in it (later, the chunk's queries still need the
    /// ring's positions it would overwrite).
    pub fn prepare_chunk(
        &mut self,
        layer: usize,
        count: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<bool> {
        let start = self.len;
        match self.layers[layer].as_mut() {
            Some(LayerCache::Full(cache)) => {
                cache.ensure_capacity(start + count, dtype, device)?;
                Ok(true)
            }
            Some(LayerCache::Sliding(cache)) if start == 0 && count <= cache.window => {
                cache.ensure_buffers(dtype, device)?;
                Ok(true)
            }
            Some(LayerCache::Sliding(_)) => Ok(false),
            None => candle_core::bail!("internal: layer {layer} owns no KV cache"),
        }
    }

    /// Where a chunk [`KvCache::prepare_chunk`] admitted goes: layer `layer`'s buffers and its
    /// first row.
    pub fn chunk_rows(&self, layer: usize) -> Result<(&Tensor, &Tensor, usize)> {
        let (k, v) = self.reserved_buffers(layer)?;
        let first = match self.layers[layer].as_ref() {
            Some(LayerCache::Sliding(cache)) => self.len % cache.window,
            _ => self.len,
        };
        Ok((k, v, first))
    }

    /// Records the chunk of `count` positions written at [`KvCache::chunk_rows`] and returns
    /// what layer `layer` attends with: a full layer's every position, an (admitted, so empty)
    /// ring's chunk.
    pub fn commit_chunk(&mut self, layer: usize, count: usize) -> Result<AttendKv> {
        let (start, end) = (self.len, self.len + count);
        let (kb, vb, first_key) = match self.layers[layer].as_mut() {
            Some(LayerCache::Full(cache)) => {
                cache.len = end;
                (&cache.k, &cache.v, 0)
            }
            Some(LayerCache::Sliding(cache)) => {
                for position in start..end {
                    cache.slots[position % cache.window] = Some(position);
                }
                (&cache.k, &cache.v, start)
            }
            None => candle_core::bail!("internal: layer {layer} owns no KV cache"),
        };
        let (Some(kb), Some(vb)) = (kb, vb) else {
            candle_core::bail!("internal: layer {layer}'s chunk was not prepared");
        };
        let keys = end - first_key;
        Ok(AttendKv {
            k: kb.narrow(2, 0, keys)?,
            v: vb.narrow(2, 0, keys)?,
            key_positions: (count > 1).then(|| (first_key..end).collect()),
        })
    }

    /// Records that a device-resident step wrote the token at position `len()` in every layer.
    pub fn record_device_token(&mut self) {
        let position = self.len;
        for layer in self.layers.iter_mut().flatten() {
            match layer {
                LayerCache::Full(cache) => cache.len = position + 1,
                LayerCache::Sliding(cache) => {
                    let window = cache.window;
                    cache.slots[position % window] = Some(position);
                }
            }
        }
        self.len += 1;
    }
}

impl FullCache {
    /// Room for `needed` positions, the ones held kept.
    fn ensure_capacity(&mut self, needed: usize, dtype: DType, device: &Device) -> Result<()> {
        let capacity = self.k.as_ref().map_or(0, |t| t.dim(2).unwrap_or(0));
        if needed > capacity {
            // Geometric growth keeps decode allocation-free between doublings.
            let grown = needed.max(capacity * 2).max(64);
            let shape = (1, self.kv_heads, grown, self.head_dim);
            let fresh = || Tensor::zeros(shape, dtype, device);
            self.k = Some(keep_first(self.k.take(), fresh()?, self.len)?);
            self.v = Some(keep_first(self.v.take(), fresh()?, self.len)?);
        }
        Ok(())
    }

    fn append(&mut self, start: usize, k: &Tensor, v: &Tensor) -> Result<AttendKv> {
        let new = k.dim(2)?;
        let needed = start + new;
        self.ensure_capacity(needed, k.dtype(), k.device())?;
        let (kb, vb) = (
            self.k.as_ref().expect("allocated above"),
            self.v.as_ref().expect("allocated above"),
        );
        kb.slice_set(&k.contiguous()?, 2, start)?;
        vb.slice_set(&v.contiguous()?, 2, start)?;
        self.len = needed;
        Ok(AttendKv {
            k: kb.narrow(2, 0, needed)?,
            v: vb.narrow(2, 0, needed)?,
            key_positions: (new > 1).then(|| (0..needed).collect()),
        })
    }
}

/// `fresh` with the first `keep` positions of `old` copied in.
fn keep_first(old: Option<Tensor>, fresh: Tensor, keep: usize) -> Result<Tensor> {
    if let Some(old) = old {
        if keep > 0 {
            fresh.slice_set(&old.narrow(2, 0, keep)?.contiguous()?, 2, 0)?;
        }
    }
    Ok(fresh)
}

impl RingCache {
    /// The ring's W slots, allocated on first use.
    fn ensure_buffers(&mut self, dtype: DType, device: &Device) -> Result<()> {
        if self.k.is_none() {
            let shape = (1, self.kv_heads, self.window, self.head_dim);
            self.k = Some(Tensor::zeros(shape, dtype, device)?);
            self.v = Some(Tensor::zeros(shape, dtype, device)?);
        }
        Ok(())
    }

    fn append(&mut self, start: usize, k: &Tensor, v: &Tensor) -> Result<AttendKv> {
        let new = k.dim(2)?;
        self.ensure_buffers(k.dtype(), k.device())?;
        let filled = start.min(self.window);
        let result = if new == 1 {
            // Decode: the slot being overwritten holds position start − W, which the window
            // rule already hides, so write first and attend over the filled slots.
            self.write(start, k, v)?;
            let count = (start + 1).min(self.window);
            let (kb, vb) = self.buffers();
            AttendKv {
                k: kb.narrow(2, 0, count)?,
                v: vb.narrow(2, 0, count)?,
                key_positions: None,
            }
        } else {
            // Prefill: attend over what the ring holds plus the whole chunk, then keep the
            // chunk's last W positions.
            let (kb, vb) = self.buffers();
            let mut key_positions: Vec<usize> = self.slots[..filled]
                .iter()
                .map(|p| p.expect("filled slot"))
                .collect();
            key_positions.extend(start..start + new);
            // An empty ring (a prompt's first piece) attends over the chunk as it is: a copy
            // per tensor and layer saved.
            let with_ring = |ring: &Tensor, chunk: &Tensor| match filled {
                0 => Ok(chunk.clone()),
                _ => Tensor::cat(&[&ring.narrow(2, 0, filled)?, chunk], 2),
            };
            let attend = AttendKv {
                k: with_ring(kb, k)?,
                v: with_ring(vb, v)?,
                key_positions: Some(key_positions),
            };
            let keep = new.min(self.window);
            let skip = new - keep;
            self.write(
                start + skip,
                &k.narrow(2, skip, keep)?,
                &v.narrow(2, skip, keep)?,
            )?;
            attend
        };
        Ok(result)
    }

    fn buffers(&self) -> (&Tensor, &Tensor) {
        (
            self.k.as_ref().expect("allocated on first append"),
            self.v.as_ref().expect("allocated on first append"),
        )
    }

    /// Writes `count ≤ W` consecutive positions from `first`, wrapping around the ring.
    fn write(&mut self, first: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let count = k.dim(2)?;
        let mut done = 0;
        while done < count {
            let slot = (first + done) % self.window;
            let run = (self.window - slot).min(count - done);
            let (kb, vb) = self.buffers();
            kb.slice_set(&k.narrow(2, done, run)?.contiguous()?, 2, slot)?;
            vb.slice_set(&v.narrow(2, done, run)?.contiguous()?, 2, slot)?;
            for i in 0..run {
                self.slots[slot + i] = Some(first + done + i);
            }
            done += run;
        }
        Ok(())
    }
}

/// The additive mask `[S, T]` for queries at `first_query ..` over `key_positions`, or `None`
/// when every key is visible to every query. A GPU builds it from the keys' positions: filled on
/// the host, a 512-token piece's mask over 4,096 keys took 33 ms while the GPU waited.
pub fn attention_mask(
    first_query: usize,
    queries: usize,
    key_positions: &[usize],
    window: Option<usize>,
    device: &Device,
) -> Result<Option<Tensor>> {
    let span = MaskSpan {
        first_query,
        queries,
        key_positions,
        window,
    };
    if span.all_visible() {
        return Ok(None);
    }
    match device {
        Device::Cpu => span.host_filled(),
        _ => span.compared_on(device),
    }
    .map(Some)
}

/// Which queries look at which keys: what a mask is made from.
struct MaskSpan<'a> {
    first_query: usize,
    queries: usize,
    key_positions: &'a [usize],
    window: Option<usize>,
}

impl MaskSpan<'_> {
    fn query_positions(&self) -> std::ops::Range<usize> {
        self.first_query..self.first_query + self.queries
    }

    /// Causality binds hardest at the first query and the window at the last.
    fn all_visible(&self) -> bool {
        let Some(last_query) = self.query_positions().last() else {
            return true;
        };
        self.key_positions.iter().all(|&k| {
            visible(self.first_query, k, self.window) && visible(last_query, k, self.window)
        })
    }

    fn host_filled(&self) -> Result<Tensor> {
        let data: Vec<f32> = self
            .query_positions()
            .flat_map(|q| {
                self.key_positions
                    .iter()
                    .map(move |&k| match visible(q, k, self.window) {
                        true => 0.0,
                        false => f32::NEG_INFINITY,
                    })
            })
            .collect();
        Tensor::from_vec(data, self.shape(), &Device::Cpu)
    }

    /// The mask by comparisons of the query and key positions on `device`.
    fn compared_on(&self, device: &Device) -> Result<Tensor> {
        let position = |p: usize| {
            u32::try_from(p).map_err(|_| {
                candle_core::Error::Msg(format!(
                    "position {p} is beyond the masks' 32-bit positions"
                ))
            })
        };
        let keys_row = |offset: usize| -> Result<Tensor> {
            let positions = self
                .key_positions
                .iter()
                .map(|&k| position(k + offset))
                .collect::<Result<Vec<u32>>>()?;
            Tensor::from_vec(positions, (1, self.key_positions.len()), device)
        };
        let queries = self.query_positions();
        let query_column =
            Tensor::arange(position(queries.start)?, position(queries.end)?, device)?
                .reshape((self.queries, 1))?;
        let mut seen = keys_row(0)?.broadcast_le(&query_column)?;
        if let Some(window) = self.window {
            // q − k < W, written k + W > q: unsigned positions never go below zero.
            seen = seen.mul(&keys_row(window)?.broadcast_gt(&query_column)?)?;
        }
        let open = Tensor::zeros((), DType::F32, device)?.broadcast_as(self.shape())?;
        let hidden = Tensor::new(f32::NEG_INFINITY, device)?.broadcast_as(self.shape())?;
        seen.where_cond(&open, &hidden)
    }

    fn shape(&self) -> (usize, usize) {
        (self.queries, self.key_positions.len())
    }
}

#[cfg(test)]
mod tests {
    use super::{attention_mask, AttendKv, FullCache, KvCache, LayerCache, MaskSpan, RingCache};
    use crate::kernels::reference::visible;
    use candle_core::{DType, Device, Tensor};

    /// A full layer and a sliding one of window 4, two kv heads of width 4.
    fn two_layer_cache() -> KvCache {
        let (kv_heads, head_dim, window) = (2, 4, 4);
        KvCache {
            layers: vec![
                Some(LayerCache::Full(FullCache {
                    kv_heads,
                    head_dim,
                    k: None,
                    v: None,
                    len: 0,
                })),
                Some(LayerCache::Sliding(RingCache {
                    kv_heads,
                    head_dim,
                    window,
                    k: None,
                    v: None,
                    slots: vec![None; window],
                })),
            ],
            len: 0,
        }
    }

    fn contents(attend: &AttendKv) -> (Vec<f32>, Vec<f32>, Option<Vec<usize>>) {
        let values = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        (
            values(&attend.k),
            values(&attend.v),
            attend.key_positions.clone(),
        )
    }

    /// A chunk written in place (`prepare_chunk`, the rows `chunk_rows` names, `commit_chunk`)
    /// attends with what an append of the same k and v returns, on a full layer and on an empty
    /// ring; a ring that holds positions, or a chunk longer than its window, is refused (those
    /// chunks append).
    #[test]
    fn a_chunk_written_in_place_attends_like_an_append() {
        let device = Device::Cpu;
        let chunk = |start: usize, count: usize, offset: f32| {
            let values = (0..2 * count * 4)
                .map(|i| (start * 100 + i) as f32 + offset)
                .collect();
            Tensor::from_vec(values, (1, 2, count, 4), &device).unwrap()
        };
        let (mut in_place, mut appended) = (two_layer_cache(), two_layer_cache());
        for (count, ring_admits) in [(3, true), (2, false)] {
            let start = in_place.len();
            for layer in 0..2 {
                let (k, v) = (chunk(start, count, 0.0), chunk(start, count, 0.5));
                let admitted = in_place
                    .prepare_chunk(layer, count, DType::F32, &device)
                    .unwrap();
                assert_eq!(
                    admitted,
                    layer == 0 || ring_admits,
                    "layer {layer} at {start}"
                );
                let expected = contents(&appended.append(layer, &k, &v).unwrap());
                let got = if admitted {
                    let (kb, vb, first) = in_place.chunk_rows(layer).unwrap();
                    kb.slice_set(&k, 2, first).unwrap();
                    vb.slice_set(&v, 2, first).unwrap();
                    in_place.commit_chunk(layer, count).unwrap()
                } else {
                    in_place.append(layer, &k, &v).unwrap()
                };
                assert_eq!(contents(&got), expected, "layer {layer} at {start}");
            }
            in_place.advance(count);
            appended.advance(count);
        }
        let mut long = two_layer_cache();
        assert!(!long.prepare_chunk(1, 5, DType::F32, &device).unwrap());
    }

    /// Every entry of the mask, as the host fills it and as a GPU builds it, against the
    /// visibility rule itself: a first piece, a later piece over a wrapped ring (window) and over
    /// a full cache (none); and `None` exactly when all keys are visible.
    #[test]
    fn attention_mask_follows_the_visibility_rule() {
        let ring: Vec<usize> = (8..12).chain(4..8).chain(12..18).collect();
        let cases: [(usize, usize, Vec<usize>, Option<usize>); 6] = [
            (0, 7, (0..7).collect(), Some(4)),
            (5, 1, (0..8).collect(), Some(4)),
            (12, 6, ring, Some(8)),
            (5, 3, (0..8).collect(), None),
            (9, 2, (3..9).collect(), Some(8)),
            (9, 3, (2..9).collect(), Some(8)),
        ];
        for (first, queries, keys, window) in cases {
            let mask = attention_mask(first, queries, &keys, window, &Device::Cpu).unwrap();
            let span = MaskSpan {
                first_query: first,
                queries,
                key_positions: &keys,
                window,
            };
            let compared = span.compared_on(&Device::Cpu).unwrap().to_vec2::<f32>();
            let expected: Vec<Vec<f32>> = (first..first + queries)
                .map(|q| {
                    keys.iter()
                        .map(|&k| match visible(q, k, window) {
                            true => 0.0,
                            false => f32::NEG_INFINITY,
                        })
                        .collect()
                })
                .collect();
            let all_visible = expected.iter().flatten().all(|&m| m == 0.0);
            match mask {
                None => assert!(all_visible, "no mask at {first}+{queries} over {keys:?}"),
                Some(mask) => {
                    assert!(
                        !all_visible,
                        "a mask where none is needed: {first}+{queries}"
                    );
                    assert_eq!(
                        mask.to_vec2::<f32>().unwrap(),
                        expected,
                        "{first}+{queries}"
                    );
                }
            }
            // What a GPU builds, here on the CPU, whether or not a mask is needed.
            assert_eq!(compared.unwrap(), expected, "{first}+{queries} compared");
        }
    }
}
