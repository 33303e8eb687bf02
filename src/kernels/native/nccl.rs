//! NCCL's all-reduce across the CUDA devices of a tensor-parallel group. libnccl (NCCL 2) is
//! loaded at run time, when a group is first made: g4 builds without it and runs on one GPU
//! without it. The communicators come from `ncclCommInitAll` in this process (one rank per
//! device, each then used by its rank's thread alone), so nothing needs exchanging or setting up.

use super::collective::AllReduce;
use super::cuda::{address, cuda_device, empty};
use candle_core::{DType, Device, Tensor};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

type Comm = *mut c_void;
type Status = c_int;

/// `ncclDataType_t` and `ncclRedOp_t` values (nccl.h, stable since NCCL 2.10).
const NCCL_FLOAT16: c_int = 6;
const NCCL_FLOAT32: c_int = 7;
const NCCL_BFLOAT16: c_int = 9;
const NCCL_SUM: c_int = 0;

type CommInitAll = unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> Status;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    *mut c_void,
) -> Status;
type CommFn = unsafe extern "C" fn(Comm) -> Status;
type ErrorString = unsafe extern "C" fn(Status) -> *const c_char;

struct Library {
    comm_init_all: CommInitAll,
    all_reduce: AllReduceFn,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    error_string: ErrorString,
}

fn library() -> anyhow::Result<&'static Library> {
    static LIBRARY: OnceLock<Result<Library, String>> = OnceLock::new();
    LIBRARY
        .get_or_init(open_library)
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn open_library() -> Result<Library, String> {
    for name in [c"libnccl.so.2", c"libnccl.so"] {
        // SAFETY: dlopen with a NUL-terminated name; a null handle means not found.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            continue;
        }
        let symbol = |symbol: &CStr| {
            // SAFETY: dlsym on a live handle with a NUL-terminated name.
            let address = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
            match address.is_null() {
                true => Err(format!(
                    "{} has no {}",
                    name.to_string_lossy(),
                    symbol.to_string_lossy()
                )),
                false => Ok(address),
            }
        };
        // SAFETY: each symbol has the C signature nccl.h gives it, which its field declares.
        return unsafe {
            Ok(Library {
                comm_init_all: std::mem::transmute::<*mut c_void, CommInitAll>(symbol(
                    c"ncclCommInitAll",
                )?),
                all_reduce: std::mem::transmute::<*mut c_void, AllReduceFn>(symbol(
                    c"ncclAllReduce",
                )?),
                comm_destroy: std::mem::transmute::<*mut c_void, CommFn>(symbol(
                    c"ncclCommDestroy",
                )?),
                comm_abort: std::mem::transmute::<*mut c_void, CommFn>(symbol(c"ncclCommAbort")?),
                error_string: std::mem::transmute::<*mut c_void, ErrorString>(symbol(
                    c"ncclGetErrorString",
                )?),
            })
        };
    }
    Err(
        "several GPUs need NCCL, and libnccl.so.2 is not installed (the nvidia-nccl-cu13 \
         wheel or the libnccl2 package has it; put its directory on LD_LIBRARY_PATH)"
            .into(),
    )
}

fn check(library: &Library, status: Status, what: &str) -> anyhow::Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: NCCL returns a static NUL-terminated string for every status.
    let text = unsafe { CStr::from_ptr((library.error_string)(status)) };
    anyhow::bail!("NCCL {what}: {} (status {status})", text.to_string_lossy())
}

/// Every rank's communicator; destroyed when the last rank's handle goes.
struct Communicators {
    library: &'static Library,
    comms: Vec<Comm>,
    aborted: AtomicBool,
}

// SAFETY: a communicator is used by one rank's thread at a time (`sum`), and abort, which NCCL
// allows from any thread, is what may touch it from another.
unsafe impl Send for Communicators {}
unsafe impl Sync for Communicators {}

impl Drop for Communicators {
    fn drop(&mut self) {
        if !self.aborted.load(Ordering::SeqCst) {
            for &comm in &self.comms {
                // SAFETY: each communicator was made by ncclCommInitAll and is freed once.
                unsafe { (self.library.comm_destroy)(comm) };
            }
        }
    }
}

struct NcclAllReduce {
    rank: usize,
    communicators: Arc<Communicators>,
}

/// One handle per device, in order; the devices must be distinct CUDA GPUs.
pub fn group(devices: &[Device]) -> anyhow::Result<Vec<Arc<dyn AllReduce>>> {
    let library = library()?;
    let ordinals = devices
        .iter()
        .map(|d| match d.location() {
            candle_core::DeviceLocation::Cuda { gpu_id } => Ok(gpu_id as c_int),
            _ => anyhow::bail!("NCCL groups CUDA devices only"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut comms = vec![std::ptr::null_mut(); devices.len()];
    // SAFETY: `comms` has room for one communicator per ordinal.
    let status = unsafe {
        (library.comm_init_all)(
            comms.as_mut_ptr(),
            ordinals.len() as c_int,
            ordinals.as_ptr(),
        )
    };
    check(library, status, "ncclCommInitAll")?;
    let communicators = Arc::new(Communicators {
        library,
        comms,
        aborted: AtomicBool::new(false),
    });
    Ok((0..devices.len())
        .map(|rank| {
            Arc::new(NcclAllReduce {
                rank,
                communicators: communicators.clone(),
            }) as Arc<dyn AllReduce>
        })
        .collect())
}

impl AllReduce for NcclAllReduce {
    fn sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let communicators = &*self.communicators;
        if communicators.aborted.load(Ordering::SeqCst) {
            candle_core::bail!("another device's rank failed");
        }
        let datatype = match x.dtype() {
            DType::F32 => NCCL_FLOAT32,
            DType::BF16 => NCCL_BFLOAT16,
            DType::F16 => NCCL_FLOAT16,
            other => candle_core::bail!("NCCL all-reduce of {other:?} tensors"),
        };
        let x = x.contiguous()?;
        let out = empty(x.shape(), x.dtype(), x.device())?;
        let stream = cuda_device(x.device())?.cuda_stream();
        // NCCL enqueues on the calling thread's current device: this rank's.
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| candle_core::Error::Msg(format!("binding rank {}: {e}", self.rank)))?;
        let (src, dst) = (address(&x, false, &stream)?, address(&out, false, &stream)?);
        // SAFETY: `src` and `dst` address `elem_count` elements of `datatype` on this rank's
        // device, and the sum is queued on the stream that every later use of `out` follows.
        let status = unsafe {
            (communicators.library.all_reduce)(
                src as *const c_void,
                dst as *mut c_void,
                x.elem_count(),
                datatype,
                NCCL_SUM,
                communicators.comms[self.rank],
                stream.cu_stream() as *mut c_void,
            )
        };
        check(communicators.library, status, "ncclAllReduce")
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        Ok(out)
    }

    fn abort(&self) {
        let communicators = &*self.communicators;
        if !communicators.aborted.swap(true, Ordering::SeqCst) {
            for &comm in &communicators.comms {
                // SAFETY: NCCL allows aborting a communicator from any thread, also while
                // another thread waits on one of its operations.
                unsafe { (communicators.library.comm_abort)(comm) };
            }
        }
    }
}
