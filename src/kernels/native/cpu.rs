//! The CPU implementation behind the native seam: SIMD kernels written with `std::arch` for
//! AVX-512F, AVX2 + FMA (x86_64) and NEON (aarch64), the widest the running CPU has chosen once
//! at run time, spread over threads by rayon (the pool candle's own CPU kernels use).
//!
//! Batch-1 decode on a CPU is bound by reading the weights: each projection's W is streamed
//! once, for every row of X at the same time, by as many threads as the memory system needs.

pub mod panels;

#[cfg(target_arch = "aarch64")]
use arm::dot_neon;
use candle_core::Tensor;
use rayon::prelude::*;
use std::sync::OnceLock;
#[cfg(target_arch = "x86_64")]
use x86::{dot_avx2, dot_avx512};

/// The instruction set the CPU kernels use here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    Avx512,
    Avx2Fma,
    Neon,
}

impl Simd {
    pub fn name(self) -> &'static str {
        match self {
            Simd::Avx512 => "AVX-512F",
            Simd::Avx2Fma => "AVX2+FMA",
            Simd::Neon => "NEON",
        }
    }
}

/// What every CPU kernel needs, for messages.
pub const REQUIREMENT: &str = "AVX2+FMA or AVX-512F (x86_64), or NEON (aarch64)";

/// The widest instruction set this CPU offers, detected once; `G4_CPU_SIMD=avx2` caps it (to
/// check the narrower path on a wider CPU).
pub fn simd() -> Option<Simd> {
    static DETECTED: OnceLock<Option<Simd>> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        let cap_avx2 = std::env::var("G4_CPU_SIMD").is_ok_and(|v| v == "avx2");
        detect(cap_avx2)
    })
}

#[cfg(target_arch = "x86_64")]
fn detect(cap_avx2: bool) -> Option<Simd> {
    if !cap_avx2 && is_x86_feature_detected!("avx512f") {
        Some(Simd::Avx512)
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        Some(Simd::Avx2Fma)
    } else {
        None
    }
}

#[cfg(target_arch = "aarch64")]
fn detect(_: bool) -> Option<Simd> {
    std::arch::is_aarch64_feature_detected!("neon").then_some(Simd::Neon)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect(_: bool) -> Option<Simd> {
    None
}

/// Runs `f` on the values of a CPU f32 tensor, made contiguous first if it is not.
pub fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cpu(storage) = &*storage else {
        candle_core::bail!("the CPU kernels take tensors in host memory");
    };
    let all = storage.as_slice::<f32>()?;
    let start = layout.start_offset();
    Ok(f(&all[start..start + t.elem_count()]))
}

/// Runs `f` on the bits of a CPU e4m3 tensor, made contiguous first if it is not.
pub fn with_e4m3_bits<R>(t: &Tensor, f: impl FnOnce(&[u8]) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let candle_core::Storage::Cpu(storage) = &*storage else {
        candle_core::bail!("the CPU kernels take tensors in host memory");
    };
    let all = storage.as_slice::<float8::F8E4M3>()?;
    let start = layout.start_offset();
    let values = &all[start..start + t.elem_count()];
    // SAFETY: F8E4M3 is `repr(transparent)` over its u8 bits.
    let bits = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) };
    Ok(f(bits))
}

