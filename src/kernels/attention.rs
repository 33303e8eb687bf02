//! `attention`: `softmax(q·kᵀ·scale + mask) · v` with GQA by contiguous groups (query head j
//! reads KV head j ÷ (heads / kv_heads)). Gemma-4 uses scale 1.0; the sliding-window and causal
//! rules arrive as an additive f32 mask `[S, T]` (absent when every key is visible, as in eager
//! decode), or, in a decode step whose position is on the device, as that position: key slots
//! past it are empty ([`Visible`]). Softmax runs in f32, as the reference's eager attention does.

use super::check::{Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::rngs::StdRng;

const OP: Op = Op::Attention;

/// Which keys a query may see: those an additive f32 mask `[S, T]` leaves open (every key
/// without one), and of those, where `last_slot` (u32 `[1]`, on the device) is given, only
/// slots `0..=last_slot`. A graph decode step gives its position as `last_slot` instead of a
/// mask: a cache buffer's slots past it are empty, and the native kernel then cuts its chunks
/// from the visible slots alone.
#[derive(Clone, Copy)]
pub struct Visible<'a> {
    pub mask: Option<&'a Tensor>,
    pub last_slot: Option<&'a Tensor>,
}

impl Visible<'_> {
    /// The additive f32 mask `[seq, keys]` both parts make together; `None` when every key is
    /// visible.
    fn additive(&self, seq: usize, keys: usize, device: &Device) -> Result<Option<Tensor>> {
        let mask = self.mask.map(|m| m.to_dtype(DType::F32)).transpose()?;
        let Some(last) = self.last_slot else {
            return Ok(mask);
        };
        let slots = Tensor::arange(0u32, keys as u32, device)?;
        let open = Tensor::zeros(keys, DType::F32, device)?;
        let hidden = Tensor::full(f32::NEG_INFINITY, keys, device)?;
        let prefix = slots
            .broadcast_le(&last.reshape(1)?)?
            .where_cond(&open, &hidden)?
            .reshape((1, keys))?
            .broadcast_as((seq, keys))?;
        Ok(Some(match mask {
            Some(mask) => (mask + prefix)?,
            None => prefix.contiguous()?,
        }))
    }
}

/// `q [B, heads, S, D]`, `k, v [B, kv_heads, T, D]`, the keys each query sees → `[B, heads, S, D]`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    visible: Visible,
    scale: f64,
) -> Result<Tensor> {
    attention_on(arm_for(OP, q.device(), q.dtype()), q, k, v, visible, scale)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn attention_on(
    arm: Arm,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    visible: Visible,
    scale: f64,
) -> Result<Tensor> {
    // The native kernels index the mask as [S, T]: a broadcastable one would be read out of
    // bounds there, so every arm refuses it alike.
    if let Some(mask) = visible.mask {
        let (seq, keys) = (q.dim(2)?, k.dim(2)?);
        if mask.dims() != [seq, keys] {
            candle_core::bail!(
                "attention: mask {:?} for {seq} queries over {keys} keys (want [{seq}, {keys}])",
                mask.dims()
            );
        }
    }
    if let Some(last) = visible.last_slot {
        if last.dtype() != DType::U32 || last.elem_count() != 1 {
            candle_core::bail!(
                "attention: last visible slot {:?} {:?} (want one u32)",
                last.dtype(),
                last.dims()
            );
        }
    }
    match arm {
        Arm::Composed => composed(q, k, v, visible, scale),
        Arm::Native(Backend::Cpu) => cpu_fwd(q, k, v, visible, scale),
        Arm::Native(_) => native_fwd(q, k, v, visible, scale),
    }
}

pub fn composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    visible: Visible,
    scale: f64,
) -> Result<Tensor> {
    let mask = visible.additive(q.dim(2)?, k.dim(2)?, q.device())?;
    around_scores(q, k, v, |scores, seq, keys| {
        let (batch, kv_heads, rows, _) = scores.dims4()?;
        let scores = if scale == 1.0 {
            scores
        } else {
            scores.affine(scale, 0.0)?
        };
        let scores =
            scores
                .to_dtype(DType::F32)?
                .reshape((batch, kv_heads, rows / seq, seq, keys))?;
        let scores = match &mask {
            Some(mask) => scores.broadcast_add(mask)?,
            None => scores,
        };
        candle_nn::ops::softmax_last_dim(&scores)?
            .to_dtype(v.dtype())?
            .reshape((batch, kv_heads, rows, keys))
    })
}

