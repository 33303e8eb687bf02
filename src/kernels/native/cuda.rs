//! The CUDA implementation behind the native seam: g4's kernels (src/kernels/cuda/*.cu,
//! compiled to a fatbin by build.rs) launched on candle's stream, cuBLAS on candle's handle, output
//! allocation and CUDA graph capture. Compiled only with `--features cuda`.
use super::{Arg, Grid, Swizzle, TensorMap};
use candle_core::cuda::cudarc::driver::{sys, CudaFunction, DevicePtr};
use candle_core::cuda::{CudaStorage, CudaStorageSlice, WrapErr};
use candle_core::op::BackpropOp;
use candle_core::{DType, Device, Result, Shape, Storage, Tensor};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

/// g4's kernels for every target at once (build.rs): the driver picks the machine code for the
/// GPU present, or compiles the PTX for a GPU newer than the code.
const FATBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/g4_kernels.fatbin"));

pub(super) fn cuda_device(device: &Device) -> Result<&candle_core::CudaDevice> {
    match device {
        Device::Cuda(d) => Ok(d),
        _ => candle_core::bail!("g4's CUDA kernels need a CUDA device"),
    }
}

/// The device address of a CUDA tensor's first element; all but row views must be contiguous.
pub(super) fn address(
    t: &Tensor,
    rows_only: bool,
    stream: &candle_core::cuda::cudarc::driver::CudaStream,
) -> Result<u64> {
    let (storage, layout) = t.storage_and_layout();
    let rows_contiguous = layout.stride().last() == Some(&1);
    if !(layout.is_contiguous() || rows_only && rows_contiguous) {
        candle_core::bail!(
            "g4's CUDA kernels need contiguous inputs, got strides {:?}",
            layout.stride()
        );
    }
    let Storage::Cuda(cuda) = &*storage else {
        candle_core::bail!("tensor is not on a CUDA device")
    };
    let base = match &cuda.slice {
        CudaStorageSlice::U8(s) => s.device_ptr(stream).0,
        CudaStorageSlice::U32(s) => s.device_ptr(stream).0,
        CudaStorageSlice::BF16(s) => s.device_ptr(stream).0,
        CudaStorageSlice::F16(s) => s.device_ptr(stream).0,
        CudaStorageSlice::F32(s) => s.device_ptr(stream).0,
        CudaStorageSlice::F8E4M3(s) => s.device_ptr(stream).0,
        _ => candle_core::bail!("g4's CUDA kernels do not take {:?} tensors", t.dtype()),
    };
    Ok(base + (layout.start_offset() * t.dtype().size_in_bytes()) as u64)
}

/// Kernels resolved once per (device, name): a decode step launches hundreds of them, and a
/// driver symbol lookup per launch is measurable host time. The module is loaded once per device.
fn function(dev: &candle_core::CudaDevice, name: &str) -> Result<CudaFunction> {
    use candle_core::cuda::cudarc::driver::CudaModule;
    use candle_core::cuda::cudarc::nvrtc::Ptx;
    type Resolved = HashMap<(candle_core::cuda::DeviceId, String), CudaFunction>;
    type Modules = HashMap<candle_core::cuda::DeviceId, std::sync::Arc<CudaModule>>;
    static RESOLVED: OnceLock<Mutex<Resolved>> = OnceLock::new();
    static MODULES: OnceLock<Mutex<Modules>> = OnceLock::new();
    let key = (dev.id(), name.to_string());
    let cache = RESOLVED.get_or_init(Default::default);
    if let Some(func) = cache.lock().expect("kernel cache lock").get(&key) {
        return Ok(func.clone());
    }
    let module = {
        let mut modules = MODULES
            .get_or_init(Default::default)
            .lock()
            .expect("module cache lock");
        match modules.get(&dev.id()) {
            Some(module) => module.clone(),
            None => {
                let context = dev.cuda_stream().context().clone();
                let module = context.load_module(Ptx::from_binary(FATBIN.to_vec())).w()?;
                modules.insert(dev.id(), module.clone());
                module
            }
        }
    };
    let func = module.load_function(name).w()?;
    cache
        .lock()
        .expect("kernel cache lock")
        .insert(key, func.clone());
    Ok(func)
}

