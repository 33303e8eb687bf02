//! `--device` and `--dtype` parsing, and what g4 knows about the device it runs on.

use anyhow::{bail, Context, Result};
#[cfg(feature = "cuda")]
use candle_core::cuda::cudarc::driver::sys;
use candle_core::{DType, Device};

/// Parses `cpu`, `cuda`, `cuda:N`, `metal` or `metal:N` and opens the device; `hip[:N]` is
/// understood and refused with what is missing.
pub fn open_device(spec: &str) -> Result<Device> {
    let (kind, ordinal) = match spec.split_once(':') {
        Some((kind, n)) => {
            let n: usize = n
                .parse()
                .with_context(|| format!("--device {spec}: '{n}' is not a device number"))?;
            (kind, n)
        }
        None => (spec, 0),
    };
    match kind {
        "cpu" if ordinal == 0 => Ok(Device::Cpu),
        "cuda" if !cfg!(feature = "cuda") => bail!(
            "--device {spec}: this g4 was built without CUDA support; rebuild with --features cuda (see scripts/build-cuda.sh)"
        ),
        "metal" if !cfg!(feature = "metal") => bail!(
            "--device {spec}: this g4 was built without Metal support; rebuild with --features metal"
        ),
        "cuda" => {
            let device = Device::new_cuda(ordinal).map_err(|e| {
                anyhow::anyhow!("--device {spec}: cannot open CUDA device {ordinal}: {e}")
            })?;
            set_up_cuda(&device).map_err(|e| anyhow::anyhow!("--device {spec}: {e}"))?;
            Ok(device)
        }
        "metal" => Device::new_metal(ordinal)
            .map_err(|e| anyhow::anyhow!("--device {spec}: cannot open Metal device {ordinal}: {e}")),
        "hip" => bail!(
            "--device {spec}: g4 cannot run on AMD GPUs yet: candle has no ROCm backend (an upstream pull request is open, unmerged) and g4 no HIP runtime arm for its kernels, which {}; {}. Use --device cpu; `g4 probe-ops` shows the HIP build",
            match cfg!(feature = "hip") {
                true => "this build compiled for AMD GPUs",
                false => "this build lacks (--features hip)",
            },
            hip_runtime_state()
        ),
        _ => bail!("--device {spec}: unknown device; expected cpu, cuda, cuda:N, metal or metal:N"),
    }
}

/// How g4 runs a CUDA device, set once when it opens:
/// - cudarc creates no CUDA events with the buffers it allocates. They order a buffer's uses
///   across streams, and g4 runs all of a device's work on candle's one stream, where cudarc
///   never records them: a prefill allocates about a thousand buffers, two events each.
/// - The device's memory pool keeps what freed buffers return, rather than handing it back to
///   the driver at every synchronisation (its default). Every forward ends in one, so each
///   prompt and each eager decode step mapped its working memory afresh: host time the GPU
///   waited for. [`release_cached_memory`] hands it back.
/// - Each thread's stack is `STACK_BYTES` rather than the default 1 KiB. The stack is reserved for
///   every thread the GPU can hold at once (≈ 260 MiB at 1 KiB on an H200). The driver raises the
///   limit at the launch of any kernel that needs more (a library's), and keeps it raised.
#[cfg(feature = "cuda")]
fn set_up_cuda(device: &Device) -> candle_core::Result<()> {
    use sys::CUmemPool_attribute;
    /// Bytes of stack per GPU thread: the most any of g4's kernels uses (48, attention.cu's, by
    /// ptxas), rounded up.
    const STACK_BYTES: usize = 64;
    if let Device::Cuda(cuda) = device {
        use candle_core::cuda::WrapErr;
        // SAFETY: no second stream exists on this context (g4 creates none), so no buffer has a
        // use on another stream to wait for.
        unsafe { cuda.disable_event_tracking() }
        let context = cuda.cuda_stream().context().clone();
        context.bind_to_thread().w()?;
        // SAFETY: sets a limit of the context bound just above.
        unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, STACK_BYTES) }
            .result()
            .w()?;
    }
    let mut threshold = u64::MAX;
    with_memory_pool(device, |pool| {
        // SAFETY: the attribute takes a u64 (cuMemPoolSetAttribute's documentation).
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
        }
    })
}

#[cfg(not(feature = "cuda"))]
fn set_up_cuda(_: &Device) -> candle_core::Result<()> {
    Ok(())
}

