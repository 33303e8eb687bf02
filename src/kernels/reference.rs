//! Shared pieces of the f64 references: the semantics of each op, written for clarity rather
//! than speed, on plain row-major slices.

/// GELU with the tanh approximation (`gelu_pytorch_tanh`).
pub fn gelu_tanh(z: f64) -> f64 {
    let inner = (2.0 / std::f64::consts::PI).sqrt() * (z + 0.044715 * z * z * z);
    0.5 * z * (1.0 + inner.tanh())
}

/// RMS-normalises one row and applies an optional plain (not 1+w) weight.
pub fn rms_norm_row(row: &[f64], weight: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let mean_square = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
    let inv = 1.0 / (mean_square + eps).sqrt();
    row.iter()
        .enumerate()
        .map(|(i, v)| v * inv * weight.map_or(1.0, |w| w[i]))
        .collect()
}

/// Applies `f` to every row of a `[rows, cols]` buffer.
pub fn map_rows(data: &[f64], cols: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    data.chunks(cols).flat_map(f).collect()
}

/// `a [m, k] · bᵀ` with `b [n, k]`.
pub fn matmul_bt(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
        }
    }
    out
}

/// Gemma-4's attention rule: a query sees itself and earlier keys, and in sliding layers only the
/// last `window` positions including itself (strict `q − k < W`).
pub fn visible(query: usize, key: usize, window: Option<usize>) -> bool {
    key <= query && window.is_none_or(|w| query - key < w)
}
