//! g4's kernels compiled for AMD GPUs (`--features hip`): the code objects scripts/build-hip.sh
//! makes from the same sources as the CUDA arms, embedded at build time. Nothing launches them
//! yet — candle has no ROCm device, and no HIP runtime arm exists — so they serve to prove that
//! every kernel compiles for each target, and to say so in probe-ops.

include!(concat!(env!("OUT_DIR"), "/hip_code_objects.rs"));

/// The GPU architectures the embedded code objects are for, in build order.
pub fn architectures() -> Vec<&'static str> {
    let mut archs: Vec<&'static str> = Vec::new();
    for (arch, _, _) in CODE_OBJECTS {
        if !archs.contains(arch) {
            archs.push(arch);
        }
    }
    archs
}
