//! Golden files (`g4-golden/1`) made by the reference implementation, and the token-exact
//! check of g4 against them.

use crate::model::session::{DecodePath, Session};
use crate::model::Gemma4;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const FORMAT: &str = "g4-golden/1";

#[derive(Clone, Debug, Deserialize)]
pub struct GoldenFile {
    pub format: String,
    /// Checkpoint directory, relative to the golden file.
    pub model: String,
    pub reference: Reference,
    pub cases: Vec<Case>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Reference {
    pub implementation: String,
    pub version: String,
    pub dtype: String,
    #[serde(default)]
    pub attention: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    pub name: String,
    pub prompt_ids: Vec<u32>,
    pub expected_ids: Vec<u32>,
    /// Per generated step, the reference's top-k `[id, logprob]`.
    #[serde(default)]
    pub top_logprobs: Option<Vec<Vec<(u32, f64)>>>,
}

impl GoldenFile {
    pub fn load(path: &Path) -> Result<GoldenFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let golden: GoldenFile = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a {FORMAT} golden file", path.display()))?;
        if golden.format != FORMAT {
            bail!(
                "{}: format is '{}', expected '{FORMAT}'",
                path.display(),
                golden.format
            );
        }
        if golden.cases.is_empty() {
            bail!("{}: has no cases", path.display());
        }
        for case in &golden.cases {
            if case
                .top_logprobs
                .as_ref()
                .is_some_and(|t| t.len() != case.expected_ids.len())
            {
                bail!(
                    "{}: case '{}' records top logprobs for {} steps but expects {} tokens",
                    path.display(),
                    case.name,
                    case.top_logprobs.as_ref().map_or(0, Vec::len),
                    case.expected_ids.len()
                );
            }
            if case.prompt_ids.is_empty() || case.expected_ids.is_empty() {
                bail!(
                    "{}: case '{}' has an empty prompt or expectation",
                    path.display(),
                    case.name
                );
            }
        }
        Ok(golden)
    }

    /// Fails when a case names a token the model has no logit for.
    pub fn check_vocab(&self, path: &Path, vocab_size: usize) -> Result<()> {
        for case in &self.cases {
            let mut ids = case.prompt_ids.iter().chain(&case.expected_ids);
            if let Some(&id) = ids.find(|&&id| id as usize >= vocab_size) {
                bail!(
                    "{}: case '{}' has token id {id}, but the model's vocab_size is {vocab_size}",
                    path.display(),
                    case.name
                );
            }
        }
        Ok(())
    }

    /// The checkpoint directory this golden refers to.
    pub fn model_dir(&self, golden_path: &Path) -> PathBuf {
        golden_path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&self.model)
    }
}

/// Golden files named on the command line: files as given, directories searched recursively for
/// `*.json` files that declare the golden format.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for path in paths {
        if path.is_file() {
            found.push(path.clone());
        } else if path.is_dir() {
            collect_dir(path, &mut found)?;
        } else {
            bail!("{}: no such golden file or directory", path.display());
        }
    }
    found.sort();
    found.dedup();
    if found.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        bail!("no golden files found in {}", names.join(", "));
    }
    Ok(found)
}

fn collect_dir(dir: &Path, found: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            collect_dir(&path, found)?;
        } else if is_golden_candidate(&path) {
            found.push(path);
        }
    }
    Ok(())
}

/// A `golden.json` is always a golden, so that one that no longer parses fails loudly instead
/// of disappearing from the run; other `*.json` files are goldens when they declare the format
/// (checkpoints hold config.json, tokenizer.json and other JSON files).
fn is_golden_candidate(path: &Path) -> bool {
    if path.file_name().is_some_and(|n| n == "golden.json") {
        return true;
    }
    path.extension().is_some_and(|e| e == "json")
        && std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| {
                v.get("format")
                    .and_then(|f| f.as_str())
                    .map(|f| f.starts_with("g4-golden"))
            })
            .unwrap_or(false)
}

/// Where g4 first left the reference's path, and how close it was.
#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    pub step: usize,
    pub got: u32,
    pub expected: u32,
    /// Rank of the expected token among g4's logits (1 = g4's own choice).
    pub expected_rank_in_g4: usize,
    /// g4's logprob of its own token minus its logprob of the expected one.
    pub margin: f64,
    /// Rank of g4's token in the reference's recorded top-k, when it is there.
    pub got_rank_in_reference: Option<usize>,
    /// Reference's top-1 / top-2 logprob gap at this step, when recorded.
    pub reference_margin: Option<f64>,
}

