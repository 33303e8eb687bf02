//! `qkv_norm_rope`: one layer's attention inputs from its stacked projection `[q | k | v]`
//! `[1, S, width]` — per-head RMSNorm (q and k with their weights, v weightless), RoPE on q and k,
//! and heads first, `[1, heads, S, D]`, as attention reads them. Separately these are up to
//! seven launches per layer (three norms, two RoPEs, two transposes); a decode step is short
//! enough that launches, not bytes, set their cost.

use super::check::{norm_weight, Builder, Case};
use super::contract::{Mutant, OpContract, OpSpec, ShapePath, ToleranceClass};
use super::native::{self, cpu};
use super::{arm_for, reference, rms_norm, rope, Arm, Backend, Op};
use candle_core::{DType, Device, Result, Tensor};
use rand::{rngs::StdRng, Rng};

const OP: Op = Op::QkvNormRope;

/// Where one layer's heads sit in its stacked projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QkvLayout {
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub kv: KvPart,
}

/// What follows q in the stacked projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvPart {
    /// Nothing: the layer attends with a producer layer's K/V.
    None,
    /// k, then v.
    KAndV,
    /// k alone; v is k's raw projection, normed without weight (k_eq_v layers).
    KAsV,
}

impl KvPart {
    /// Heads of width `head_dim` after q, in units of the kv heads.
    fn parts(self) -> usize {
        match self {
            KvPart::None => 0,
            KvPart::KAsV => 1,
            KvPart::KAndV => 2,
        }
    }

    /// The kernel's and the check cases' encoding (`Case::k`).
    fn code(self) -> usize {
        match self {
            KvPart::None => 0,
            KvPart::KAndV => 1,
            KvPart::KAsV => 2,
        }
    }

    fn from_code(code: usize) -> KvPart {
        match code {
            0 => KvPart::None,
            1 => KvPart::KAndV,
            _ => KvPart::KAsV,
        }
    }
}

impl QkvLayout {
    fn width(&self) -> usize {
        (self.q_heads + self.kv_heads * self.kv.parts()) * self.head_dim
    }

    /// Output heads: q, then k and v when the layer has its own.
    fn output_heads(&self) -> usize {
        match self.kv {
            KvPart::None => self.q_heads,
            _ => self.q_heads + 2 * self.kv_heads,
        }
    }
}

/// q `[1, q_heads, S, D]`, and k, v `[1, kv_heads, S, D]` when the layer has its own (with a
/// [`KvSlot`], the whole cache buffers they were written into).
pub type AttentionInputs = (Tensor, Option<(Tensor, Tensor)>);

/// Where a call's k and v go instead of new tensors: the layer's cache buffers
/// `[1, kv_heads, rows, D]`, from a row held on the device or known on the host.
#[derive(Clone, Copy)]
pub struct KvSlot<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub row: CacheRow<'a>,
}

/// The first cache row a call writes.
#[derive(Clone, Copy)]
pub enum CacheRow<'a> {
    /// One decode token's row, held on the device (u32 `[1]`), so that a captured step writes
    /// wherever the replayed position says.
    Device(&'a Tensor),
    /// A prefill chunk's first row: its S tokens go to rows `first .. first + S`.
    Host(usize),
}