/// `probs(scores, seq, keys) · v`, where `scores = q·kᵀ` is `[B, kv_heads, group·S, T]`: each
/// KV head's query group is folded into the row axis (row `g·S + s`), which avoids
/// materialising repeat_kv. `probs` returns the softmax in the same layout and `v`'s dtype.
fn around_scores(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    probs: impl FnOnce(Tensor, usize, usize) -> Result<Tensor>,
) -> Result<Tensor> {
    let (batch, heads, seq, head_dim) = q.dims4()?;
    let (_, kv_heads, keys, _) = k.dims4()?;
    let group = heads / kv_heads;
    let q = q
        .contiguous()?
        .reshape((batch, kv_heads, group * seq, head_dim))?;
    let probs = probs(q.matmul(&k.t()?)?, seq, keys)?;
    probs
        .matmul(&v.contiguous()?)?
        .reshape((batch, heads, seq, head_dim))
}

/// CPU arm: the composed arm's two GEMMs (candle's) around one vectorised pass per score row
/// (`native/cpu.rs`) for its scale, mask and softmax, f32.
fn cpu_fwd(q: &Tensor, k: &Tensor, v: &Tensor, visible: Visible, scale: f64) -> Result<Tensor> {
    let (Some(simd), DType::F32) = (cpu::simd(), q.dtype()) else {
        return composed(q, k, v, visible, scale);
    };
    let mask = visible.additive(q.dim(2)?, k.dim(2)?, q.device())?;
    around_scores(q, k, v, |scores, seq, keys| {
        let probs = cpu::with_f32(&scores, |scores| match &mask {
            Some(mask) => cpu::with_f32(mask, |mask| {
                cpu::masked_softmax_f32(simd, scores, Some(mask), seq, keys, scale as f32)
            }),
            None => Ok(cpu::masked_softmax_f32(
                simd,
                scores,
                None,
                seq,
                keys,
                scale as f32,
            )),
        })??;
        Tensor::from_vec(probs, scores.shape(), scores.device())
    })
}

/// Query blocks longer than this go through cuBLAS GEMMs: the row kernel re-reads K/V per query
/// and measured 2.2× slower than the GEMM path for a 512-token E4B prefill on the H200.
const CUDA_KERNEL_MAX_QUERIES: usize = 16;
/// The widest head the native kernel holds per lane (Gemma-4's largest is 512).
const NATIVE_MAX_HEAD_DIM: usize = 512;

/// Keys per chunk of the split-K kernel, and the blocks to aim for: a decode step has only one
/// query row per head, so its keys are what spreads the work over the GPU's SMs. The grid is
/// sized for every key of the buffer; a step whose position is on the device uses only the
/// chunks its visible keys fill at `G4_ATTN_MIN_KEYS_PER_CHUNK` (8) each, and the merge reads
/// only those (a graph step is captured once for a buffer that mostly holds fewer keys).
const KEYS_PER_CHUNK: usize = 16;
/// Warps per block of both kernels (`G4_ATTN_WARPS`: the chunk kernel strides its keys and
/// merges its warps by this count, so a block must hold exactly this many on any warp width).
const WARPS_PER_BLOCK: usize = 4;
const TARGET_BLOCKS: usize = 512;
/// Chunks a row may have (`G4_ATTN_MAX_SPLITS`: the merge keeps one weight per chunk in shared
/// memory); `TARGET_BLOCKS` keeps every decode step well under it.
const MAX_SPLITS: usize = 1024;

/// Warps of the softmax kernel's block (one warp per score row).
const SOFTMAX_WARPS: usize = 4;
/// Scores a softmax lane holds at once (`G4_SOFTMAX_VALUES`): rows of up to this many per lane
/// are one tile, read once, with the kernel's `_one_tile` variant.
const SOFTMAX_VALUES: usize = 16;

/// The flash kernel's block (`G4_FLASH_*` in attention.cu): 4 warps of 16 query rows, tiles of
/// 32 keys, and 128 output columns (256 at head_dim 512); shared rows are padded by 8 elements.
const FLASH_WARPS: usize = 4;
const FLASH_QUERIES: usize = 64;
const FLASH_KEYS: usize = 32;
const FLASH_DV: usize = 128;
const FLASH_WIDE_D: usize = 512;
const FLASH_WIDE_DV: usize = 256;
const FLASH_HEAD_DIMS: [usize; 3] = [128, 256, 512];
/// Output columns per block at `head_dim`.
fn flash_columns(head_dim: usize) -> usize {
    match head_dim >= FLASH_WIDE_D {
        true => FLASH_WIDE_DV,
        false => FLASH_DV,
    }
}

/// Dynamic shared memory of a flash block (attention.cu's `FlashTiles`): q's tile, two stages
/// of K, V and mask tiles, then one bit per key tile.
fn flash_shared_bytes(head_dim: usize, key_tiles: usize) -> u32 {
    let row = head_dim + 8;
    let stage = FLASH_KEYS * row * 2
        + FLASH_KEYS * (flash_columns(head_dim) + 8) * 2
        + FLASH_QUERIES * (FLASH_KEYS + 8) * 4;
    (FLASH_QUERIES * row * 2 + 2 * stage + key_tiles.div_ceil(32) * 4) as u32
}

