//! Safetensors checkpoints: one file or sharded (`model.safetensors.index.json`), memory-mapped,
//! with the text stack found under `model.` or `model.language_model.`. Every tensor is
//! shape-checked on load and converted to the compute dtype; every failure names the file and
//! the tensor.

use anyhow::{bail, Context, Result};
use candle_core::safetensors::{MmapedSafetensors, SliceSafetensors};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Prefixes under which checkpoints keep the text decoder, most specific first.
const PREFIXES: [&str; 3] = ["model.language_model.", "model.", "language_model.model."];

/// One safetensors file: memory-mapped from disk, or compiled into the binary.
enum Source {
    Mapped(MmapedSafetensors),
    Embedded(SliceSafetensors<'static>),
}

impl Source {
    fn names(&self) -> Vec<String> {
        let views = match self {
            Source::Mapped(m) => m.tensors(),
            Source::Embedded(s) => s.tensors(),
        };
        views.into_iter().map(|(name, _)| name).collect()
    }

    fn shape(&self, name: &str) -> candle_core::Result<Vec<usize>> {
        Ok(match self {
            Source::Mapped(m) => m.get(name)?.shape().to_vec(),
            Source::Embedded(s) => s.get(name)?.shape().to_vec(),
        })
    }

    fn load(&self, name: &str) -> candle_core::Result<Tensor> {
        match self {
            Source::Mapped(m) => m.load(name, &Device::Cpu),
            Source::Embedded(s) => s.load(name, &Device::Cpu),
        }
    }
}

pub struct Checkpoint {
    files: Vec<(PathBuf, Source)>,
    /// Tensor name → index into `files`.
    location: HashMap<String, usize>,
    prefix: &'static str,
    device: Device,
    dtype: DType,
    total_bytes: u64,
    progress: Option<indicatif::ProgressBar>,
}

impl Checkpoint {
    /// Opens every safetensors file of the checkpoint in `dir` and validates their headers.
    pub fn open(dir: &Path, device: &Device, dtype: DType) -> Result<Checkpoint> {
        let mut files = Vec::new();
        let mut total_bytes = 0;
        for path in shard_paths(dir)? {
            // SAFETY: the file is mapped read-only; g4 never writes checkpoints it has open.
            let mapped = unsafe { MmapedSafetensors::new(&path) }.map_err(|e| {
                anyhow::anyhow!(
                    "{}: not a valid safetensors file: {}",
                    path.display(),
                    root_cause(&e)
                )
            })?;
            total_bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
            files.push((path, Source::Mapped(mapped)));
        }
        Checkpoint::index(
            files,
            total_bytes,
            &dir.display().to_string(),
            device,
            dtype,
        )
    }

    /// A checkpoint compiled into the binary.
    pub fn embedded(
        name: &str,
        bytes: &'static [u8],
        device: &Device,
        dtype: DType,
    ) -> Result<Checkpoint> {
        let slice = SliceSafetensors::new(bytes).map_err(|e| {
            anyhow::anyhow!(
                "embedded {name}: not a valid safetensors file: {}",
                root_cause(&e)
            )
        })?;
        let files = vec![(PathBuf::from(name), Source::Embedded(slice))];
        Checkpoint::index(files, bytes.len() as u64, name, device, dtype)
    }

    fn index(
        files: Vec<(PathBuf, Source)>,
        total_bytes: u64,
        what: &str,
        device: &Device,
        dtype: DType,
    ) -> Result<Checkpoint> {
        let mut location = HashMap::new();
        for (i, (_, source)) in files.iter().enumerate() {
            for name in source.names() {
                location.insert(name, i);
            }
        }
        let prefix = PREFIXES
            .into_iter()
            .find(|p| location.contains_key(&format!("{p}embed_tokens.weight")))
            .with_context(|| {
                format!(
                    "{what}: no embed_tokens.weight under any of the prefixes {}",
                    PREFIXES.join(", ")
                )
            })?;
        Ok(Checkpoint {
            files,
            location,
            prefix,
            device: device.clone(),
            dtype,
            total_bytes,
            progress: None,
        })
    }

    /// Reports loaded bytes to `bar` from now on.
    pub fn set_progress(&mut self, bar: indicatif::ProgressBar) {
        self.progress = Some(bar);
    }

    /// The compute dtype tensors are converted to.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Total bytes of the checkpoint's files (for progress reporting).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Whether the text decoder has a tensor `name` (relative to the decoder prefix).
    pub fn contains(&self, name: &str) -> bool {
        self.location
            .contains_key(&format!("{}{name}", self.prefix))
    }

    /// Whether the checkpoint has a tensor with this absolute name (e.g. `lm_head.weight`).
    pub fn contains_absolute(&self, name: &str) -> bool {
        self.location.contains_key(name)
    }

