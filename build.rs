//! With `--features cuda`: compile src/kernels/cuda/*.cu into one fatbin — machine code (SASS)
//! for sm_80 (Ampere and Ada run it) and sm_90 (Hopper), plus compute_90 PTX that newer GPUs
//! compile at load — and point the linker at the CUDA link folder prepared by
//! scripts/build-cuda.sh (G4_CUDA_LINK_DIR). Shipping SASS spares a fresh machine the driver's
//! JIT of the whole module on first use (about 13 s on an H200).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=G4_CUDA_LINK_DIR");
    println!("cargo:rerun-if-changed=src/kernels/cuda");
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
            "-gencode=arch=compute_90,code=[sm_90,compute_90]",
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