impl KvSlot<'_> {
    fn validate(&self, layout: QkvLayout, seq: usize, dtype: DType) -> Result<()> {
        let (hkv, d) = (layout.kv_heads, layout.head_dim);
        let fits = |t: &Tensor| {
            t.dtype() == dtype
                && t.is_contiguous()
                && matches!(t.dims(), &[1, h, _, dd] if h == hkv && dd == d)
        };
        let rows = self.k.dims().get(2).copied().unwrap_or(0);
        let row_fits = match self.row {
            CacheRow::Device(slot) => {
                seq == 1 && slot.dtype() == DType::U32 && slot.elem_count() == 1
            }
            CacheRow::Host(first) => first + seq <= rows,
        };
        if !row_fits
            || layout.kv == KvPart::None
            || !fits(self.k)
            || !fits(self.v)
            || self.k.dims() != self.v.dims()
        {
            candle_core::bail!(
                "qkv_norm_rope: a cache destination takes own k and v for one token at a \
                 device-held row or for a chunk within the cache (got {seq} tokens, {layout:?}, \
                 caches {:?} / {:?} {:?}, {})",
                self.k.shape(),
                self.v.shape(),
                self.k.dtype(),
                match self.row {
                    CacheRow::Device(slot) => format!("slot {:?} {:?}", slot.shape(), slot.dtype()),
                    CacheRow::Host(first) => format!("first row {first}"),
                }
            );
        }
        Ok(())
    }

    /// Writes k and v `[1, kv_heads, S, D]` at the row (the arms without a kernel of their
    /// own): one scatter (a device-held row) or one copy (a host-known one) per tensor.
    fn store(&self, (q, kv): AttentionInputs) -> Result<AttentionInputs> {
        let (k, v) = kv.expect("validate: the layout has k and v");
        match self.row {
            CacheRow::Device(slot) => {
                let index = slot
                    .reshape((1, 1, 1, 1))?
                    .broadcast_as(k.shape())?
                    .contiguous()?;
                self.k.scatter_set(&index, &k.contiguous()?, 2)?;
                self.v.scatter_set(&index, &v.contiguous()?, 2)?;
            }
            CacheRow::Host(first) => {
                self.k.slice_set(&k.contiguous()?, 2, first)?;
                self.v.slice_set(&v.contiguous()?, 2, first)?;
            }
        }
        Ok((q, Some((self.k.clone(), self.v.clone()))))
    }
}

/// `qkv [1, S, width]`, `cos, sin [S, D/2]` (f32); `k_norm` is required when the layout has k.
#[allow(clippy::too_many_arguments)]
pub fn qkv_norm_rope(
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
    kv_slot: Option<KvSlot>,
) -> Result<AttentionInputs> {
    let arm = arm_for(OP, qkv.device(), qkv.dtype());
    qkv_norm_rope_on(arm, qkv, layout, q_norm, k_norm, cos, sin, eps, kv_slot)
}

/// Runs one given arm; `probe-ops` checks every available arm through this.
#[allow(clippy::too_many_arguments)]
pub fn qkv_norm_rope_on(
    arm: Arm,
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
    kv_slot: Option<KvSlot>,
) -> Result<AttentionInputs> {
    let (_, seq, width) = qkv.dims3()?;
    if width != layout.width() {
        candle_core::bail!(
            "qkv_norm_rope: projection width {width} does not hold {layout:?} ({} wide)",
            layout.width()
        );
    }
    let k_norm = match (layout.kv, k_norm) {
        (KvPart::None, _) => None,
        (_, Some(w)) => Some(w),
        (_, None) => candle_core::bail!("qkv_norm_rope: a layout with k needs k_norm"),
    };
    if let Some(kv_slot) = &kv_slot {
        kv_slot.validate(layout, seq, qkv.dtype())?;
    }
    let inputs = match arm {
        Arm::Composed => composed(qkv, layout, q_norm, k_norm, cos, sin, eps)?,
        Arm::Native(Backend::Cpu) => cpu_fwd(qkv, layout, q_norm, k_norm, cos, sin, eps)?,
        Arm::Native(_) => return native_fwd(qkv, layout, q_norm, k_norm, cos, sin, eps, kv_slot),
    };
    match kv_slot {
        Some(kv_slot) => kv_slot.store(inputs),
        None => Ok(inputs),
    }
}

pub fn composed(
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
) -> Result<AttentionInputs> {
    let seq = qkv.dim(1)?;
    let d = layout.head_dim;
    let part = |first_head: usize, heads: usize| {
        qkv.narrow(2, first_head * d, heads * d)?
            .reshape((1, seq, heads, d))
    };
    let heads_first = |t: Tensor| t.transpose(1, 2)?.contiguous();
    let normed_rotated = |raw: &Tensor, weight: &Tensor| {
        heads_first(rope::composed(
            &rms_norm::composed(raw, Some(weight), eps)?,
            cos,
            sin,
        )?)
    };
    let q = normed_rotated(&part(0, layout.q_heads)?, q_norm)?;
    let kv = match (layout.kv, k_norm) {
        (KvPart::None, _) | (_, None) => None,
        (kv, Some(k_norm)) => {
            let k_raw = part(layout.q_heads, layout.kv_heads)?;
            let v_raw = match kv {
                KvPart::KAndV => part(layout.q_heads + layout.kv_heads, layout.kv_heads)?,
                _ => k_raw.clone(),
            };
            let k = normed_rotated(&k_raw, k_norm)?;
            let v = heads_first(rms_norm::composed(&v_raw, None, eps)?)?;
            Some((k, v))
        }
    };
    Ok((q, kv))
}