pub fn launch(
    name: &str,
    device: &Device,
    grid: Grid,
    shared_bytes: u32,
    args: &[Arg],
) -> Result<()> {
    let dev = cuda_device(device)?;
    let func = function(dev, name)?;
    let stream = dev.cuda_stream();
    if shared_bytes > DEFAULT_SHARED_BYTES {
        func.set_attribute(
            sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes as i32,
        )
        .w()?;
    }
    enum Value {
        Pointer(u64),
        I32(i32),
        U32(u32),
        Usize(usize),
        F32(f32),
        TensorMap(TensorMap),
    }
    let values = args
        .iter()
        .map(|a| {
            Ok(match a {
                Arg::Tensor(t) => Value::Pointer(address(t, false, &stream)?),
                Arg::RowView(t) => Value::Pointer(address(t, true, &stream)?),
                Arg::OptionalTensor(Some(t)) => Value::Pointer(address(t, false, &stream)?),
                Arg::OptionalTensor(None) => Value::Pointer(0),
                Arg::I32(v) => Value::I32(*v),
                Arg::U32(v) => Value::U32(*v),
                Arg::Usize(v) => Value::Usize(*v),
                Arg::F32(v) => Value::F32(*v),
                Arg::TensorMap(map) => Value::TensorMap(**map),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut params: Vec<*mut c_void> = values
        .iter()
        .map(|value| match value {
            Value::Pointer(p) => p as *const u64 as *mut c_void,
            Value::I32(v) => v as *const i32 as *mut c_void,
            Value::U32(v) => v as *const u32 as *mut c_void,
            Value::Usize(v) => v as *const usize as *mut c_void,
            Value::F32(v) => v as *const f32 as *mut c_void,
            Value::TensorMap(map) => map as *const TensorMap as *mut c_void,
        })
        .collect();
    // Where the GPU has it, each g4 kernel may start while the one before it finishes: every
    // kernel waits for its inputs itself (G4_KERNEL_START in g4_compat.cuh), and the decode
    // GEMVs load their first weights before they wait.
    // SAFETY: a C struct of an enum, padding and a union of plain integers: all zeros is the
    // value the driver API documents as "no attribute", which the next two lines fill in.
    let mut overlap: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    overlap.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid.blocks,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: grid.threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: shared_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut overlap,
        numAttrs: u32::from(overlaps_launches(dev)?),
    };
    stream.context().bind_to_thread().w()?;
    // SAFETY: every pointer argument is a live, contiguous CUDA tensor of the dtype the
    // kernel was chosen for, sized by the caller's shape checks; `params` points into `values`,
    // which outlives the call, one entry per kernel parameter in order.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            func.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .w()?;
    Ok(())
}

/// The TMA descriptor of the contiguous matrix `t` (see [`super::tensor_map`]).
pub fn tensor_map(
    t: &Tensor,
    box_inner: usize,
    box_outer: usize,
    swizzle: Swizzle,
) -> Result<TensorMap> {
    use sys::{
        CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
        CUtensorMapL2promotion, CUtensorMapSwizzle,
    };
    let (outer, inner) = t.dims2()?;
    let data_type = match t.dtype() {
        DType::BF16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::F8E4M3 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        other => candle_core::bail!("no TMA descriptor for {other:?} matrices"),
    };
    let swizzle = match swizzle {
        Swizzle::Bytes64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        Swizzle::Bytes128 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let dev = cuda_device(t.device())?;
    let base = address(t, false, &dev.cuda_stream())?;
    let dims = [inner as u64, outer as u64];
    let pitch = [(inner * t.dtype().size_in_bytes()) as u64];
    let boxes = [box_inner as u32, box_outer as u32];
    let element_strides = [1u32, 1];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: `map` is a writable descriptor; the arrays hold the rank's (2) dims, its one
    // row pitch, box and element strides; `base` is the live tensor's device address.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            data_type,
            2,
            base as *mut c_void,
            dims.as_ptr(),
            pitch.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(|e| {
        candle_core::Error::Msg(format!(
            "TMA descriptor of a [{outer}, {inner}] {:?} matrix, box {box_outer} × {box_inner}: {e}",
            t.dtype()
        ))
    })?;
    Ok(TensorMap(map.opaque))
}

/// Dynamic shared memory a kernel may take without raising its limit.
const DEFAULT_SHARED_BYTES: u32 = 48 * 1024;

/// Whether g4's kernels launch with programmatic stream serialization on this device: on
/// compute capability 9.0 and newer (where `griddepcontrol` exists), unless `G4_PDL=0`
/// asks for plain stream order (to measure what the overlap buys).
fn overlaps_launches(dev: &candle_core::CudaDevice) -> Result<bool> {
    static BY_DEVICE: OnceLock<Mutex<HashMap<candle_core::cuda::DeviceId, bool>>> = OnceLock::new();
    let mut known = BY_DEVICE
        .get_or_init(Default::default)
        .lock()
        .expect("launch overlap cache lock");
    if let Some(&overlaps) = known.get(&dev.id()) {
        return Ok(overlaps);
    }
    let (major, _) = dev.cuda_stream().context().compute_capability().w()?;
    let overlaps = major >= 9 && std::env::var("G4_PDL").as_deref() != Ok("0");
    known.insert(dev.id(), overlaps);
    Ok(overlaps)
}

/// `C' = α·A·Bᵀ + β·C` with cuBLAS on candle's handle; A `[M, K]`, B `[N, K]`, C `[M, N]`,
/// all contiguous.
pub fn gemm_bt_accumulate(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f64,
    beta: f64,
) -> Result<Tensor> {
    use candle_core::cuda::cudarc::cublas::{sys::cublasOperation_t, Gemm, GemmConfig};
    use candle_core::cuda::CudaDType;
    use candle_core::WithDType;
    fn typed<T: CudaDType + WithDType + candle_core::cuda::cudarc::driver::DeviceRepr>(
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        alpha: f64,
        beta: f64,
    ) -> Result<Tensor>
    where
        candle_core::cuda::cudarc::cublas::CudaBlas: Gemm<T>,
    {
        let dev = cuda_device(a.device())?;
        let (m, k) = a.dims2()?;
        let n = b.dim(0)?;
        fn view<'g, T: CudaDType>(
            storage: &'g Storage,
            t: &Tensor,
        ) -> Result<candle_core::cuda::cudarc::driver::CudaView<'g, T>> {
            let Storage::Cuda(cuda) = storage else {
                candle_core::bail!("tensor is not on a CUDA device")
            };
            let offset = t.layout().start_offset();
            Ok(cuda
                .as_cuda_slice::<T>()?
                .slice(offset..offset + t.elem_count()))
        }
        // The storage guards live to the end of the call, and so do the views borrowed from them.
        let (sa, sb, sc) = (
            a.storage_and_layout().0,
            b.storage_and_layout().0,
            c.storage_and_layout().0,
        );
        let (av, bv, cv) = (view::<T>(&sa, a)?, view::<T>(&sb, b)?, view::<T>(&sc, c)?);
        let stream = dev.cuda_stream();
        let mut out = stream.clone_dtod(&cv).w()?;
        // Row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ: B transposed, A as is.
        let config = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_T,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: T::from_f64(alpha),
            lda: k as i32,
            ldb: k as i32,
            beta: T::from_f64(beta),
            ldc: n as i32,
        };
        // SAFETY: shapes and leading dimensions come from the contiguous tensors above.
        unsafe { dev.cublas_handle().gemm(config, &bv, &av, &mut out) }.w()?;
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(out, dev.clone()));
        Ok(Tensor::from_storage(
            storage,
            (m, n),
            BackpropOp::none(),
            false,
        ))
    }
    match a.dtype() {
        DType::F32 => typed::<f32>(a, b, c, alpha, beta),
        DType::BF16 => typed::<half::bf16>(a, b, c, alpha, beta),
        DType::F16 => typed::<half::f16>(a, b, c, alpha, beta),
        other => candle_core::bail!("cuBLAS accumulate has no {other:?} variant"),
    }
}

