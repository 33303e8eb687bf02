//! Throughput measurements in the spirit of llama-bench: prompt processing (`ppN`: one forward
//! over N tokens) and token generation (`tgN`: N greedy decode steps after a one-token prompt),
//! repeated, on the device, with the device synchronised around each timed region. A test at a
//! depth D (llama-bench's `-d`) runs after D tokens of context, prefilled untimed.

use crate::model::session::{DecodePath, Session};
use crate::model::{sampling::greedy, Gemma4};
use anyhow::{Context, Result};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Test {
    Prompt(usize),
    Generate(usize),
}

impl Test {
    pub fn name(self) -> String {
        match self {
            Test::Prompt(n) => format!("pp{n}"),
            Test::Generate(n) => format!("tg{n}"),
        }
    }

    pub fn parse(spec: &str) -> Option<Test> {
        let n = |s: &str| s.parse().ok().filter(|&n: &usize| n > 0);
        if let Some(rest) = spec.strip_prefix("pp") {
            n(rest).map(Test::Prompt)
        } else if let Some(rest) = spec.strip_prefix("tg") {
            n(rest).map(Test::Generate)
        } else {
            None
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// `ppN` or `tgN`, with ` @ dD` at a depth D > 0 (llama-bench's naming).
    pub test: String,
    pub tokens: usize,
    /// Tokens of context before the timed region (besides tgN's one-token prompt).
    pub depth: usize,
    pub repetitions: usize,
    pub tokens_per_s_mean: f64,
    pub tokens_per_s_stddev: f64,
    pub samples_tokens_per_s: Vec<f64>,
    /// ppN only: the share of each forward's time after which the host had queued all of it,
    /// averaged. Near 1, the GPU waited for the host (launches, uploads); well below, the GPU
    /// set the pace.
    pub host_queued_share: Option<f64>,
}

/// Positions a test needs: its depth, its tokens, and tgN's one-token prompt (saturating: a
/// count past any context must not wrap round to a small one).
pub fn positions_needed(test: Test, depth: usize) -> usize {
    depth.saturating_add(match test {
        Test::Prompt(n) => n,
        Test::Generate(n) => n.saturating_add(1),
    })
}

/// Runs `test` at `depth` `repetitions` times after one untimed warm-up run.
pub fn measure(
    model: &Gemma4,
    test: Test,
    depth: usize,
    decode: DecodePath,
    repetitions: usize,
    seed: u64,
) -> Result<Measurement> {
    let mut rng = StdRng::seed_from_u64(seed);
    let vocab = model.config().vocab_size as u32;
    let mut random_ids =
        |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(3..vocab)).collect() };
    let mut samples = Vec::with_capacity(repetitions);
    let mut queued_shares = Vec::with_capacity(repetitions);
    for rep in 0..=repetitions {
        let mut session = Session::new(model, decode);
        // The greedy pick after the context: where tgN's decode starts.
        let mut picked = match test {
            Test::Generate(_) => Some(greedy(session.prefill(&[model.config().bos_token_id])?)?),
            Test::Prompt(_) => None,
        };
        if depth > 0 {
            picked = Some(greedy(session.prefill(&random_ids(depth))?)?);
        }
        let seconds = match test {
            Test::Prompt(n) => {
                let ids = random_ids(n);
                model.device().synchronize()?;
                let started = Instant::now();
                let logits = session.prefill(&ids)?;
                let queued = started.elapsed().as_secs_f64();
                greedy(logits)?;
                let seconds = started.elapsed().as_secs_f64();
                if rep > 0 {
                    queued_shares.push(queued / seconds);
                }
                seconds
            }
            Test::Generate(n) => {
                let mut next = picked.context("internal: tgN without a prompt")?;
                model.device().synchronize()?;
                let started = Instant::now();
                for _ in 0..n {
                    // The argmax stays on the device; only the chosen id comes back.
                    next = greedy(session.decode(next)?)?;
                }
                model.device().synchronize()?;
                started.elapsed().as_secs_f64()
            }
        };
        if rep > 0 {
            let tokens = match test {
                Test::Prompt(n) | Test::Generate(n) => n,
            };
            samples.push(tokens as f64 / seconds);
        }
    }
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let variance =
        samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (samples.len().max(2) - 1) as f64;
    Ok(Measurement {
        test: match depth {
            0 => test.name(),
            d => format!("{} @ d{d}", test.name()),
        },
        depth,
        tokens: match test {
            Test::Prompt(n) | Test::Generate(n) => n,
        },
        repetitions,
        tokens_per_s_mean: mean,
        tokens_per_s_stddev: variance.sqrt(),
        samples_tokens_per_s: samples,
        host_queued_share: (!queued_shares.is_empty())
            .then(|| queued_shares.iter().sum::<f64>() / queued_shares.len() as f64),
    })
}