/// Threads of the mask's tile map kernel (one block per query tile × key tile).
const FLASH_MAP_THREADS: u32 = 128;
/// Blocks a flash launch aims for: with fewer query tiles than that (a 512-token prefill of 8
/// heads has 128 blocks), each query tile's visible key tiles are split over several blocks
/// and a merge kernel combines them.
const FLASH_TARGET_BLOCKS: usize = 512;

/// CUDA arm: for decode and short query blocks, split-K over the keys with an online softmax
/// per warp and a merge kernel (src/kernels/cuda/attention.cu), reading K/V in place from the
/// cache (head_dim up to 512, Gemma-4's largest), its chunks cut from the visible slots where
/// the last one is on the device; for longer blocks, the flash kernel where it fits
/// ([`flash_fits`]), else cuBLAS's batched GEMMs around one softmax kernel.
fn native_fwd(q: &Tensor, k: &Tensor, v: &Tensor, visible: Visible, scale: f64) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, warp_lanes, Arg, Grid};
    let (batch, heads, seq, head_dim) = q.dims4()?;
    let (_, kv_heads, keys, _) = k.dims4()?;
    if seq > CUDA_KERNEL_MAX_QUERIES {
        let mask = visible.additive(seq, keys, q.device())?;
        return match flash_fits(q, k, v) {
            true => flash_fwd(q, k, v, mask.as_ref(), scale),
            false => gemm_fwd(q, k, v, mask.as_ref(), scale),
        };
    }
    let q = q.contiguous()?;
    if head_dim > NATIVE_MAX_HEAD_DIM {
        return composed(&q, k, v, visible, scale);
    }
    // Rows must be contiguous and the batch dim must collapse into the head dim.
    let fits = |t: &Tensor| {
        let stride = t.stride();
        stride[3] == 1 && stride[2] == head_dim && (batch == 1 || stride[0] == kv_heads * stride[1])
    };
    let (k, v) = if fits(k) && fits(v) && k.stride() == v.stride() {
        (k.clone(), v.clone())
    } else {
        (k.contiguous()?, v.contiguous()?)
    };
    let head_stride = k.stride()[1];
    let mask = visible
        .mask
        .map(|m| m.to_dtype(DType::F32)?.contiguous())
        .transpose()?;
    let last_slot = visible.last_slot.map(Tensor::contiguous).transpose()?;
    let rows = batch * heads * seq;
    let splits = keys
        .div_ceil(KEYS_PER_CHUNK)
        .min(TARGET_BLOCKS.div_ceil(rows))
        .clamp(1, MAX_SPLITS);
    let out = empty((batch, heads, seq, head_dim), q.dtype(), q.device())?;
    let (partial_acc, partial_stats) = split_partials(splits, rows, head_dim, q.device())?;
    let args = [
        Arg::Tensor(&q),
        Arg::RowView(&k),
        Arg::RowView(&v),
        Arg::OptionalTensor(mask.as_ref()),
        Arg::OptionalTensor(last_slot.as_ref()),
        Arg::Tensor(&out),
        Arg::OptionalTensor(partial_acc.as_ref()),
        Arg::OptionalTensor(partial_stats.as_ref()),
        Arg::I32(heads as i32),
        Arg::I32(kv_heads as i32),
        Arg::I32(seq as i32),
        Arg::I32(keys as i32),
        Arg::I32(head_dim as i32),
        Arg::Usize(head_stride),
        Arg::F32(scale as f32),
        Arg::I32(splits as i32),
    ];
    let lanes = warp_lanes(q.device());
    let grid = Grid::of_warps(rows * splits, WARPS_PER_BLOCK, lanes);
    let dtype = q.dtype();
    let kernel = chunk_kernel(&q, &k, &v, lanes);
    launch(&kernel_name(kernel, dtype)?, q.device(), grid, &args)?;
    merge_splits(
        (&partial_acc, &partial_stats),
        &out,
        rows,
        splits,
        (last_slot.as_ref(), keys),
    )?;
    Ok(out)
}

/// The chunk kernel's entry point. Where every row of q, K and V is one or two whole 16-byte
/// vectors a lane, on 16-byte boundaries (Gemma-4's heads of 256 and 512 in 16-bit floats), a
/// lean entry compiled for that path alone: it needs 63 or 80 registers where the general one,
/// which holds every path, takes 128 — so that its blocks no longer fill the register file and
/// the merge and the next GEMV can start beside them (programmatic dependent launch).
fn chunk_kernel(q: &Tensor, k: &Tensor, v: &Tensor, lanes: usize) -> &'static str {
    let element = q.dtype().size_in_bytes();
    let head_dim = q.dim(3).unwrap_or(0);
    let per_load = 16 / element;
    let aligned = [q, k, v].iter().all(|t| {
        super::native::vector_aligned(t)
            && t.stride()[..3]
                .iter()
                .all(|s| (s * element).is_multiple_of(16))
    });
    match (aligned && head_dim.is_multiple_of(lanes * per_load))
        .then(|| head_dim / (lanes * per_load))
    {
        Some(1) => "attention_vec1",
        Some(2) => "attention_vec2",
        _ => "attention",
    }
}

