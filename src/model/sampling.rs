//! Choosing the next token: greedy (on the device, without copying the logits to the host) or
//! sampling with temperature, top-k, top-p, min-p and a repetition penalty, from a seeded RNG.

use anyhow::{bail, Result};
use candle_core::Tensor;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    /// 1.0 disables the penalty.
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

/// The valid range of each sampling parameter, shared by the flags and generation_config.json.
pub mod ranges {
    /// Checks `value` of `name` against its range; the message says which values are valid.
    pub fn check(name: &str, value: f64) -> Result<f64, String> {
        let (ok, valid) = match name {
            "temperature" => (value >= 0.0, "a finite number >= 0 (0 is greedy)"),
            "top_p" => (value > 0.0 && value <= 1.0, "a number in (0, 1]"),
            "min_p" => ((0.0..=1.0).contains(&value), "a number in [0, 1]"),
            "repetition_penalty" => (value > 0.0, "a finite number > 0 (1 is off)"),
            _ => (true, ""),
        };
        if value.is_finite() && ok {
            Ok(value)
        } else {
            Err(format!("{value} is not valid: expected {valid}"))
        }
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Sampler {
        Sampler {
            rng: StdRng::seed_from_u64(params.seed),
            params,
        }
    }

    /// The next token from f32 logits `[vocab]`, given the tokens so far; non-finite logits
    /// are an error, never a token.
    pub fn next(&mut self, logits: &Tensor, history: &[u32]) -> Result<u32> {
        let p = &self.params;
        if p.temperature <= 0.0 && p.repeat_penalty == 1.0 {
            return greedy_checked(logits);
        }
        let mut values = logits.to_vec1::<f32>()?;
        if values.iter().any(|v| !v.is_finite()) {
            bail!(NON_FINITE);
        }
        if p.repeat_penalty != 1.0 {
            let recent = &history[history.len().saturating_sub(p.repeat_last_n)..];
            let mut seen = std::collections::HashSet::new();
            for &id in recent {
                if seen.insert(id) {
                    if let Some(v) = values.get_mut(id as usize) {
                        *v = if *v > 0.0 {
                            *v / p.repeat_penalty
                        } else {
                            *v * p.repeat_penalty
                        };
                    }
                }
            }
        }
        if p.temperature <= 0.0 {
            return Ok(argmax_host(&values));
        }
        Ok(self.sample(&values))
    }

    fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let mut candidates: Vec<(u32, f64)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, ((l as f64 - max) / p.temperature).exp()))
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
        if let Some(k) = p.top_k.filter(|&k| k > 0) {
            candidates.truncate(k);
        }
        if let Some(top_p) = p.top_p.filter(|&t| t < 1.0) {
            let total: f64 = candidates.iter().map(|c| c.1).sum();
            let mut cumulative = 0.0;
            let keep = candidates
                .iter()
                .position(|c| {
                    cumulative += c.1 / total;
                    cumulative >= top_p
                })
                .map_or(candidates.len(), |i| i + 1);
            candidates.truncate(keep);
        }
        if let Some(min_p) = p.min_p.filter(|&m| m > 0.0) {
            let threshold = candidates[0].1 * min_p;
            candidates.retain(|c| c.1 >= threshold);
        }
        let total: f64 = candidates.iter().map(|c| c.1).sum();
        let mut target = self.rng.random::<f64>() * total;
        for &(id, weight) in &candidates {
            if target < weight {
                return id;
            }
            target -= weight;
        }
        candidates.last().map_or(0, |c| c.0)
    }
}

const NON_FINITE: &str =
    "the model produced non-finite logits (NaN or infinity): its weights hold non-finite values or overflow this dtype";

/// Greedy choice on the device: the index of the largest logit (the first on ties).
pub fn greedy(logits: &Tensor) -> Result<u32> {
    Ok(crate::kernels::argmax::argmax(logits)?
        .squeeze(0)?
        .to_scalar::<u32>()?)
}