/// Which norm weight a part's heads take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum NormWeight {
    Q,
    K,
    Weightless,
}

/// q, k or v in the stacked projection: its first head in a token's row, its heads, its norm,
/// and whether it is rotated.
struct Part {
    first_head: usize,
    heads: usize,
    norm: NormWeight,
    rotate: bool,
}

/// The parts of `layout` in output order: q, then k and v when the layer has its own.
fn parts(layout: QkvLayout) -> Vec<Part> {
    let (hq, hkv) = (layout.q_heads, layout.kv_heads);
    let mut parts = vec![Part {
        first_head: 0,
        heads: hq,
        norm: NormWeight::Q,
        rotate: true,
    }];
    if layout.kv != KvPart::None {
        parts.push(Part {
            first_head: hq,
            heads: hkv,
            norm: NormWeight::K,
            rotate: true,
        });
        parts.push(Part {
            first_head: if layout.kv == KvPart::KAndV {
                hq + hkv
            } else {
                hq
            },
            heads: hkv,
            norm: NormWeight::Weightless,
            rotate: false,
        });
    }
    parts
}

/// CPU arm (f32): each token's part normed by the SIMD row kernel `rms_norm` uses (one row per
/// head), then rotated and written heads first.
fn cpu_fwd(
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
) -> Result<AttentionInputs> {
    let all_f32 = [Some(qkv), Some(q_norm), k_norm, Some(cos), Some(sin)]
        .into_iter()
        .flatten()
        .all(|t| t.dtype() == DType::F32);
    let Some(simd) = cpu::simd().filter(|_| all_f32) else {
        return composed(qkv, layout, q_norm, k_norm, cos, sin, eps);
    };
    let (_, seq, width) = qkv.dims3()?;
    let (d, half) = (layout.head_dim, layout.head_dim / 2);
    let k_norm_values = k_norm
        .map(|w| w.flatten_all()?.to_vec1::<f32>())
        .transpose()?;
    let (cos, sin) = (
        cos.flatten_all()?.to_vec1::<f32>()?,
        sin.flatten_all()?.to_vec1::<f32>()?,
    );
    let parts = parts(layout);
    let outputs = cpu::with_f32(q_norm, |q_norm| {
        cpu::with_f32(qkv, |qkv| {
            parts
                .iter()
                .map(|part| {
                    let weight = match part.norm {
                        NormWeight::Q => Some(q_norm),
                        NormWeight::K => k_norm_values.as_deref(),
                        NormWeight::Weightless => None,
                    };
                    let mut out = vec![0f32; part.heads * seq * d];
                    for s in 0..seq {
                        let start = s * width + part.first_head * d;
                        let rows = &qkv[start..start + part.heads * d];
                        let normed = cpu::rms_norm_f32(simd, rows, d, weight, None, eps as f32);
                        for (h, normed) in normed.chunks_exact(d).enumerate() {
                            let out = &mut out[(h * seq + s) * d..(h * seq + s + 1) * d];
                            if !part.rotate {
                                out.copy_from_slice(normed);
                                continue;
                            }
                            // x·cos + rotate_half(x)·sin, in the composed arm's order.
                            for j in 0..half {
                                let (c, sn) = (cos[s * half + j], sin[s * half + j]);
                                let (a, b) = (normed[j], normed[j + half]);
                                out[j] = a * c + -b * sn;
                                out[j + half] = b * c + a * sn;
                            }
                        }
                    }
                    out
                })
                .collect::<Vec<_>>()
        })
    })??;
    let mut tensors = parts
        .iter()
        .zip(outputs)
        .map(|(part, out)| Tensor::from_vec(out, (1, part.heads, seq, d), qkv.device()));
    let mut next = || tensors.next().expect("q's part is always there");
    let q = next()?;
    let kv = match layout.kv {
        KvPart::None => None,
        _ => Some((next()?, next()?)),
    };
    Ok((q, kv))
}

/// The widest head the CUDA arm rotates in shared memory (`G4_QKV_MAX_HEAD_DIM`); Gemma-4's
/// are 256 and 512 wide.
const NATIVE_MAX_HEAD_DIM: usize = 512;

