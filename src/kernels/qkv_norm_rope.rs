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
use rand::rngs::StdRng;

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

/// q `[1, q_heads, S, D]`, and k, v `[1, kv_heads, S, D]` when the layer has its own.
pub type AttentionInputs = (Tensor, Option<(Tensor, Tensor)>);

/// `qkv [1, S, width]`, `cos, sin [S, D/2]` (f32); `k_norm` is required when the layout has k.
pub fn qkv_norm_rope(
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
) -> Result<AttentionInputs> {
    let arm = arm_for(OP, qkv.device(), qkv.dtype());
    qkv_norm_rope_on(arm, qkv, layout, q_norm, k_norm, cos, sin, eps)
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
) -> Result<AttentionInputs> {
    let (_, _, width) = qkv.dims3()?;
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
    match arm {
        Arm::Composed => composed(qkv, layout, q_norm, k_norm, cos, sin, eps),
        Arm::Native(Backend::Cpu) => cpu_fwd(qkv, layout, q_norm, k_norm, cos, sin, eps),
        Arm::Native(_) => native_fwd(qkv, layout, q_norm, k_norm, cos, sin, eps),
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

/// CUDA arm: one block per (token, head), the row normed in registers, rounded to T as the
/// separate norm stores it, rotated through shared memory and written heads first
/// (src/kernels/cuda/norms.cu). Wider heads take the composed arm.
fn native_fwd(
    qkv: &Tensor,
    layout: QkvLayout,
    q_norm: &Tensor,
    k_norm: Option<&Tensor>,
    cos: &Tensor,
    sin: &Tensor,
    eps: f64,
) -> Result<AttentionInputs> {
    use super::native::{empty, launch, per_row, warp_lanes, Arg};
    let (_, seq, _) = qkv.dims3()?;
    let (d, hq, hkv) = (layout.head_dim, layout.q_heads, layout.kv_heads);
    let heads = layout.output_heads();
    let rows = per_row(seq * heads, d, warp_lanes(qkv.device()))
        .filter(|_| d <= NATIVE_MAX_HEAD_DIM && d % 2 == 0);
    let Some(rows) = rows else {
        return composed(qkv, layout, q_norm, k_norm, cos, sin, eps);
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
    let kv = match layout.kv {
        KvPart::None => None,
        _ => Some((
            empty((1, hkv, seq, d), dtype, qkv.device())?,
            empty((1, hkv, seq, d), dtype, qkv.device())?,
        )),
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
                outputs(composed(
                    c.float(0),
                    layout_of(c)?,
                    c.float(2),
                    Some(c.float(1)),
                    c.float(3),
                    c.float(4),
                    c.eps,
                )?)
            },
        },
        Mutant {
            what: "the rotation reversed (sin negated)",
            run: |c| {
                outputs(composed(
                    c.float(0),
                    layout_of(c)?,
                    c.float(1),
                    Some(c.float(2)),
                    c.float(3),
                    &c.float(4).neg()?,
                    c.eps,
                )?)
            },
        },
    ],
};

/// Shapes the CUDA arm hands to another path.
const SHAPE_PATHS: &[ShapePath] = &[
    ShapePath {
        shapes: "head dim up to 512 (Gemma-4's 256 and 512)",
        path: "native: one block per token and head",
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

fn outputs((q, kv): AttentionInputs) -> Result<Vec<Tensor>> {
    Ok(match kv {
        Some((k, v)) => vec![q, k, v],
        None => vec![q],
    })
}

fn cases(device: &Device, dtype: DType, rng: &mut StdRng) -> Result<Vec<Case>> {
    let mut cases = Vec::new();
    // Every kv part, head dims 16 to 512 (proportional RoPE on the 512-wide full layers, as
    // 26B-A4B's) and one wider, prefill and decode; last (the one `--perf` times) an E4B sliding layer's decode.
    for (seq, q_heads, kv_heads, head_dim, kv, proportional) in [
        (3, 4, 2, 16, KvPart::KAndV, false),
        (2, 4, 1, 64, KvPart::KAsV, false),
        (5, 2, 1, 32, KvPart::None, false),
        (7, 3, 1, 256, KvPart::KAndV, false),
        (1, 16, 2, 512, KvPart::KAsV, true),
        (2, 2, 1, 640, KvPart::KAndV, false),
        (1, 8, 2, 256, KvPart::KAndV, false),
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
        let expected = reference(&qkv, seq, layout, &q_norm, &k_norm, &cos, &sin, 1e-6);
        let label = format!(
            "S{seq} q{q_heads} kv{kv_heads}·{kv:?} D{head_dim}{}",
            if proportional { " proportional" } else { "" }
        );
        let mut case = c.finish(label, expected);
        (case.rows, case.cols, case.k) = (q_heads, kv_heads, kv.code());
        cases.push(case);
    }
    Ok(cases)
}

fn run(arm: Arm, c: &Case) -> Result<Vec<Tensor>> {
    let f = |i| c.float(i);
    outputs(qkv_norm_rope_on(
        arm,
        f(0),
        layout_of(c)?,
        f(1),
        Some(f(2)),
        f(3),
        f(4),
        c.eps,
    )?)
}
