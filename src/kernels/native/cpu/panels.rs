//! A GEMM over weights packed once at load into panels of `PANEL` output columns,
//! `[⌈N/PANEL⌉, K, PANEL]`: for each k a panel holds the `PANEL` weights that multiply x[·, k]
//! next to each other. The kernel broadcasts one X value and multiplies it into a whole panel
//! row with one vector FMA per register, keeping an `R × PANEL` tile of Y in registers: nothing
//! is packed per call (a general GEMM packs both operands every time), and decode's one row
//! streams each panel front to back.

use super::Simd;
use rayon::prelude::*;

/// Output columns of a panel: one AVX-512 register, two AVX2 ones, four NEON ones.
pub const PANEL: usize = 16;

/// Panels one task computes: a decode step's narrow projections still spread over the threads,
/// and a task is long enough to amortise waking one.
const PANELS_PER_TASK: usize = 4;

/// `y [m, n] = x [m, k] · Wᵀ` in f32, W as `panels` (see the module).
pub fn matmul_panels_f32(
    simd: Simd,
    x: &[f32],
    panels: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Vec<f32> {
    let count = n.div_ceil(PANEL);
    assert!(x.len() == m * k && panels.len() == count * k * PANEL);
    // Panel by panel while computing, so that each task writes one contiguous block.
    let mut by_panel = vec![0f32; count * m * PANEL];
    by_panel
        .par_chunks_mut(m * PANEL)
        .with_min_len(PANELS_PER_TASK)
        .enumerate()
        .for_each(|(p, out)| {
            let panel = &panels[p * k * PANEL..(p + 1) * k * PANEL];
            panel_rows(simd, x, panel, m, k, out);
        });
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
fn panel_rows(simd: Simd, x: &[f32], panel: &[f32], m: usize, k: usize, out: &mut [f32]) {
    macro_rules! tiles {
        ($kernel:ident, $rows:literal) => {{
            let mut r = 0;
            while r + $rows <= m {
                $kernel::<$rows>(&x[r * k..], panel, k, &mut out[r * PANEL..]);
                r += $rows;
            }
            match m - r {
                0 => {}
                1 => $kernel::<1>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                2 => $kernel::<2>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                3 => $kernel::<3>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                4 => $kernel::<4>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                5 => $kernel::<5>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                6 => $kernel::<6>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
                _ => $kernel::<7>(&x[r * k..], panel, k, &mut out[r * PANEL..]),
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
unsafe fn tile_avx512<const R: usize>(x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
    tile::<R>(x, panel, k, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize>(x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
    tile::<R>(x, panel, k, out)
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn tile_neon<const R: usize>(x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
    tile::<R>(x, panel, k, out)
}

/// `out [R, PANEL] = x [R, k (row pitch k)] · panel`, the tile in registers: the compiler
/// vectorises the fixed-size loops to the enclosing `target_feature`'s width.
#[inline(always)]
fn tile<const R: usize>(x: &[f32], panel: &[f32], k: usize, out: &mut [f32]) {
    assert!(x.len() >= (R - 1) * k + k && panel.len() == k * PANEL && out.len() >= R * PANEL);
    let mut acc = [[0f32; PANEL]; R];
    for (i, w) in panel.chunks_exact(PANEL).enumerate() {
        for (r, sums) in acc.iter_mut().enumerate() {
            // SAFETY: r < R and i < k, and x holds R rows of k (asserted above).
            let xv = unsafe { *x.get_unchecked(r * k + i) };
            for (s, &wv) in sums.iter_mut().zip(w) {
                *s = xv.mul_add(wv, *s);
            }
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        out[r * PANEL..(r + 1) * PANEL].copy_from_slice(sums);
    }
}

/// W `[n, k]` row-major → `[⌈n/PANEL⌉, k, PANEL]`, the columns past n zero.
pub fn pack_f32(w: &[f32], n: usize, k: usize) -> Vec<f32> {
    assert_eq!(w.len(), n * k);
    let count = n.div_ceil(PANEL);
    let mut panels = vec![0f32; count * k * PANEL];
    for (row, values) in w.chunks_exact(k.max(1)).enumerate().take(n) {
        let (p, j) = (row / PANEL, row % PANEL);
        for (i, &v) in values.iter().enumerate() {
            panels[(p * k + i) * PANEL + j] = v;
        }
    }
    panels
}