/// Hands the memory cached in the device's pool back to the driver, once the device is idle:
/// after loading, so that what the weights take is what the device shows in use.
#[cfg(feature = "cuda")]
pub fn release_cached_memory(device: &Device) -> candle_core::Result<()> {
    device.synchronize()?;
    // SAFETY: trimming only releases memory no live allocation holds.
    with_memory_pool(device, |pool| unsafe { sys::cuMemPoolTrimTo(pool, 0) })
}

#[cfg(not(feature = "cuda"))]
pub fn release_cached_memory(_: &Device) -> candle_core::Result<()> {
    Ok(())
}

/// Runs `f` on the default memory pool of a CUDA device (the one stream-ordered allocation
/// draws from); does nothing on other devices, nor on a GPU or driver without memory pools,
/// where cudarc allocates with plain `cuMemAlloc` and there is no pool to keep memory in.
#[cfg(feature = "cuda")]
fn with_memory_pool(
    device: &Device,
    f: impl FnOnce(sys::CUmemoryPool) -> sys::CUresult,
) -> candle_core::Result<()> {
    use candle_core::cuda::WrapErr;
    let Device::Cuda(cuda) = device else {
        return Ok(());
    };
    let context = cuda.cuda_stream().context().clone();
    if !context.has_async_alloc() {
        return Ok(());
    }
    context.bind_to_thread().w()?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: `pool` receives the handle of the pool the driver owns for this device.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device()).result() }.w()?;
    f(pool).result().w()
}

/// Parses `--device`: one device, or several separated by commas (`cuda:0,cuda:1`), over which
/// the model is split by tensor parallelism. The CPU may be named more than once (ranks on the
/// CPU check the split's arithmetic); a GPU may not.
pub fn open_devices(spec: &str) -> Result<Vec<Device>> {
    let specs: Vec<&str> = spec.split(',').map(str::trim).collect();
    let mut devices: Vec<Device> = Vec::with_capacity(specs.len());
    for one in &specs {
        if one.is_empty() {
            bail!("--device {spec}: empty device name in the list");
        }
        let device = open_device(one)?;
        if !device.is_cpu() && devices.iter().any(|d| d.location() == device.location()) {
            bail!("--device {spec}: {one} is named twice; each rank needs a GPU of its own");
        }
        devices.push(device);
    }
    Ok(devices)
}

/// What the HIP runtime says about this machine, asked through dlopen so that g4 needs no ROCm
/// to build or to run elsewhere.
fn hip_runtime_state() -> String {
    for name in [c"libamdhip64.so", c"libamdhip64.so.6", c"libamdhip64.so.5"] {
        // SAFETY: dlopen/dlsym with NUL-terminated names; the symbol, when present, is
        // hipGetDeviceCount(int*) -> hipError_t (an int), called with a live out-pointer.
        let count = unsafe {
            let handle = libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if handle.is_null() {
                continue;
            }
            let symbol = libc::dlsym(handle, c"hipGetDeviceCount".as_ptr());
            if symbol.is_null() {
                return format!("{} has no hipGetDeviceCount", name.to_string_lossy());
            }
            let get_count: extern "C" fn(*mut i32) -> i32 = std::mem::transmute(symbol);
            let mut count = 0i32;
            (get_count(&mut count), count)
        };
        return match count {
            (0, n) if n > 0 => format!("the HIP runtime finds {n} AMD GPU(s)"),
            _ => "the HIP runtime finds no AMD GPU".to_string(),
        };
    }
    "the HIP runtime (libamdhip64.so) is not installed".to_string()
}

/// Parses `f32`, `bf16` or `f16` (also the torch spellings `float32`, `bfloat16`, `float16`).
pub fn parse_dtype(spec: &str) -> Result<DType> {
    match spec {
        "f32" | "float32" => Ok(DType::F32),
        "bf16" | "bfloat16" => Ok(DType::BF16),
        "f16" | "float16" => Ok(DType::F16),
        _ => bail!("--dtype {spec}: unsupported compute dtype; expected f32, bf16 or f16"),
    }
}

pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        other => other.as_str(),
    }
}

/// A short human name of the device, e.g. `cpu` or `cuda:0`.
pub fn device_name(device: &Device) -> String {
    match device {
        Device::Cpu => "cpu".to_string(),
        Device::Cuda(_) => format!("cuda:{}", device_ordinal(device)),
        Device::Metal(_) => format!("metal:{}", device_ordinal(device)),
    }
}