/// Keys from which the flash kernel replaces the GEMM path. Measured on the H200 (E4B bf16,
/// docs/PERFORMANCE.md, stop 37): over 512 keys (a 512-token prefill) the GEMM path's kernels
/// took 1.29 ms against flash's 1.71; a 16,384-token prompt (pieces of 512 against up to 16,384
/// keys) prefilled 1.18–1.35× faster with flash everywhere, and needs no score matrices. Between
/// the two nothing was measured on its own: 4,096 keeps every piece of a 4,096-token prompt but
/// its last on the GEMM path.
const FLASH_MIN_KEYS: usize = 4096;

/// Whether the flash kernel takes these: at least [`FLASH_MIN_KEYS`] keys, 16-bit floats, a
/// head_dim it is built for, a CUDA GPU with the shared memory its block asks for (Hopper and
/// the A100), and rows it can copy in 16-byte pieces (contiguous rows on 16-byte boundaries;
/// K/V's heads and batches may be any whole number of such rows apart, as in a cache's views).
fn flash_fits(q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
    let head_dim = q.dim(3).unwrap_or(0);
    let rows_fit = |t: &Tensor, contiguous_rows: bool| {
        let stride = t.stride();
        stride[3] == 1
            && (!contiguous_rows || stride[2] == head_dim)
            && stride[..3].iter().all(|s| s.is_multiple_of(8))
            && super::native::vector_aligned(t)
    };
    let keys = k.dim(2).unwrap_or(0);
    let shared_fits = || {
        crate::device::max_shared_bytes_per_block(q.device()).is_some_and(|most| {
            flash_shared_bytes(head_dim, keys.div_ceil(FLASH_KEYS)) as usize <= most
        })
    };
    keys >= FLASH_MIN_KEYS
        && matches!(q.dtype(), DType::BF16 | DType::F16)
        && FLASH_HEAD_DIMS.contains(&head_dim)
        && rows_fit(q, false)
        && rows_fit(k, true)
        && rows_fit(v, true)
        && k.stride() == v.stride()
        && shared_fits()
}

/// Long query blocks on CUDA in 16-bit floats: one kernel for scores, masked softmax and p·v
/// per tile of keys, the output written token-major as [`gemm_fwd`]'s.
fn flash_fwd(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch_with_shared, warp_lanes, Arg, Grid};
    let (batch, heads, seq, head_dim) = q.dims4()?;
    let (_, kv_heads, keys, _) = k.dims4()?;
    let mask = mask
        .map(|m| m.to_dtype(DType::F32)?.contiguous())
        .transpose()?;
    let (q_tiles, key_tiles) = (seq.div_ceil(FLASH_QUERIES), keys.div_ceil(FLASH_KEYS));
    let map = mask
        .as_ref()
        .map(|mask| flash_mask_map(mask, q_tiles, key_tiles))
        .transpose()?;
    let out = empty((batch, seq, heads, head_dim), q.dtype(), q.device())?;
    let blocks = batch * heads * q_tiles * (head_dim / flash_columns(head_dim));
    let splits = FLASH_TARGET_BLOCKS
        .div_ceil(blocks)
        .clamp(1, key_tiles.max(1));
    let rows = batch * seq * heads;
    let (partial_acc, partial_stats) = split_partials(splits, rows, head_dim, q.device())?;
    let (q_stride, kv_stride) = (q.stride(), k.stride());
    let args = [
        Arg::RowView(q),
        Arg::RowView(k),
        Arg::RowView(v),
        Arg::OptionalTensor(mask.as_ref()),
        Arg::OptionalTensor(map.as_ref()),
        Arg::Tensor(&out),
        Arg::OptionalTensor(partial_acc.as_ref()),
        Arg::OptionalTensor(partial_stats.as_ref()),
        Arg::I32(heads as i32),
        Arg::I32(kv_heads as i32),
        Arg::I32(seq as i32),
        Arg::I32(keys as i32),
        Arg::Usize(q_stride[0]),
        Arg::Usize(q_stride[1]),
        Arg::Usize(q_stride[2]),
        Arg::Usize(kv_stride[0]),
        Arg::Usize(kv_stride[1]),
        Arg::F32(scale as f32),
        Arg::I32(splits as i32),
    ];
    let grid = Grid::of_warps(blocks * splits, FLASH_WARPS, warp_lanes(q.device()));
    let name = kernel_name(&format!("flash_attention_d{head_dim}"), q.dtype())?;
    launch_with_shared(
        &name,
        q.device(),
        grid,
        flash_shared_bytes(head_dim, key_tiles),
        &args,
    )?;
    merge_splits(
        (&partial_acc, &partial_stats),
        &out,
        rows,
        splits,
        (None, 0),
    )?;
    out.transpose(1, 2)
}