/// Defines `fn $name(simd: Simd, args…)` running the portable body `$portable` compiled for the
/// instruction set `simd` names: one `#[target_feature]` copy per set, each vectorised by the
/// compiler to that set's width.
macro_rules! simd_kernel {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $portable:ident) => {
        $(#[$doc])*
        fn $name(simd: Simd, $($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            unsafe fn avx512($($arg: $ty),*) {
                $portable($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) {
                $portable($($arg),*)
            }
            #[cfg(target_arch = "aarch64")]
            #[target_feature(enable = "neon")]
            unsafe fn neon($($arg: $ty),*) {
                $portable($($arg),*)
            }
            match simd {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `simd()` chose AVX-512F only where the CPU reports it.
                Simd::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `simd()` chose AVX2+FMA only where the CPU reports both.
                Simd::Avx2Fma => unsafe { avx2($($arg),*) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: `simd()` chose NEON only where the CPU reports it.
                Simd::Neon => unsafe { neon($($arg),*) },
                #[allow(unreachable_patterns)]
                _ => unreachable!("simd() never returns an instruction set of another architecture"),
            }
        }
    };
}

/// Rows of X the GEMV takes (its accumulators stay in registers).
pub const GEMV_MAX_ROWS: usize = 8;

/// W rows one task computes: enough to amortise the task, few enough to spread a narrow
/// projection over every thread.
const ROWS_PER_TASK: usize = 16;

/// `out [m, n] = x [m, k] · w [n, k]ᵀ` in f32 for `m ≤ GEMV_MAX_ROWS`: every W row is read once
/// for all X rows.
pub fn gemv_f32(simd: Simd, x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    assert!(m <= GEMV_MAX_ROWS && x.len() == m * k && w.len() == n * k);
    // Column-major while computing, so that each task writes one contiguous block.
    let mut by_column = vec![0f32; n * m];
    by_column
        .par_chunks_mut(ROWS_PER_TASK * m)
        .enumerate()
        .for_each(|(task, out)| {
            let first = task * ROWS_PER_TASK;
            for (j, sums) in out.chunks_exact_mut(m).enumerate() {
                let row = &w[(first + j) * k..(first + j + 1) * k];
                dot_rows(simd, x, row, k, sums);
            }
        });
    if m == 1 {
        return by_column;
    }
    let mut out = vec![0f32; m * n];
    for (j, sums) in by_column.chunks_exact(m).enumerate() {
        for (r, &s) in sums.iter().enumerate() {
            out[r * n + j] = s;
        }
    }
    out
}

/// `sums[r] = x[r] · w_row` for each of the `sums.len()` rows of `x`.
fn dot_rows(simd: Simd, x: &[f32], w_row: &[f32], k: usize, sums: &mut [f32]) {
    macro_rules! rows {
        ($kernel:ident) => {
            match sums.len() {
                1 => $kernel::<1>(x, w_row, k, sums),
                2 => $kernel::<2>(x, w_row, k, sums),
                3 => $kernel::<3>(x, w_row, k, sums),
                4 => $kernel::<4>(x, w_row, k, sums),
                5 => $kernel::<5>(x, w_row, k, sums),
                6 => $kernel::<6>(x, w_row, k, sums),
                7 => $kernel::<7>(x, w_row, k, sums),
                _ => $kernel::<8>(x, w_row, k, sums),
            }
        };
    }
    match simd {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `simd()` chose AVX-512F only where the CPU reports it.
        Simd::Avx512 => unsafe { rows!(dot_avx512) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `simd()` chose AVX2+FMA only where the CPU reports both.
        Simd::Avx2Fma => unsafe { rows!(dot_avx2) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `simd()` chose NEON only where the CPU reports it.
        Simd::Neon => unsafe { rows!(dot_neon) },
        #[allow(unreachable_patterns)]
        _ => unreachable!("simd() never returns an instruction set of another architecture"),
    }
}

/// Elements below which an elementwise kernel runs on the calling thread: waking the pool
/// costs more than it saves.
const PARALLEL_ELEMENTS: usize = 1 << 16;

/// `gelu_tanh(gate) ⊙ up` in f32 over rows of `width`: row r's gate and up start at `r·pitch`
/// of their slices (separate tensors: pitch = width; one packed `[gate ‖ up]` tensor: both
/// slices are the packed values, up offset by `width`, pitch = 2·width).
pub fn gelu_mul_f32(simd: Simd, gate: &[f32], up: &[f32], width: usize, pitch: usize) -> Vec<f32> {
    let rows = gate.len().div_ceil(pitch.max(1));
    let mut out = vec![0f32; rows * width];
    let row = |(r, out): (usize, &mut [f32])| {
        let (g, u) = (
            &gate[r * pitch..r * pitch + width],
            &up[r * pitch..r * pitch + width],
        );
        gelu_mul_row(simd, g, u, out);
    };
    if out.len() < PARALLEL_ELEMENTS {
        out.chunks_mut(width.max(1)).enumerate().for_each(row);
    } else {
        out.par_chunks_mut(width.max(1)).enumerate().for_each(row);
    }
    out
}

simd_kernel! {
    /// One row of [`gelu_mul_f32`].
    fn gelu_mul_row(gate: &[f32], up: &[f32], out: &mut [f32]) => gelu_mul_portable
}

/// `gelu_tanh(g)·u` written as `g·u / (1 + e^(−2·√(2/π)·(g + 0.044715·g³)))` (the same function:
/// 0.5·(1 + tanh(t)) = 1 / (1 + e^(−2t))), with a branch-free `e^x` the compiler vectorises to
/// whatever width the enclosing `target_feature` allows.
#[inline(always)]
fn gelu_mul_portable(gate: &[f32], up: &[f32], out: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        let t = SQRT_2_OVER_PI * g.mul_add(0.044715 * g * g, g);
        let e = -2.0 * t;
        *o = g * u / (1.0 + exp_f32(if e > 88.0 { 88.0 } else { e }));
    }
}

/// Gemma's RMSNorm in f32 over rows of `cols`: `x / √(mean(x²) + eps) · weight`, plus `residual`
/// when given (`rms_norm_plus_add`).
pub fn rms_norm_f32(
    simd: Simd,
    x: &[f32],
    cols: usize,
    weight: Option<&[f32]>,
    residual: Option<&[f32]>,
    eps: f32,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let row = |(r, out): (usize, &mut [f32])| {
        let x = &x[r * cols..(r + 1) * cols];
        let residual = residual.map(|res| &res[r * cols..(r + 1) * cols]);
        rms_norm_row(simd, x, weight, residual, eps, out);
    };
    if out.len() < PARALLEL_ELEMENTS {
        out.chunks_mut(cols.max(1)).enumerate().for_each(row);
    } else {
        out.par_chunks_mut(cols.max(1)).enumerate().for_each(row);
    }
    out
}

simd_kernel! {
    /// One row of [`rms_norm_f32`].
    fn rms_norm_row(
        x: &[f32],
        weight: Option<&[f32]>,
        residual: Option<&[f32]>,
        eps: f32,
        out: &mut [f32]
    ) => rms_norm_portable
}

/// One row of [`rms_norm_f32`]; the sum of squares keeps `LANES` partial sums so that it
/// vectorises.
#[inline(always)]
fn rms_norm_portable(
    x: &[f32],
    weight: Option<&[f32]>,
    residual: Option<&[f32]>,
    eps: f32,
    out: &mut [f32],
) {
    let mut partial = [0f32; LANES];
    let whole = x.len() / LANES * LANES;
    for chunk in x[..whole].chunks_exact(LANES) {
        for (p, &v) in partial.iter_mut().zip(chunk) {
            *p = v.mul_add(v, *p);
        }
    }
    let mut squares: f32 = partial.iter().sum();
    for &v in &x[whole..] {
        squares = v.mul_add(v, squares);
    }
    let inv = 1.0 / (squares / x.len() as f32 + eps).sqrt();
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        let normed = v * inv * weight.map_or(1.0, |w| w[i]);
        *o = residual.map_or(normed, |res| res[i] + normed);
    }
}

/// `softmax(scores · scale + mask)` over rows of `keys` in f32: attention's probabilities, whose
/// rows are query groups of `seq` queries, so row r reads mask row `r % seq` (`[seq, keys]`,
/// additive; absent: every key visible). A row with no visible key is zeros.
pub fn masked_softmax_f32(
    simd: Simd,
    scores: &[f32],
    mask: Option<&[f32]>,
    seq: usize,
    keys: usize,
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![0f32; scores.len()];
    let keys = keys.max(1);
    let row = |(r, (scores, out)): (usize, (&[f32], &mut [f32]))| {
        let mask = mask.map(|m| &m[(r % seq) * keys..][..keys]);
        masked_softmax_row(simd, scores, mask, scale, out);
    };
    if out.len() < PARALLEL_ELEMENTS {
        scores
            .chunks(keys)
            .zip(out.chunks_mut(keys))
            .enumerate()
            .for_each(row);
    } else {
        scores
            .par_chunks(keys)
            .zip(out.par_chunks_mut(keys))
            .enumerate()
            .for_each(row);
    }
    out
}

simd_kernel! {
    /// One row of [`masked_softmax_f32`].
    fn masked_softmax_row(scores: &[f32], mask: Option<&[f32]>, scale: f32, out: &mut [f32])
        => masked_softmax_portable
}

/// One row of [`masked_softmax_f32`]: the logits into `out`, then max, `e^(x − max)` and its sum
/// (each over `LANES` partial results, so that they vectorise), then the quotients.
#[inline(always)]
fn masked_softmax_portable(scores: &[f32], mask: Option<&[f32]>, scale: f32, out: &mut [f32]) {
    match mask {
        Some(mask) => {
            for ((o, &s), &m) in out.iter_mut().zip(scores).zip(mask) {
                *o = s * scale + m;
            }
        }
        None => {
            for (o, &s) in out.iter_mut().zip(scores) {
                *o = s * scale;
            }
        }
    }
    let whole = out.len() / LANES * LANES;
    let mut partial = [f32::NEG_INFINITY; LANES];
    for chunk in out[..whole].chunks_exact(LANES) {
        for (p, &v) in partial.iter_mut().zip(chunk) {
            *p = if v > *p { v } else { *p };
        }
    }
    let max = out[whole..]
        .iter()
        .chain(&partial)
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    if max == f32::NEG_INFINITY {
        out.fill(0.0);
        return;
    }
    // A hidden key (−∞) gets exactly 0: exp_f32 alone would flush it to e^−87.
    let exp = |v: f32| {
        if v == f32::NEG_INFINITY {
            0.0
        } else {
            exp_f32(v - max)
        }
    };
    let mut partial = [0f32; LANES];
    for chunk in out[..whole].chunks_exact_mut(LANES) {
        for (p, v) in partial.iter_mut().zip(chunk) {
            *v = exp(*v);
            *p += *v;
        }
    }
    let mut sum: f32 = partial.iter().sum();
    for v in &mut out[whole..] {
        *v = exp(*v);
        sum += *v;
    }
    for v in out.iter_mut() {
        *v /= sum;
    }
}

/// f32 lanes of the portable kernels' partial sums: two AVX-512 vectors, four AVX2 ones.
const LANES: usize = 32;

/// `c · tanh(x / c)` in f32.
pub fn softcap_f32(simd: Simd, x: &[f32], cap: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let chunk = PARALLEL_ELEMENTS;
    let pass = |(x, out): (&[f32], &mut [f32])| softcap_chunk(simd, x, cap, out);
    if x.len() < 2 * chunk {
        pass((x, &mut out));
    } else {
        x.par_chunks(chunk)
            .zip(out.par_chunks_mut(chunk))
            .for_each(pass);
    }
    out
}

simd_kernel! {
    /// A stretch of [`softcap_f32`].
    fn softcap_chunk(x: &[f32], cap: f32, out: &mut [f32]) => softcap_portable
}

#[inline(always)]
fn softcap_portable(x: &[f32], cap: f32, out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = cap * tanh_f32(v / cap);
    }
}

/// `tanh` to a few ulp, branch-free (Cephes' tanhf): an odd polynomial below |x| = 0.625, where
/// `1 − 2 / (e^2|x| + 1)` would cancel, that form above it. NaN stays NaN (so that the logits'
/// finiteness check sees it): the clamp is a comparison, not `min`, which would drop it.
#[inline(always)]
fn tanh_f32(x: f32) -> f32 {
    let a = if x.abs() > 44.0 { 44.0 } else { x.abs() };
    let large = 1.0 - 2.0 / (exp_f32(2.0 * a) + 1.0);
    let z = x * x;
    let small = (-5.704_988_7e-3f32)
        .mul_add(z, 2.063_909e-2)
        .mul_add(z, -5.373_971_6e-2)
        .mul_add(z, 1.333_144_2e-1)
        .mul_add(z, -3.333_328e-1)
        * z;
    let small = small.mul_add(x, x);
    if a < 0.625 {
        small
    } else {
        large.copysign(x)
    }
}

/// `e^x` for x ≤ 88 to about 1 ulp: x = n·ln2 + r with |r| ≤ ln2/2, e^r by Cephes' degree-6
/// polynomial, 2^n put in the exponent bits. Below −87 it flushes to 0; NaN gives NaN.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // A comparison, not `max`, so that NaN stays NaN.
    let x = if x < -87.0 { -87.0 } else { x };
    let n = (x * std::f32::consts::LOG2_E).round();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let p = 1.987_569_1e-4f32
        .mul_add(r, 1.398_199_9e-3)
        .mul_add(r, 8.333_452e-3)
        .mul_add(r, 4.166_579_6e-2)
        .mul_add(r, 1.666_666_5e-1)
        .mul_add(r, 0.5);
    let er = (p * r).mul_add(r, r) + 1.0;
    er * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// M rows of X against one W row: two vectors of W per step (two independent FMA chains
    /// per row even when M = 1), the tail in scalar.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_avx512<const M: usize>(x: &[f32], w: &[f32], k: usize, sums: &mut [f32]) {
        const L: usize = 16;
        let mut acc = [[_mm512_setzero_ps(); 2]; M];
        let steps = k / (2 * L);
        for s in 0..steps {
            let i = s * 2 * L;
            let w0 = _mm512_loadu_ps(w.as_ptr().add(i));
            let w1 = _mm512_loadu_ps(w.as_ptr().add(i + L));
            for (r, a) in acc.iter_mut().enumerate() {
                let xr = x.as_ptr().add(r * k + i);
                a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), w0, a[0]);
                a[1] = _mm512_fmadd_ps(_mm512_loadu_ps(xr.add(L)), w1, a[1]);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
            for i in steps * 2 * L..k {
                sum += x[r * k + i] * w[i];
            }
            sums[r] = sum;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_avx2<const M: usize>(x: &[f32], w: &[f32], k: usize, sums: &mut [f32]) {
        const L: usize = 8;
        let mut acc = [[_mm256_setzero_ps(); 2]; M];
        let steps = k / (2 * L);
        for s in 0..steps {
            let i = s * 2 * L;
            let w0 = _mm256_loadu_ps(w.as_ptr().add(i));
            let w1 = _mm256_loadu_ps(w.as_ptr().add(i + L));
            for (r, a) in acc.iter_mut().enumerate() {
                let xr = x.as_ptr().add(r * k + i);
                a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, a[0]);
                a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(xr.add(L)), w1, a[1]);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let v = _mm256_add_ps(a[0], a[1]);
            let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
            let one = _mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1));
            let mut sum = _mm_cvtss_f32(one);
            for i in steps * 2 * L..k {
                sum += x[r * k + i] * w[i];
            }
            sums[r] = sum;
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    #[target_feature(enable = "neon")]
    pub unsafe fn dot_neon<const M: usize>(x: &[f32], w: &[f32], k: usize, sums: &mut [f32]) {
        const L: usize = 4;
        let mut acc = [[vdupq_n_f32(0.0); 2]; M];
        let steps = k / (2 * L);
        for s in 0..steps {
            let i = s * 2 * L;
            let w0 = vld1q_f32(w.as_ptr().add(i));
            let w1 = vld1q_f32(w.as_ptr().add(i + L));
            for (r, a) in acc.iter_mut().enumerate() {
                let xr = x.as_ptr().add(r * k + i);
                a[0] = vfmaq_f32(a[0], vld1q_f32(xr), w0);
                a[1] = vfmaq_f32(a[1], vld1q_f32(xr.add(L)), w1);
            }
        }
        for (r, a) in acc.iter().enumerate() {
            let mut sum = vaddvq_f32(vaddq_f32(a[0], a[1]));
            for i in steps * 2 * L..k {
                sum += x[r * k + i] * w[i];
            }
            sums[r] = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NaN input stays NaN through every elementwise kernel and each instruction set this CPU
    /// has: the logits' finiteness gate depends on it (a clamp written with min/max once turned
    /// a NaN logit into the cap).
    #[test]
    fn nan_propagates_through_the_elementwise_kernels() {
        let Some(widest) = simd() else {
            return;
        };
        let mut sets = vec![widest];
        #[cfg(target_arch = "x86_64")]
        if widest == Simd::Avx512
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
        {
            sets.push(Simd::Avx2Fma);
        }
        // Long enough for the vector bodies, with NaN in the body and in the tail.
        let mut x: Vec<f32> = (0..100).map(|i| i as f32 * 0.37 - 18.0).collect();
        x[40] = f32::NAN;
        x[99] = f32::NAN;
        for simd in sets {
            let capped = softcap_f32(simd, &x, 30.0);
            let gated = gelu_mul_f32(simd, &x, &x, x.len(), x.len());
            for (i, v) in x.iter().enumerate() {
                assert_eq!(capped[i].is_nan(), v.is_nan(), "{simd:?} softcap at {i}");
                assert_eq!(gated[i].is_nan(), v.is_nan(), "{simd:?} gelu_mul at {i}");
            }
            let normed = rms_norm_f32(simd, &x, 50, None, None, 1e-6);
            assert!(normed[..50].iter().all(|v| v.is_nan()), "{simd:?} rms_norm");
            let probs = masked_softmax_f32(simd, &x, None, 1, 50, 1.0);
            assert!(probs.iter().all(|v| v.is_nan()), "{simd:?} masked_softmax");
        }
    }

    /// Hidden keys get exactly zero, a row with none visible is zeros (not NaN), and a row
    /// longer than the partial-result lanes matches an f64 softmax.
    #[test]
    fn masked_softmax_hides_keys_exactly() {
        let Some(simd) = simd() else {
            return;
        };
        let keys = 70;
        let scores: Vec<f32> = (0..2 * keys)
            .map(|i| (i as f32 * 0.61).sin() * 4.0)
            .collect();
        let mut mask = vec![0f32; 2 * keys];
        mask[keys..].fill(f32::NEG_INFINITY);
        for hidden in [3, 40, 69] {
            mask[hidden] = f32::NEG_INFINITY;
        }
        // Two query rows (seq 2): row r reads mask row r % 2.
        let probs = masked_softmax_f32(simd, &scores, Some(&mask), 2, keys, 0.5);
        assert!(probs[keys..].iter().all(|&p| p == 0.0), "no visible key");
        let logits: Vec<f64> = (0..keys)
            .map(|i| scores[i] as f64 * 0.5 + mask[i] as f64)
            .collect();
        let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        for (i, l) in logits.iter().enumerate() {
            let want = (l - max).exp() / total;
            assert!(
                (probs[i] as f64 - want).abs() < 1e-6,
                "key {i}: {} vs {want}",
                probs[i]
            );
            if l.is_infinite() {
                assert_eq!(probs[i], 0.0, "hidden key {i}");
            }
        }
    }
}
