//! With `--features hip`: compile the same sources to AMD code objects (scripts/build-hip.sh,
//! which fetches its toolchain; no ROCm needed) and embed them.
//!
//! With `--features cuda`: compile src/kernels/cuda/*.cu into one fatbin — machine code (SASS)
//! for sm_80 (Ampere and Ada run it) and sm_90a (Hopper, with its wgmma and TMA instructions;
//! every compute capability 9.0 GPU runs it), plus compute_90 PTX that newer GPUs compile at
//! load — and point the linker at the CUDA link folder prepared by
//! scripts/build-cuda.sh (G4_CUDA_LINK_DIR). Shipping SASS spares a fresh machine the driver's
//! JIT of the whole module on first use (about 13 s on an H200).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=G4_CUDA_LINK_DIR");
    println!("cargo:rerun-if-changed=src/kernels/cuda");
    println!("cargo:rerun-if-changed=scripts/build-hip.sh");
    if std::env::var_os("CARGO_FEATURE_HIP").is_some() {
        embed_hip_code_objects();
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    if let Some(dir) = std::env::var_os("G4_CUDA_LINK_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let sources = Path::new("src/kernels/cuda");
    let mut units: Vec<PathBuf> = std::fs::read_dir(sources)
        .expect("src/kernels/cuda exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    units.sort();
    let all = out.join("g4_kernels.cu");
    let includes: String = units
        .iter()
        .map(|u| {
            format!(
                "#include \"{}\"\n",
                std::fs::canonicalize(u).expect("source exists").display()
            )
        })
        .collect();
    std::fs::write(&all, includes).expect("write the kernel translation unit");
    let nvcc = std::env::var("CUDA_ROOT").map_or(PathBuf::from("nvcc"), |root| {
        Path::new(&root).join("bin/nvcc")
    });
    let status = Command::new(&nvcc)
        .args([
            "--fatbin",
            "-O3",
            "-std=c++17",
            "-gencode=arch=compute_80,code=sm_80",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-gencode=arch=compute_90,code=compute_90",
            "-o",
        ])
        .arg(out.join("g4_kernels.fatbin"))
        .arg(&all)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (use scripts/build-cuda.sh)",
                nvcc.display()
            )
        });
    assert!(status.success(), "nvcc failed on src/kernels/cuda");
}

/// Runs scripts/build-hip.sh into OUT_DIR and writes `hip_code_objects.rs`: every code object
/// as `(arch, kernel source, bytes)`.
fn embed_hip_code_objects() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let objects = out.join("hip");
    let output = Command::new("bash")
        .arg("scripts/build-hip.sh")
        .arg(&objects)
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/build-hip.sh: {e}"));
    assert!(
        output.status.success(),
        "scripts/build-hip.sh failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut entries = String::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some((arch, path)) = line.split_once(' ') else {
            continue;
        };
        let path = std::fs::canonicalize(path).expect("build-hip.sh printed an existing object");
        let source = path
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.split('.').next())
            .expect("objects are named SOURCE.ARCH.co");
        entries.push_str(&format!(
            "    ({arch:?}, {source:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    assert!(
        !entries.is_empty(),
        "scripts/build-hip.sh printed no code object"
    );
    std::fs::write(
        out.join("hip_code_objects.rs"),
        format!("pub const CODE_OBJECTS: &[(&str, &str, &[u8])] = &[\n{entries}];\n"),
    )
    .expect("write hip_code_objects.rs");
}