/// The mask's tile map: one byte per (query tile, key tile), whether any query sees any key.
fn flash_mask_map(mask: &Tensor, q_tiles: usize, key_tiles: usize) -> Result<Tensor> {
    use super::native::{empty, launch, Arg, Grid};
    let (seq, keys) = mask.dims2()?;
    let map = empty(q_tiles * key_tiles, DType::U8, mask.device())?;
    let args = [
        Arg::Tensor(mask),
        Arg::Tensor(&map),
        Arg::I32(seq as i32),
        Arg::I32(keys as i32),
        Arg::I32(key_tiles as i32),
    ];
    let grid = Grid {
        blocks: (q_tiles * key_tiles) as u32,
        threads: FLASH_MAP_THREADS,
    };
    launch("g4_flash_mask_map", mask.device(), grid, &args)?;
    Ok(map)
}

/// Split-K's f32 partial rows (`[rows, splits, head_dim]`) and each one's (max, sum), for
/// [`merge_splits`]; none for a single split.
fn split_partials(
    splits: usize,
    rows: usize,
    head_dim: usize,
    device: &Device,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    use super::native::empty;
    if splits <= 1 {
        return Ok((None, None));
    }
    Ok((
        Some(empty(splits * rows * head_dim, DType::F32, device)?),
        Some(empty(splits * rows * 2, DType::F32, device)?),
    ))
}

/// Combines split-K's partial rows into `out` (`[rows, head_dim]` underneath, in whichever
/// order the kernel numbered its rows), for the decode and the flash kernel alike; given the
/// decode position on the device and the keys, only the chunks the chunk kernel used.
fn merge_splits(
    (partial_acc, partial_stats): (&Option<Tensor>, &Option<Tensor>),
    out: &Tensor,
    rows: usize,
    splits: usize,
    (last_slot, keys): (Option<&Tensor>, usize),
) -> Result<()> {
    use super::native::{kernel_name, launch, warp_lanes, Arg, Grid};
    let (Some(partial_acc), Some(partial_stats)) = (partial_acc, partial_stats) else {
        return Ok(());
    };
    let head_dim = out.elem_count() / rows.max(1);
    let args = [
        Arg::Tensor(partial_acc),
        Arg::Tensor(partial_stats),
        Arg::Tensor(out),
        Arg::I32(head_dim as i32),
        Arg::I32(splits as i32),
        Arg::OptionalTensor(last_slot),
        Arg::I32(keys as i32),
    ];
    let lanes = warp_lanes(out.device());
    let threads = WARPS_PER_BLOCK * lanes;
    let grid = Grid::of_warps(rows * head_dim.div_ceil(threads), WARPS_PER_BLOCK, lanes);
    let name = kernel_name("attention_merge", out.dtype())?;
    launch(&name, out.device(), grid, &args)
}

/// Long query blocks elsewhere: cuBLAS's q·kᵀ, one kernel for its scale, f32 cast, mask and softmax
/// (`attention_softmax`, instead of five passes over f32 score matrices), then one cuBLAS call
/// for p·v that writes each head's rows token-major (`[B, S, heads, D]` underneath the
/// `[B, heads, S, D]` view returned), so the output projection reads it without a transpose
/// copy. K/V are read in place where their rows are contiguous (a cache's views).
fn gemm_fwd(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    use super::native::{empty, kernel_name, launch, vector_aligned, warp_lanes, Arg, Grid};
    let (batch, heads, seq, head_dim) = q.dims4()?;
    let (_, kv_heads, keys, _) = k.dims4()?;
    let group = heads / kv_heads;
    let mask = mask
        .map(|m| m.to_dtype(DType::F32)?.contiguous())
        .transpose()?;
    let q = q
        .contiguous()?
        .reshape((batch, kv_heads, group * seq, head_dim))?;
    let scores = q.matmul(&k.t()?)?.contiguous()?;
    let probs = empty(scores.shape(), scores.dtype(), scores.device())?;
    let rows = scores.elem_count() / keys.max(1);
    let args = [
        Arg::Tensor(&scores),
        Arg::OptionalTensor(mask.as_ref()),
        Arg::Tensor(&probs),
        Arg::I32(rows as i32),
        Arg::I32(seq as i32),
        Arg::I32(keys as i32),
        Arg::F32(scale as f32),
    ];
    let per_vector = 16 / scores.dtype().size_in_bytes();
    let vectors = keys.is_multiple_of(per_vector)
        && [&scores, &probs].into_iter().all(vector_aligned)
        && mask.as_ref().is_none_or(vector_aligned);
    let lanes = warp_lanes(scores.device());
    let kernel = match (vectors, keys <= SOFTMAX_VALUES * lanes) {
        (true, true) => "attention_softmax_vec_one_tile",
        (true, false) => "attention_softmax_vec",
        (false, _) => "attention_softmax",
    };
    let grid = Grid::of_warps(rows.div_ceil(SOFTMAX_WARPS), SOFTMAX_WARPS, lanes);
    launch(
        &kernel_name(kernel, scores.dtype())?,
        scores.device(),
        grid,
        &args,
    )?;
    let rows_contiguous = |t: &Tensor| t.stride()[2..] == [head_dim, 1];
    let v = if rows_contiguous(v) {
        v.clone()
    } else {
        v.contiguous()?
    };
    super::native::probs_values_token_major(&probs, &v, seq)?.transpose(1, 2)
}

