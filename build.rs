//! With `--features cuda`: point the linker at the CUDA link folder prepared by
//! scripts/build-cuda.sh (G4_CUDA_LINK_DIR), and compile src/kernels/cuda/*.cu to PTX.

fn main() {
    println!("cargo:rerun-if-env-changed=G4_CUDA_LINK_DIR");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    if let Some(dir) = std::env::var_os("G4_CUDA_LINK_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
}
