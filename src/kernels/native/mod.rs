//! The native-backend seam. Everything vendor-specific about running g4's own kernels lives
//! behind it: which native code exists for a device (and why not), launch geometry and
//! arguments, output allocation, kernel lookup and launch, the vendor BLAS, and graph capture.
//! CUDA is its first implementation (`cuda.rs`); the kernel sources are written so that hipcc
//! compiles them too, and a HIP implementation slots in here without touching an op module.
//! Op modules never name a vendor API: their native arm calls [`launch`] with a kernel name.
//! The CPU has native arms too (`cpu.rs`): SIMD kernels chosen by what the processor offers.

pub mod collective;
pub mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "hip")]
pub mod hip;
#[cfg(feature = "cuda")]
mod nccl;
pub mod poison;

use candle_core::{DType, Device, Result, Shape, Tensor};

/// A backend for which native kernels can exist: a GPU vendor's, or the CPU's SIMD units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Cuda,
    Hip,
    Metal,
    Cpu,
}

impl Backend {
    pub const ALL: [Backend; 4] = [Backend::Cuda, Backend::Hip, Backend::Metal, Backend::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Hip => "hip",
            Backend::Metal => "metal",
            Backend::Cpu => "cpu",
        }
    }

    /// The cargo feature that compiles this backend's kernels into g4, if g4 has one.
    fn feature(self) -> Option<&'static str> {
        match self {
            Backend::Cuda => Some("cuda"),
            Backend::Hip => Some("hip"),
            Backend::Metal => Some("metal"),
            // The CPU kernels are in every build for the architectures they are written for.
            Backend::Cpu => None,
        }
    }

    pub fn built(self) -> bool {
        match self {
            Backend::Cuda => cfg!(feature = "cuda"),
            Backend::Metal => cfg!(feature = "metal"),
            Backend::Hip => cfg!(feature = "hip"),
            Backend::Cpu => cfg!(any(target_arch = "x86_64", target_arch = "aarch64")),
        }
    }

    fn drives(self, device: &Device) -> bool {
        matches!(
            (self, device),
            (Backend::Cuda, Device::Cuda(_))
                | (Backend::Metal, Device::Metal(_))
                | (Backend::Cpu, Device::Cpu)
        )
    }
}

/// One native kernel: which backend, which dtypes, and what the device must offer.
#[derive(Clone, Copy, Debug)]
pub struct NativeKernel {
    pub backend: Backend,
    pub dtypes: &'static [DType],
    /// Minimum CUDA compute capability (major, minor), e.g. FP8 tensor cores need (8, 9).
    pub min_compute_capability: Option<(u32, u32)>,
}

/// Which implementation of an op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    Native(Backend),
    Composed,
}

impl Arm {
    pub fn name(self) -> String {
        match self {
            Arm::Native(backend) => backend.name().to_string(),
            Arm::Composed => "composed".to_string(),
        }
    }
}

/// Why a native arm cannot run here. Distinct causes stay distinct: a user told to write a
/// kernel that already exists goes to fix the wrong thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// The kernel exists but this build lacks the cargo feature that compiles it.
    NotBuilt { feature: &'static str },
    /// No native implementation exists for this backend (or for this dtype on it).
    NoKernel { detail: String },
    /// The device is present but lacks a capability the kernel needs.
    DeviceUnsupported { need: String },
    /// No device of this backend is in use (and, for HIP, why none can be).
    NoDevice { detail: String },
}

impl Unavailable {
    pub fn kind(&self) -> &'static str {
        match self {
            Unavailable::NotBuilt { .. } => "not-built",
            Unavailable::NoKernel { .. } => "no-kernel",
            Unavailable::DeviceUnsupported { .. } => "device-unsupported",
            Unavailable::NoDevice { .. } => "no-device",
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NotBuilt { feature } => write!(
                f,
                "not-built: the kernel exists but this build lacks it; rebuild with --features {feature}"
            ),
            Unavailable::NoKernel { detail } => write!(f, "no-kernel: {detail}"),
            Unavailable::DeviceUnsupported { need } => {
                write!(f, "device-unsupported: needs {need}")
            }
            Unavailable::NoDevice { detail } => write!(f, "no-device: {detail}"),
        }
    }
}

/// Why a native arm cannot run, without building a message: the dispatch path asks this on
/// every op call, so it allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Missing {
    NoKernelForBackend,
    NotBuilt,
    NoDevice,
    NoDtypeVariant,
    Capability(u32, u32),
    CpuFeatures,
}