/// cuBLASLt's handle, workspace and planned GEMMs for one device, made on first use.
struct Lt {
    handle: candle_core::cuda::cudarc::cublaslt::sys::cublasLtHandle_t,
    workspace: candle_core::cuda::cudarc::driver::CudaSlice<u8>,
    /// By (M, N, K, output dtype): asking cuBLASLt for an algorithm takes host time that a
    /// prefill, with seven projections a layer, would otherwise spend again on every call.
    plans: HashMap<(usize, usize, usize, DType), LtPlan>,
}

/// One GEMM's descriptors and the algorithm cuBLASLt chose for them.
struct LtPlan {
    desc: candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
    layouts: [candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatrixLayout_t; 3],
    algo: candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatmulAlgo_t,
}

// SAFETY: the handle and descriptors are only used under the mutex below, on the stream of
// their device.
unsafe impl Send for Lt {}

/// What cuBLASLt may use beside its operands (its own default on Hopper).
const LT_WORKSPACE_BYTES: usize = 32 << 20;
/// Planned shapes kept per device; past this (prompts of ever new lengths) the plans start over.
const LT_MAX_PLANS: usize = 256;

/// `Y = (X ⊙ x_scale) · (W ⊙ w_scale)ᵀ` on FP8 tensor cores: cuBLASLt with outer-vector scales,
/// column-major Yᵀ = Wᵀ·X (A = W transposed, B = X: the TN layout FP8 requires).
pub fn gemm_bt_fp8_row_scales(
    x: &Tensor,
    x_scale: &Tensor,
    w: &Tensor,
    w_scale: &Tensor,
    dtype: DType,
) -> Result<Tensor> {
    use candle_core::cuda::cudarc::cublaslt::{result as lt, sys as lts};
    use lts::cublasLtMatmulDescAttributes_t as attribute;
    let dev = cuda_device(x.device())?;
    let (m, k) = x.dims2()?;
    let n = w.dim(0)?;
    let y = empty(&Shape::from((m, n)), dtype, x.device())?;
    let stream = dev.cuda_stream();
    let pointer = |t: &Tensor| address(t, false, &stream).map(|a| a as *const c_void);
    let (xp, xsp, wp, wsp, yp) = (
        pointer(x)?,
        pointer(x_scale)?,
        pointer(w)?,
        pointer(w_scale)?,
        pointer(&y)?,
    );
    static HANDLES: OnceLock<Mutex<HashMap<candle_core::cuda::DeviceId, Lt>>> = OnceLock::new();
    let mut handles = HANDLES.get_or_init(Default::default).lock().unwrap();
    let state = match handles.entry(dev.id()) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(Lt {
            handle: lt_ok(lt::create_handle())?,
            // SAFETY: cuBLASLt's scratch space; nothing reads it before cuBLASLt writes it.
            workspace: unsafe { stream.alloc::<u8>(LT_WORKSPACE_BYTES) }.w()?,
            plans: HashMap::new(),
        }),
    };
    if state.plans.len() >= LT_MAX_PLANS {
        for (_, plan) in state.plans.drain() {
            plan.destroy()?;
        }
    }
    let handle = state.handle;
    let plan = match state.plans.entry((m, n, k, dtype)) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(LtPlan::new(handle, (m, n, k), dtype, (wsp, xsp))?)
        }
    };
    set_desc(
        plan.desc,
        attribute::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
        &wsp,
    )?;
    set_desc(
        plan.desc,
        attribute::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
        &xsp,
    )?;
    let workspace = state.workspace.device_ptr(&stream).0 as *mut c_void;
    let [a_layout, b_layout, d_layout] = plan.layouts;
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: the plan's descriptors are live, the pointers come from the tensors above (the
    // output allocated for [m, n]), and the workspace holds LT_WORKSPACE_BYTES.
    lt_ok(unsafe {
        lt::matmul(
            handle,
            plan.desc,
            (&alpha as *const f32).cast(),
            (&beta as *const f32).cast(),
            wp,
            a_layout,
            xp,
            b_layout,
            yp,
            d_layout,
            yp as *mut c_void,
            d_layout,
            &plan.algo,
            workspace,
            LT_WORKSPACE_BYTES,
            stream.cu_stream() as _,
        )
    })?;
    Ok(y)
}