impl Divergence {
    /// A near-tie: each side's token is the other's runner-up by a small margin — numerical
    /// noise between two correct implementations rather than a broken op.
    pub fn is_near_tie(&self) -> bool {
        self.expected_rank_in_g4 == 2 && self.got_rank_in_reference == Some(2) && self.margin < 0.05
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub total: usize,
    /// Steps before the first divergence: what free-running greedy decoding reproduces.
    pub matched: usize,
    /// Steps (teacher-forced on the reference's tokens) where g4's top-1 is the reference's.
    pub top1_agreement: usize,
    /// The other teacher-forced steps, so that a reader can see how close the reference's own
    /// top two were at each one (a near-tie flips on any rounding).
    pub disagreements: Vec<usize>,
    pub divergence: Option<Divergence>,
    pub generated_ids: Vec<u32>,
    /// Largest |g4 − reference| log-probability over the reference's recorded top-k at the
    /// steps up to and including the first divergence: the drift that flips a token.
    pub max_logprob_delta: Option<f64>,
}

impl CaseResult {
    pub fn token_exact(&self) -> bool {
        self.matched == self.total
    }
}

/// Runs one case: prefills the prompt (in chunks of `prefill_chunk` tokens when given, which
/// exercises attention after a non-empty cache), then decodes with the KV cache, feeding the
/// reference's tokens. Until the first mismatch that is exactly free-running greedy decoding;
/// after it, each step still measures top-1 agreement.
pub fn run_case(
    model: &Gemma4,
    case: &Case,
    prefill_chunk: Option<usize>,
    decode: DecodePath,
) -> Result<CaseResult> {
    let mut session = Session::new(model, decode);
    let chunk = prefill_chunk.unwrap_or(case.prompt_ids.len()).max(1);
    let parts: Vec<&[u32]> = case.prompt_ids.chunks(chunk).collect();
    let (last, first) = parts.split_last().context("empty prompt")?;
    for part in first {
        session.prefill(part)?;
    }
    let mut logits = session.prefill(last)?;
    let mut result = CaseResult {
        name: case.name.clone(),
        total: case.expected_ids.len(),
        matched: 0,
        top1_agreement: 0,
        disagreements: Vec::new(),
        divergence: None,
        generated_ids: Vec::new(),
        max_logprob_delta: None,
    };
    for (step, &expected) in case.expected_ids.iter().enumerate() {
        let got = crate::model::sampling::greedy_checked(logits)
            .with_context(|| format!("case '{}', step {step}", case.name))?;
        if result.divergence.is_none() {
            result.generated_ids.push(got);
            if let Some(reference) = case.top_logprobs.as_ref().and_then(|t| t.get(step)) {
                let ours = crate::model::sampling::log_probs(logits)?;
                let delta = reference
                    .iter()
                    .filter_map(|&(id, lp)| ours.get(id as usize).map(|&o| (o as f64 - lp).abs()))
                    .fold(0.0, f64::max);
                result.max_logprob_delta = Some(result.max_logprob_delta.unwrap_or(0.0).max(delta));
            }
        }
        if got == expected {
            result.top1_agreement += 1;
            if result.divergence.is_none() {
                result.matched += 1;
            }
        } else {
            result.disagreements.push(step);
            if result.divergence.is_none() {
                result.divergence = Some(diagnose(logits, step, got, expected, case)?);
            }
        }
        if step + 1 < case.expected_ids.len() {
            logits = session.decode(expected)?;
        }
    }
    Ok(result)
}

fn diagnose(
    logits: &candle_core::Tensor,
    step: usize,
    got: u32,
    expected: u32,
    case: &Case,
) -> Result<Divergence> {
    let values = logits.to_vec1::<f32>()?;
    let max = values.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_sum = values
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    let logprob = |id: u32| values[id as usize] as f64 - log_sum;
    let expected_value = values[expected as usize];
    let expected_rank_in_g4 = 1 + values.iter().filter(|&&v| v > expected_value).count();
    let reference_step = case.top_logprobs.as_ref().and_then(|t| t.get(step));
    Ok(Divergence {
        step,
        got,
        expected,
        expected_rank_in_g4,
        margin: logprob(got) - logprob(expected),
        got_rank_in_reference: reference_step
            .and_then(|top| top.iter().position(|&(id, _)| id == got).map(|r| r + 1)),
        reference_margin: reference_step
            .and_then(|top| (top.len() >= 2).then(|| top[0].1 - top[1].1)),
    })
}