fn missing(
    kernels: &[NativeKernel],
    backend: Backend,
    device: &Device,
    dtype: DType,
) -> Option<Missing> {
    let mut kernels = kernels.iter().filter(|k| k.backend == backend).peekable();
    if kernels.peek().is_none() {
        return Some(Missing::NoKernelForBackend);
    }
    if !backend.built() {
        return Some(Missing::NotBuilt);
    }
    if !backend.drives(device) {
        return Some(Missing::NoDevice);
    }
    let Some(kernel) = kernels.find(|k| k.dtypes.contains(&dtype)) else {
        return Some(Missing::NoDtypeVariant);
    };
    if backend == Backend::Cpu && cpu::simd().is_none() {
        return Some(Missing::CpuFeatures);
    }
    match kernel.min_compute_capability {
        Some((major, minor))
            if crate::device::compute_capability(device).is_none_or(|cc| cc < (major, minor)) =>
        {
            Some(Missing::Capability(major, minor))
        }
        _ => None,
    }
}

/// Whether the native arm written as `kernels` can run on `device` in `dtype`, and if not, why.
pub fn native_status(
    kernels: &[NativeKernel],
    backend: Backend,
    device: &Device,
    dtype: DType,
) -> std::result::Result<(), Unavailable> {
    let Some(why) = missing(kernels, backend, device, dtype) else {
        return Ok(());
    };
    Err(match why {
        Missing::NoKernelForBackend => Unavailable::NoKernel {
            detail: format!("no {} kernel is written for this op", backend.name()),
        },
        Missing::NotBuilt => match backend.feature() {
            Some(feature) => Unavailable::NotBuilt { feature },
            None => Unavailable::NoKernel {
                detail: format!("g4 cannot build {} kernels", backend.name()),
            },
        },
        Missing::NoDevice => Unavailable::NoDevice {
            detail: match backend {
                Backend::Hip => hip_built_but_idle(),
                _ => "the selected device is not of this backend".to_string(),
            },
        },
        Missing::NoDtypeVariant => Unavailable::NoKernel {
            detail: format!("the {} kernel has no {dtype:?} variant", backend.name()),
        },
        Missing::Capability(major, minor) => Unavailable::DeviceUnsupported {
            need: format!("compute capability >= {major}.{minor}"),
        },
        Missing::CpuFeatures => Unavailable::DeviceUnsupported {
            need: cpu::REQUIREMENT.to_string(),
        },
    })
}

/// The backend whose native arm runs `kernels` on `device` in `dtype`, if any.
pub fn select(kernels: &[NativeKernel], device: &Device, dtype: DType) -> Option<Backend> {
    Backend::ALL
        .into_iter()
        .find(|&backend| missing(kernels, backend, device, dtype).is_none())
}

/// Why a HIP arm that this build compiled cannot run.
fn hip_built_but_idle() -> String {
    #[cfg(feature = "hip")]
    let built = format!("built for {}", hip::architectures().join(", "));
    #[cfg(not(feature = "hip"))]
    let built = "built".to_string();
    format!(
        "{built} (not run on AMD hardware in g4's tests); no HIP device: candle has no ROCm \
         backend and g4 no HIP runtime arm yet"
    )
}

const FLOATS: &[DType] = &[DType::F32, DType::BF16, DType::F16];

/// A CUDA kernel in every float dtype; the PTX targets compute_80 at the lowest (bf16
/// conversions).
const CUDA_FLOAT_KERNEL: NativeKernel = NativeKernel {
    backend: Backend::Cuda,
    dtypes: FLOATS,
    min_compute_capability: Some((8, 0)),
};

/// The same source compiled for AMD GPUs (`--features hip`).
const HIP_FLOAT_KERNEL: NativeKernel = NativeKernel {
    backend: Backend::Hip,
    dtypes: FLOATS,
    min_compute_capability: None,
};

/// g4's own GPU kernel (src/kernels/cuda/, CUDA and HIP) in every float dtype.
pub const GPU_FLOATS: &[NativeKernel] = &[CUDA_FLOAT_KERNEL, HIP_FLOAT_KERNEL];

/// A CUDA arm that is the vendor BLAS (cuBLAS), which has no HIP counterpart in g4.
pub const CUDA_BLAS_FLOATS: &[NativeKernel] = &[CUDA_FLOAT_KERNEL];

/// g4's own GPU kernel in f32 only.
pub const GPU_F32: &[NativeKernel] = &[
    NativeKernel {
        dtypes: &[DType::F32],
        ..CUDA_FLOAT_KERNEL
    },
    NativeKernel {
        dtypes: &[DType::F32],
        ..HIP_FLOAT_KERNEL
    },
];

/// A CPU SIMD kernel in f32.
const CPU_F32_KERNEL: NativeKernel = NativeKernel {
    backend: Backend::Cpu,
    dtypes: &[DType::F32],
    min_compute_capability: None,
};