impl LtPlan {
    /// Descriptors for `[m, k]·[n, k]ᵀ` over e4m3 with outer-vector f32 scales, output `dtype`,
    /// and cuBLASLt's fastest algorithm for them. Whatever was made is destroyed again when a
    /// step fails.
    fn new(
        handle: candle_core::cuda::cudarc::cublaslt::sys::cublasLtHandle_t,
        (m, n, k): (usize, usize, usize),
        dtype: DType,
        scales: (*const c_void, *const c_void),
    ) -> Result<LtPlan> {
        use candle_core::cuda::cudarc::cublaslt::{result as lt, sys as lts};
        let out_type = match dtype {
            DType::BF16 => lts::cudaDataType::CUDA_R_16BF,
            DType::F16 => lts::cudaDataType::CUDA_R_16F,
            DType::F32 => lts::cudaDataType::CUDA_R_32F,
            other => candle_core::bail!("the FP8 GEMM has no {other:?} output"),
        };
        let e4m3 = lts::cudaDataType::CUDA_R_8F_E4M3;
        let desc = lt_ok(lt::create_matmul_desc(
            lts::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lts::cudaDataType::CUDA_R_32F,
        ))?;
        let mut layouts = Vec::with_capacity(3);
        let shapes = [(e4m3, k, n), (e4m3, k, m), (out_type, n, m)];
        let planned = shapes
            .into_iter()
            .try_for_each(|(data_type, rows, cols)| {
                let layout =
                    lt::create_matrix_layout(data_type, rows as u64, cols as u64, rows as i64);
                layouts.push(lt_ok(layout)?);
                Ok(())
            })
            .and_then(|()| Self::choose(handle, desc, &layouts, scales));
        match (planned, <[_; 3]>::try_from(layouts.as_slice())) {
            (Ok(algo), Ok(layouts)) => Ok(LtPlan {
                desc,
                layouts,
                algo,
            }),
            (planned, _) => {
                // SAFETY: made above, and used by no one after this.
                unsafe {
                    for &layout in &layouts {
                        lt_ok(lt::destroy_matrix_layout(layout))?;
                    }
                    lt_ok(lt::destroy_matmul_desc(desc))?;
                }
                let error = planned.err().unwrap_or_else(|| {
                    candle_core::Error::Msg("cuBLASLt made fewer than 3 layouts".into())
                });
                Err(error.context(format!("cuBLASLt has no FP8 GEMM for M{m} N{n} K{k}")))
            }
        }
    }