    /// Loads decoder tensor `name`, checks its shape, converts it to the compute dtype.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        self.absolute_tensor(&format!("{}{name}", self.prefix), shape)
    }

    /// Loads a tensor by its absolute name, checks its shape, converts it to the compute dtype.
    pub fn absolute_tensor(&self, full_name: &str, shape: &[usize]) -> Result<Tensor> {
        let Some(&file) = self.location.get(full_name) else {
            let files: Vec<String> = self.files.iter().map(|(p, _)| file_name(p)).collect();
            bail!(
                "missing tensor {full_name} (looked in {})",
                files.join(", ")
            );
        };
        let (path, source) = &self.files[file];
        let shape_found = source.shape(full_name).map_err(|e| {
            anyhow::anyhow!("{}: tensor {full_name}: {}", path.display(), root_cause(&e))
        })?;
        if shape_found != shape {
            bail!(
                "{}: tensor {full_name} has shape {:?}, expected {:?} from config.json",
                path.display(),
                shape_found,
                shape
            );
        }
        let stored = source.load(full_name).map_err(|e| {
            anyhow::anyhow!("{}: tensor {full_name}: {}", path.display(), root_cause(&e))
        })?;
        if let Some(bar) = &self.progress {
            bar.inc((stored.elem_count() * stored.dtype().size_in_bytes()) as u64);
        }
        let moved = |t: Tensor| {
            t.to_device(&self.device).map_err(|e| {
                anyhow::anyhow!("tensor {full_name}: cannot move to {:?}: {e}", self.device)
            })
        };
        match stored.dtype() {
            DType::F32 | DType::BF16 | DType::F16 => moved(stored)?
                .to_dtype(self.dtype)
                .map_err(|e| anyhow::anyhow!("tensor {full_name}: {e}")),
            // compressed-tensors FP8: e4m3 weights with one f32 scale per output row, dequantised
            // once here (on the device, through the registry) into the compute dtype.
            DType::F8E4M3 => {
                let scale_name = format!("{full_name}_scale");
                if !self.location.contains_key(&scale_name) {
                    bail!("{}: FP8 tensor {full_name} has no {scale_name}", path.display());
                }
                let rows = shape.first().copied().unwrap_or(1);
                let scale = self.raw_f32(&scale_name)?;
                if scale.elem_count() != rows {
                    bail!(
                        "{}: {scale_name} has {} values, expected one per row of {full_name} ({rows})",
                        path.display(),
                        scale.elem_count()
                    );
                }
                let weight = moved(stored)?.reshape((rows, ()))?;
                let scale = moved(scale)?;
                let dense = crate::kernels::dequant_fp8_channel::dequant_fp8_channel(
                    &weight, &scale, self.dtype,
                )?;
                Ok(dense.reshape(shape)?)
            }
            other => bail!(
                "{}: tensor {full_name} is stored as {other:?}; g4 loads f32, bf16, f16 and FP8 (e4m3) weights",
                path.display()
            ),
        }
    }

    /// A small f32 tensor (a quantisation scale), on the host.
    fn raw_f32(&self, full_name: &str) -> Result<Tensor> {
        let &file = self
            .location
            .get(full_name)
            .context("scale listed but not found")?;
        let (path, source) = &self.files[file];
        source
            .load(full_name)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| {
                anyhow::anyhow!("{}: tensor {full_name}: {}", path.display(), root_cause(&e))
            })
    }
}

/// The checkpoint's safetensors files: those listed by the shard index when there is one,
/// else `model.safetensors`, else every `*.safetensors` in the folder.
fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        bail!("{}: model directory not found", dir.display());
    }
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index)
            .with_context(|| format!("cannot read {}", index.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{}: not valid JSON", index.display()))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .with_context(|| format!("{}: no weight_map object", index.display()))?;
        let mut names: Vec<&str> = map.values().filter_map(|v| v.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let paths: Vec<PathBuf> = names.into_iter().map(|n| dir.join(n)).collect();
        if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
            bail!(
                "{}: lists shard {} which does not exist",
                index.display(),
                missing.display()
            );
        }
        return Ok(paths);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    all.sort();
    if all.is_empty() {
        bail!("{}: no *.safetensors files", dir.display());
    }
    Ok(all)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// candle wraps errors with backtraces and paths; users need the innermost message on one line.
fn root_cause(e: &candle_core::Error) -> String {
    let text = match e {
        candle_core::Error::WithPath { inner, .. } => inner.to_string(),
        candle_core::Error::WithBacktrace { inner, .. } => inner.to_string(),
        other => other.to_string(),
    };
    text.lines().next().unwrap_or_default().to_string()
}
