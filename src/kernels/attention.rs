//! `attention`: `softmax(q·kᵀ·scale + mask) · v` with GQA by contiguous groups (query head j
//! reads KV head j ÷ (heads / kv_heads)). Gemma-4 uses scale 1.0; the sliding-window and causal
//! rules arrive as an additive f32 mask `[S, T]` (absent when every key is visible, as in decode).
//! Softmax runs in f32, as the reference's eager attention does.

use super::{arm_for, missing_dispatch, Arm, Backend, Op};
use candle_core::{DType, Result, Tensor};

const OP: Op = Op::Attention;

/// `q [B, heads, S, D]`, `k, v [B, kv_heads, T, D]`, `mask [S, T]` → `[B, heads, S, D]`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    attention_on(arm_for(OP, q.device(), q.dtype()), q, k, v, mask, scale)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
pub fn attention_on(
    arm: Arm,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    match arm {
        Arm::Composed => composed(q, k, v, mask, scale),
        Arm::Native(Backend::Cuda) => cuda_fwd(q, k, v, mask, scale),
        Arm::Native(backend) => Err(missing_dispatch(OP, backend)),
    }
}

pub fn composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    let (batch, heads, seq, head_dim) = q.dims4()?;
    let (_, kv_heads, keys, _) = k.dims4()?;
    let group = heads / kv_heads;
    // Folding each KV head's query group into the row axis avoids materialising repeat_kv.
    let q = q
        .contiguous()?
        .reshape((batch, kv_heads, group * seq, head_dim))?;
    let scores = q.matmul(&k.t()?)?;
    let scores = if scale == 1.0 {
        scores
    } else {
        scores.affine(scale, 0.0)?
    };
    let scores = scores
        .to_dtype(DType::F32)?
        .reshape((batch, kv_heads, group, seq, keys))?;
    let scores = match mask {
        Some(mask) => scores.broadcast_add(mask)?,
        None => scores,
    };
    let probs = candle_nn::ops::softmax_last_dim(&scores)?
        .to_dtype(v.dtype())?
        .reshape((batch, kv_heads, group * seq, keys))?;
    probs
        .matmul(&v.contiguous()?)?
        .reshape((batch, heads, seq, head_dim))
}

/// Query blocks longer than this go through cuBLAS GEMMs: the row kernel re-reads K/V per query
/// and measured 2.2× slower than the GEMM path for a 512-token E4B prefill on the H200.
const CUDA_KERNEL_MAX_QUERIES: usize = 16;

/// Keys per chunk of the split-K kernel, and the blocks to aim for: a decode step has only one
/// query row per head, so its keys are what spreads the work over the GPU's SMs.
const KEYS_PER_CHUNK: usize = 16;
const TARGET_BLOCKS: usize = 512;

/// CUDA arm: for decode and short query blocks, split-K over the keys with an online softmax
/// per warp and a merge kernel (src/kernels/cuda/attention.cu), reading K/V in place from the
/// cache (head_dim up to 512, Gemma-4's largest); for longer blocks, the same math as cuBLAS
/// batched GEMMs.
fn cuda_fwd(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> Result<Tensor> {
    use super::cuda_launch::{empty, kernel_name, launch, Arg, Grid};
    let (batch, heads, seq, head_dim) = q.dims4()?;
    if seq > CUDA_KERNEL_MAX_QUERIES {
        return composed(q, k, v, mask, scale);
    }
    let q = q.contiguous()?;
    let (_, kv_heads, keys, _) = k.dims4()?;
    if head_dim > 512 {
        candle_core::bail!("the CUDA attention arm supports head_dim up to 512, got {head_dim}");
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
    let mask = mask
        .map(|m| m.to_dtype(DType::F32)?.contiguous())
        .transpose()?;
    let rows = batch * heads * seq;
    let splits = keys
        .div_ceil(KEYS_PER_CHUNK)
        .min(TARGET_BLOCKS.div_ceil(rows))
        .max(1);
    let out = empty((batch, heads, seq, head_dim), q.dtype(), q.device())?;
    let (partial_acc, partial_stats) = if splits > 1 {
        (
            Some(empty(rows * splits * head_dim, DType::F32, q.device())?),
            Some(empty(rows * splits * 2, DType::F32, q.device())?),
        )
    } else {
        (None, None)
    };
    let args = [
        Arg::Tensor(&q),
        Arg::RowView(&k),
        Arg::RowView(&v),
        Arg::OptionalTensor(mask.as_ref()),
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
    // Four warps per block, whatever the warp size.
    let grid = Grid {
        blocks: (rows * splits) as u32,
        threads: 128,
    };
    let dtype = q.dtype();
    launch(&kernel_name("attention", dtype)?, q.device(), grid, &args)?;
    if let (Some(partial_acc), Some(partial_stats)) = (&partial_acc, &partial_stats) {
        let args = [
            Arg::Tensor(partial_acc),
            Arg::Tensor(partial_stats),
            Arg::Tensor(&out),
            Arg::I32(head_dim as i32),
            Arg::I32(splits as i32),
        ];
        let grid = Grid {
            blocks: rows as u32,
            threads: 128,
        };
        launch(
            &kernel_name("attention_merge", dtype)?,
            q.device(),
            grid,
            &args,
        )?;
    }
    Ok(out)
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