/// One batch: `q [heads, S, D]`, `k, v [kv_heads, T, D]`, `mask [S, T]` (−∞ hides a key).
pub fn reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    mask: &[f64],
    heads: usize,
    kv_heads: usize,
    seq: usize,
    keys: usize,
    d: usize,
    scale: f64,
) -> Vec<f64> {
    let group = heads / kv_heads;
    let mut out = vec![0.0; heads * seq * d];
    for h in 0..heads {
        let kvh = h / group;
        for s in 0..seq {
            let qrow = &q[(h * seq + s) * d..][..d];
            let scores: Vec<f64> = (0..keys)
                .map(|t| {
                    let krow = &k[(kvh * keys + t) * d..][..d];
                    qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>() * scale
                        + mask[s * keys + t]
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            for t in 0..keys {
                let p = exps[t] / total;
                for j in 0..d {
                    out[(h * seq + s) * d + j] += p * v[(kvh * keys + t) * d + j];
                }
            }
        }
    }
    out
}

/// The op's contract (`contract.rs`): checked against `reference` in every case below.
pub const CONTRACT: OpContract = OpContract {
    spec: OpSpec::floats(ToleranceClass::RoundsIntermediate)
        .native(native::GPU_FLOATS_AND_CPU_F32)
        .shape_paths(SHAPE_PATHS),
    cases,
    run,
    mutants: &[
        Mutant {
            what: "1/sqrt(d) scaling",
            run: |c| {
                let d = c.float(0).dim(3)? as f64;
                composed_seeing(c, visible_of(c), d.powf(-0.5))
            },
        },
        Mutant {
            what: "the mask ignored",
            run: |c| {
                let visible = Visible {
                    mask: None,
                    ..visible_of(c)
                };
                composed_seeing(c, visible, c.scale)
            },
        },
        Mutant {
            what: "the last visible slot ignored",
            run: |c| {
                let visible = Visible {
                    last_slot: None,
                    ..visible_of(c)
                };
                composed_seeing(c, visible, c.scale)
            },
        },
    ],
};

/// The composed arm over a case's q, k and v, seeing `visible` at `scale` (the mutants).
fn composed_seeing(c: &Case, visible: Visible, scale: f64) -> Result<Vec<Tensor>> {
    Ok(vec![composed(
        c.float(0),
        c.float(1),
        c.float(2),
        visible,
        scale,
    )?])
}

/// Shapes the native arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "up to 16 queries, head_dim up to 512",
        path: "native: split-K over the keys with an online softmax, K/V read in place (16 bytes a lane at once where aligned rows are whole vectors: head_dim 256 and 512, by a lean kernel built for them)",
        case: "q[8×1×512] kv[2×256] at position 69",
    },
    ShapePath {
        shapes: "up to 16 queries, head_dim up to 512, the last visible slot on the device (graph decode)",
        path: "native: the same split-K, its chunks cut from the slots up to the last visible one, only as many as those slots fill at 8 keys each",
        case: "q[16×1×256] kv[8×1024] at position 40 no mask last slot on the device",
    },
    ShapePath {
        shapes: "more than 16 queries over 4,096 keys or more in bf16/f16 on CUDA, head_dim 128, 256 or 512",
        path: "native: one flash kernel (tensor-core tiles, online softmax, hidden key tiles skipped, split over blocks and merged where the launch is small), written token-major",
        case: "q[4×100×256] kv[1×4100] window 300",
    },
    ShapePath {
        shapes: "more than 16 queries otherwise (fewer keys, f32, other head sizes, HIP)",
        path: "native: cuBLAS's batched GEMMs around one masked-softmax kernel, p·v written token-major",
        case: "q[2×17×64] kv[1×1040] window 600",
    },
    ShapePath {
        shapes: "up to 16 queries with head_dim above 512",
        path: "composed",
        case: "q[2×2×576] kv[1×7]",
    },
];

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (heads, kv heads, queries, keys, head dim, sliding window, first query position,
    // mask, last query's position held on the device as the last visible slot); queries sit
    // at the end of the keys unless a position is given. Without a mask or a last slot every
    // key is visible: the eager decode step's call.
    for (h, kvh, s, t, d, window, first, masked, last_slot) in [
        (4, 4, 5, 5, 16, None, None, true, false),
        (8, 2, 3, 11, 256, Some(8), None, true, false),
        (4, 1, 1, 9, 512, None, None, true, false),
        (2, 1, 13, 13, 64, Some(4), None, true, false),
        // Decode over many keys: the CUDA arm splits them into chunks and merges.
        (8, 2, 1, 300, 256, None, None, true, false),
        // Many chunks whose keys a sliding window hides before the visible ones: each warp's
        // early-loaded first key is dropped until a chunk shows a visible key.
        (1, 1, 1, 3000, 256, Some(64), None, true, false),
        // Eager decode at both of Gemma-4's head sizes: no mask.
        (8, 2, 1, 300, 256, None, None, false, false),
        (16, 4, 1, 70, 512, None, None, false, false),
        // Wider heads than the native kernel holds: the composed path.
        (2, 1, 2, 7, 576, None, None, true, false),
        // A graph step's whole cache buffer: only slots up to the position are visible,
        // so whole chunks are hidden.
        (8, 2, 1, 256, 512, None, Some(69), true, false),
        // Longer than a decode block: the CUDA arm's GEMM path, with a sliding window over
        // more keys than a softmax block has threads, and with every key visible (no mask).
        (4, 2, 24, 30, 128, Some(8), None, true, false),
        (8, 2, 40, 700, 256, Some(512), None, true, false),
        (4, 2, 20, 20, 512, None, Some(19), false, false),
        // A graph decode step's: no mask, its position as the last visible slot, so the
        // native kernel's chunks cut only the slots up to it. A full layer's buffer, a sliding
        // ring mostly empty, a filled ring (the position past the buffer: every slot), and the
        // last slot beside a window's mask.
        (8, 2, 1, 256, 512, None, Some(69), false, true),
        (16, 8, 1, 1024, 256, None, Some(40), false, true),
        (4, 1, 1, 300, 256, None, Some(1000), false, true),
        (8, 2, 1, 300, 256, Some(64), None, true, true),
        // A position early in a long buffer: the native kernel uses only the chunks its few
        // visible keys fill (here 2 of 32, and 1 of 32), and the merge reads only those.
        (8, 2, 1, 512, 512, None, Some(9), false, true),
        (8, 2, 1, 512, 256, None, Some(2), false, true),
        // A short query block sees the slots up to its last query, each query alike; longer
        // blocks take the mask that the last slot makes (the GEMM path's).
        (4, 2, 3, 40, 256, None, Some(20), false, true),
        (4, 2, 24, 30, 128, Some(8), None, true, true),
        // Rows of whole 16-byte vectors in every dtype: the softmax's vector loads, over one
        // tile of keys and over several.
        (8, 2, 24, 64, 256, Some(32), None, true, false),
        (2, 1, 17, 1040, 64, Some(600), None, true, false),
        // The flash kernel's (from 4,096 keys in bf16/f16 on CUDA): queries over two tiles (the
        // second partial), keys over many with a partial last one, a window that hides whole
        // tiles before the visible ones, and every key visible; each query tile's keys split
        // over several blocks and merged.
        (4, 1, 100, 4100, 256, Some(300), None, true, false),
        (4, 1, 70, 4133, 512, Some(40), None, true, false),
        (2, 2, 65, 4096, 128, None, Some(4095), false, false),
    ] {
        let mut c = Builder::new(device, dtype, rng);
        let spread = (d as f64).powf(-0.25) * 1.5;
        let q = c.uniform(&[1, h, s, d], -spread, spread)?;
        let k = c.uniform(&[1, kvh, t, d], -spread, spread)?;
        let v = c.uniform(&[1, kvh, t, d], -1.0, 1.0)?;
        let first_query = first.unwrap_or(t - s);
        let last_query = first_query + s - 1;
        let hidden = |open: bool| if open { 0.0 } else { f64::NEG_INFINITY };
        let mask: Vec<f64> = (0..s)
            .flat_map(|i| {
                (0..t).map(move |j| hidden(super::reference::visible(first_query + i, j, window)))
            })
            .collect();
        if masked {
            let mask_f32: Vec<f32> = mask.iter().map(|&m| m as f32).collect();
            c.raw(Tensor::from_vec(mask_f32, (s, t), device)?);
        }
        if last_slot {
            c.raw(Tensor::new(&[last_query as u32], device)?);
        }
        // What the queries see: the mask's keys (every key without one), of those the slots up
        // to the last one where it is given.
        let seen: Vec<f64> = (0..s * t)
            .map(|at| {
                let by_mask = !masked || mask[at] == 0.0;
                hidden(by_mask && (!last_slot || at % t <= last_query))
            })
            .collect();
        let expected = reference(&q, &k, &v, &seen, h, kvh, s, t, d, 1.0);
        let label = format!(
            "q[{h}×{s}×{d}] kv[{kvh}×{t}]{}{}{}{}",
            window.map_or(String::new(), |w| format!(" window {w}")),
            first.map_or(String::new(), |p| format!(" at position {p}")),
            if masked { "" } else { " no mask" },
            if last_slot {
                " last slot on the device"
            } else {
                ""
            }
        );
        cases.push(c.finish(label, expected));
    }
    // K/V as a cache's views: the first `t` of `capacity` rows of each head, read in place (the
    // decode kernel and the GEMM path's p·v step from one head to the next by `capacity` rows).
    for (h, kvh, s, t, d, capacity) in [(8, 2, 24, 64, 256, 80), (4, 1, 1, 40, 128, 64)] {
        let mut c = Builder::new(device, dtype, rng);
        let spread = (d as f64).powf(-0.25) * 1.5;
        let q = c.uniform(&[1, h, s, d], -spread, spread)?;
        let first_rows = |buffer: &[f64]| -> Vec<f64> {
            buffer
                .chunks(capacity * d)
                .flat_map(|head| &head[..t * d])
                .copied()
                .collect()
        };
        let k = first_rows(&c.uniform(&[1, kvh, capacity, d], -spread, spread)?);
        let v = first_rows(&c.uniform(&[1, kvh, capacity, d], -1.0, 1.0)?);
        let mask: Vec<f64> = (0..s)
            .flat_map(|i| {
                (0..t).map(
                    move |j| match super::reference::visible(t - s + i, j, None) {
                        true => 0.0,
                        false => f64::NEG_INFINITY,
                    },
                )
            })
            .collect();
        let mask_f32: Vec<f32> = mask.iter().map(|&m| m as f32).collect();
        c.raw(Tensor::from_vec(mask_f32, (s, t), device)?);
        let expected = reference(&q, &k, &v, &mask, h, kvh, s, t, d, 1.0);
        let mut case = c.finish(
            format!("q[{h}×{s}×{d}] kv[{kvh}×{t} of {capacity}]"),
            expected,
        );
        case.k = t;
        cases.push(case);
    }

    Ok(cases)
}

