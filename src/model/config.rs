//! Gemma-4 text configuration: both checkpoint layouts (flat `gemma4_text` or nested under
//! `text_config`), both config eras (flat `global_head_dim` / `num_global_key_value_heads`, or
//! `per_layer_config`), every field of GEMMA4_TEXT.md §1 with its class default, and the
//! per-layer quantities derived from them (§1.4).

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Sliding,
    Full,
}

/// Where a layer's keys and values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSource {
    /// The layer projects its own K/V and owns a cache.
    Own,
    /// A KV-consumer layer: it reads the K/V its producer published in the same forward call.
    SharedFrom(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    pub kind: LayerKind,
    pub head_dim: usize,
    pub kv_heads: usize,
    /// Full layers of k_eq_v models have no `v_proj`: V is the raw K projection.
    pub k_eq_v: bool,
    pub kv_source: KvSource,
    pub mlp_width: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    pub theta: f64,
    /// `proportional` RoPE divides the exponent by the whole head dim and zero-pads the
    /// frequencies past `partial_rotary_factor`; `default` rotates every pair.
    pub proportional: bool,
    pub partial_rotary_factor: f64,
    pub factor: f64,
}

impl RopeSpec {
    /// The inverse frequencies for a head of `head_dim`, `head_dim / 2` of them, in f32 as the
    /// reference computes them.
    pub fn inv_freq(&self, head_dim: usize) -> Vec<f32> {
        let half = head_dim / 2;
        // The reference's `default` RoPE ignores partial_rotary_factor and factor.
        let (rotated, factor) = if self.proportional {
            (
                (self.partial_rotary_factor * head_dim as f64 / 2.0).floor() as usize,
                self.factor as f32,
            )
        } else {
            (half, 1.0)
        };
        let theta = self.theta as f32;
        (0..half)
            .map(|k| {
                if k < rotated {
                    // The exponent divides by the whole head dim, not by 2·rotated.
                    let exponent = (2 * k) as f32 / head_dim as f32;
                    1.0 / theta.powf(exponent) / factor
                } else {
                    0.0
                }
            })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PleSpec {
    /// `hidden_size_per_layer_input` (Dp).
    pub width: usize,
    /// `vocab_size_per_layer_input`.
    pub vocab_size: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MoeSpec {
    pub num_experts: usize,
    pub top_k: usize,
    pub expert_width: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointLayout {
    /// `Gemma4ForCausalLM`: text fields at top level, tensors under `model.`.
    TextOnly,
    /// `Gemma4ForConditionalGeneration`: text fields under `text_config`, tensors under
    /// `model.language_model.`.
    Multimodal,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub layout: CheckpointLayout,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub rms_norm_eps: f64,
    pub sliding_window: usize,
    pub max_position_embeddings: usize,
    pub final_logit_softcapping: Option<f64>,
    pub tie_word_embeddings: bool,
    pub rope_sliding: RopeSpec,
    pub rope_full: RopeSpec,
    pub ple: Option<PleSpec>,
    pub moe: Option<MoeSpec>,
    pub layers: Vec<LayerSpec>,
    pub pad_token_id: u32,
    pub bos_token_id: u32,
    pub eos_token_ids: Vec<u32>,
    /// What an FP8 checkpoint does to a quantised projection's input.
    pub fp8_activations: Fp8Activations,
}

/// The input of an FP8 projection: kept as it is (weight-only FP8, "W8A16"), or quantised per
/// token to e4m3 on the fly (compressed-tensors' FP8_DYNAMIC scheme, "W8A8"): each row scaled by
/// its largest |x| / 448, rounded to e4m3 and scaled back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fp8Activations {
    #[default]
    AsIs,
    DynamicPerToken,
}

impl Config {
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not valid JSON", path.display()))?;
        Config::from_json(&value).with_context(|| format!("{}", path.display()))
    }

    pub fn from_json(root: &Value) -> Result<Config> {
        let root = root.as_object().context("config must be a JSON object")?;
        let (text, layout) = match root.get("text_config") {
            Some(Value::Object(text)) => (text, CheckpointLayout::Multimodal),
            Some(other) if !other.is_null() => bail!("text_config must be an object"),
            _ => (root, CheckpointLayout::TextOnly),
        };
        let fields = Fields(text);
        check_model_type(text)?;
        let fp8_activations = check_quantization(
            root.get("quantization_config")
                .or_else(|| text.get("quantization_config")),
        )?;

        let hidden_size = fields.usize_or("hidden_size", 2304)?;
        let num_layers = fields.usize_or("num_hidden_layers", 30)?;
        let num_attention_heads = fields.usize_or("num_attention_heads", 8)?;
        let intermediate_size = fields.usize_or("intermediate_size", 9216)?;
        let vocab_size = fields.usize_or("vocab_size", 262144)?;
        for (name, value) in [
            ("hidden_size", hidden_size),
            ("num_hidden_layers", num_layers),
            ("num_attention_heads", num_attention_heads),
            ("intermediate_size", intermediate_size),
            ("vocab_size", vocab_size),
        ] {
            if value == 0 {
                bail!("{name} must be positive");
            }
        }

        let activation = fields.string_or("hidden_activation", "gelu_pytorch_tanh")?;
        if !matches!(activation.as_str(), "gelu_pytorch_tanh" | "gelu_tanh") {
            bail!("hidden_activation '{activation}' is not supported (Gemma-4 uses gelu_pytorch_tanh)");
        }
        if fields.bool_or("attention_bias", false)? {
            bail!("attention_bias = true is not supported: Gemma-4 has no attention biases");
        }
        // "vision" only affects image blocks; "all" would make the text stack bidirectional.
        if text
            .get("use_bidirectional_attention")
            .and_then(Value::as_str)
            == Some("all")
        {
            bail!("use_bidirectional_attention = \"all\" is not supported for text generation");
        }

        let layer_kinds = layer_kinds(&fields, num_layers)?;
        let (rope_sliding, rope_full) = rope_specs(&fields)?;
        let ple = match text.get("hidden_size_per_layer_input") {
            None => Some(256),
            Some(Value::Null) => None,
            Some(_) => {
                Some(fields.usize_or("hidden_size_per_layer_input", 256)?).filter(|&w| w > 0)
            }
        }
        .map(|width| -> Result<PleSpec> {
            Ok(PleSpec {
                width,
                vocab_size: fields.usize_or("vocab_size_per_layer_input", 262144)?,
            })
        })
        .transpose()?;

        let moe = if fields.bool_or("enable_moe_block", false)? {
            let spec = MoeSpec {
                num_experts: fields.required_usize("num_experts", "enable_moe_block is true")?,
                top_k: fields.required_usize("top_k_experts", "enable_moe_block is true")?,
                expert_width: fields
                    .required_usize("moe_intermediate_size", "enable_moe_block is true")?,
            };
            if spec.top_k == 0 || spec.top_k > spec.num_experts {
                bail!(
                    "top_k_experts = {} must be in 1..={} (num_experts)",
                    spec.top_k,
                    spec.num_experts
                );
            }
            Some(spec)
        } else {
            None
        };

        let layers = layer_specs(
            &fields,
            &layer_kinds,
            num_attention_heads,
            intermediate_size,
        )?;
        let max_position_embeddings = fields.usize_or("max_position_embeddings", 131072)?;
        if max_position_embeddings == 0 {
            bail!("max_position_embeddings must be positive");
        }
        // A window at least as long as the context hides nothing: the ring never needs more.
        let sliding_window = fields
            .usize_or("sliding_window", 512)?
            .min(max_position_embeddings);
        if sliding_window == 0 {
            bail!("sliding_window must be positive");
        }
        let rms_norm_eps = fields.f64_or("rms_norm_eps", 1e-6)?;
        if rms_norm_eps <= 0.0 {
            bail!("rms_norm_eps = {rms_norm_eps} must be positive");
        }
        let final_logit_softcapping = fields.optional_f64("final_logit_softcapping")?;
        if final_logit_softcapping.is_some_and(|c| c <= 0.0) {
            bail!("final_logit_softcapping must be positive (or null for none)");
        }

        // Token ids: the multimodal wrapper carries eos at top level (the -it models list 1 and 106).
        let ids = |name: &str, default: u32| -> Result<Vec<u32>> {
            let value = text
                .get(name)
                .filter(|v| !v.is_null())
                .or_else(|| root.get(name).filter(|v| !v.is_null()));
            token_ids(name, value, default)
        };
        let mut eos_token_ids = token_ids(
            "eos_token_id",
            root.get("eos_token_id").filter(|v| !v.is_null()),
            1,
        )?;
        for id in ids("eos_token_id", 1)? {
            if !eos_token_ids.contains(&id) {
                eos_token_ids.push(id);
            }
        }

        Ok(Config {
            layout,
            vocab_size,
            hidden_size,
            intermediate_size,
            num_attention_heads,
            rms_norm_eps,
            sliding_window,
            max_position_embeddings,
            final_logit_softcapping,
            tie_word_embeddings: match root.get("tie_word_embeddings").filter(|v| !v.is_null()) {
                Some(_) => Fields(root).bool_or("tie_word_embeddings", true)?,
                None => fields.bool_or("tie_word_embeddings", true)?,
            },
            rope_sliding,
            rope_full,
            ple,
            moe,
            layers,
            pad_token_id: ids("pad_token_id", 0)?[0],
            bos_token_id: ids("bos_token_id", 2)?[0],
            eos_token_ids,
            fp8_activations,
        })
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn rope(&self, kind: LayerKind) -> &RopeSpec {
        match kind {
            LayerKind::Sliding => &self.rope_sliding,
            LayerKind::Full => &self.rope_full,
        }
    }
}

/// g4 reads compressed-tensors FP8: e4m3 weights (8-bit floats) with one scale per output row,
/// static and symmetric, and inputs either kept or quantised per token to e4m3 on the fly
/// (FP8_DYNAMIC). Any other scheme would load as garbage, so it is refused by name.
fn check_quantization(config: Option<&Value>) -> Result<Fp8Activations> {
    let Some(config) = config.filter(|v| !v.is_null()) else {
        return Ok(Fp8Activations::AsIs);
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    match text(config.get("quant_method")).as_deref() {
        Some("compressed-tensors") => {}
        Some(other) => bail!(
            "quantization_config.quant_method '{other}' is not supported (g4 reads compressed-tensors FP8 checkpoints)"
        ),
        None => bail!("quantization_config has no quant_method"),
    }
    if let Some(format) = text(config.get("format")) {
        if format != "float-quantized" && format != "naive-quantized" {
            bail!("quantization_config.format '{format}' is not supported (g4 reads float-quantized FP8)");
        }
    }
    let groups = config
        .get("config_groups")
        .and_then(Value::as_object)
        .filter(|g| !g.is_empty())
        .context("quantization_config has no config_groups")?;
    for (group, spec) in groups {
        let at = format!("quantization_config.config_groups.{group}.weights");
        let weights = spec
            .get("weights")
            .and_then(Value::as_object)
            .with_context(|| format!("{at} is missing"))?;
        let expect = |key: &str, want: &Value| -> Result<()> {
            match weights.get(key) {
                Some(v) if v == want => Ok(()),
                Some(v) => bail!(
                    "{at}.{key} = {v} is not supported (g4 reads FP8 e4m3 with {key} = {want})"
                ),
                None => Ok(()),
            }
        };
        expect("num_bits", &Value::from(8))?;
        expect("type", &Value::from("float"))?;
        expect("strategy", &Value::from("channel"))?;
        expect("symmetric", &Value::from(true))?;
        expect("dynamic", &Value::from(false))?;
        if weights.get("group_size").is_some_and(|g| !g.is_null()) {
            bail!("{at}.group_size is set: block-wise scales are not supported (g4 reads one scale per row)");
        }
    }
    let mut schemes = groups.iter().map(|(group, spec)| {
        match spec.get("input_activations").filter(|a| !a.is_null()) {
            None => Ok(Fp8Activations::AsIs),
            Some(activations) => dynamic_per_token(group, activations),
        }
    });
    let first = schemes.next().unwrap_or(Ok(Fp8Activations::AsIs))?;
    for scheme in schemes {
        if scheme? != first {
            bail!("quantization_config: groups that quantise their inputs beside groups that do not are not supported");
        }
    }
    Ok(first)
}

/// FP8_DYNAMIC's input activations: e4m3, one scale per token, computed on the fly.
fn dynamic_per_token(group: &str, activations: &Value) -> Result<Fp8Activations> {
    let at = format!("quantization_config.config_groups.{group}.input_activations");
    let want = [
        ("num_bits", Value::from(8)),
        ("type", Value::from("float")),
        ("strategy", Value::from("token")),
        ("dynamic", Value::from(true)),
        ("symmetric", Value::from(true)),
    ];
    for (key, value) in want {
        match activations.get(key) {
            Some(v) if *v == value => {}
            Some(v) => bail!(
                "{at}.{key} = {v} is not supported (g4 quantises inputs dynamically per token to e4m3: {key} = {value})"
            ),
            None if key == "dynamic" || key == "strategy" => {
                bail!("{at} has no {key}: g4 quantises inputs dynamically per token only")
            }
            None => {}
        }
    }
    Ok(Fp8Activations::DynamicPerToken)
}

fn check_model_type(text: &Map<String, Value>) -> Result<()> {
    match text.get("model_type").and_then(Value::as_str) {
        None | Some("gemma4_text") | Some("gemma4") => Ok(()),
        Some(other) => {
            bail!("model_type '{other}' is not a Gemma-4 text model (expected gemma4_text)")
        }
    }
}

/// `layer_types` when given; otherwise every sixth layer is full. The last layer is always full.
fn layer_kinds(fields: &Fields, num_layers: usize) -> Result<Vec<LayerKind>> {
    let mut kinds = match fields.0.get("layer_types").filter(|v| !v.is_null()) {
        Some(Value::Array(items)) => {
            if items.len() != num_layers {
                bail!(
                    "layer_types has {} entries but num_hidden_layers is {num_layers}",
                    items.len()
                );
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| match item.as_str() {
                    Some("sliding_attention") => Ok(LayerKind::Sliding),
                    Some("full_attention") => Ok(LayerKind::Full),
                    _ => bail!("layer_types[{i}] = {item}: expected \"sliding_attention\" or \"full_attention\""),
                })
                .collect::<Result<Vec<_>>>()?
        }
        Some(other) => bail!("layer_types must be a list, got {other}"),
        None => (0..num_layers)
            .map(|i| {
                if (i + 1) % 6 == 0 {
                    LayerKind::Full
                } else {
                    LayerKind::Sliding
                }
            })
            .collect(),
    };
    if let Some(last) = kinds.last_mut() {
        *last = LayerKind::Full;
    }
    Ok(kinds)
}

fn rope_specs(fields: &Fields) -> Result<(RopeSpec, RopeSpec)> {
    let default_sliding = RopeSpec {
        theta: 10_000.0,
        proportional: false,
        partial_rotary_factor: 1.0,
        factor: 1.0,
    };
    let default_full = RopeSpec {
        theta: 1_000_000.0,
        proportional: true,
        partial_rotary_factor: 0.25,
        factor: 1.0,
    };
    let Some(params) = fields.0.get("rope_parameters").filter(|v| !v.is_null()) else {
        return Ok((default_sliding, default_full));
    };
    let params = params
        .as_object()
        .context("rope_parameters must be an object keyed by layer type")?;
    let parse = |key: &str, default: RopeSpec| -> Result<RopeSpec> {
        let Some(entry) = params.get(key) else {
            return Ok(default);
        };
        let entry = entry
            .as_object()
            .with_context(|| format!("rope_parameters.{key} must be an object"))?;
        let f = Fields(entry);
        let default_type = if default.proportional {
            "proportional"
        } else {
            "default"
        };
        let proportional = match f.string_or("rope_type", default_type)?.as_str() {
            "default" => false,
            "proportional" => true,
            other => bail!("rope_parameters.{key}.rope_type '{other}' is not supported (expected default or proportional)"),
        };
        let spec = RopeSpec {
            theta: f
                .f64_or("rope_theta", default.theta)
                .with_context(|| format!("rope_parameters.{key}"))?,
            proportional,
            partial_rotary_factor: f
                .f64_or("partial_rotary_factor", 1.0)
                .with_context(|| format!("rope_parameters.{key}"))?,
            factor: f
                .f64_or("factor", 1.0)
                .with_context(|| format!("rope_parameters.{key}"))?,
        };
        if spec.theta <= 0.0 || spec.factor <= 0.0 {
            bail!("rope_parameters.{key}: rope_theta and factor must be positive");
        }
        if !(spec.partial_rotary_factor > 0.0 && spec.partial_rotary_factor <= 1.0) {
            bail!("rope_parameters.{key}.partial_rotary_factor must be in (0, 1]");
        }
        Ok(spec)
    };
    Ok((
        parse("sliding_attention", default_sliding)?,
        parse("full_attention", default_full)?,
    ))
}

fn layer_specs(
    fields: &Fields,
    kinds: &[LayerKind],
    num_attention_heads: usize,
    intermediate_size: usize,
) -> Result<Vec<LayerSpec>> {
    let num_layers = kinds.len();
    let head_dim = fields.usize_or("head_dim", 256)?;
    let kv_heads = fields.usize_or("num_key_value_heads", 4)?;
    let k_eq_v = fields.bool_or("attention_k_eq_v", false)?;
    // With `per_layer_config` (≥5.15 era) the flat global fields are ignored, as the reference
    // ignores them: full layers take exactly what their entry overrides.
    let overrides = per_layer_overrides(fields, num_layers)?;
    let (global_head_dim, global_kv_heads) = match &overrides {
        Some(_) => (head_dim, kv_heads),
        None => (
            fields.usize_or("global_head_dim", 512)?,
            match fields.optional_usize("num_global_key_value_heads")? {
                Some(n) if k_eq_v => n,
                _ => kv_heads,
            },
        ),
    };
    let overrides = overrides.unwrap_or_default();
    let shared = fields.usize_or("num_kv_shared_layers", 0)?;
    if shared >= num_layers {
        bail!("num_kv_shared_layers = {shared} leaves no layer to produce K/V (num_hidden_layers = {num_layers})");
    }
    let first_consumer = num_layers - shared;
    let double_wide = fields.bool_or("use_double_wide_mlp", false)?;

    (0..num_layers)
        .map(|i| {
            let kind = kinds[i];
            let full = kind == LayerKind::Full;
            let (mut hd, mut kvh) = if full { (global_head_dim, global_kv_heads) } else { (head_dim, kv_heads) };
            if let Some(o) = overrides.get(&i) {
                hd = o.head_dim.unwrap_or(hd);
                kvh = o.kv_heads.unwrap_or(kvh);
            }
            if hd == 0 || hd % 2 != 0 {
                bail!("layer {i}: head_dim {hd} must be a positive even number");
            }
            if kvh == 0 || !num_attention_heads.is_multiple_of(kvh) {
                bail!("layer {i}: num_attention_heads {num_attention_heads} is not a multiple of its {kvh} key/value heads");
            }
            let consumer = shared > 0 && i >= first_consumer;
            let kv_source = if consumer {
                let producer = (0..first_consumer).rev().find(|&j| kinds[j] == kind).with_context(|| {
                    format!("layer {i} shares K/V but no earlier non-shared layer has its type {kind:?}")
                })?;
                KvSource::SharedFrom(producer)
            } else {
                KvSource::Own
            };
            Ok(LayerSpec {
                kind,
                head_dim: hd,
                kv_heads: kvh,
                k_eq_v: full && k_eq_v,
                kv_source,
                mlp_width: intermediate_size * if double_wide && consumer { 2 } else { 1 },
            })
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|specs| {
            // A consumer attends with its producer's K/V, so their shapes must agree.
            for (i, spec) in specs.iter().enumerate() {
                if let KvSource::SharedFrom(p) = spec.kv_source {
                    if (specs[p].head_dim, specs[p].kv_heads) != (spec.head_dim, spec.kv_heads) {
                        bail!("layer {i} shares K/V with layer {p} but their head_dim/kv heads differ");
                    }
                }
            }
            Ok(specs)
        })
}

#[derive(Default)]
struct LayerOverride {
    head_dim: Option<usize>,
    kv_heads: Option<usize>,
}

/// The ≥5.15 `per_layer_config`: `{"<layer index>": {"head_dim": g, "num_key_value_heads": k}}`.
fn per_layer_overrides(
    fields: &Fields,
    num_layers: usize,
) -> Result<Option<std::collections::HashMap<usize, LayerOverride>>> {
    let mut out = std::collections::HashMap::new();
    let Some(map) = fields.0.get("per_layer_config").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let map = map
        .as_object()
        .context("per_layer_config must be an object keyed by layer index")?;
    for (key, entry) in map {
        let index: usize = key
            .parse()
            .ok()
            .filter(|&i| i < num_layers)
            .with_context(|| {
                format!("per_layer_config key '{key}' is not a layer index below {num_layers}")
            })?;
        let entry = entry
            .as_object()
            .with_context(|| format!("per_layer_config.{key} must be an object"))?;
        let f = Fields(entry);
        out.insert(
            index,
            LayerOverride {
                head_dim: f
                    .optional_usize("head_dim")
                    .with_context(|| format!("per_layer_config.{key}"))?,
                kv_heads: f
                    .optional_usize("num_key_value_heads")
                    .with_context(|| format!("per_layer_config.{key}"))?,
            },
        );
    }
    Ok(Some(out))
}

fn token_ids(name: &str, value: Option<&Value>, default: u32) -> Result<Vec<u32>> {
    let as_id = |v: &Value| -> Result<u32> {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .with_context(|| format!("{name} must be a token id, got {v}"))
    };
    match value {
        None => Ok(vec![default]),
        Some(Value::Array(items)) if !items.is_empty() => items.iter().map(as_id).collect(),
        Some(v) => Ok(vec![as_id(v)?]),
    }
}

/// Upper bounds of config sizes, far above every Gemma-4 model and far below what would
/// exhaust memory before a weight is read (a hostile or corrupt config.json must fail cleanly).
const SIZE_LIMITS: [(&str, usize); 11] = [
    ("num_hidden_layers", 1024),
    ("num_attention_heads", 1024),
    ("num_key_value_heads", 1024),
    ("num_global_key_value_heads", 1024),
    ("num_kv_shared_layers", 1024),
    ("head_dim", 8192),
    ("global_head_dim", 8192),
    ("num_experts", 4096),
    ("top_k_experts", 4096),
    ("max_position_embeddings", 1 << 21),
    // Clamped to the context instead: any longer window means "no window".
    ("sliding_window", usize::MAX),
];
const DEFAULT_SIZE_LIMIT: usize = 1 << 24;

/// Typed access to config fields with the field named in every error.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn present(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// A size or count, bounded (`SIZE_LIMITS`) before anything is allocated from it.
    fn optional_usize(&self, name: &str) -> Result<Option<usize>> {
        let Some(v) = self.present(name) else {
            return Ok(None);
        };
        let n = v
            .as_u64()
            .with_context(|| format!("{name} must be a non-negative integer, got {v}"))?;
        let limit = SIZE_LIMITS
            .iter()
            .find(|(field, _)| *field == name)
            .map_or(DEFAULT_SIZE_LIMIT, |&(_, limit)| limit);
        if n > limit as u64 {
            bail!("{name} = {n} is beyond any Gemma-4 model (g4 accepts at most {limit})");
        }
        Ok(Some(n as usize))
    }

    fn usize_or(&self, name: &str, default: usize) -> Result<usize> {
        Ok(self.optional_usize(name)?.unwrap_or(default))
    }

    fn required_usize(&self, name: &str, why: &str) -> Result<usize> {
        self.optional_usize(name)?
            .with_context(|| format!("{name} is required when {why}"))
    }

    fn optional_f64(&self, name: &str) -> Result<Option<f64>> {
        self.present(name)
            .map(|v| {
                v.as_f64()
                    .with_context(|| format!("{name} must be a number, got {v}"))
            })
            .transpose()
    }

    fn f64_or(&self, name: &str, default: f64) -> Result<f64> {
        Ok(self.optional_f64(name)?.unwrap_or(default))
    }

    fn bool_or(&self, name: &str, default: bool) -> Result<bool> {
        self.present(name)
            .map(|v| {
                v.as_bool()
                    .with_context(|| format!("{name} must be true or false, got {v}"))
            })
            .transpose()
            .map(|b| b.unwrap_or(default))
    }

    fn optional_string(&self, name: &str) -> Result<Option<String>> {
        self.present(name)
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .with_context(|| format!("{name} must be a string, got {v}"))
            })
            .transpose()
    }

    fn string_or(&self, name: &str, default: &str) -> Result<String> {
        Ok(self
            .optional_string(name)?
            .unwrap_or_else(|| default.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(extra: Value) -> Value {
        let mut base = json!({
            "model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 6,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "intermediate_size": 128, "vocab_size": 512,
        });
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        base
    }

    fn parse(v: Value) -> Config {
        Config::from_json(&v).unwrap()
    }

    fn error(v: Value) -> String {
        format!("{:#}", Config::from_json(&v).unwrap_err())
    }

    #[test]
    fn hostile_sizes_are_refused_before_anything_is_allocated() {
        for (field, value, needle) in [
            (
                "num_hidden_layers",
                json!(u64::MAX),
                "num_hidden_layers = 18446744073709551615 is beyond",
            ),
            (
                "num_hidden_layers",
                json!(1_000_000_000u64),
                "g4 accepts at most 1024",
            ),
            (
                "hidden_size",
                json!(1u64 << 40),
                "hidden_size = 1099511627776 is beyond",
            ),
            (
                "max_position_embeddings",
                json!(1u64 << 40),
                "max_position_embeddings",
            ),
            (
                "rms_norm_eps",
                json!(-1.0),
                "rms_norm_eps = -1 must be positive",
            ),
            (
                "final_logit_softcapping",
                json!(0.0),
                "final_logit_softcapping must be positive",
            ),
            (
                "per_layer_config",
                json!({"900": {"head_dim": 32}}),
                "not a layer index below 6",
            ),
        ] {
            let e = error(text(json!({ field: value })));
            assert!(e.contains(needle), "{field}: {e}");
        }
    }

    #[test]
    fn quantisation_schemes_other_than_fp8_per_row_are_refused_by_name() {
        let fp8 = |weights: Value| {
            json!({"quant_method": "compressed-tensors", "format": "float-quantized",
                   "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}})
        };
        let good = json!({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false});
        let weight_only =
            Config::from_json(&text(json!({"quantization_config": fp8(good.clone())})));
        assert_eq!(weight_only.unwrap().fp8_activations, Fp8Activations::AsIs);
        // llm-compressor's FP8_DYNAMIC, as RedHatAI's Gemma-4 FP8-dynamic releases carry it.
        let mut fp8_dynamic = fp8(good.clone());
        fp8_dynamic["config_groups"]["group_0"]["input_activations"] = json!({
            "num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "symmetric": true,
            "group_size": null, "observer": null, "actorder": null, "block_structure": null});
        let w8a8 = Config::from_json(&text(json!({"quantization_config": fp8_dynamic})));
        assert_eq!(
            w8a8.unwrap().fp8_activations,
            Fp8Activations::DynamicPerToken
        );
        let mut cases = vec![
            (
                json!({"quant_method": "gptq"}),
                "quant_method 'gptq'".to_string(),
            ),
            (
                json!({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}}),
                "format 'pack-quantized'".to_string(),
            ),
        ];
        for (key, value) in [
            ("num_bits", json!(4)),
            ("type", json!("int")),
            ("strategy", json!("block")),
            ("symmetric", json!(false)),
        ] {
            let mut weights = good.clone();
            weights[key] = value;
            cases.push((fp8(weights), format!("weights.{key} =")));
        }
        let mut weights = good.clone();
        weights["group_size"] = json!(128);
        cases.push((fp8(weights), "block-wise scales".to_string()));
        let dynamic = json!({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "symmetric": true});
        for (key, value, needle) in [
            ("dynamic", json!(false), "input_activations.dynamic = false"),
            (
                "strategy",
                json!("tensor"),
                "input_activations.strategy = \"tensor\"",
            ),
            ("type", json!("int"), "input_activations.type = \"int\""),
            ("num_bits", json!(4), "input_activations.num_bits = 4"),
        ] {
            let mut activations = dynamic.clone();
            activations[key] = value;
            let mut quant = fp8(good.clone());
            quant["config_groups"]["group_0"]["input_activations"] = activations;
            cases.push((quant, needle.to_string()));
        }
        let mut mixed = fp8(good.clone());
        mixed["config_groups"]["group_0"]["input_activations"] = dynamic;
        mixed["config_groups"]["group_1"] =
            json!({"targets": ["Embedding"], "weights": good.clone()});
        cases.push((mixed, "beside groups that do not".to_string()));
        for (quant, needle) in cases {
            let e = error(text(json!({"quantization_config": quant})));
            assert!(e.contains(&needle), "{needle}: {e}");
        }
    }

    #[test]
    fn a_window_longer_than_the_context_is_the_context() {
        let c = parse(text(
            json!({"sliding_window": 1_000_000_000_000u64, "max_position_embeddings": 512}),
        ));
        assert_eq!(c.sliding_window, 512);
        let c = parse(text(json!({"sliding_window": u64::MAX})));
        assert_eq!(c.sliding_window, c.max_position_embeddings);
    }

    #[test]
    fn class_defaults_apply_to_missing_fields() {
        let c = parse(json!({"model_type": "gemma4_text"}));
        assert_eq!(
            (c.vocab_size, c.hidden_size, c.intermediate_size),
            (262144, 2304, 9216)
        );
        assert_eq!(
            (c.num_attention_heads, c.num_layers(), c.sliding_window),
            (8, 30, 512)
        );
        assert_eq!(c.rms_norm_eps, 1e-6);
        assert_eq!(c.final_logit_softcapping, None);
        assert_eq!(
            c.ple,
            Some(PleSpec {
                width: 256,
                vocab_size: 262144
            })
        );
        assert_eq!(c.moe, None);
        assert!(c.tie_word_embeddings);
        assert_eq!(
            (c.pad_token_id, c.bos_token_id, c.eos_token_ids.clone()),
            (0, 2, vec![1])
        );
        // Sliding layers: head_dim 256 × 4 KV heads; full layers: global_head_dim 512.
        assert_eq!((c.layers[0].head_dim, c.layers[0].kv_heads), (256, 4));
        assert_eq!(
            (c.layers[5].kind, c.layers[5].head_dim, c.layers[5].kv_heads),
            (LayerKind::Full, 512, 4)
        );
        assert!(c.rope_full.proportional && c.rope_full.partial_rotary_factor == 0.25);
        assert_eq!(c.rope_sliding.theta, 10_000.0);
    }

    #[test]
    fn absent_layer_types_give_five_to_one_and_the_last_layer_is_forced_full() {
        let c = parse(text(json!({"num_hidden_layers": 8})));
        let kinds: Vec<_> = c.layers.iter().map(|l| l.kind).collect();
        use LayerKind::{Full as F, Sliding as S};
        assert_eq!(kinds, vec![S, S, S, S, S, F, S, F]);
        let c = parse(text(json!({"layer_types": vec!["sliding_attention"; 6]})));
        assert_eq!(c.layers[5].kind, F);
    }

    #[test]
    fn flat_era_global_fields_apply_to_full_layers() {
        let c = parse(text(
            json!({"global_head_dim": 32, "num_global_key_value_heads": 1, "attention_k_eq_v": true}),
        ));
        assert_eq!(
            (
                c.layers[5].head_dim,
                c.layers[5].kv_heads,
                c.layers[5].k_eq_v
            ),
            (32, 1, true)
        );
        assert_eq!(
            (
                c.layers[0].head_dim,
                c.layers[0].kv_heads,
                c.layers[0].k_eq_v
            ),
            (16, 2, false)
        );
        // Without k_eq_v the global KV-head count does not apply.
        let c = parse(text(
            json!({"global_head_dim": 32, "num_global_key_value_heads": 1}),
        ));
        assert_eq!((c.layers[5].kv_heads, c.layers[5].k_eq_v), (2, false));
    }

    #[test]
    fn per_layer_config_era_overrides_by_layer_index() {
        let c = parse(text(json!({
            "attention_k_eq_v": true,
            "per_layer_config": {"5": {"head_dim": 32, "num_key_value_heads": 1}},
            "global_head_dim": 999,
        })));
        assert_eq!((c.layers[5].head_dim, c.layers[5].kv_heads), (32, 1));
        assert_eq!(c.layers[4].head_dim, 16);
        let err = error(text(json!({"per_layer_config": {"x": {}}})));
        assert!(err.contains("per_layer_config key 'x'"), "{err}");
    }

    #[test]
    fn both_layouts_read_the_same_text_fields() {
        let flat = parse(text(json!({"eos_token_id": 1})));
        let nested = parse(
            json!({"model_type": "gemma4", "text_config": text(json!({})), "eos_token_id": [1, 106]}),
        );
        assert_eq!(flat.layout, CheckpointLayout::TextOnly);
        assert_eq!(nested.layout, CheckpointLayout::Multimodal);
        assert_eq!(flat.layers, nested.layers);
        assert_eq!(nested.eos_token_ids, vec![1, 106]);
    }

    #[test]
    fn ple_is_disabled_by_zero_or_null_and_defaults_to_256() {
        assert_eq!(
            parse(text(json!({"hidden_size_per_layer_input": 0}))).ple,
            None
        );
        assert_eq!(
            parse(text(json!({"hidden_size_per_layer_input": null}))).ple,
            None
        );
        assert_eq!(parse(text(json!({}))).ple.unwrap().width, 256);
        assert_eq!(
            parse(text(json!({"hidden_size_per_layer_input": 8})))
                .ple
                .unwrap()
                .width,
            8
        );
    }

    #[test]
    fn kv_sharing_reads_the_last_non_shared_layer_of_the_same_type() {
        // E2B: 35 layers, full every fifth, 20 shared → sliding consumers ← 13, full ← 14.
        let kinds: Vec<&str> = (0..35)
            .map(|i| {
                if (i + 1) % 5 == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
            })
            .collect();
        let c = parse(text(json!({
            "num_hidden_layers": 35, "layer_types": kinds, "num_kv_shared_layers": 20,
            "use_double_wide_mlp": true, "num_key_value_heads": 1,
        })));
        assert_eq!(c.layers[14].kv_source, KvSource::Own);
        assert_eq!(c.layers[15].kv_source, KvSource::SharedFrom(13));
        assert_eq!(c.layers[19].kv_source, KvSource::SharedFrom(14));
        assert_eq!((c.layers[14].mlp_width, c.layers[15].mlp_width), (128, 256));
    }

    #[test]
    fn proportional_rope_divides_by_the_whole_head_and_zero_pads() {
        let c = parse(text(json!({})));
        let inv = c.rope_full.inv_freq(512);
        assert_eq!(inv.len(), 256);
        assert!(inv[64..].iter().all(|&f| f == 0.0));
        let expected = 1.0 / 1_000_000f32.powf(2.0 / 512.0);
        assert!(
            (inv[1] - expected).abs() < 1e-12,
            "{} vs {expected}",
            inv[1]
        );
        let sliding = c.rope_sliding.inv_freq(256);
        assert!(sliding.iter().all(|&f| f > 0.0));
    }

    #[test]
    fn unknown_fields_are_ignored_and_bad_values_are_named() {
        parse(text(
            json!({"some_future_field": {"x": 1}, "use_bidirectional_attention": "vision"}),
        ));
        for (bad, needle) in [
            (
                json!({"hidden_size": -1}),
                "hidden_size must be a non-negative integer",
            ),
            (json!({"hidden_size": 0}), "hidden_size must be positive"),
            (
                json!({"layer_types": ["sliding_attention"]}),
                "layer_types has 1 entries but num_hidden_layers is 6",
            ),
            (json!({"layer_types": vec!["x"; 6]}), "layer_types[0]"),
            (
                json!({"num_key_value_heads": 3}),
                "not a multiple of its 3 key/value heads",
            ),
            (
                json!({"hidden_activation": "silu"}),
                "hidden_activation 'silu' is not supported",
            ),
            (json!({"enable_moe_block": true}), "num_experts is required"),
            (json!({"num_kv_shared_layers": 6}), "leaves no layer"),
            (json!({"model_type": "llama"}), "model_type 'llama'"),
            (
                json!({"rope_parameters": {"full_attention": {"rope_type": "yarn"}}}),
                "rope_type 'yarn'",
            ),
            (
                json!({"use_bidirectional_attention": "all"}),
                "use_bidirectional_attention",
            ),
            (
                json!({"quantization_config": {"quant_method": "gptq"}}),
                "quant_method 'gptq' is not supported",
            ),
        ] {
            let err = error(text(bad.clone()));
            assert!(err.contains(needle), "{bad}: '{err}' lacks '{needle}'");
        }
    }
}
