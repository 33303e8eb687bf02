//! Safetensors checkpoints: one file or sharded (`model.safetensors.index.json`), with the text
//! stack found under `model.` or `model.language_model.`. Headers are parsed and checked here;
//! each tensor is read straight from its file into the buffer that becomes the tensor (no
//! memory map held beside the copy, so a CPU model's memory is its weights; large tensors by
//! several threads, stacked projections into one buffer), shape-checked and converted to the
//! compute dtype. Every failure names the file and the tensor.

use super::config::Fp8Activations;
use super::projection::Projection;
use crate::kernels::{arm_for, linear_panels, linear_panels_fp8, Arm, Op};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Prefixes under which checkpoints keep the text decoder, most specific first.
const PREFIXES: [&str; 3] = ["model.language_model.", "model.", "language_model.model."];

/// The safetensors format's own limit on a header.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Where one safetensors file's bytes are: a file on disk, or compiled into the binary.
enum Bytes {
    File(std::fs::File),
    Embedded(&'static [u8]),
}

impl Bytes {
    fn len(&self) -> std::io::Result<u64> {
        match self {
            Bytes::File(f) => Ok(f.metadata()?.len()),
            Bytes::Embedded(b) => Ok(b.len() as u64),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match self {
            Bytes::File(f) => std::os::unix::fs::FileExt::read_exact_at(f, buf, offset),
            Bytes::Embedded(b) => {
                let start = usize::try_from(offset).map_err(std::io::Error::other)?;
                let src = b
                    .get(start..start + buf.len())
                    .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// One tensor as its file's header describes it.
#[derive(Clone, Debug)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    /// Absolute offset of its first byte in the file, and its length in bytes.
    start: u64,
    len: usize,
}

impl Entry {
    fn candle_dtype(&self) -> Option<DType> {
        Some(match self.dtype.as_str() {
            "F32" => DType::F32,
            "BF16" => DType::BF16,
            "F16" => DType::F16,
            "F64" => DType::F64,
            "F8_E4M3" => DType::F8E4M3,
            "U8" => DType::U8,
            "U32" => DType::U32,
            "I64" => DType::I64,
            _ => return None,
        })
    }
}

struct ShardFile {
    path: PathBuf,
    bytes: Bytes,
    /// In header order.
    tensors: Vec<(String, Entry)>,
}

impl ShardFile {
    fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(name, _)| name.as_str())
    }
}

/// A decoder tensor to load: its name, the shape config.json implies, and what to keep of it.
#[derive(Clone, Debug)]
pub struct Part {
    pub name: String,
    pub shape: Vec<usize>,
    pub take: Take,
}

impl Part {
    /// All of tensor `name`, which must have `shape`.
    pub fn whole(name: impl Into<String>, shape: &[usize]) -> Part {
        Part {
            name: name.into(),
            shape: shape.to_vec(),
            take: Take::All,
        }
    }

    /// Only `take` of it.
    pub fn taking(self, take: Take) -> Part {
        Part { take, ..self }
    }
}

/// What a tensor-parallel rank keeps of a stored tensor: all of it, some of its rows (the
/// second-to-last dimension; several ranges join in order), or a range of its columns (the
/// last dimension). Cut in host memory, before the move: a rank's device holds only its part.
#[derive(Clone, Debug, PartialEq)]
pub enum Take {
    All,
    Rows(Vec<Range<usize>>),
    Cols(Range<usize>),
}

impl Take {
    /// Rows `range` of `rows`: all of them when the range covers them (one device).
    pub fn rows(range: Range<usize>, rows: usize) -> Take {
        Take::rows_joined(vec![range], rows)
    }

    /// Several row ranges of `rows`, joined in order (a rank's gate and up rows).
    pub fn rows_joined(ranges: Vec<Range<usize>>, rows: usize) -> Take {
        if ranges.iter().map(Range::len).sum::<usize>() == rows {
            Take::All
        } else {
            Take::Rows(ranges)
        }
    }

    /// Columns `range` of `cols`: all of them when the range covers them.
    pub fn cols(range: Range<usize>, cols: usize) -> Take {
        if range.len() == cols {
            Take::All
        } else {
            Take::Cols(range)
        }
    }

    /// `t` cut to what is kept.
    pub(super) fn apply(&self, t: &Tensor) -> candle_core::Result<Tensor> {
        let (dim, ranges) = match self {
            Take::All => return Ok(t.clone()),
            Take::Rows(ranges) => (t.rank().saturating_sub(2), ranges.as_slice()),
            Take::Cols(range) => (t.rank().saturating_sub(1), std::slice::from_ref(range)),
        };
        let parts = ranges
            .iter()
            .map(|r| t.narrow(dim, r.start, r.len()))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Tensor::cat(&parts, dim)?.contiguous()
    }

    /// An FP8 weight's row scales `[rows]` for the rows kept.
    fn apply_to_scale(&self, scale: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Take::Rows(_) => self.apply(&scale.unsqueeze(1)?)?.squeeze(1),
            Take::All | Take::Cols(_) => Ok(scale.clone()),
        }
    }
}

pub struct Checkpoint {
    files: Vec<ShardFile>,
    /// Tensor name → (index into `files`, index into its `tensors`).
    location: HashMap<String, (usize, usize)>,
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
            let bytes = Bytes::File(file);
            let tensors = read_header(&bytes).with_context(|| format!("{}", path.display()))?;
            total_bytes += bytes.len().unwrap_or(0);
            files.push(ShardFile {
                path,
                bytes,
                tensors,
            });
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
        let bytes = Bytes::Embedded(bytes);
        let tensors = read_header(&bytes).with_context(|| format!("embedded {name}"))?;
        let total_bytes = bytes.len().unwrap_or(0);
        let files = vec![ShardFile {
            path: PathBuf::from(name),
            bytes,
            tensors,
        }];
        Checkpoint::index(files, total_bytes, name, device, dtype)
    }