/// g4's own GPU kernel in every float dtype, and a CPU SIMD kernel in f32.
pub const GPU_FLOATS_AND_CPU_F32: &[NativeKernel] =
    &[CUDA_FLOAT_KERNEL, HIP_FLOAT_KERNEL, CPU_F32_KERNEL];

/// A CPU SIMD kernel in f32 only (an op the model uses on CPUs only).
pub const CPU_F32: &[NativeKernel] = &[CPU_F32_KERNEL];

/// A kernel argument.
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    Tensor(&'a Tensor),
    /// A tensor whose rows are contiguous but whose outer dims may be strided (a cache view);
    /// the kernel receives the strides separately.
    RowView(&'a Tensor),
    /// A null pointer when absent (e.g. the weightless RMSNorm).
    OptionalTensor(Option<&'a Tensor>),
    I32(i32),
    U32(u32),
    Usize(usize),
    F32(f32),
    /// A TMA descriptor, passed by value (the kernel takes it as a `__grid_constant__`).
    TensorMap(&'a TensorMap),
}

/// A TMA descriptor of a row-major matrix: CUDA's `CUtensorMap`, 128 opaque bytes made by
/// [`tensor_map`] for the copy engine of Hopper and newer GPUs.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
pub struct TensorMap(pub [u64; 16]);

/// How TMA lays a box's rows out in shared memory: 16-byte chunks of each row exchanged by row
/// index within a span of 64 or 128 bytes, so that column reads do not share banks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swizzle {
    Bytes64,
    Bytes128,
}

/// The TMA descriptor of the contiguous matrix `t` (`[outer, inner]`, bf16, f16 or e4m3) copied in
/// boxes of `box_outer` rows of `box_inner` elements, with `swizzle`; rows past the matrix's
/// edge read as zeros.
pub fn tensor_map(
    t: &Tensor,
    box_inner: usize,
    box_outer: usize,
    swizzle: Swizzle,
) -> Result<TensorMap> {
    match t.device() {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::tensor_map(t, box_inner, box_outer, swizzle),
        device => {
            let _ = (box_inner, box_outer, swizzle);
            candle_core::bail!(
                "TMA descriptors are CUDA's: no native backend of this build drives {device:?}"
            )
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub blocks: u32,
    pub threads: u32,
}

impl Grid {
    /// `blocks` blocks of `warps` warps each, on a GPU whose warps are `lanes` wide. Kernels
    /// that hand work out per warp are launched through this, never with a thread count that
    /// assumes 32 lanes.
    pub fn of_warps(blocks: usize, warps: usize, lanes: usize) -> Grid {
        Grid {
            blocks: blocks.max(1) as u32,
            threads: (warps * lanes) as u32,
        }
    }

    /// Warps per block on a GPU whose warps are `lanes` wide (what the geometry tests check).
    #[cfg(test)]
    pub fn warps(&self, lanes: usize) -> usize {
        self.threads as usize / lanes
    }
}

/// The warp widths g4's kernels must be correct for: NVIDIA's and AMD RDNA's (gfx1100) 32
/// lanes, AMD CDNA's (gfx90a, gfx942) 64-lane wavefronts. The launch-geometry tests run both.
pub const WARP_WIDTHS: [usize; 2] = [32, 64];

/// Lanes per warp of the GPU behind `device`: 32 on every NVIDIA GPU, the only GPUs that run
/// g4's kernels today (a HIP device would report its wavefront size, 32 or 64).
pub fn warp_lanes(device: &Device) -> usize {
    match device {
        Device::Cuda(_) => 32,
        _ => WARP_WIDTHS[0],
    }
}

/// A grid-stride launch over `n` elements.
pub fn elementwise(n: usize) -> Grid {
    let threads = 256;
    Grid {
        blocks: n.div_ceil(threads as usize).clamp(1, 65_535) as u32,
        threads,
    }
}

/// Row elements a thread of the norm kernels aims to hold, and the most it can: each norm
/// kernel comes in two register budgets, `V = 8` and `V = 16` (`_wide`; norms.cu).
const ROW_VALUES_PER_THREAD: usize = 8;
const ROW_VALUES_MAX: usize = 16;

/// The norm kernels' block size limit (`G4_NORM_MAX_THREADS`, their launch bound): they hold
/// four rows' worth of values per thread, too many registers for 1024-thread blocks.
const ROW_MAX_THREADS: usize = 512;

/// A launch of a norm kernel: one block per row, and the register budget the row needs.
pub struct RowLaunch {
    pub grid: Grid,
    variant: RowVariant,
}

/// Which of a norm kernel's variants (norms.cu) holds the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowVariant {
    /// `ROW_VALUES_PER_THREAD` values a thread.
    Plain,
    /// `ROW_VALUES_MAX` values a thread: `_wide`.
    Wide,
    /// The wide row held with the weights read where used: `_wide_lean`.
    WideLean,
    /// A few wide rows at `ROW_VALUES_PER_THREAD` values a thread over up to
    /// `FEW_ROWS_MAX_THREADS`: `_few_rows`.
    FewRows,
}

impl RowLaunch {
    /// `g4_<kernel>[_wide[_lean]|_few_rows]_<dtype>`.
    pub fn kernel(&self, kernel: &str, dtype: DType) -> Result<String> {
        let suffix = match self.variant {
            RowVariant::Plain => "",
            RowVariant::Wide => "_wide",
            RowVariant::WideLean => "_wide_lean",
            RowVariant::FewRows => "_few_rows",
        };
        kernel_name(&format!("{kernel}{suffix}"), dtype)
    }
}

/// One block per row, with enough threads to hold the row in registers, and at least one whole
/// warp of `lanes` (the block reductions shuffle across a full warp); `None` for rows wider
/// than a block holds (8192 elements).
pub fn per_row(rows: usize, cols: usize, lanes: usize) -> Option<RowLaunch> {
    let threads = cols
        .div_ceil(ROW_VALUES_PER_THREAD)
        .next_power_of_two()
        .clamp(lanes, ROW_MAX_THREADS);
    let wide = cols > threads * ROW_VALUES_PER_THREAD;
    (cols <= threads * ROW_VALUES_MAX).then_some(RowLaunch {
        grid: Grid {
            blocks: rows as u32,
            threads: threads as u32,
        },
        variant: if wide {
            RowVariant::Wide
        } else {
            RowVariant::Plain
        },
    })
}

/// [`per_row`]'s launch where it holds the row at `ROW_VALUES_PER_THREAD` values a thread (rows
/// up to 4,096 wide), for kernels that come only in that budget; `None` for wider rows.
pub fn per_row_plain(rows: usize, cols: usize, lanes: usize) -> Option<RowLaunch> {
    per_row(rows, cols, lanes).filter(|launch| launch.variant == RowVariant::Plain)
}

/// The lean wide norm's launch bound (`G4_LEAN_NORM_MAX_THREADS`).
const ROW_LEAN_MAX_THREADS: usize = 384;

/// The `_wide_lean` launch for rows 4,097–6,144 wide (31B's 5,376), for kernels that have that
/// variant: one block per row sized to hold it at `ROW_VALUES_MAX` values a thread, whole warps
/// of `lanes`; `None` for rows [`per_row`] takes.
pub fn per_row_lean(rows: usize, cols: usize, lanes: usize) -> Option<RowLaunch> {
    let (values, fits) = (ROW_VALUES_MAX, ROW_LEAN_MAX_THREADS);
    wide_row_launch(rows, cols, lanes, values, fits, RowVariant::WideLean)
}

/// Rows a launch may have to take the `_few_rows` variant: a decode step's, or a short prefill
/// piece's.
const FEW_ROWS: usize = 8;
/// The few-rows norm's launch bound (`G4_FEW_ROWS_NORM_MAX_THREADS`).
const FEW_ROWS_MAX_THREADS: usize = 1024;

/// The `_few_rows` launch for up to [`FEW_ROWS`] rows 4,097–8,192 wide, for kernels that have
/// that variant: one block per row of `ROW_VALUES_PER_THREAD` values a thread, whole warps of
/// `lanes`. A decode step's norm runs alone between two GEMVs, so its length is latency: one
/// load per thread and input, and more threads reducing at once. `None` for other rows.
pub fn per_row_few(rows: usize, cols: usize, lanes: usize) -> Option<RowLaunch> {
    let (values, fits) = (ROW_VALUES_PER_THREAD, FEW_ROWS_MAX_THREADS);
    (rows <= FEW_ROWS)
        .then(|| wide_row_launch(rows, cols, lanes, values, fits, RowVariant::FewRows))
        .flatten()
}

/// One block per row of a row wider than [`per_row`]'s plain blocks hold, sized to it at
/// `values` a thread in whole warps of `lanes`, where that is at most `max_threads`.
fn wide_row_launch(
    rows: usize,
    cols: usize,
    lanes: usize,
    values: usize,
    max_threads: usize,
    variant: RowVariant,
) -> Option<RowLaunch> {
    let threads = cols.div_ceil(values).next_multiple_of(lanes);
    let wide = cols > ROW_MAX_THREADS * ROW_VALUES_PER_THREAD;
    (wide && threads <= max_threads).then_some(RowLaunch {
        grid: Grid {
            blocks: rows as u32,
            threads: threads as u32,
        },
        variant,
    })
}

/// qkv_norm_rope's block (`G4_QKV_BLOCK_THREADS`): one row (a head) per warp.
const WARP_ROW_BLOCK_THREADS: usize = 256;

/// One row per warp, `WARP_ROW_BLOCK_THREADS` a block, the register budget the row needs on
/// `lanes` lanes; `None` for rows wider than a warp holds.
pub fn per_warp(rows: usize, cols: usize, lanes: usize) -> Option<RowLaunch> {
    (cols <= lanes * ROW_VALUES_MAX).then(|| RowLaunch {
        grid: Grid::of_warps(
            rows.div_ceil(WARP_ROW_BLOCK_THREADS / lanes),
            WARP_ROW_BLOCK_THREADS / lanes,
            lanes,
        ),
        variant: if cols > lanes * ROW_VALUES_PER_THREAD {
            RowVariant::Wide
        } else {
            RowVariant::Plain
        },
    })
}

/// Whether a kernel can read `t` in 16-byte vectors from its first element.
pub fn vector_aligned(t: &Tensor) -> bool {
    (t.layout().start_offset() * t.dtype().size_in_bytes()).is_multiple_of(16)
}

/// `g4_<kernel>_<f32|bf16|f16>`.
pub fn kernel_name(kernel: &str, dtype: DType) -> Result<String> {
    let suffix = match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        other => candle_core::bail!("g4's CUDA kernel {kernel} has no {other:?} variant"),
    };
    Ok(format!("g4_{kernel}_{suffix}"))
}

/// Launches kernel `name` (see [`kernel_name`]) on `device`'s stream.
pub fn launch(name: &str, device: &Device, grid: Grid, args: &[Arg]) -> Result<()> {
    launch_with_shared(name, device, grid, 0, args)
}

/// [`launch`] with `shared_bytes` of dynamic shared memory per block (past the 48 KiB a kernel
/// gets by default, the launch raises the kernel's limit first).
pub fn launch_with_shared(
    name: &str,
    device: &Device,
    grid: Grid,
    shared_bytes: u32,
    args: &[Arg],
) -> Result<()> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::launch(name, device, grid, shared_bytes, args),
        _ => {
            let _ = (grid, shared_bytes, args);
            candle_core::bail!("{name}: no native backend of this build drives {device:?}")
        }
    }
}