/// Greedy choice that refuses non-finite logits, with one trip to the host: the chosen index
/// and the sum of all logits (finite exactly when every logit is; softcapped logits cannot
/// overflow it) come back together. Ids below 2^24 (config.json's vocab limit) are exact in f32.
pub fn greedy_checked(logits: &Tensor) -> Result<u32> {
    let index = crate::kernels::argmax::argmax(logits)?.to_dtype(candle_core::DType::F32)?;
    let sum = logits
        .to_dtype(candle_core::DType::F32)?
        .sum_all()?
        .reshape(1)?;
    let both = Tensor::cat(&[&index, &sum], 0)?.to_vec1::<f32>()?;
    if !both[1].is_finite() {
        bail!(NON_FINITE);
    }
    Ok(both[0] as u32)
}

/// The model's log-probabilities (f32 logits `[vocab]`, before temperature, truncation and
/// penalties), on the host.
pub fn log_probs(logits: &Tensor) -> Result<Vec<f32>> {
    let logits = logits.to_dtype(candle_core::DType::F32)?;
    Ok(candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1)?.to_vec1::<f32>()?)
}

/// The `n` most likely token ids with their log-probabilities, most likely first (the lower
/// id first on ties).
pub fn top_n(log_probs: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut ids: Vec<u32> = (0..log_probs.len() as u32).collect();
    let n = n.min(ids.len());
    let by_rank = |a: &u32, b: &u32| {
        log_probs[*b as usize]
            .total_cmp(&log_probs[*a as usize])
            .then(a.cmp(b))
    };
    if n > 0 && n < ids.len() {
        ids.select_nth_unstable_by(n - 1, by_rank);
    }
    ids.truncate(n);
    ids.sort_by(by_rank);
    ids.into_iter()
        .map(|id| (id, log_probs[id as usize]))
        .collect()
}

fn argmax_host(values: &[f32]) -> u32 {
    values
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn params(temperature: f64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k: None,
            top_p: None,
            min_p: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 7,
        }
    }

    fn logits(values: &[f32]) -> Tensor {
        Tensor::new(values, &Device::Cpu).unwrap()
    }

    #[test]
    fn greedy_takes_the_largest_logit() {
        let mut s = Sampler::new(params(0.0));
        assert_eq!(s.next(&logits(&[0.1, 3.0, 2.9]), &[]).unwrap(), 1);
    }

    #[test]
    fn repeat_penalty_can_change_the_greedy_choice() {
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 1.5,
            ..params(0.0)
        });
        assert_eq!(s.next(&logits(&[0.1, 3.0, 2.9]), &[1]).unwrap(), 2);
    }

    #[test]
    fn top_k_one_is_greedy_and_top_k_limits_the_support() {
        let mut s = Sampler::new(SamplingParams {
            top_k: Some(1),
            ..params(1.0)
        });
        for _ in 0..20 {
            assert_eq!(s.next(&logits(&[1.0, 1.2, 0.9, 1.1]), &[]).unwrap(), 1);
        }
        let mut s = Sampler::new(SamplingParams {
            top_k: Some(2),
            ..params(1.0)
        });
        for _ in 0..50 {
            assert!([1, 3].contains(&s.next(&logits(&[1.0, 1.2, 0.9, 1.1]), &[]).unwrap()));
        }
    }

    #[test]
    fn top_p_and_min_p_drop_the_tail() {
        // Probabilities ≈ [0.64, 0.24, 0.09, 0.03].
        let l = [3.0, 2.0, 1.0, 0.0];
        let mut s = Sampler::new(SamplingParams {
            top_p: Some(0.8),
            ..params(1.0)
        });
        for _ in 0..50 {
            assert!(s.next(&logits(&l), &[]).unwrap() <= 1);
        }
        let mut s = Sampler::new(SamplingParams {
            min_p: Some(0.2),
            ..params(1.0)
        });
        for _ in 0..50 {
            assert!(s.next(&logits(&l), &[]).unwrap() <= 1);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let l = logits(&[1.0, 1.1, 0.9, 1.05, 0.95]);
        let draw = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                ..params(1.0)
            });
            (0..30)
                .map(|_| s.next(&l, &[]).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(11), draw(11));
        assert_ne!(draw(11), draw(12));
    }
}
