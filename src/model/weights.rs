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
        let (paths, weight_map) = shard_paths(dir)?;
        for path in paths {
            let file = std::fs::File::open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            // SAFETY: the file is mapped read-only; g4 never writes checkpoints it has open.
            let map = unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("cannot map {}", path.display()))?;
            check_header(&map).with_context(|| format!("{}", path.display()))?;
            // SAFETY: as above.
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
        if let Some((index, weight_map)) = &weight_map {
            check_weight_map(index, weight_map, &files)?;
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
        check_header(bytes).with_context(|| format!("embedded {name}"))?;
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
        for (i, (path, source)) in files.iter().enumerate() {
            for name in source.names() {
                if let Some(first) = location.insert(name.clone(), i) {
                    bail!(
                        "tensor {name} is stored twice: in {} and in {}",
                        files[first].0.display(),
                        path.display()
                    );
                }
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
        let stored = source.load(full_name).map_err(|e| {
            anyhow::anyhow!("{}: tensor {full_name}: {}", path.display(), root_cause(&e))
        })?;
        if !matches!(stored.dtype(), DType::F32 | DType::BF16 | DType::F16) {
            bail!(
                "{}: scale {full_name} is stored as {:?}; FP8 scales must be f32, bf16 or f16",
                path.display(),
                stored.dtype()
            );
        }
        Ok(stored.to_dtype(DType::F32)?)
    }
}

/// Checks a safetensors header tensor by tensor, naming the tensor in every error: no name
/// twice (a JSON parser would silently keep the last entry), a known dtype, and data offsets
/// that match the shape and stay inside the file.
fn check_header(bytes: &[u8]) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Entry {
        dtype: String,
        shape: Vec<usize>,
        data_offsets: [usize; 2],
    }
    struct Entries(Vec<(String, serde_json::Value)>);
    impl<'de> serde::Deserialize<'de> for Entries {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Entries;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object of tensors")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Entries, A::Error> {
                    let mut entries = Vec::new();
                    while let Some(name) = map.next_key::<String>()? {
                        entries.push((name, map.next_value()?));
                    }
                    Ok(Entries(entries))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    let length = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes")))
        .context("not a valid safetensors file: shorter than its 8-byte header length")?;
    let header_end = usize::try_from(length)
        .ok()
        .and_then(|n| 8usize.checked_add(n))
        .filter(|&end| end <= bytes.len())
        .with_context(|| {
            format!("not a valid safetensors file: its header claims {length} bytes, past the end of the file")
        })?;
    let Entries(entries) = serde_json::from_slice(&bytes[8..header_end])
        .map_err(|e| anyhow::anyhow!("not a valid safetensors file: header: {e}"))?;
    let data_len = bytes.len() - header_end;
    let mut seen = std::collections::HashSet::new();
    for (name, value) in entries {
        if !seen.insert(name.clone()) {
            bail!("the safetensors header lists tensor {name} twice");
        }
        if name == "__metadata__" {
            continue;
        }
        let entry: Entry = serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("tensor {name}: malformed header entry: {e}"))?;
        let size = match entry.dtype.as_str() {
            "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" => 1,
            "U16" | "I16" | "F16" | "BF16" => 2,
            "U32" | "I32" | "F32" => 4,
            "U64" | "I64" | "F64" => 8,
            other => bail!("tensor {name}: unknown dtype {other}"),
        };
        let [begin, end] = entry.data_offsets;
        let expected = entry
            .shape
            .iter()
            .try_fold(size, |n: usize, &d| n.checked_mul(d));
        let invalid =
            |why: String| anyhow::anyhow!("not a valid safetensors file: tensor {name}: {why}");
        if end < begin {
            return Err(invalid(format!(
                "data_offsets [{begin}, {end}] run backwards"
            )));
        }
        if end > data_len {
            return Err(invalid(format!(
                "its data ends at byte {end}, past the {data_len}-byte data section (a truncated file?)"
            )));
        }
        if expected != Some(end - begin) {
            return Err(invalid(format!(
                "shape {:?} of {} needs {} bytes, but its data_offsets [{begin}, {end}] hold {}",
                entry.shape,
                entry.dtype,
                expected.map_or("more than 2^64".to_string(), |n| n.to_string()),
                end - begin
            )));
        }
    }
    Ok(())
}

/// The index's `weight_map` and the shards must agree: every tensor where the index places
/// it, and no tensor the index does not place.
fn check_weight_map(
    index: &Path,
    weight_map: &HashMap<String, PathBuf>,
    files: &[(PathBuf, Source)],
) -> Result<()> {
    for (path, source) in files {
        let names = source.names();
        for name in &names {
            match weight_map.get(name) {
                Some(placed) if placed == path => {}
                Some(placed) => bail!(
                    "{}: tensor {name} is in {}, but {} places it in {}",
                    path.display(),
                    file_name(path),
                    file_name(index),
                    file_name(placed)
                ),
                None => bail!(
                    "{}: tensor {name} is not in the weight_map of {}",
                    path.display(),
                    file_name(index)
                ),
            }
        }
    }
    for (name, placed) in weight_map {
        let in_file = files
            .iter()
            .any(|(path, source)| path == placed && source.names().iter().any(|n| n == name));
        if !in_file {
            bail!(
                "{}: places tensor {name} in {}, which does not hold it",
                index.display(),
                file_name(placed)
            );
        }
    }
    Ok(())
}

/// The checkpoint's safetensors files — those listed by the shard index when there is one
/// (with its name → file map), else `model.safetensors`, else every `*.safetensors` in the folder.
#[allow(clippy::type_complexity)]
fn shard_paths(dir: &Path) -> Result<(Vec<PathBuf>, Option<(PathBuf, HashMap<String, PathBuf>)>)> {
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
        let mut weight_map = HashMap::new();
        for (name, shard) in map {
            let shard = shard.as_str().with_context(|| {
                format!("{}: weight_map.{name} is not a file name", index.display())
            })?;
            weight_map.insert(name.clone(), dir.join(shard));
        }
        let mut paths: Vec<PathBuf> = weight_map.values().cloned().collect();
        paths.sort_unstable();
        paths.dedup();
        if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
            bail!(
                "{}: lists shard {} which does not exist",
                index.display(),
                missing.display()
            );
        }
        return Ok((paths, Some((index, weight_map))));
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok((vec![single], None));
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
    Ok((all, None))
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