/// CUDA arm: one warp per (token, head), the row normed in registers, rounded to T as the
/// separate norm stores it, rotated with each pair's halves exchanged in registers, and written
/// heads first (src/kernels/cuda/norms.cu), k and v into the cache from its given row (device-held
/// or host-known) when given one. Wider heads take the composed arm.
#[allow(clippy::too_many_arguments)]
fn native_fwd(
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
    kv_slot: Option<KvSlot>,
) -> Result<AttentionInputs> {
    use super::native::{empty, launch, per_warp, warp_lanes, Arg};
    let (_, seq, _) = qkv.dims3()?;
    let (d, hq, hkv) = (layout.head_dim, layout.q_heads, layout.kv_heads);
    let heads = layout.output_heads();
    let rows = per_warp(seq * heads, d, warp_lanes(qkv.device()))
        .filter(|_| d <= NATIVE_MAX_HEAD_DIM && d % 2 == 0);
    let Some(rows) = rows else {
        let inputs = composed(qkv, layout, q_norm, k_norm, cos, sin, eps)?;
        return match kv_slot {
            Some(kv_slot) => kv_slot.store(inputs),
            None => Ok(inputs),
        };
    };
    let qkv = qkv.contiguous()?;
    let dtype = qkv.dtype();
    let q_norm = q_norm.to_dtype(dtype)?.contiguous()?;
    let k_norm = k_norm
        .map(|w| w.to_dtype(dtype)?.contiguous())
        .transpose()?;
    let cos = cos.to_dtype(DType::F32)?.contiguous()?;
    let sin = sin.to_dtype(DType::F32)?.contiguous()?;
    if cos.dims() != [seq, d / 2] || sin.dims() != [seq, d / 2] {
        candle_core::bail!(
            "qkv_norm_rope: cos/sin {:?} do not fit {seq} tokens of head dim {d}",
            cos.shape()
        );
    }
    let q = empty((1, hq, seq, d), dtype, qkv.device())?;
    let kv = match (layout.kv, kv_slot) {
        (KvPart::None, _) => None,
        (_, Some(kv_slot)) => Some((kv_slot.k.clone(), kv_slot.v.clone())),
        _ => Some((
            empty((1, hkv, seq, d), dtype, qkv.device())?,
            empty((1, hkv, seq, d), dtype, qkv.device())?,
        )),
    };
    let cache_rows = kv_slot.map_or(0, |kv_slot| kv_slot.k.dim(2).unwrap_or(0));
    let (device_row, first_row) = match kv_slot.map(|kv_slot| kv_slot.row) {
        Some(CacheRow::Device(slot)) => (Some(slot), 0),
        Some(CacheRow::Host(first)) => (None, first),
        None => (None, 0),
    };
    let args = [
        Arg::Tensor(&qkv),
        Arg::Tensor(&q_norm),
        Arg::OptionalTensor(k_norm.as_ref()),
        Arg::Tensor(&cos),
        Arg::Tensor(&sin),
        Arg::Tensor(&q),
        Arg::OptionalTensor(kv.as_ref().map(|(k, _)| k)),
        Arg::OptionalTensor(kv.as_ref().map(|(_, v)| v)),
        Arg::OptionalTensor(device_row),
        Arg::I32(first_row as i32),
        Arg::I32(cache_rows as i32),
        Arg::I32(seq as i32),
        Arg::I32(hq as i32),
        Arg::I32(hkv as i32),
        Arg::I32(d as i32),
        Arg::I32(layout.kv.code() as i32),
        Arg::F32(eps as f32),
    ];
    launch(
        &rows.kernel("qkv_norm_rope", dtype)?,
        qkv.device(),
        rows.grid,
        &args,
    )?;
    Ok((q, kv))
}