    /// Sets `desc`'s operations and scales, and asks cuBLASLt for its fastest algorithm over
    /// `layouts` (A, B, D). cuBLASLt offers none for a descriptor whose scale pointers are
    /// unset, so the first call's (W's, X's) are set before it is asked.
    fn choose(
        handle: candle_core::cuda::cudarc::cublaslt::sys::cublasLtHandle_t,
        desc: candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
        layouts: &[candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatrixLayout_t],
        (w_scale, x_scale): (*const c_void, *const c_void),
    ) -> Result<candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatmulAlgo_t> {
        use candle_core::cuda::cudarc::cublas::sys::cublasOperation_t as operation;
        use candle_core::cuda::cudarc::cublaslt::{result as lt, sys as lts};
        use lts::cublasLtMatmulDescAttributes_t as attribute;
        let outer = lts::cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        set_desc(
            desc,
            attribute::CUBLASLT_MATMUL_DESC_TRANSA,
            &operation::CUBLAS_OP_T,
        )?;
        set_desc(
            desc,
            attribute::CUBLASLT_MATMUL_DESC_TRANSB,
            &operation::CUBLAS_OP_N,
        )?;
        set_desc(desc, attribute::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer)?;
        set_desc(desc, attribute::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer)?;
        set_desc(
            desc,
            attribute::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
            &w_scale,
        )?;
        set_desc(
            desc,
            attribute::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
            &x_scale,
        )?;
        let &[a_layout, b_layout, d_layout] = layouts else {
            candle_core::bail!("an FP8 GEMM takes 3 layouts, not {}", layouts.len());
        };
        let preference = lt_ok(lt::create_matmul_pref())?;
        // SAFETY: every descriptor is live; the preference is destroyed after its one use.
        unsafe {
            let chosen = lt_ok(lt::set_matmul_pref_attribute(
                preference,
                lts::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&LT_WORKSPACE_BYTES as *const usize).cast(),
                std::mem::size_of::<usize>(),
            ))
            .and_then(|()| {
                lt_ok(lt::get_matmul_algo_heuristic(
                    handle, desc, a_layout, b_layout, d_layout, d_layout, preference,
                ))
            });
            lt_ok(lt::destroy_matmul_pref(preference))?;
            Ok(chosen?.algo)
        }
    }

    fn destroy(self) -> Result<()> {
        use candle_core::cuda::cudarc::cublaslt::result as lt;
        // SAFETY: made by `new`, and used by no one after this.
        unsafe {
            for layout in self.layouts {
                lt_ok(lt::destroy_matrix_layout(layout))?;
            }
            lt_ok(lt::destroy_matmul_desc(self.desc))
        }
    }
}

fn lt_ok<T>(
    result: std::result::Result<T, candle_core::cuda::cudarc::cublaslt::result::CublasError>,
) -> Result<T> {
    result.map_err(|e| candle_core::Error::Msg(format!("cuBLASLt: {e:?}")))
}

