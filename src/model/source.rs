//! Where a model comes from: a Hugging Face checkpoint directory, or the tiny model compiled
//! into the binary (golden/kjv-tiny, trained by scripts/train_default_model.py).

use super::tokenizer::TextTokenizer;
use super::weights::Checkpoint;
use super::Config;
use anyhow::{Context, Result};
use candle_core::{DType, Device};
use serde_json::Value;
use std::path::PathBuf;

#[derive(Clone)]
pub enum ModelSource {
    Dir(PathBuf),
    Embedded,
}

mod embedded {
    pub const NAME: &str = "embedded kjv-tiny";
    pub const CONFIG: &str = include_str!("../../golden/kjv-tiny/model/config.json");
    pub const WEIGHTS: &[u8] = include_bytes!("../../golden/kjv-tiny/model/model.safetensors");
    pub const TOKENIZER: &[u8] = include_bytes!("../../golden/kjv-tiny/model/tokenizer.json");
    pub const TOKENIZER_CONFIG: &str =
        include_str!("../../golden/kjv-tiny/model/tokenizer_config.json");
    pub const CHAT_TEMPLATE: &str = include_str!("../../golden/kjv-tiny/model/chat_template.jinja");
    pub const GENERATION_CONFIG: &str =
        include_str!("../../golden/kjv-tiny/model/generation_config.json");
}

/// Defaults from generation_config.json; every field is optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationDefaults {
    pub do_sample: Option<bool>,
    pub temperature: Option<f64>,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f32>,
    pub eos_token_ids: Vec<u32>,
}

impl GenerationDefaults {
    pub fn from_json(what: &str, text: &str) -> Result<GenerationDefaults> {
        let v: Value =
            serde_json::from_str(text).with_context(|| format!("{what}: not valid JSON"))?;
        let eos_token_ids = match v.get("eos_token_id") {
            Some(Value::Array(ids)) => ids
                .iter()
                .filter_map(|i| i.as_u64().map(|i| i as u32))
                .collect(),
            Some(id) => id.as_u64().map(|i| vec![i as u32]).unwrap_or_default(),
            None => Vec::new(),
        };
        // Out-of-range values are errors naming the file and field, as the flags' are.
        let number = |field: &str| -> Result<Option<f64>> {
            match v.get(field).filter(|x| !x.is_null()) {
                None => Ok(None),
                Some(x) => {
                    let value = x
                        .as_f64()
                        .with_context(|| format!("{what}: {field} must be a number, got {x}"))?;
                    crate::model::sampling::ranges::check(field, value)
                        .map(Some)
                        .map_err(|e| anyhow::anyhow!("{what}: {field} = {e}"))
                }
            }
        };
        Ok(GenerationDefaults {
            do_sample: v.get("do_sample").and_then(Value::as_bool),
            temperature: number("temperature")?,
            top_k: v.get("top_k").and_then(Value::as_u64).map(|k| k as usize),
            top_p: number("top_p")?,
            min_p: number("min_p")?,
            repetition_penalty: number("repetition_penalty")?.map(|p| p as f32),
            eos_token_ids,
        })
    }
}

impl ModelSource {
    pub fn name(&self) -> String {
        match self {
            ModelSource::Dir(dir) => dir.display().to_string(),
            ModelSource::Embedded => embedded::NAME.to_string(),
        }
    }

    pub fn config(&self) -> Result<Config> {
        match self {
            ModelSource::Dir(dir) => {
                anyhow::ensure!(dir.is_dir(), "{}: model directory not found", dir.display());
                Config::from_file(&dir.join("config.json"))
            }
            ModelSource::Embedded => Config::from_json(&serde_json::from_str(embedded::CONFIG)?)
                .context("embedded config.json"),
        }
    }

    pub fn checkpoint(&self, device: &Device, dtype: DType) -> Result<Checkpoint> {
        match self {
            ModelSource::Dir(dir) => Checkpoint::open(dir, device, dtype),
            ModelSource::Embedded => {
                Checkpoint::embedded(embedded::NAME, embedded::WEIGHTS, device, dtype)
            }
        }
    }

    pub fn tokenizer(&self) -> Result<TextTokenizer> {
        match self {
            ModelSource::Dir(dir) => TextTokenizer::from_dir(dir),
            ModelSource::Embedded => TextTokenizer::from_parts(
                embedded::NAME,
                embedded::TOKENIZER,
                Some(embedded::TOKENIZER_CONFIG),
                Some(embedded::CHAT_TEMPLATE.to_string()),
            ),
        }
    }

    /// generation_config.json when the checkpoint has one.
    pub fn generation_defaults(&self) -> Result<GenerationDefaults> {
        match self {
            ModelSource::Dir(dir) => {
                let path = dir.join("generation_config.json");
                match std::fs::read_to_string(&path) {
                    Ok(text) => GenerationDefaults::from_json(&path.display().to_string(), &text),
                    Err(_) => Ok(GenerationDefaults::default()),
                }
            }
            ModelSource::Embedded => {
                GenerationDefaults::from_json(embedded::NAME, embedded::GENERATION_CONFIG)
            }
        }
    }
}