/// The names of several devices, comma-separated as `--device` takes them.
pub fn device_names(devices: &[Device]) -> String {
    let names: Vec<String> = devices.iter().map(device_name).collect();
    names.join(",")
}

fn device_ordinal(device: &Device) -> usize {
    match device.location() {
        candle_core::DeviceLocation::Cpu => 0,
        candle_core::DeviceLocation::Cuda { gpu_id }
        | candle_core::DeviceLocation::Metal { gpu_id } => gpu_id,
    }
}

/// The CUDA compute capability of `device`, when it is a CUDA device g4 can query.
pub fn compute_capability(device: &Device) -> Option<(u32, u32)> {
    cuda_properties(device).map(|p| p.capability)
}

/// The most shared memory one block of a kernel may ask for on `device` (opting in past the
/// default 48 KiB), when it is a CUDA device g4 can query: 227 KiB on Hopper, 163 KiB on the
/// A100, 99 KiB on other Ampere and Ada GPUs.
pub fn max_shared_bytes_per_block(device: &Device) -> Option<usize> {
    cuda_properties(device).map(|p| p.shared_bytes_per_block)
}

/// The multiprocessors of `device`, when it is a CUDA device g4 can query.
pub fn multiprocessor_count(device: &Device) -> Option<usize> {
    cuda_properties(device).map(|p| p.multiprocessors)
}

#[derive(Clone, Copy)]
struct CudaProperties {
    capability: (u32, u32),
    shared_bytes_per_block: usize,
    multiprocessors: usize,
}

fn cuda_properties(device: &Device) -> Option<CudaProperties> {
    match device {
        Device::Cuda(_) => cached_cuda_properties(device_ordinal(device)),
        _ => None,
    }
}

/// Queried once per device: the registry asks on every op dispatch of the decode path.
#[cfg(feature = "cuda")]
fn cached_cuda_properties(ordinal: usize) -> Option<CudaProperties> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Known = HashMap<usize, Option<CudaProperties>>;
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    let mut known = known.lock().expect("device properties cache lock");
    *known
        .entry(ordinal)
        .or_insert_with(|| query_cuda_properties(ordinal))
}

#[cfg(feature = "cuda")]
fn query_cuda_properties(ordinal: usize) -> Option<CudaProperties> {
    use candle_core::cuda::cudarc::driver::{result, sys::CUdevice_attribute};
    result::init().ok()?;
    let dev = result::device::get(ordinal as i32).ok()?;
    let get = |attr| unsafe { result::device::get_attribute(dev, attr) }.ok();
    let major = get(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = get(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let shared = get(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let multiprocessors = get(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    Some(CudaProperties {
        capability: (major as u32, minor as u32),
        shared_bytes_per_block: shared as usize,
        multiprocessors: multiprocessors as usize,
    })
}

#[cfg(not(feature = "cuda"))]
fn cached_cuda_properties(_ordinal: usize) -> Option<CudaProperties> {
    None
}

/// What [`memory_in_use`] measures on this device.
pub fn memory_measure(device: &Device) -> &'static str {
    match device {
        Device::Cuda(_) => "GPU memory (device-wide)",
        _ => "process peak RSS",
    }
}

/// Memory in use: device-wide GPU memory on CUDA, the process's peak resident set elsewhere.
pub fn memory_in_use(device: &Device) -> Option<u64> {
    match device {
        Device::Cuda(_) => cuda_memory_in_use(device),
        _ => {
            let status = std::fs::read_to_string("/proc/self/status").ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
        }
    }
}

/// The driver answers for the thread's current context: `device`'s is made current first (the
/// ranks of a split model each have their own GPU).
#[cfg(feature = "cuda")]
fn cuda_memory_in_use(device: &Device) -> Option<u64> {
    let Device::Cuda(cuda) = device else {
        return None;
    };
    cuda.cuda_stream().context().bind_to_thread().ok()?;
    let (free, total) = candle_core::cuda::cudarc::driver::result::mem_get_info().ok()?;
    Some((total - free) as u64)
}

#[cfg(not(feature = "cuda"))]
fn cuda_memory_in_use(_: &Device) -> Option<u64> {
    None
}

/// Lets the host allocator reuse freed memory for the many megabyte-sized activations of a CPU
/// forward instead of returning it to the kernel and taking it back zeroed, page by page, on
/// the next call (glibc maps every block above a threshold that grows only to 32 MiB, and
/// unmaps it on free: on the CPU that cost 12 % of a prefill). Peak memory is unchanged.
pub fn keep_freed_host_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called once, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
