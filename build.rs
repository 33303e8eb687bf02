//! With `--features cuda`: compile src/kernels/cuda/*.cu to PTX (one module: compute_90 for
//! Hopper, compute_80 as the portable fallback) and point the linker at the CUDA link folder
//! prepared by scripts/build-cuda.sh (G4_CUDA_LINK_DIR).

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
    for arch in ["compute_90", "compute_80"] {
        let ptx = out.join(format!("g4_kernels_{arch}.ptx"));
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17", &format!("-arch={arch}"), "-o"])
            .arg(&ptx)
            .arg(&all)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e} (use scripts/build-cuda.sh)",
                    nvcc.display()
                )
            });
        assert!(
            status.success(),
            "nvcc failed on src/kernels/cuda for {arch}"
        );
    }
}