/// A case's visible keys: its f32 input is the mask, its u32 one the last visible slot.
fn visible_of(c: &Case) -> Visible<'_> {
    let input = |dtype| c.raws().iter().find(|t| t.dtype() == dtype);
    Visible {
        mask: input(DType::F32),
        last_slot: input(DType::U32),
    }
}

/// `c.k > 0`: K/V are the first `c.k` rows of longer per-head buffers (a cache's views).
fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    let (k, v) = match c.k {
        0 => (f(1).clone(), f(2).clone()),
        keys => (f(1).narrow(2, 0, keys)?, f(2).narrow(2, 0, keys)?),
    };
    Ok(vec![attention_on(
        arm,
        f(0),
        &k,
        &v,
        visible_of(c),
        c.scale,
    )?])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's launch geometry is its own copy of attention.cu's: a block of other than
    /// `G4_ATTN_WARPS` warps would merge the wrong warps, more chunks than the merge's table
    /// would write past it.
    #[test]
    fn the_launch_geometry_is_the_kernels() {
        let source = include_str!("cuda/attention.cu");
        let define = |name| crate::kernels::source_define(source, name) as usize;
        assert_eq!(WARPS_PER_BLOCK, define("G4_ATTN_WARPS"));
        assert_eq!(MAX_SPLITS, define("G4_ATTN_MAX_SPLITS"));
        assert_eq!(NATIVE_MAX_HEAD_DIM, define("G4_ATTN_MAX_D"));
        assert_eq!(FLASH_WARPS, define("G4_FLASH_WARPS"));
        assert_eq!(FLASH_QUERIES, define("G4_FLASH_QUERIES"));
        assert_eq!(FLASH_KEYS, define("G4_FLASH_KEYS"));
        assert_eq!(FLASH_DV, define("G4_FLASH_DV"));
        assert_eq!(FLASH_WIDE_D, define("G4_FLASH_WIDE_D"));
        assert_eq!(FLASH_WIDE_DV, define("G4_FLASH_WIDE_DV"));
        assert_eq!(FLASH_MAP_THREADS as usize, define("G4_FLASH_MAP_THREADS"));
    }

    /// A mask that is not `[S, T]` is refused by every arm (the native kernels would read a
    /// broadcastable one out of bounds), not broadcast by some and misread by others.
    #[test]
    fn a_mask_that_is_not_queries_by_keys_is_refused_by_every_arm() -> Result<()> {
        let device = Device::Cpu;
        let q = Tensor::zeros((1, 2, 3, 8), DType::F32, &device)?;
        let kv = Tensor::zeros((1, 1, 5, 8), DType::F32, &device)?;
        let broadcastable = Tensor::zeros((1, 5), DType::F32, &device)?;
        for arm in [Arm::Composed, Arm::Native(Backend::Cpu)] {
            let visible = Visible {
                mask: Some(&broadcastable),
                last_slot: None,
            };
            let err = attention_on(arm, &q, &kv, &kv, visible, 1.0).unwrap_err();
            assert!(err.to_string().contains("want [3, 5]"), "{arm:?}: {err}");
        }
        Ok(())
    }
}
