//! A GEMM over weights packed once at load into panels of `PANEL` output columns,
//! `[⌈N/PANEL⌉, K, PANEL]`: for each k a panel holds the `PANEL` weights that multiply x[·, k]
//! next to each other. The kernel broadcasts one X value and multiplies it into a whole panel
//! row with one vector FMA per register, keeping an `R × PANEL` tile of Y in registers: nothing
//! is packed per call (a general GEMM packs both operands every time), and decode's one row
//! streams each panel front to back. Panels hold f32 weights, or an FP8 checkpoint's e4m3 bytes
//! with one f32 scale per column, dequantised a panel row at a time in registers exactly as a
//! dequantisation at load would (e4m3 value × scale, rounded to f32).

use super::Simd;
use rayon::prelude::*;

/// The weights of one panel, a panel row (one k) at a time.
trait PanelRows: Copy {
    fn row(&self, i: usize) -> [f32; PANEL];
}

#[derive(Clone, Copy)]
struct F32Panel<'a>(&'a [f32]);

impl PanelRows for F32Panel<'_> {
    #[inline(always)]
    fn row(&self, i: usize) -> [f32; PANEL] {
        self.0[i * PANEL..(i + 1) * PANEL]
            .try_into()
            .expect("a panel row")
    }
}

#[derive(Clone, Copy)]
struct E4m3Panel<'a> {
    bits: &'a [u8],
    scale: &'a [f32; PANEL],
}

impl PanelRows for E4m3Panel<'_> {
    #[inline(always)]
    fn row(&self, i: usize) -> [f32; PANEL] {
        let bits: &[u8; PANEL] = self.bits[i * PANEL..(i + 1) * PANEL]
            .try_into()
            .expect("a panel row");
        let mut row = [0f32; PANEL];
        for ((value, &b), &scale) in row.iter_mut().zip(bits).zip(self.scale) {
            *value = e4m3_to_f32(b) * scale;
        }
        row
    }
}

/// An e4m3 value from its bits with integer and float arithmetic only (no table, no branch), so
/// that the compiler vectorises it: a normal value's exponent and mantissa move into f32's fields
/// (exponent bias 7 → 127), a subnormal one is its mantissa × 2⁻⁹. The NaN code (S.1111.111),
/// which quantisers never write, reads as ±480.
#[inline(always)]
fn e4m3_to_f32(bits: u8) -> f32 {
    let b = bits as u32;
    let magnitude = b & 0x7f;
    let normal = f32::from_bits((magnitude << 20) + (120 << 23));
    let subnormal = (b & 0x7) as f32 * (1.0 / 512.0);
    let value = if magnitude >= 0x08 { normal } else { subnormal };
    f32::from_bits(value.to_bits() | ((b & 0x80) << 24))
}

/// Output columns of a panel: one AVX-512 register, two AVX2 ones, four NEON ones.
pub const PANEL: usize = 16;

/// Panels one task computes: a decode step's narrow projections still spread over the threads,
/// and a task is long enough to amortise waking one.
const PANELS_PER_TASK: usize = 4;