/// `α·A·Bᵀ + β·C` through the vendor BLAS (a new tensor; C is not modified).
pub fn gemm_bt_accumulate(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f64,
    beta: f64,
) -> Result<Tensor> {
    match a.device() {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::gemm_bt_accumulate(a, b, c, alpha, beta),
        device => {
            let _ = (b, c, alpha, beta);
            candle_core::bail!("no vendor BLAS of this build drives {device:?}")
        }
    }
}

/// `Y [M, N] = (X_e4m3 ⊙ x_scale[row]) · (W_e4m3 ⊙ w_scale[row])ᵀ` in `dtype` on FP8 tensor
/// cores (cuBLASLt with outer-vector scales: CUDA compute capability 8.9 or newer, K a multiple
/// of 16). `x` and `w` hold e4m3 bits (U8 or F8E4M3), the scales are f32.
pub fn gemm_bt_fp8_row_scales(
    x: &Tensor,
    x_scale: &Tensor,
    w: &Tensor,
    w_scale: &Tensor,
    dtype: DType,
) -> Result<Tensor> {
    match x.device() {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::gemm_bt_fp8_row_scales(x, x_scale, w, w_scale, dtype),
        device => {
            let _ = (x_scale, w, w_scale, dtype);
            candle_core::bail!("no FP8 GEMM of this build drives {device:?}")
        }
    }
}