    fn index(
        files: Vec<ShardFile>,
        total_bytes: u64,
        what: &str,
        device: &Device,
        dtype: DType,
    ) -> Result<Checkpoint> {
        let mut location = HashMap::new();
        for (i, file) in files.iter().enumerate() {
            for (j, name) in file.names().enumerate() {
                if let Some((first, _)) = location.insert(name.to_string(), (i, j)) {
                    bail!(
                        "tensor {name} is stored twice: in {} and in {}",
                        files[first].path.display(),
                        file.path.display()
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

    /// The device tensors are loaded to.
    pub fn device(&self) -> &Device {
        &self.device
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

    /// Loads decoder tensor `part` as [`Checkpoint::tensor`] does, keeping only `part.take`.
    pub fn part(&self, part: &Part) -> Result<Tensor> {
        self.load(
            &format!("{}{}", self.prefix, part.name),
            &part.shape,
            &part.take,
        )
    }

    /// The file and header entry of a tensor whose shape must be `shape`.
    fn locate(&self, full_name: &str, shape: &[usize]) -> Result<(&ShardFile, &Entry)> {
        let Some(&(file, index)) = self.location.get(full_name) else {
            let files: Vec<String> = self.files.iter().map(|f| file_name(&f.path)).collect();
            bail!(
                "missing tensor {full_name} (looked in {})",
                files.join(", ")
            );
        };
        let file = &self.files[file];
        let entry = &file.tensors[index].1;
        if entry.shape != shape {
            bail!(
                "{}: tensor {full_name} has shape {:?}, expected {:?} from config.json",
                file.path.display(),
                entry.shape,
                shape
            );
        }
        Ok((file, entry))
    }

    /// A tensor exactly as stored, on the host.
    fn stored(&self, file: &ShardFile, full_name: &str, entry: &Entry) -> Result<Tensor> {
        let dtype = entry.candle_dtype().with_context(|| {
            format!(
                "{}: tensor {full_name} is stored as {}; g4 loads f32, bf16, f16 and FP8 (e4m3) weights",
                file.path.display(),
                entry.dtype
            )
        })?;
        let read = read_tensor(&file.bytes, entry, dtype)
            .map_err(|e| anyhow::anyhow!("{}: tensor {full_name}: {e}", file.path.display()))?;
        if let Some(bar) = &self.progress {
            bar.inc(entry.len as u64);
        }
        Ok(read)
    }

    /// Decoder tensors `parts`, each shape-checked and cut to its take, concatenated along their
    /// first dimension. Parts stored in one float dtype are joined in host memory and moved once:
    /// a join on the device would leave the parts' freed memory as holes in its allocator pool.
    pub fn concat(&self, parts: &[Part]) -> Result<Tensor> {
        let located = parts
            .iter()
            .map(|part| {
                let full_name = format!("{}{}", self.prefix, part.name);
                let (file, entry) = self.locate(&full_name, &part.shape)?;
                Ok((full_name, file, entry))
            })
            .collect::<Result<Vec<_>>>()?;
        let stored_dtypes: std::collections::HashSet<_> = located
            .iter()
            .map(|(_, _, entry)| entry.candle_dtype())
            .collect();
        let one_dtype = match stored_dtypes.len() {
            1 => stored_dtypes.into_iter().next().flatten(),
            _ => None,
        };
        let Some(dtype @ (DType::F32 | DType::BF16 | DType::F16)) = one_dtype else {
            let tensors = parts
                .iter()
                .map(|part| self.part(part))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Tensor::cat(&tensors, 0)?);
        };
        let what = || {
            let first = &located[0].0;
            format!("{first} and {} more", located.len() - 1)
        };
        let rows_of_one_width = located.iter().all(|(_, _, entry)| {
            !entry.shape.is_empty() && entry.shape[1..] == located[0].2.shape[1..]
        });
        let joined = if rows_of_one_width && parts.iter().all(|part| part.take == Take::All) {
            // Whole tensors: read straight into the joined buffer.
            let entries: Vec<_> = located
                .iter()
                .map(|(_, file, entry)| (&file.bytes, *entry))
                .collect();
            let mut shape = located[0].2.shape.clone();
            shape[0] = located.iter().map(|(_, _, entry)| entry.shape[0]).sum();
            let joined = read_joined(&entries, dtype, &shape)
                .map_err(|e| anyhow::anyhow!("tensors {}: {e}", what()))?;
            if let Some(bar) = &self.progress {
                bar.inc(entries.iter().map(|(_, entry)| entry.len as u64).sum());
            }
            joined
        } else {
            let host = located
                .iter()
                .zip(parts)
                .map(|((full_name, file, entry), part)| {
                    Ok(part.take.apply(&self.stored(file, full_name, entry)?)?)
                })
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&host, 0).map_err(|e| anyhow::anyhow!("tensors {}: {e}", what()))?
        };
        joined
            .to_device(&self.device)
            .and_then(|moved| moved.to_dtype(self.dtype))
            .map_err(|e| anyhow::anyhow!("tensors {}: {e}", what()))
    }

    /// Loads a tensor by its absolute name, checks its shape, converts it to the compute dtype.
    pub fn absolute_tensor(&self, full_name: &str, shape: &[usize]) -> Result<Tensor> {
        self.load(full_name, shape, &Take::All)
    }

    /// A tensor by its absolute name, shape-checked, cut to `take`, in the compute dtype.
    fn load(&self, full_name: &str, shape: &[usize], take: &Take) -> Result<Tensor> {
        let (file, entry) = self.locate(full_name, shape)?;
        let path = &file.path;
        let stored = self.stored(file, full_name, entry)?;
        let cut = |t: &Tensor| {
            take.apply(t)
                .map_err(|e| anyhow::anyhow!("tensor {full_name}: cannot take {take:?}: {e}"))
        };
        let moved = |t: Tensor| {
            t.to_device(&self.device).map_err(|e| {
                anyhow::anyhow!("tensor {full_name}: cannot move to {:?}: {e}", self.device)
            })
        };
        match stored.dtype() {
            DType::F32 | DType::BF16 | DType::F16 => moved(cut(&stored)?)?
                .to_dtype(self.dtype)
                .map_err(|e| anyhow::anyhow!("tensor {full_name}: {e}")),
            // compressed-tensors FP8: e4m3 weights with one f32 scale per output row, dequantised
            // once here (on the device, through the registry) into the compute dtype.
            DType::F8E4M3 => {
                let rows = shape.first().copied().unwrap_or(1);
                let scale = self.fp8_scale(file, full_name, rows)?;
                let scale = moved(take.apply_to_scale(&scale)?)?;
                let weight = cut(&stored)?;
                let kept = weight.dims().to_vec();
                let weight = moved(weight)?.reshape((scale.elem_count(), ()))?;
                let dense = crate::kernels::dequant_fp8_channel::dequant_fp8_channel(
                    &weight, &scale, self.dtype,
                )?;
                Ok(dense.reshape(kept)?)
            }
            other => bail!(
                "{}: tensor {full_name} is stored as {other:?}; g4 loads f32, bf16, f16 and FP8 (e4m3) weights",
                path.display()
            ),
        }
    }

    /// Decoder projection `name` (`[rows, cols]`), loaded as [`Checkpoint::tensor`] does, except
    /// that an FP8 weight stays e4m3 with its row scales where the registry reads it natively for
    /// this device and dtype (`matmul_bt_fp8_channel` on GPUs; `linear_panels_fp8`, in panels, on
    /// a CPU in f32), and that a dense one is packed into panels where `linear_panels` runs
    /// natively (f32 on a CPU).
    pub fn projection(&self, part: Part, inputs: Fp8Activations) -> Result<Projection> {
        self.concat_projection(&[part], inputs)
    }

    /// Decoder projections `parts` joined along their rows as [`Checkpoint::concat`] joins them;
    /// FP8 kept as such (weights and scales joined alike) when every part is stored in FP8. Where
    /// `inputs` says FP8_DYNAMIC, a projection stored in FP8 rounds its input to e4m3 first.
    pub fn concat_projection(&self, parts: &[Part], inputs: Fp8Activations) -> Result<Projection> {
        let weight = self.concat_projection_weight(parts)?;
        if inputs == Fp8Activations::DynamicPerToken && self.stored_fp8(parts)? {
            return Ok(Projection::E4m3Input(Box::new(weight)));
        }
        Ok(weight)
    }

    /// Whether every one of `parts` is stored in FP8.
    pub fn stored_fp8(&self, parts: &[Part]) -> Result<bool> {
        for part in parts {
            let (_, entry) = self.locate(&format!("{}{}", self.prefix, part.name), &part.shape)?;
            if entry.candle_dtype() != Some(DType::F8E4M3) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn concat_projection_weight(&self, parts: &[Part]) -> Result<Projection> {
        if let Some((weight, scale)) = self.concat_fp8(parts, Op::MatmulBtFp8Channel)? {
            return Ok(Projection::Fp8 { weight, scale });
        }
        if let Some((weight, scale)) = self.concat_fp8(parts, Op::LinearPanelsFp8)? {
            let (panels, scale) = linear_panels_fp8::pack(&weight, &scale)?;
            let n = weight.dim(0)?;
            return Ok(Projection::Fp8Panels { panels, scale, n });
        }
        let dense = match parts {
            [part] => self.part(part)?,
            _ => self.concat(parts)?,
        };
        let panels_native = matches!(
            arm_for(Op::LinearPanels, &self.device, self.dtype),
            Arm::Native(_)
        );
        Ok(if panels_native {
            Projection::Panels {
                panels: linear_panels::pack(&dense)?,
                n: dense.dim(0)?,
            }
        } else {
            Projection::Dense(dense)
        })
    }

    /// Decoder tensors `parts` (2-D) joined along their rows as e4m3 weights `[rows, cols]` and
    /// f32 row scales `[rows]`, on the device, when every part is stored in FP8 and the registry
    /// runs `op` (the op that will read them) natively for this device and dtype; `None`
    /// otherwise (the caller loads them dequantised).
    pub fn concat_fp8(&self, parts: &[Part], op: Op) -> Result<Option<(Tensor, Tensor)>> {
        if !matches!(arm_for(op, &self.device, self.dtype), Arm::Native(_)) {
            return Ok(None);
        }
        self.concat_e4m3(parts)
    }

    /// [`Checkpoint::concat_fp8`] whichever arm reads them: `None` only where a part is not
    /// stored in FP8.
    pub fn concat_e4m3(&self, parts: &[Part]) -> Result<Option<(Tensor, Tensor)>> {
        let located = parts
            .iter()
            .map(|part| {
                let full_name = format!("{}{}", self.prefix, part.name);
                let (file, entry) = self.locate(&full_name, &part.shape)?;
                Ok((full_name, part, file, entry))
            })
            .collect::<Result<Vec<_>>>()?;
        let all_fp8 = located
            .iter()
            .all(|(_, _, _, entry)| entry.candle_dtype() == Some(DType::F8E4M3));
        if !all_fp8 {
            return Ok(None);
        }
        let (mut weights, mut scales) = (Vec::new(), Vec::new());
        for (full_name, part, file, entry) in &located {
            let rows = part.shape[0];
            let weight = self.stored(file, full_name, entry)?.reshape((rows, ()))?;
            weights.push(part.take.apply(&weight)?);
            let scale = self.fp8_scale(file, full_name, rows)?;
            scales.push(part.take.apply_to_scale(&scale)?);
        }
        let names = || {
            let names: Vec<&str> = located.iter().map(|(n, ..)| n.as_str()).collect();
            match names.as_slice() {
                [one] => one.to_string(),
                [first, .., last] => format!("{first} … {last}"),
                [] => String::new(),
            }
        };
        let on_device = |parts: &[Tensor]| {
            Tensor::cat(parts, 0)
                .and_then(|joined| joined.to_device(&self.device))
                .map_err(|e| anyhow::anyhow!("FP8 weights {}: {e}", names()))
        };
        Ok(Some((on_device(&weights)?, on_device(&scales)?)))
    }

    /// The f32 row scales `{full_name}_scale` of an FP8 weight with `rows` rows, on the host.
    fn fp8_scale(&self, file: &ShardFile, full_name: &str, rows: usize) -> Result<Tensor> {
        let scale_name = format!("{full_name}_scale");
        if !self.location.contains_key(&scale_name) {
            bail!(
                "{}: FP8 tensor {full_name} has no {scale_name}",
                file.path.display()
            );
        }
        let scale = self.raw_f32(&scale_name)?;
        if scale.elem_count() != rows {
            bail!(
                "{}: {scale_name} has {} values, expected one per row of {full_name} ({rows})",
                file.path.display(),
                scale.elem_count()
            );
        }
        Ok(scale.flatten_all()?)
    }

    /// Decoder tensor `name` (`[rows, cols]`) kept in host memory as stored, for reading a few
    /// rows at a time: memory-mapped from its file, or the embedded bytes. Only float tables
    /// stored as f32, bf16 or f16 can be read this way.
    pub fn host_rows(&self, name: &str, shape: [usize; 2]) -> Result<HostRows> {
        let full_name = format!("{}{name}", self.prefix);
        let (file, entry) = self.locate(&full_name, &shape)?;
        let dtype = match entry.candle_dtype() {
            Some(d @ (DType::F32 | DType::BF16 | DType::F16)) => d,
            _ => bail!(
                "{}: tensor {full_name} is stored as {}; a host-memory table must be f32, bf16 or f16",
                file.path.display(),
                entry.dtype
            ),
        };
        let start = usize::try_from(entry.start)?;
        let bytes = match &file.bytes {
            Bytes::File(f) => {
                // SAFETY: mapped read-only; g4 never writes checkpoints it has open.
                let map = unsafe {
                    memmap2::MmapOptions::new()
                        .offset(entry.start)
                        .len(entry.len)
                        .map(f)
                }
                .with_context(|| format!("{}: cannot map {full_name}", file.path.display()))?;
                // Fault the whole table in now (from the page cache, or the disk as loading it
                // would): a prompt's gather then copies memory instead of taking thousands of
                // page faults. Older kernels lack the advice; rows then fault in on first use.
                let _ = map.advise(memmap2::Advice::PopulateRead);
                RowBytes::Mapped(map)
            }
            Bytes::Embedded(b) => RowBytes::Embedded(&b[start..start + entry.len]),
        };
        if let Some(bar) = &self.progress {
            bar.inc(entry.len as u64);
        }
        Ok(HostRows {
            bytes,
            dtype,
            rows: shape[0],
            cols: shape[1],
        })
    }

    /// A small f32 tensor (a quantisation scale), on the host.
    fn raw_f32(&self, full_name: &str) -> Result<Tensor> {
        let &(file, index) = self
            .location
            .get(full_name)
            .context("scale listed but not found")?;
        let file = &self.files[file];
        let entry = &file.tensors[index].1;
        if !matches!(
            entry.candle_dtype(),
            Some(DType::F32 | DType::BF16 | DType::F16)
        ) {
            bail!(
                "{}: scale {full_name} is stored as {}; FP8 scales must be f32, bf16 or f16",
                file.path.display(),
                entry.dtype
            );
        }
        Ok(self.stored(file, full_name, entry)?.to_dtype(DType::F32)?)
    }
}

/// Reads a tensor's bytes straight into the vector that becomes its host storage. The vector is
/// allocated zeroed (fresh pages from the allocator, not a pass that writes every element) and
/// filled by several threads when it is large: reading a warm page cache is bound by the copy
/// and its page faults. (1 GB of bf16 on a 2-core machine: 1.2 GB/s writing every element, then
/// one reader; 1.6 GB/s zeroed; 2.6 GB/s with two readers.)
fn read_tensor(bytes: &Bytes, entry: &Entry, dtype: DType) -> Result<Tensor> {
    read_joined(&[(bytes, entry)], dtype, &entry.shape)
}

/// Tensors stored in `dtype`, read one after another into one host tensor of `shape` (their
/// concatenation along the first dimension, without a second copy).
fn read_joined(parts: &[(&Bytes, &Entry)], dtype: DType, shape: &[usize]) -> Result<Tensor> {
    fn filled<T: candle_core::WithDType>(
        mut values: Vec<T>,
        parts: &[(&Bytes, &Entry)],
        shape: &[usize],
    ) -> Result<Tensor> {
        let len = values.len() * std::mem::size_of::<T>();
        // SAFETY: T is a plain numeric type, every bit pattern of which is a value, and the
        // view covers exactly the vector's initialised elements.
        let view = unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) };
        read_parts(parts, view)?;
        Ok(Tensor::from_vec(values, shape, &Device::Cpu)?)
    }
    use half::vec::HalfBitsVecExt;
    let len: usize = parts.iter().map(|(_, entry)| entry.len).sum();
    match dtype {
        DType::F32 => filled(vec![0f32; len / 4], parts, shape),
        DType::BF16 => filled(
            vec![0u16; len / 2].reinterpret_into::<half::bf16>(),
            parts,
            shape,
        ),
        DType::F16 => filled(
            vec![0u16; len / 2].reinterpret_into::<half::f16>(),
            parts,
            shape,
        ),
        _ => {
            let mut raw = vec![0u8; len];
            read_parts(parts, &mut raw)?;
            Ok(Tensor::from_raw_buffer(&raw, dtype, shape, &Device::Cpu)?)
        }
    }
}

/// Each part's bytes into the next `entry.len` bytes of `view`.
fn read_parts(parts: &[(&Bytes, &Entry)], mut view: &mut [u8]) -> std::io::Result<()> {
    for (bytes, entry) in parts {
        let (part, rest) = std::mem::take(&mut view).split_at_mut(entry.len);
        read_parallel(bytes, entry.start, part)?;
        view = rest;
    }
    Ok(())
}

/// Reads of at least this many bytes per thread are split over threads.
const PARALLEL_READ_BYTES: usize = 32 << 20;

/// `buf.len()` bytes at `offset`, read by up to one thread per core in chunks of at least
/// [`PARALLEL_READ_BYTES`].
fn read_parallel(bytes: &Bytes, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    read_in_chunks(bytes, offset, buf, PARALLEL_READ_BYTES, cores)
}

/// `buf.len()` bytes at `offset` by up to `max_threads` threads, each at least `min_chunk`.
fn read_in_chunks(
    bytes: &Bytes,
    offset: u64,
    buf: &mut [u8],
    min_chunk: usize,
    max_threads: usize,
) -> std::io::Result<()> {
    let threads = max_threads.min(buf.len() / min_chunk.max(1)).max(1);
    if threads == 1 {
        return bytes.read_at(offset, buf);
    }
    let chunk = buf.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let reads: Vec<_> = buf
            .chunks_mut(chunk)
            .enumerate()
            .map(|(i, part)| scope.spawn(move || bytes.read_at(offset + (i * chunk) as u64, part)))
            .collect();
        reads.into_iter().try_for_each(|read| {
            read.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a reader thread panicked")))
        })
    })
}

/// A float table kept in host memory in its stored dtype (see [`Checkpoint::host_rows`]).
pub struct HostRows {
    bytes: RowBytes,
    dtype: DType,
    rows: usize,
    cols: usize,
}

enum RowBytes {
    Mapped(memmap2::Mmap),
    Embedded(&'static [u8]),
}

impl HostRows {
    /// The stored dtype, which gathered rows keep.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of the whole table.
    pub fn total_bytes(&self) -> usize {
        self.rows * self.row_bytes()
    }

    /// The whole table as stored (what a GPU maps to read rows in place).
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            RowBytes::Mapped(map) => map,
            RowBytes::Embedded(b) => b,
        }
    }

    /// An error naming the first of `ids` past the table's last row.
    pub fn check_rows(&self, ids: &[u32]) -> candle_core::Result<()> {
        match ids.iter().find(|&&id| id as usize >= self.rows) {
            Some(bad) => candle_core::bail!("row {bad} is outside a table of {} rows", self.rows),
            None => Ok(()),
        }
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols * self.dtype.size_in_bytes()
    }

    /// Writes rows `ids` into `out` (`ids.len()` whole rows), in order, as stored. A prompt's
    /// worth of rows is copied by several threads: the copy is what the GPU waits for.
    pub fn gather(&self, ids: &[u32], out: &mut [u8]) -> candle_core::Result<()> {
        let row = self.row_bytes();
        if out.len() != ids.len() * row {
            candle_core::bail!(
                "internal: {} bytes for {} rows of {row} bytes",
                out.len(),
                ids.len()
            );
        }
        self.check_rows(ids)?;
        let table = self.bytes();
        let copy = |ids: &[u32], out: &mut [u8]| {
            for (&id, slice) in ids.iter().zip(out.chunks_exact_mut(row)) {
                let start = id as usize * row;
                slice.copy_from_slice(&table[start..start + row]);
            }
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(out.len() / PARALLEL_GATHER_BYTES)
            .max(1);
        if threads == 1 {
            copy(ids, out);
            return Ok(());
        }
        let per_thread = ids.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for (ids, out) in ids.chunks(per_thread).zip(out.chunks_mut(per_thread * row)) {
                scope.spawn(move || copy(ids, out));
            }
        });
        Ok(())
    }
}

/// Gathers of at least this many bytes per thread are split over threads.
const PARALLEL_GATHER_BYTES: usize = 1 << 20;

/// Reads and checks a safetensors header tensor by tensor, naming the tensor in every error:
/// no name twice (a JSON parser would silently keep the last entry), a known dtype, and data
/// offsets that match the shape and stay inside the file.
fn read_header(bytes: &Bytes) -> Result<Vec<(String, Entry)>> {
    #[derive(serde::Deserialize)]
    struct Stored {
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
    let file_len = bytes.len().context("cannot read the file's length")?;
    let mut prefix = [0u8; 8];
    bytes
        .read_at(0, &mut prefix)
        .ok()
        .context("not a valid safetensors file: shorter than its 8-byte header length")?;
    let length = u64::from_le_bytes(prefix);
    if length > MAX_HEADER_BYTES {
        bail!("not a valid safetensors file: its header claims {length} bytes, more than the format's limit of {MAX_HEADER_BYTES}");
    }
    let header_end = 8u64
        .checked_add(length)
        .filter(|&end| end <= file_len)
        .with_context(|| {
            format!("not a valid safetensors file: its header claims {length} bytes, past the end of the file")
        })?;
    let mut header = vec![0u8; length as usize];
    bytes
        .read_at(8, &mut header)
        .context("cannot read the safetensors header")?;
    let Entries(stored) = serde_json::from_slice(&header)
        .map_err(|e| anyhow::anyhow!("not a valid safetensors file: header: {e}"))?;
    let data_len = usize::try_from(file_len - header_end)?;
    let mut seen = std::collections::HashSet::new();
    let mut entries = Vec::with_capacity(stored.len());
    for (name, value) in stored {
        if !seen.insert(name.clone()) {
            bail!("the safetensors header lists tensor {name} twice");
        }
        if name == "__metadata__" {
            continue;
        }
        let entry: Stored = serde_json::from_value(value)
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
        entries.push((
            name,
            Entry {
                dtype: entry.dtype,
                shape: entry.shape,
                start: header_end + begin as u64,
                len: end - begin,
            },
        ));
    }
    Ok(entries)
}

/// The index's `weight_map` and the shards must agree: every tensor where the index places
/// it, and no tensor the index does not place.
fn check_weight_map(
    index: &Path,
    weight_map: &HashMap<String, PathBuf>,
    files: &[ShardFile],
) -> Result<()> {
    for file in files {
        let path = &file.path;
        for name in file.names() {
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
    let stored: HashMap<&str, &Path> = files
        .iter()
        .flat_map(|file| file.names().map(|name| (name, file.path.as_path())))
        .collect();
    for (name, placed) in weight_map {
        if stored.get(name.as_str()) != Some(&placed.as_path()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A read split over threads (chunks that do not divide it, at an offset into the file)
    /// returns the bytes one read returns.
    #[test]
    fn a_read_split_over_threads_returns_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bytes");
        let content: Vec<u8> = (0..20_011u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&path, &content).unwrap();
        let file = Bytes::File(std::fs::File::open(&path).unwrap());
        let (offset, len) = (37, 10_007);
        for threads in [1, 2, 5, 64] {
            let mut read = vec![0u8; len];
            read_in_chunks(&file, offset as u64, &mut read, 1_000, threads).unwrap();
            assert_eq!(read, content[offset..offset + len], "{threads} threads");
        }
        let mut past_end = vec![0u8; len];
        assert!(read_in_chunks(&file, 15_000, &mut past_end, 1_000, 5).is_err());
    }

    /// Whole tensors joined by `concat` (read straight into one buffer) equal `Tensor::cat` of
    /// the tensors loaded one by one.
    #[test]
    fn a_concat_of_whole_tensors_equals_their_cat() {
        let dir = tempfile::tempdir().unwrap();
        let part = |rows: usize, first: f32| {
            Tensor::arange(first, first + (rows * 8) as f32, &Device::Cpu)
                .unwrap()
                .reshape((rows, 8))
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        let tensors = HashMap::from([
            ("model.embed_tokens.weight".to_string(), part(2, 0.0)),
            ("model.a.weight".to_string(), part(3, 100.0)),
            ("model.b.weight".to_string(), part(5, 200.0)),
        ]);
        candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
        let ckpt = Checkpoint::open(dir.path(), &Device::Cpu, DType::BF16).unwrap();
        let joined = ckpt
            .concat(&[
                Part::whole("b.weight", &[5, 8]),
                Part::whole("a.weight", &[3, 8]),
            ])
            .unwrap();
        let expected = Tensor::cat(&[part(5, 200.0), part(3, 100.0)], 0).unwrap();
        assert_eq!(joined.dims(), &[8, 8]);
        assert_eq!(count_differing(&joined, &expected), 0.0);
    }

    /// A gather large enough to be split over threads returns exactly the rows index_select
    /// picks from the same table loaded whole.
    #[test]
    fn host_rows_gather_matches_the_loaded_table() {
        let (rows, cols) = (1024, 2048);
        let table = Tensor::arange(0f32, (rows * cols) as f32, &Device::Cpu)
            .unwrap()
            .reshape((rows, cols))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let tensors = HashMap::from([
            ("model.embed_tokens.weight".to_string(), table.clone()),
            ("model.table.weight".to_string(), table.clone()),
        ]);
        candle_core::safetensors::save(&tensors, dir.path().join("model.safetensors")).unwrap();
        let ckpt = Checkpoint::open(dir.path(), &Device::Cpu, DType::F32).unwrap();
        let host = ckpt.host_rows("table.weight", [rows, cols]).unwrap();
        let ids: Vec<u32> = (0..900).map(|i| (i * 7919 % rows) as u32).collect();
        assert!(ids.len() * host.row_bytes() >= 2 * PARALLEL_GATHER_BYTES);
        let mut bytes = vec![0u8; ids.len() * host.row_bytes()];
        host.gather(&ids, &mut bytes).unwrap();
        let gathered =
            Tensor::from_raw_buffer(&bytes, DType::F32, &[ids.len(), cols], &Device::Cpu).unwrap();
        let expected = table
            .index_select(&Tensor::new(ids.as_slice(), &Device::Cpu).unwrap(), 0)
            .unwrap();
        assert_eq!(count_differing(&gathered, &expected), 0.0);
        assert!(host
            .gather(&[rows as u32], &mut bytes[..host.row_bytes()])
            .is_err());
    }

    fn count_differing(a: &Tensor, b: &Tensor) -> f32 {
        a.ne(b)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }
}