/// `y [m, n] = x [m, k] · Wᵀ` in f32, W as f32 `panels` (see the module).
pub fn matmul_panels_f32(
    simd: Simd,
    x: &[f32],
    panels: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f32> {
    assert!(panels.len() == n.div_ceil(PANEL) * k * PANEL);
    by_panels(x, m, n, k, |p, out| {
        let panel = F32Panel(&panels[p * k * PANEL..(p + 1) * k * PANEL]);
        panel_rows(simd, x, panel, m, k, out);
    })
}

/// `y [m, n] = x [m, k] · (W × scale)ᵀ` in f32, W as e4m3 `panels` (their bits) and `scale` one
/// f32 per column, padded like the panels.
pub fn matmul_panels_e4m3_f32(
    simd: Simd,
    x: &[f32],
    panels: &[u8],
    scale: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f32> {
    let count = n.div_ceil(PANEL);
    assert!(panels.len() == count * k * PANEL && scale.len() == count * PANEL);
    by_panels(x, m, n, k, |p, out| {
        let panel = E4m3Panel {
            bits: &panels[p * k * PANEL..(p + 1) * k * PANEL],
            scale: scale[p * PANEL..(p + 1) * PANEL]
                .try_into()
                .expect("a panel's scales"),
        };
        panel_rows(simd, x, panel, m, k, out);
    })
}

/// Runs `panel(p, out)` for every panel over the threads, each writing its `[m, PANEL]` block,
/// and lays the blocks out as `y [m, n]`.
fn by_panels(
    x: &[f32],
    m: usize,
    n: usize,
    k: usize,
    panel: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    assert_eq!(x.len(), m * k);
    let count = n.div_ceil(PANEL);
    // Panel by panel while computing, so that each task writes one contiguous block.
    let mut by_panel = vec![0f32; count * m * PANEL];
    by_panel
        .par_chunks_mut(m * PANEL)
        .with_min_len(PANELS_PER_TASK)
        .enumerate()
        .for_each(|(p, out)| panel(p, out));
    let mut y = vec![0f32; m * n];
    for (p, block) in by_panel.chunks_exact(m * PANEL).enumerate() {
        let cols = PANEL.min(n - p * PANEL);
        for (r, tile_row) in block.chunks_exact(PANEL).enumerate() {
            y[r * n + p * PANEL..r * n + p * PANEL + cols].copy_from_slice(&tile_row[..cols]);
        }
    }
    y
}

/// `out [m, PANEL]` = every row of `x` times one panel, `rows` X rows per tile.
fn panel_rows<P: PanelRows>(simd: Simd, x: &[f32], panel: P, m: usize, k: usize, out: &mut [f32]) {
    macro_rules! tiles {
        ($kernel:ident, $rows:literal) => {{
            let mut r = 0;
            while r + $rows <= m {
                $kernel::<$rows, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]);
                r += $rows;
            }
            match m - r {
                0 => {}
                1 => $kernel::<1, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                2 => $kernel::<2, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                3 => $kernel::<3, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                4 => $kernel::<4, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                5 => $kernel::<5, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                6 => $kernel::<6, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                _ => $kernel::<7, P>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
            }
        }};
    }
    match simd {
        // SAFETY (each arm): `simd()` chose the instruction set only where the CPU reports it.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => unsafe { tiles!(tile_avx512, 8) },
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2Fma => unsafe { tiles!(tile_avx2, 4) },
        #[cfg(target_arch = "aarch64")]
        Simd::Neon => unsafe { tiles!(tile_neon, 6) },
        #[allow(unreachable_patterns)]
        _ => unreachable!("simd() never returns an instruction set of another architecture"),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const R: usize, P: PanelRows>(
    x: &[f32],
    panel: P,
    k: usize,
    out: &mut [f32],
) {
    tile::<R, P>(x, panel, k, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize, P: PanelRows>(x: &[f32], panel: P, k: usize, out: &mut [f32]) {
    tile::<R, P>(x, panel, k, out)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn tile_neon<const R: usize, P: PanelRows>(x: &[f32], panel: P, k: usize, out: &mut [f32]) {
    tile::<R, P>(x, panel, k, out)
}

/// `out [R, PANEL] = x [R, k (row pitch k)] · panel`, the tile in registers: the compiler
/// vectorises the fixed-size loops to the enclosing `target_feature`'s width.
#[inline(always)]
fn tile<const R: usize, P: PanelRows>(x: &[f32], panel: P, k: usize, out: &mut [f32]) {
    assert!(x.len() >= (R - 1) * k + k && out.len() >= R * PANEL);
    let mut acc = [[0f32; PANEL]; R];
    for i in 0..k {
        let w = panel.row(i);
        for (r, sums) in acc.iter_mut().enumerate() {
            // SAFETY: r < R and i < k, and x holds R rows of k (asserted above).
            let xv = unsafe { *x.get_unchecked(r * k + i) };
            for (s, &wv) in sums.iter_mut().zip(&w) {
                *s = xv.mul_add(wv, *s);
            }
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        out[r * PANEL..(r + 1) * PANEL].copy_from_slice(sums);
    }
}

#[cfg(test)]
mod tests {
    /// Every e4m3 code but the NaN pair decodes to float8's value, bit for bit (signed zeros and
    /// subnormals included).
    #[test]
    fn e4m3_decode_matches_float8_for_every_code() {
        for bits in 0..=255u8 {
            if bits & 0x7f == 0x7f {
                continue;
            }
            let expected = float8::F8E4M3::from_bits(bits).to_f32();
            assert_eq!(
                super::e4m3_to_f32(bits).to_bits(),
                expected.to_bits(),
                "{bits:#04x}"
            );
        }
    }
}