/// Row groups times their own matrix through the vendor BLAS's grouped GEMM: rows
/// `[start_g, start_g + counts[g])` of `a [R, K]` times `b[g]ᵀ` (`b [G, N, K]`) → `[R, N]`.
pub fn grouped_gemm_bt(a: &Tensor, counts: &[usize], b: &Tensor) -> Result<Tensor> {
    match a.device() {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::grouped_gemm_bt(a, counts, b),
        device => {
            let _ = (counts, b);
            candle_core::bail!("no vendor grouped GEMM of this build drives {device:?}")
        }
    }
}

/// Attention's `p·v` for every head through the vendor BLAS, written token-major: `probs [B,
/// kv_heads, group·S, T]` (contiguous; head `kv·group + g` owns rows `g·S ..`) and `v [B,
/// kv_heads, T, D]` (contiguous rows) → `[B, S, heads, D]`.
pub fn probs_values_token_major(probs: &Tensor, v: &Tensor, seq: usize) -> Result<Tensor> {
    match probs.device() {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::probs_values_token_major(probs, v, seq),
        device => {
            let _ = (v, seq);
            candle_core::bail!("no vendor batched GEMM of this build drives {device:?}")
        }
    }
}

/// An output tensor for a kernel that writes every element: uninitialised on a GPU, zeros on
/// the host; poisoned and guarded while a numerical check is armed ([`poison`]).
pub fn empty(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
    let shape = shape.into();
    if let Some(poisoned) = poison::allocate(&shape, dtype, device) {
        return poisoned;
    }
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::empty(&shape, dtype, device),
        _ => Tensor::zeros(shape, dtype, device),
    }
}