/// Sets one attribute of a matmul descriptor to `value`.
fn set_desc<T>(
    desc: candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatmulDesc_t,
    attribute: candle_core::cuda::cudarc::cublaslt::sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> Result<()> {
    use candle_core::cuda::cudarc::cublaslt::result::set_matmul_desc_attribute;
    // SAFETY: `desc` is live; `value` is `size_of::<T>()` readable bytes.
    lt_ok(unsafe {
        set_matmul_desc_attribute(
            desc,
            attribute,
            (value as *const T).cast(),
            std::mem::size_of::<T>(),
        )
    })
}

pub fn empty(shape: &Shape, dtype: DType, device: &Device) -> Result<Tensor> {
    let dev = cuda_device(device)?;
    let n = shape.elem_count();
    // SAFETY: every element is written by the kernel that receives this tensor as output.
    let slice = unsafe {
        match dtype {
            DType::F32 => CudaStorageSlice::F32(dev.alloc::<f32>(n)?),
            DType::BF16 => CudaStorageSlice::BF16(dev.alloc::<half::bf16>(n)?),
            DType::F16 => CudaStorageSlice::F16(dev.alloc::<half::f16>(n)?),
            DType::U32 => CudaStorageSlice::U32(dev.alloc::<u32>(n)?),
            DType::U8 => CudaStorageSlice::U8(dev.alloc::<u8>(n)?),
            other => candle_core::bail!("cannot allocate a {other:?} kernel output"),
        }
    };
    let storage = Storage::Cuda(CudaStorage {
        slice,
        device: dev.clone(),
    });
    Ok(Tensor::from_storage(
        storage,
        shape.clone(),
        BackpropOp::none(),
        false,
    ))
}

/// A recorded sequence of launches, replayed as one.
pub struct CapturedGraph(candle_core::cuda::cudarc::driver::CudaGraph);

impl CapturedGraph {
    pub fn replay(&self) -> Result<()> {
        self.0.launch().w()
    }
}

/// Runs `step` once for real, then records it into a graph. candle uploads strided ops'
/// layouts on every launch; the first run fills its cache of those uploads so that the
/// recorded launches read them from device memory, as capture requires.
pub fn run_and_capture(device: &Device, step: &dyn Fn() -> Result<()>) -> Result<CapturedGraph> {
    use candle_core::cuda::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let dev = cuda_device(device)?;
    let _upload_cache = dev.enable_cuda_graph_htod_cache();
    step()?;
    let stream = dev.cuda_stream();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .w()?;
    let recorded = step();
    // Capture must end even when recording failed, or the stream stays unusable.
    let graph = stream.end_capture(CUgraphInstantiate_flags(0)).w();
    recorded?;
    let Some(graph) = graph? else {
        candle_core::bail!("the captured step is empty");
    };
    graph.upload().w()?;
    Ok(CapturedGraph(graph))
}

/// Row groups times their own matrix, in one cuBLAS grouped-GEMM call: rows
/// `[start_g, start_g + counts[g])` of `a [R, K]` times `b[g]ᵀ` (`b [G, N, K]`) give the same
/// rows of the result `[R, N]`. Groups with no rows are skipped.
pub fn grouped_gemm_bt(a: &Tensor, counts: &[usize], b: &Tensor) -> Result<Tensor> {
    use candle_core::cuda::cudarc::cublas::sys;
    let dev = cuda_device(a.device())?;
    let stream = dev.cuda_stream();
    let (rows, k) = a.dims2()?;
    let (groups, n, kb) = b.dims3()?;
    if kb != k || groups != counts.len() || counts.iter().sum::<usize>() != rows {
        candle_core::bail!(
            "grouped GEMM: a {:?}, b {:?} and {} group counts summing to {} do not fit",
            a.dims(),
            b.dims(),
            counts.len(),
            counts.iter().sum::<usize>()
        );
    }
    let dtype = a.dtype();
    let data_type = cublas_data_type(dtype, "grouped GEMM")?;
    let out = super::empty((rows, n), dtype, a.device())?;
    let size = dtype.size_in_bytes() as u64;
    let (a_base, b_base, c_base) = (
        address(a, false, &stream)?,
        address(b, false, &stream)?,
        address(&out, false, &stream)?,
    );
    let (mut a_ptrs, mut b_ptrs, mut c_ptrs, mut widths) = (vec![], vec![], vec![], vec![]);
    let mut start = 0u64;
    for (group, &count) in counts.iter().enumerate() {
        if count > 0 {
            a_ptrs.push(a_base + start * k as u64 * size);
            b_ptrs.push(b_base + (group * n * k) as u64 * size);
            c_ptrs.push(c_base + start * n as u64 * size);
            widths.push(count as i32);
        }
        start += count as u64;
    }
    let problems = widths.len();
    if problems == 0 {
        return Ok(out);
    }
    // Row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ: B transposed, A as is.
    let transa = vec![sys::cublasOperation_t::CUBLAS_OP_T; problems];
    let transb = vec![sys::cublasOperation_t::CUBLAS_OP_N; problems];
    let (ms, ks) = (vec![n as i32; problems], vec![k as i32; problems]);
    let (ldas, ldbs, ldcs) = (ks.clone(), ks.clone(), ms.clone());
    let (alphas, betas) = (vec![1.0f32; problems], vec![0.0f32; problems]);
    let group_sizes = vec![1i32; problems];
    // The pointer arrays live in device memory; cuBLAS reads the rest from the host.
    let (a_dev, b_dev, c_dev) = (
        stream.clone_htod(&a_ptrs).w()?,
        stream.clone_htod(&b_ptrs).w()?,
        stream.clone_htod(&c_ptrs).w()?,
    );
    let (a_arr, _a) = a_dev.device_ptr(&stream);
    let (b_arr, _b) = b_dev.device_ptr(&stream);
    let (c_arr, _c) = c_dev.device_ptr(&stream);
    let blas = dev.cublas_handle();
    // SAFETY: every pointer addresses a live, contiguous tensor region sized by the counts and
    // shapes checked above; the host arrays outlive the call, the device arrays its launch.
    let status = unsafe {
        sys::cublasGemmGroupedBatchedEx(
            *blas.handle(),
            transa.as_ptr(),
            transb.as_ptr(),
            ms.as_ptr(),
            widths.as_ptr(),
            ks.as_ptr(),
            alphas.as_ptr() as *const _,
            // cuBLAS's A is our B (transposed), its B our rows.
            pointer_array(b_arr),
            data_type,
            ldas.as_ptr(),
            pointer_array(a_arr),
            data_type,
            ldbs.as_ptr(),
            betas.as_ptr() as *const _,
            c_arr as *const *mut std::ffi::c_void,
            data_type,
            ldcs.as_ptr(),
            problems as i32,
            group_sizes.as_ptr(),
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    };
    if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        candle_core::bail!("cublasGemmGroupedBatchedEx failed: {status:?}");
    }
    Ok(out)
}

/// Attention's `p·v` for every (batch, head) in one cuBLAS call over pointer arrays, each head's
/// rows written into the token-major `[B, S, heads, D]` (see `native::probs_values_token_major`).
/// Pointer arrays, not strides: a head reads its KV head's values, and no single stride between
/// consecutive problems says that.
pub fn probs_values_token_major(probs: &Tensor, v: &Tensor, seq: usize) -> Result<Tensor> {
    use candle_core::cuda::cudarc::cublas::sys;
    let dev = cuda_device(probs.device())?;
    let stream = dev.cuda_stream();
    let (batch, kv_heads, rows, keys) = probs.dims4()?;
    let head_dim = v.dim(3)?;
    let group = rows / seq.max(1);
    let heads = kv_heads * group;
    let v_stride = v.stride();
    if v.dims() != [batch, kv_heads, keys, head_dim]
        || rows != group * seq
        || v_stride[2..] != [head_dim, 1]
        || v.dtype() != probs.dtype()
    {
        candle_core::bail!(
            "attention p·v: probs {:?} over {seq} queries and values {:?} (strides {v_stride:?}) do not fit",
            probs.dims(),
            v.dims()
        );
    }
    let dtype = probs.dtype();
    let data_type = cublas_data_type(dtype, "attention p·v")?;
    let out = super::empty((batch, seq, heads, head_dim), dtype, probs.device())?;
    if out.elem_count() == 0 {
        return Ok(out);
    }
    let size = dtype.size_in_bytes() as u64;
    let (p_base, v_base, out_base) = (
        address(probs, false, &stream)?,
        address(v, true, &stream)?,
        address(&out, false, &stream)?,
    );
    // One array of 3·problems pointers, uploaded once: cuBLAS's A (values), B (probs), C (out).
    let problems = batch * heads;
    let mut pointers = vec![0u64; 3 * problems];
    for b in 0..batch {
        for h in 0..heads {
            let (kv, i) = (h / group, b * heads + h);
            pointers[i] = v_base + (b * v_stride[0] + kv * v_stride[1]) as u64 * size;
            pointers[problems + i] = p_base
                + ((b * kv_heads + kv) * rows + (h % group) * seq) as u64 * (keys as u64) * size;
            pointers[2 * problems + i] =
                out_base + ((b * seq * heads + h) * head_dim) as u64 * size;
        }
    }
    let on_device = stream.clone_htod(&pointers).w()?;
    let (array, _guard) = on_device.device_ptr(&stream);
    let (alpha, beta) = (1.0f32, 0.0f32);
    // Row-major C = P·V is column-major Cᵀ = Vᵀ·Pᵀ: cuBLAS's A is V (D × T, column-major), its B
    // is P (T × S), its C is Cᵀ (D × S) with a row of `heads · D` between tokens.
    // SAFETY: every pointer addresses a live tensor region sized by the shapes checked above; the
    // pointer array lives to the end of this call and is freed in stream order after the launch.
    let status = unsafe {
        sys::cublasGemmBatchedEx(
            *dev.cublas_handle().handle(),
            sys::cublasOperation_t::CUBLAS_OP_N,
            sys::cublasOperation_t::CUBLAS_OP_N,
            head_dim as i32,
            seq as i32,
            keys as i32,
            &alpha as *const f32 as *const _,
            pointer_array(array),
            data_type,
            head_dim as i32,
            pointer_array(array + (problems * 8) as u64),
            data_type,
            keys as i32,
            &beta as *const f32 as *const _,
            (array + (2 * problems * 8) as u64) as *const *mut std::ffi::c_void,
            data_type,
            (heads * head_dim) as i32,
            problems as i32,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    };
    if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        candle_core::bail!("cublasGemmBatchedEx (attention p·v) failed: {status:?}");
    }
    Ok(out)
}

/// cuBLAS's name for a float dtype; `what` names the caller in the error.
fn cublas_data_type(
    dtype: DType,
    what: &str,
) -> Result<candle_core::cuda::cudarc::cublas::sys::cudaDataType_t> {
    use candle_core::cuda::cudarc::cublas::sys::cudaDataType_t;
    Ok(match dtype {
        DType::F32 => cudaDataType_t::CUDA_R_32F,
        DType::BF16 => cudaDataType_t::CUDA_R_16BF,
        DType::F16 => cudaDataType_t::CUDA_R_16F,
        other => candle_core::bail!("{what} has no {other:?} variant"),
    })
}

/// A device address of a pointer array, as cuBLAS's pointer-array argument.
fn pointer_array(address: u64) -> *const *const std::ffi::c_void {
    address as *const *const std::ffi::c_void
}

/// Host→device copies go through pinned buffers: from pinned memory a copy is asynchronous
/// (the host returns at once), and a ring of buffers lets the host fill the next ones while
/// the GPU is still to read the last (a prefill's per-layer rows go in two chunks). Larger
/// copies go through in chunks of whole rows of about this size. The ring is allocated whole at
/// the first upload: a buffer first met by a later prompt cost that prompt ≈ 6 ms of pinned
/// allocation (E4B pp512 on the H200, the second prompt of a process).
const STAGING_BYTES: usize = 8 << 20;
const STAGING_BUFFERS: usize = 4;

struct Staging {
    buffers: Vec<StagingBuffer>,
    next: usize,
}

/// A pinned buffer and the event recorded after the last copy that reads it. cudarc records a
/// pinned slice's own event only when it manages several streams; candle runs one, so that
/// event is never recorded and waiting on it returns at once — the host then refilled a buffer
/// the GPU had not copied yet whenever the GPU lagged behind (a long prefill with the per-layer
/// table in host memory read other layers' rows).
struct StagingBuffer {
    host: candle_core::cuda::cudarc::driver::PinnedHostSlice<u8>,
    copied: candle_core::cuda::cudarc::driver::CudaEvent,
}

impl StagingBuffer {
    fn new(stream: &candle_core::cuda::cudarc::driver::CudaStream, bytes: usize) -> Result<Self> {
        Ok(StagingBuffer {
            // SAFETY: a buffer is filled before any copy reads it (`upload_rows`).
            host: unsafe { stream.context().alloc_pinned::<u8>(bytes) }.w()?,
            copied: stream.context().new_event(None).w()?,
        })
    }
}

/// Fills the contiguous CUDA tensor `dst` (`rows` of `row_bytes`) from the host through the
/// staging buffers (see `native::upload_rows`).
pub fn upload_rows(
    dst: &Tensor,
    rows: usize,
    row_bytes: usize,
    fill: &mut super::RowFill,
) -> Result<()> {
    use candle_core::cuda::cudarc::driver::{result::memcpy_htod_async, HostSlice};
    type PerDevice = HashMap<candle_core::cuda::DeviceId, Staging>;
    static STAGING: OnceLock<Mutex<PerDevice>> = OnceLock::new();
    let dev = cuda_device(dst.device())?;
    let stream = dev.cuda_stream();
    let base = address(dst, false, &stream)?;
    let chunk_rows = (STAGING_BYTES / row_bytes.max(1)).max(1);
    let buffer_bytes = chunk_rows * row_bytes;
    let mut all = STAGING
        .get_or_init(Default::default)
        .lock()
        .expect("staging lock");
    let staging = match all.entry(dev.id()) {
        std::collections::hash_map::Entry::Occupied(ring) => ring.into_mut(),
        std::collections::hash_map::Entry::Vacant(slot) => {
            let buffers = (0..STAGING_BUFFERS)
                .map(|_| StagingBuffer::new(&stream, STAGING_BYTES))
                .collect::<Result<Vec<_>>>()?;
            slot.insert(Staging { buffers, next: 0 })
        }
    };
    for first in (0..rows).step_by(chunk_rows) {
        let range = first..(first + chunk_rows).min(rows);
        let len = range.len() * row_bytes;
        let buffer = &mut staging.buffers[staging.next];
        staging.next = (staging.next + 1) % STAGING_BUFFERS;
        if buffer.host.len() < buffer_bytes {
            // Rows wider than a buffer: its last copy must be done before its pinned memory
            // is freed.
            buffer.copied.synchronize().w()?;
            *buffer = StagingBuffer::new(&stream, buffer_bytes)?;
        }
        // Waits for the copy that last read this buffer (a new event: returns at once).
        buffer.copied.synchronize().w()?;
        fill(range, &mut buffer.host.as_mut_slice().w()?[..len])?;
        let (src, _read) = unsafe { buffer.host.stream_synced_slice(&stream) };
        let dst_ptr = base + (first * row_bytes) as u64;
        // SAFETY: `dst_ptr` addresses `len` bytes inside `dst`, which holds `rows` rows, and
        // `src` stays untouched until `copied` (recorded next) completes.
        unsafe { memcpy_htod_async(dst_ptr, &src[..len], stream.cu_stream()) }.w()?;
        buffer.copied.record(&stream).w()?;
    }
    Ok(())
}

/// Host memory the GPU reads in place: page-locked and mapped into the device's address space
/// (read-only), unregistered on drop. Kernels take `device_address` as a plain pointer.
pub struct MappedHost {
    /// The page-aligned start that was registered.
    registered: usize,
    /// The device address of the first byte of the caller's range.
    device_address: u64,
    context: std::sync::Arc<candle_core::cuda::cudarc::driver::CudaContext>,
}

// SAFETY: the registration is a process-wide driver state; the handle only names it.
unsafe impl Send for MappedHost {}
unsafe impl Sync for MappedHost {}

impl MappedHost {
    /// Registers `bytes` (which must outlive the registration) for `device`.
    pub fn register(device: &Device, bytes: &[u8]) -> Result<MappedHost> {
        let dev = cuda_device(device)?;
        let context = dev.cuda_stream().context().clone();
        context.bind_to_thread().w()?;
        let page = 4096usize;
        let start = bytes.as_ptr() as usize;
        let registered = start - start % page;
        let end = (start + bytes.len()).next_multiple_of(page);
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_READ_ONLY;
        // SAFETY: the range lies in pages the caller's mapping holds (a mapping covers whole
        // pages), and stays mapped until `drop` unregisters it.
        unsafe { sys::cuMemHostRegister_v2(registered as *mut c_void, end - registered, flags) }
            .result()
            .w()?;
        let mut base: sys::CUdeviceptr = 0;
        // SAFETY: `registered` was registered with DEVICEMAP just above.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut base, registered as *mut c_void, 0) }
            .result()
            .w()?;
        Ok(MappedHost {
            registered,
            device_address: base + (start - registered) as u64,
            context,
        })
    }

    /// The device address of the first byte of the range `register` was given.
    pub fn device_address(&self) -> u64 {
        self.device_address
    }
}

impl Drop for MappedHost {
    fn drop(&mut self) {
        if self.context.bind_to_thread().is_ok() {
            // SAFETY: `registered` was registered by `register`; nothing reads it after drop.
            let _ = unsafe { sys::cuMemHostUnregister(self.registered as *mut c_void) };
        }
    }
}