/// Row-major f64: `qkv [S, width]`, `cos, sin [S, D/2]`; the outputs q, k, v heads first,
/// concatenated.
#[allow(clippy::too_many_arguments)]
pub fn reference(
    qkv: &[f64],
    seq: usize,
    layout: QkvLayout,
    q_norm: &[f64],
    k_norm: &[f64],
    cos: &[f64],
    sin: &[f64],
    eps: f64,
) -> Vec<f64> {
    let (d, width) = (layout.head_dim, layout.width());
    let mut outputs = Vec::new();
    for part in parts(layout) {
        let weight = match part.norm {
            NormWeight::Q => Some(q_norm),
            NormWeight::K => Some(k_norm),
            NormWeight::Weightless => None,
        };
        let mut out = vec![0.0; part.heads * seq * d];
        for s in 0..seq {
            for h in 0..part.heads {
                let start = s * width + (part.first_head + h) * d;
                let normed = reference::rms_norm_row(&qkv[start..start + d], weight, eps);
                let row = match part.rotate {
                    true => {
                        let table = s * d / 2..(s + 1) * d / 2;
                        rope::reference(&normed, 1, 1, d, &cos[table.clone()], &sin[table])
                    }
                    false => normed,
                };
                out[(h * seq + s) * d..(h * seq + s + 1) * d].copy_from_slice(&row);
            }
        }
        outputs.extend(out);
    }
    outputs
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
            what: "q's and k's norm weights swapped",
            run: |c| {
                let f = |i| c.float(i);
                let inputs = composed(f(0), layout_of(c)?, f(2), Some(f(1)), f(3), f(4), c.eps)?;
                stored(c, inputs, 0)
            },
        },
        Mutant {
            what: "the rotation reversed (sin negated)",
            run: |c| {
                let f = |i| c.float(i);
                let sin = f(4).neg()?;
                let inputs = composed(f(0), layout_of(c)?, f(1), Some(f(2)), f(3), &sin, c.eps)?;
                stored(c, inputs, 0)
            },
        },
        Mutant {
            what: "k and v written one cache row past their first",
            run: |c| {
                let f = |i| c.float(i);
                let inputs = composed(f(0), layout_of(c)?, f(1), Some(f(2)), f(3), f(4), c.eps)?;
                stored(c, inputs, 1)
            },
        },
    ],
};

/// Shapes the CUDA arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "head dim up to 512 (Gemma-4's 256 and 512)",
        path: "native: one warp per token and head",
        case: "S1 q16 kv2·KAsV D512 proportional",
    },
    ShapePath {
        shapes: "head dim over 512",
        path: "composed",
        case: "S2 q2 kv1·KAndV D640",
    },
];

/// A case's layout: `rows` q heads, `cols` kv heads, `k` the kv part's code, the head dim the
/// norm weights' length.
fn layout_of(c: &Case) -> Result<QkvLayout> {
    Ok(QkvLayout {
        q_heads: c.rows,
        kv_heads: c.cols,
        head_dim: c.float(1).dim(0)?,
        kv: KvPart::from_code(c.k),
    })
}

/// A cache case's destination (raw inputs: k's and v's cache as they were before the call, and
/// the slot), on fresh copies of the caches so that no arm sees another's writes.
fn fresh_caches(c: &Case) -> Result<Option<(Tensor, Tensor)>> {
    c.optional_raw(0)
        .map(|k| Ok((k.copy()?, c.raw(1).copy()?)))
        .transpose()
}

fn outputs((q, kv): AttentionInputs) -> Result<Vec<Tensor>> {
    Ok(match kv {
        Some((k, v)) => vec![q, k, v],
        None => vec![q],
    })
}

/// A cache case's first row, `offset` rows on: a decode token's (one token) is held on the device
/// as the model's graph step holds it, a prefill chunk's (several) is known on the host.
enum CaseRow {
    Device(Tensor),
    Host(usize),
}

impl CaseRow {
    fn of(c: &Case, offset: u32) -> Result<CaseRow> {
        Ok(match c.float(0).dim(1)? {
            1 => CaseRow::Device((c.raw(2) + offset as f64)?),
            _ => CaseRow::Host((c.raw(2).to_vec1::<u32>()?[0] + offset) as usize),
        })
    }

    fn cache_row(&self) -> CacheRow<'_> {
        match self {
            CaseRow::Device(slot) => CacheRow::Device(slot),
            CaseRow::Host(first) => CacheRow::Host(*first),
        }
    }
}