/// Fills the contiguous tensor `dst` (`[rows, …]`) from the host: `fill(rows, bytes)` writes
/// the host image of a range of its rows into `bytes`. On CUDA the rows are written straight
/// into pinned staging buffers, a chunk at a time, and each chunk's copy runs while the host
/// fills the next; the call returns before the GPU has read the last one.
pub fn upload_rows(dst: &Tensor, fill: &mut RowFill) -> Result<()> {
    let rows = dst.dims().first().copied().unwrap_or(1);
    let bytes = dst.elem_count() * dst.dtype().size_in_bytes();
    if !dst.is_contiguous() || rows == 0 {
        candle_core::bail!("upload: the destination must be contiguous with at least one row");
    }
    match dst.device() {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::upload_rows(dst, rows, bytes / rows, fill),
        device => {
            let mut image = vec![0u8; bytes];
            fill(0..rows, &mut image)?;
            let src = Tensor::from_raw_buffer(&image, dst.dtype(), dst.dims(), device)?;
            dst.slice_set(&src, 0, 0)
        }
    }
}

/// Writes the host image of rows `range` into the byte slice (see [`upload_rows`]).
pub type RowFill<'a> = dyn FnMut(std::ops::Range<usize>, &mut [u8]) -> Result<()> + 'a;

/// A new `[rows, …]` tensor filled from the host as [`upload_rows`] does.
pub fn upload_new(
    dtype: DType,
    shape: impl Into<Shape>,
    device: &Device,
    fill: &mut RowFill,
) -> Result<Tensor> {
    let shape = shape.into();
    let dst = match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::empty(&shape, dtype, device)?,
        _ => Tensor::zeros(shape, dtype, device)?,
    };
    upload_rows(&dst, fill)?;
    Ok(dst)
}

/// A host table the device reads in place: page-locked and mapped for the GPU, so that a
/// gather of its rows runs on the device and the host copies nothing (CUDA only).
pub struct MappedTable {
    /// Where the GPU sees the table's first byte.
    device_address: usize,
    /// The registration, undone when the table is dropped.
    #[cfg(feature = "cuda")]
    _registration: cuda::MappedHost,
}

impl MappedTable {
    /// Registers `bytes` for `device`; `None` on devices that cannot read host memory in place.
    /// `bytes` must outlive the table.
    pub fn register(device: &Device, bytes: &[u8]) -> Result<Option<MappedTable>> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => {
                let registration = cuda::MappedHost::register(device, bytes)?;
                Ok(Some(MappedTable {
                    device_address: registration.device_address() as usize,
                    _registration: registration,
                }))
            }
            _ => {
                let _ = bytes;
                Ok(None)
            }
        }
    }

    /// Rows `ids` (`[n]` u32 on the device, each within the table) of `row_bytes` bytes, as a
    /// new `[n, cols]` tensor of `dtype`: one block per row, in 16-byte vectors where the table
    /// and its rows are aligned to them, else in 2-byte units (a safetensors tensor starts
    /// where the one before it ended).
    pub fn gather_rows(
        &self,
        ids: &Tensor,
        row_bytes: usize,
        dtype: DType,
        cols: usize,
    ) -> Result<Tensor> {
        let table = self.device_address;
        let n = ids.dim(0)?;
        let out = empty((n, cols), dtype, ids.device())?;
        let (kernel, unit) = match (table | row_bytes).is_multiple_of(16) {
            true => ("g4_gather_rows_mapped", 16),
            false => ("g4_gather_rows_mapped_u16", 2),
        };
        let args = [
            Arg::Usize(table),
            Arg::Tensor(ids),
            Arg::Tensor(&out),
            Arg::U32((row_bytes / unit) as u32),
        ];
        let grid = Grid::of_warps(n, 8, warp_lanes(ids.device()));
        launch(kernel, ids.device(), grid, &args)?;
        Ok(out)
    }
}

/// Whether steps can be recorded into a graph on `device`.
pub fn can_capture(device: &Device) -> bool {
    cfg!(feature = "cuda") && device.is_cuda()
}

