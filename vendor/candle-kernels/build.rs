use cudaforge::{KernelBuilder, Result};
use std::env;
use std::path::PathBuf;

const CUTILE_FEATURE: &str = "CARGO_FEATURE_CUTILE";

fn main() -> Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=src/compatibility.cuh");
    println!("cargo::rerun-if-changed=src/cuda_utils.cuh");
    println!("cargo::rerun-if-changed=src/binary_op_macros.cuh");

    // g4: each module as a fatbin — machine code for sm_80 (Ampere, Ada) and sm_90 (Hopper), and
    // compute_90 PTX for newer GPUs — instead of PTX alone, which the driver JIT-compiles on a
    // fresh machine's first run (about 11 s on an H200). The modules compile in parallel.
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let nvcc = ["CUDA_ROOT", "CUDA_PATH", "CUDA_HOME"]
        .iter()
        .find_map(|var| env::var_os(var))
        .map_or(PathBuf::from("nvcc"), |root| PathBuf::from(root).join("bin/nvcc"));
    let mut modules: Vec<String> = std::fs::read_dir("src")
        .expect("src exists")
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.ends_with(".cu") && !name.starts_with("moe_") && !name.starts_with("mmvq_"))
        .map(|name| name.trim_end_matches(".cu").to_string())
        .collect();
    modules.sort();
    let builds: Vec<_> = modules
        .iter()
        .map(|module| {
            let output = out_dir.join(format!("{module}.fatbin"));
            let source = format!("src/{module}.cu");
            let nvcc = nvcc.clone();
            std::thread::spawn(move || {
                std::process::Command::new(&nvcc)
                    .args([
                        "--fatbin",
                        "-O3",
                        "-std=c++17",
                        "--expt-relaxed-constexpr",
                        "--default-stream",
                        "per-thread",
                        "-gencode=arch=compute_80,code=sm_80",
                        "-gencode=arch=compute_90,code=[sm_90,compute_90]",
                        "-o",
                    ])
                    .arg(&output)
                    .arg(&source)
                    .status()
                    .map(|status| (source, status))
            })
        })
        .collect();
    for build in builds {
        let (source, status) = build
            .join()
            .expect("an nvcc thread panicked")
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {source}");
    }
    let constants: String = modules
        .iter()
        .map(|module| {
            format!(
                "pub const {}: &[u8] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{module}.fatbin\"));\n",
                module.to_uppercase()
            )
        })
        .collect();
    std::fs::write(out_dir.join("fatbin.rs"), constants).expect("write fatbin.rs");

    let mut moe_sources = vec![
        "src/moe/moe_gguf.cu",
        "src/moe/moe_wmma.cu",
        "src/moe/moe_wmma_gguf.cu",
        "src/mmvq_gguf.cu",
        "src/mmq_gguf/mmq_quantize.cu",
        "src/mmq_gguf/mmq_instance_q4_0.cu",
        "src/mmq_gguf/mmq_instance_q4_1.cu",
        "src/mmq_gguf/mmq_instance_q5_0.cu",
        "src/mmq_gguf/mmq_instance_q5_1.cu",
        "src/mmq_gguf/mmq_instance_q8_0.cu",
        "src/mmq_gguf/mmq_instance_q2_k.cu",
        "src/mmq_gguf/mmq_instance_q3_k.cu",
        "src/mmq_gguf/mmq_instance_q4_k.cu",
        "src/mmq_gguf/mmq_instance_q5_k.cu",
        "src/mmq_gguf/mmq_instance_q6_k.cu",
    ];
    if env::var_os(CUTILE_FEATURE).is_some() {
        moe_sources.push("src/moe/moe_align.cu");
    }

    let mut moe_builder = KernelBuilder::default()
        .source_files(moe_sources)
        .arg("--expt-relaxed-constexpr")
        .arg("-std=c++17")
        .arg("-O3");

    // Disable bf16 WMMA kernels on GPUs older than sm_80 (Ampere).
    // bf16 WMMA fragments require compute capability >= 8.0.
    let compute_cap = cudaforge::detect_compute_cap()
        .map(|arch| arch.base())
        .unwrap_or(80);
    if compute_cap < 80 {
        moe_builder = moe_builder.arg("-DNO_BF16_KERNEL");
    }

    let mut is_target_msvc = false;
    if let Ok(target) = std::env::var("TARGET") {
        if target.contains("msvc") {
            is_target_msvc = true;
            moe_builder = moe_builder.arg("-D_USE_MATH_DEFINES");
        }
    }

    if !is_target_msvc {
        moe_builder = moe_builder.arg("-Xcompiler").arg("-fPIC");
    }

    moe_builder.build_lib(out_dir.join("libmoe.a"))?;
    println!("cargo:rustc-link-search={}", out_dir.display());
    println!("cargo:rustc-link-lib=moe");
    println!("cargo:rustc-link-lib=dylib=cudart");
    if !is_target_msvc {
        println!("cargo:rustc-link-lib=stdc++");
    }
    Ok(())
}