/// What a composed stand-in returns: on a cache case, k and v stored `offset` rows past the
/// case's first row.
fn stored(c: &Case, inputs: AttentionInputs, offset: u32) -> Result<Vec<Tensor>> {
    let Some((k, v)) = fresh_caches(c)? else {
        return outputs(inputs);
    };
    let row = CaseRow::of(c, offset)?;
    outputs(
        KvSlot {
            k: &k,
            v: &v,
            row: row.cache_row(),
        }
        .store(inputs)?,
    )
}

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Every kv part, head dims 12 (halves that split a 16-byte run) to 512 (proportional RoPE on the 512-wide full layers, as
    // 26B-A4B's) and one wider, prefill and decode, decode into a device-held cache row (the kv
    // part with its own v, k_eq_v on the wide head, and the composed fallback) and prefill
    // chunks into host-known rows; last (the one `--perf` times) an E4B sliding layer's decode.
    for (seq, q_heads, kv_heads, head_dim, kv, proportional, cache) in [
        (3, 4, 2, 16, KvPart::KAndV, false, None),
        (2, 2, 1, 12, KvPart::KAndV, false, None),
        (2, 4, 1, 64, KvPart::KAsV, false, None),
        (5, 2, 1, 32, KvPart::None, false, None),
        (7, 3, 1, 256, KvPart::KAndV, false, None),
        (1, 16, 2, 512, KvPart::KAsV, true, None),
        (2, 2, 1, 640, KvPart::KAndV, false, None),
        (1, 4, 2, 256, KvPart::KAndV, false, Some((5, 9))),
        (1, 8, 1, 512, KvPart::KAsV, true, Some((0, 3))),
        (1, 2, 1, 640, KvPart::KAndV, false, Some((2, 4))),
        (3, 4, 2, 256, KvPart::KAndV, false, Some((2, 6))),
        (2, 8, 1, 512, KvPart::KAsV, true, Some((1, 4))),
        (1, 8, 2, 256, KvPart::KAndV, false, None),
    ] {
        let layout = QkvLayout {
            q_heads,
            kv_heads,
            head_dim,
            kv,
        };
        let mut c = Builder::new(device, dtype, rng);
        let qkv = c.uniform(&[1, seq, layout.width()], -3.0, 3.0)?;
        let q_norm = c.float(&[head_dim], norm_weight)?;
        let k_norm = c.float(&[head_dim], norm_weight)?;
        let (cos, sin) = rope::case_tables(&mut c, seq, head_dim, proportional)?;
        let mut expected = reference(&qkv, seq, layout, &q_norm, &k_norm, &cos, &sin, 1e-6);
        let mut label = format!(
            "S{seq} q{q_heads} kv{kv_heads}·{kv:?} D{head_dim}{}",
            if proportional { " proportional" } else { "" }
        );
        if let Some((first, rows)) = cache {
            expected = into_cache(&mut c, expected, layout, seq, first, rows)?;
            label += &format!(" into cache row {first} of {rows}");
        }
        let mut case = c.finish(label, expected);
        (case.rows, case.cols, case.k) = (q_heads, kv_heads, kv.code());
        cases.push(case);
    }
    Ok(cases)
}

/// Adds a cache case's caches `[1, kv_heads, rows, D]` (random, as earlier tokens left them) and
/// its first row as raw inputs; returns the expected outputs with k and v replaced by the caches
/// after the `seq` tokens' write.
fn into_cache(
    c: &mut Builder,
    expected: Vec<f64>,
    layout: QkvLayout,
    seq: usize,
    first: usize,
    rows: usize,
) -> Result<Vec<f64>> {
    let (hkv, d) = (layout.kv_heads, layout.head_dim);
    let q_len = layout.q_heads * seq * d;
    let mut outputs = expected[..q_len].to_vec();
    for new in expected[q_len..].chunks(hkv * seq * d) {
        let draw: Vec<f64> = (0..hkv * rows * d)
            .map(|_| c.rng.random_range(-2.0..2.0))
            .collect();
        let mut cache = c.round(draw, c.dtype())?;
        c.raw(
            Tensor::from_vec(cache.clone(), (1, hkv, rows, d), &Device::Cpu)?
                .to_dtype(c.dtype())?
                .to_device(c.device())?,
        );
        for (i, token) in new.chunks(d).enumerate() {
            let (h, s) = (i / seq, i % seq);
            let row = h * rows + first + s;
            cache[row * d..(row + 1) * d].copy_from_slice(token);
        }
        outputs.extend(cache);
    }
    c.indices(&[first as u32])?;
    Ok(outputs)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    let caches = fresh_caches(c)?;
    let row = caches.as_ref().map(|_| CaseRow::of(c, 0)).transpose()?;
    let kv_slot = caches
        .as_ref()
        .zip(row.as_ref())
        .map(|((k, v), row)| KvSlot {
            k,
            v,
            row: row.cache_row(),
        });
    outputs(qkv_norm_rope_on(
        arm,
        f(0),
        layout_of(c)?,
        f(1),
        Some(f(2)),
        f(3),
        f(4),
        c.eps,
        kv_slot,
    )?)
}