/// A recorded step, replayed as one launch.
pub struct CapturedGraph {
    #[cfg(feature = "cuda")]
    inner: cuda::CapturedGraph,
}

impl CapturedGraph {
    pub fn replay(&self) -> Result<()> {
        #[cfg(feature = "cuda")]
        return self.inner.replay();
        #[cfg(not(feature = "cuda"))]
        candle_core::bail!("graph replay needs a build with --features cuda")
    }
}

/// Runs `step` once for real and records it into a graph (see [`can_capture`]).
pub fn run_and_capture(device: &Device, step: &dyn Fn() -> Result<()>) -> Result<CapturedGraph> {
    #[cfg(feature = "cuda")]
    return Ok(CapturedGraph {
        inner: cuda::run_and_capture(device, step)?,
    });
    #[cfg(not(feature = "cuda"))]
    {
        let _ = step;
        candle_core::bail!("graph capture on {device:?} needs a build with --features cuda")
    }
}

#[cfg(test)]
mod tests {
    use super::{Grid, WARP_WIDTHS};
    use candle_core::DType;

    /// `moe_router_topk` and `attention` launch `Grid::of_warps` directly with the warps their
    /// kernels expect per block.
    #[test]
    fn a_grid_of_warps_holds_those_warps_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for warps in [1, 4, 8, 16] {
                let grid = Grid::of_warps(3, warps, lanes);
                assert_eq!((grid.blocks, grid.warps(lanes)), (3, warps));
                assert!(grid.threads <= 1024);
            }
        }
    }

    /// The row values a thread of `launch`'s kernel variant holds.
    fn values_per_thread(launch: &super::RowLaunch) -> usize {
        match launch.variant {
            super::RowVariant::Plain | super::RowVariant::FewRows => super::ROW_VALUES_PER_THREAD,
            super::RowVariant::Wide | super::RowVariant::WideLean => super::ROW_VALUES_MAX,
        }
    }

    /// The norm kernels' blocks are whole warps on any width and hold their row.
    #[test]
    fn a_row_block_is_whole_warps_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for cols in [1, 16, 64, 256, 512, 2816, 4096, 4097, 5376, 8192] {
                let launch = super::per_row(2, cols, lanes).unwrap();
                let threads = launch.grid.threads as usize;
                assert!(
                    threads.is_multiple_of(lanes) && threads <= 512,
                    "{cols} {lanes}"
                );
                assert!(
                    cols <= threads * values_per_thread(&launch),
                    "{cols} {lanes}"
                );
                let wide = launch.variant == super::RowVariant::Wide;
                assert_eq!(wide, cols > 4096, "{cols} {lanes}");
            }
            assert!(super::per_row(1, 8200, lanes).is_none());
        }
    }

    /// `launch` runs `dual_rms_norm_plus_res`'s `variant` for `rows × cols`: a block per row,
    /// whole warps of `lanes`, at most `max_threads`, holding the row.
    fn assert_holds_rows(
        launch: &super::RowLaunch,
        variant: &str,
        (rows, cols): (usize, usize),
        lanes: usize,
        max_threads: usize,
    ) {
        let name = launch.kernel("dual_rms_norm_plus_res", DType::BF16);
        let want = format!("g4_dual_rms_norm_plus_res{variant}_bf16");
        assert_eq!(name.unwrap(), want);
        let threads = launch.grid.threads as usize;
        let context = format!("{rows} × {cols} on {lanes} lanes");
        assert!(
            threads.is_multiple_of(lanes) && threads <= max_threads,
            "{context}"
        );
        assert!(cols <= threads * values_per_thread(launch), "{context}");
        assert_eq!(launch.grid.blocks as usize, rows, "{context}");
    }

    /// The lean launch takes exactly the wide rows its bound holds, in whole warps.
    #[test]
    fn a_lean_row_launch_takes_wide_rows_up_to_its_bound() {
        for lanes in WARP_WIDTHS {
            for cols in [4096, 4097, 5376, 6144, 6145, 8192] {
                let lean = super::per_row_lean(3, cols, lanes);
                assert_eq!(
                    lean.is_some(),
                    (4097..=6144).contains(&cols),
                    "{cols} {lanes}"
                );
                if let Some(launch) = lean {
                    assert_holds_rows(&launch, "_wide_lean", (3, cols), lanes, 384);
                }
            }
        }
    }

    /// The few-rows launch takes up to 8 rows 4,097–8,192 wide, each in one block of whole warps
    /// that holds it, and leaves every other row to the launches before it.
    #[test]
    fn a_few_rows_launch_takes_a_decode_steps_wide_rows() {
        for lanes in WARP_WIDTHS {
            for rows in [1, 3, 8, 9, 64] {
                for cols in [2560, 4096, 4097, 5376, 6144, 8192, 8200] {
                    let few = super::per_row_few(rows, cols, lanes);
                    assert_eq!(
                        few.is_some(),
                        rows <= 8 && (4097..=8192).contains(&cols),
                        "{rows} {cols} {lanes}"
                    );
                    if let Some(launch) = few {
                        assert_holds_rows(&launch, "_few_rows", (rows, cols), lanes, 1024);
                    }
                }
            }
        }
    }

    /// A warp-per-row launch covers every row with whole warps and holds each row in a warp.
    #[test]
    fn a_warp_row_launch_holds_its_rows_on_any_warp_width() {
        for lanes in WARP_WIDTHS {
            for (rows, cols) in [(1, 12), (7, 256), (32768, 256), (20480, 512), (9, 1024)] {
                let Some(launch) = super::per_warp(rows, cols, lanes) else {
                    assert!(cols > lanes * super::ROW_VALUES_MAX, "{cols} {lanes}");
                    continue;
                };
                let warps = launch.grid.warps(lanes);
                assert_eq!(launch.grid.threads as usize, super::WARP_ROW_BLOCK_THREADS);
                assert!(
                    launch.grid.blocks as usize * warps >= rows,
                    "{rows} {lanes}"
                );
                assert!(
                    (launch.grid.blocks as usize - 1) * warps < rows,
                    "{rows} {lanes}"
                );
                assert!(cols <= lanes * values_per_thread(&launch), "{cols} {lanes}");
            }
        }
    }

    /// The body of device function `name` in `sources` (from its definition's opening brace to
    /// the matching closing one).
    fn device_function_body<'s>(sources: &'s str, name: &str) -> Option<&'s str> {
        let definition = format!(" {name}(");
        sources.match_indices(&definition).find_map(|(at, _)| {
            let rest = &sources[at..];
            let close = rest.find(')')?;
            let after = rest[close..].trim_start_matches(|c: char| c != '{' && c != ';');
            if !after.starts_with('{') {
                return None;
            }
            let mut depth = 0;
            for (i, c) in after.char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    return Some(&after[..=i]);
                }
            }
            None
        })
    }

    /// Whether `body` waits for its inputs, itself or in a device function it calls, up to
    /// `depth` calls down.
    fn waits(sources: &str, body: &str, depth: usize) -> bool {
        body.contains("G4_WAIT_FOR_INPUTS()")
            || depth > 0
                && body
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|word| word.len() > 2)
                    .filter_map(|word| device_function_body(sources, word))
                    .any(|callee| callee != body && waits(sources, callee, depth - 1))
    }

    /// Every kernel may start before the one before it has finished (programmatic dependent
    /// launch, native/cuda.rs): each entry point's body must begin with `G4_KERNEL_START`, or,
    /// for the kernels that load their weights before their inputs (the decode GEMVs, the
    /// norms), let dependents launch and call a device function that waits. A kernel without
    /// either would read its input early.
    #[test]
    fn every_kernel_waits_for_its_inputs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kernels/cuda");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        let sources: String = files
            .iter()
            .filter(|path| path.extension().is_some_and(|e| e == "cu" || e == "cuh"))
            .map(|path| std::fs::read_to_string(path).unwrap())
            .collect();
        let mut kernels = 0;
        for path in files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        {
            let source = std::fs::read_to_string(path).unwrap();
            for (at, _) in source.match_indices("__global__") {
                let body = &source[at..][source[at..].find('{').unwrap() + 1..];
                let mut statements = body
                    .trim_start_matches(|c: char| c.is_whitespace() || c == '\\')
                    .split(';');
                let first = statements.next().unwrap();
                let callee = statements
                    .next()
                    .unwrap()
                    .trim_start_matches(|c: char| c.is_whitespace() || c == '\\')
                    .split(['<', '('])
                    .next()
                    .unwrap();
                // The norms wait up to three calls down (`dual_rms_norm_plus_res` →
                // `dual_norm_y` → `store_residual_after` → `load_tail_inputs`).
                let loads_weights_first = first == "G4_LET_DEPENDENTS_LAUNCH()"
                    && device_function_body(&sources, callee)
                        .is_some_and(|callee| waits(&sources, callee, 3));
                assert!(
                    first == "G4_KERNEL_START()" || loads_weights_first,
                    "{}: a kernel starts with `{first}` and calls `{callee}`",
                    path.display()
                );
                kernels += 1;
            }
        }
        assert!(
            kernels >= 28,
            "found {kernels} kernels under {}",
            dir.display()
        );
    }
}
