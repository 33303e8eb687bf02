//! The fused-op registry: every composed arm against the f64 reference (table-driven: op ×
//! dtype × shapes), the check catching deliberately broken arms, and `g4 probe-ops`' JSON
//! contract — including that the selected arm it reports is the one the model runs.

use candle_core::{DType, Device, Result, Tensor};
use g4::kernels::check::{check_arm, check_with, Case};
use g4::kernels::{arm_for, Arm, Backend, Op};
use std::process::Command;

const SEEDS: [u64; 3] = [1, 2, 3];

#[test]
fn every_composed_arm_matches_the_f64_reference_in_every_dtype() {
    let mut failures = Vec::new();
    for op in Op::ALL {
        for &dtype in op.contract().spec.dtypes {
            for seed in SEEDS {
                let result = check_arm(op, Arm::Composed, &Device::Cpu, dtype, seed).unwrap();
                assert!(
                    result.cases >= 3,
                    "{} has only {} check cases",
                    op.name(),
                    result.cases
                );
                if !result.ok {
                    failures.push(format!(
                        "{} {dtype:?} seed {seed}: {:?}",
                        op.name(),
                        result.failure
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every op declares broken stand-ins for its arms; the same check probe-ops runs must reject
/// each of them (an output left unwritten included: native outputs are poisoned while checked).
#[test]
fn the_check_catches_every_ops_deliberately_broken_arms() {
    let mut passed = Vec::new();
    for op in Op::ALL {
        let contract = op.contract();
        assert!(
            !contract.mutants.is_empty(),
            "{} declares no mutant",
            op.name()
        );
        for mutant in contract.mutants {
            let result = check_with(contract, &Device::Cpu, DType::F32, 1, &mutant.run).unwrap();
            if result.ok {
                passed.push(format!("{} with {}", op.name(), mutant.what));
            }
        }
    }
    assert!(
        passed.is_empty(),
        "broken arms passed the check: {passed:#?}"
    );
}

/// Rule 6: each range of shapes a native arm hands elsewhere is named in the contract and
/// covered by a check case.
#[test]
fn every_shape_path_is_covered_by_a_check_case() {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
    for op in Op::ALL {
        let contract = op.contract();
        let cases = (contract.cases)(&Device::Cpu, DType::F32, &mut rng).unwrap();
        for path in contract.spec.shape_paths {
            assert!(
                cases.iter().any(|c| c.label == path.case),
                "{}: no check case '{}' for shapes {}",
                op.name(),
                path.case,
                path.shapes
            );
        }
    }
}

/// A new op needs only its contract: this one, written here, goes through the same harness,
/// and the compiler insists on every field of `OpContract`.
#[test]
fn a_new_op_is_checked_from_its_contract_alone() {
    use g4::kernels::check::Builder;
    use g4::kernels::contract::{Mutant, OpContract, OpSpec, ToleranceClass};

    /// `y = 2x + 1`, with no native kernel yet.
    const AFFINE_TOY: OpContract = OpContract {
        spec: OpSpec {
            native_kernels: &[],
            ..OpSpec::floats(ToleranceClass::RoundsOnce).not_used_yet("a test's toy")
        },
        cases: |device, dtype, rng| {
            let mut cases = Vec::new();
            for n in [1, 7, 300] {
                let mut c = Builder::new(device, dtype, rng);
                let x = c.uniform(&[n], -2.0, 2.0)?;
                let expected = x.iter().map(|v| 2.0 * v + 1.0).collect();
                cases.push(c.finish(format!("[{n}]"), expected));
            }
            Ok(cases)
        },
        run: |_arm, c| Ok(vec![c.float(0).affine(2.0, 1.0)?]),
        mutants: &[Mutant {
            what: "no offset",
            run: |c| Ok(vec![c.float(0).affine(2.0, 0.0)?]),
        }],
    };
    for &dtype in AFFINE_TOY.spec.dtypes {
        let arm = |c: &Case| (AFFINE_TOY.run)(Arm::Composed, c);
        let result = check_with(&AFFINE_TOY, &Device::Cpu, dtype, 7, &arm).unwrap();
        assert!(result.ok, "{dtype:?}: {:?}", result.failure);
        let broken = AFFINE_TOY.mutants[0].run;
        let result = check_with(&AFFINE_TOY, &Device::Cpu, dtype, 7, &broken).unwrap();
        assert!(!result.ok);
    }
}

#[test]
fn a_kernel_that_writes_outside_its_output_is_caught() {
    // Scribbles over its input (and so the guarded buffer), then returns the right answer.
    let scribbler = |c: &Case| -> Result<Vec<Tensor>> {
        let out = g4::kernels::softcap::composed(c.float(0), c.scale)?;
        c.float(0)
            .slice_set(&c.float(0).zeros_like()?.narrow(0, 0, 1)?, 0, 0)?;
        Ok(vec![out])
    };
    let result = check_with(
        Op::Softcap.contract(),
        &Device::Cpu,
        DType::F32,
        1,
        &scribbler,
    )
    .unwrap();
    assert!(!result.ok);
    assert!(result.failure.unwrap().contains("wrote outside its output"));
}

/// The whole probe as JSON, on fixed inputs so that a failure reproduces (`--seed`); a user's
/// probe draws fresh ones each run.
fn probe_json() -> serde_json::Value {
    probe_ops_json(&["--seed", "20261201"], &[])
}

/// `g4 probe-ops --json ARGS` with `env` set, which must succeed; its report.
fn probe_ops_json(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_g4"))
        .args(["probe-ops", "--json"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("probe-ops --json prints JSON")
}

#[test]
fn probe_json_contract_and_honest_reasons() {
    let report = probe_json();
    let device = &report["device"];
    assert_eq!(device["name"], "cpu");
    assert_eq!(device["backend"], "cpu");
    assert!(device.get("compute_capability").is_some());
    assert!(device["build_features"].is_array());
    let ops = report["ops"].as_array().unwrap();
    assert_eq!(ops.len(), Op::ALL.len());
    for (entry, op) in ops.iter().zip(Op::ALL) {
        assert_eq!(entry["op"], op.name());
        // The report cannot disagree with what runs: same predicate.
        let mut selected: Vec<(String, Vec<&str>)> = Vec::new();
        for &dtype in op.contract().spec.dtypes {
            let arm = arm_for(op, &Device::Cpu, dtype).name();
            let name = g4::device::dtype_name(dtype);
            match selected.iter_mut().find(|(a, _)| *a == arm) {
                Some((_, dtypes)) => dtypes.push(name),
                None => selected.push((arm, vec![name])),
            }
        }
        let expected = match selected.as_slice() {
            [(arm, _)] => arm.clone(),
            several => several
                .iter()
                .map(|(a, ds)| format!("{a} ({})", ds.join(",")))
                .collect::<Vec<_>>()
                .join(", "),
        };
        assert_eq!(entry["selected_arm"], expected.as_str());
        let arms = entry["arms"].as_array().unwrap();
        assert_eq!(arms.len(), 5, "cuda, hip, metal, cpu, composed");
        for arm in arms {
            for key in ["backend", "kind", "status", "reason", "check"] {
                assert!(arm.get(key).is_some(), "{}: arm lacks {key}", op.name());
            }
        }
        let composed = arms.iter().find(|a| a["backend"] == "composed").unwrap();
        assert_eq!(composed["kind"], "composed");
        assert_eq!(composed["status"], "available");
        assert_eq!(composed["check"]["ok"], true);
        assert!(composed["check"]["nmse"].as_f64().unwrap() >= 0.0);
        assert!(composed["check"]["max_abs"].as_f64().is_some());

        let cuda = arms.iter().find(|a| a["backend"] == "cuda").unwrap();
        let has_cuda_kernel = op
            .native_kernels()
            .iter()
            .any(|k| k.backend == Backend::Cuda);
        let expected = match (has_cuda_kernel, cfg!(feature = "cuda")) {
            (false, _) => "no-kernel",
            (true, false) => "not-built",
            (true, true) => "no-device",
        };
        assert_eq!(cuda["status"], "unavailable");
        assert_eq!(cuda["reason_kind"], expected, "{}", op.name());
        if expected == "not-built" {
            assert!(cuda["reason"].as_str().unwrap().contains("--features cuda"));
        }
        // HIP: g4's own kernels are compiled for AMD GPUs with --features hip, but no HIP
        // device can run them (candle has no ROCm backend); vendor-BLAS arms have no HIP kernel.
        let hip = arms.iter().find(|a| a["backend"] == "hip").unwrap();
        let has_hip_kernel = op
            .native_kernels()
            .iter()
            .any(|k| k.backend == Backend::Hip);
        let expected = match (has_hip_kernel, cfg!(feature = "hip")) {
            (false, _) => "no-kernel",
            (true, false) => "not-built",
            (true, true) => "no-device",
        };
        assert_eq!(hip["reason_kind"], expected, "{}", op.name());
        // The vendor-BLAS arms (cuBLAS, cuBLASLt's FP8 GEMM) and the arm that is only the
        // Hopper GEMM's TMA + wgmma entries have no HIP counterpart.
        let cuda_only = [
            "matmul_bt_alpha_beta",
            "matmul_bt_fp8_dynamic",
            "matmul_bt_fp8_channel_f16_rows",
        ];
        assert_eq!(
            has_hip_kernel,
            has_cuda_kernel && !cuda_only.contains(&op.name())
        );
        let hip_reason = hip["reason"].as_str().unwrap();
        match expected {
            "not-built" => assert!(hip_reason.contains("--features hip"), "{hip_reason}"),
            "no-device" => assert!(
                hip_reason.contains("built for gfx90a, gfx942, gfx1100")
                    && hip_reason.contains("not run on AMD hardware")
                    && hip_reason.contains("ROCm"),
                "{hip_reason}"
            ),
            _ => {}
        }
        // The CPU arm runs and passes its check where a CPU kernel is written (and the CPU
        // has the SIMD it needs); elsewhere it says which of the two is missing.
        let cpu = arms.iter().find(|a| a["backend"] == "cpu").unwrap();
        let has_cpu_kernel = op
            .native_kernels()
            .iter()
            .any(|k| k.backend == Backend::Cpu);
        match (has_cpu_kernel, g4::kernels::native::cpu::simd()) {
            (true, Some(_)) => {
                assert_eq!(cpu["status"], "available", "{}", op.name());
                assert_eq!(cpu["check"]["ok"], true, "{}", op.name());
            }
            (true, None) => assert_eq!(cpu["reason_kind"], "device-unsupported"),
            (false, _) => assert_eq!(cpu["reason_kind"], "no-kernel", "{}", op.name()),
        }
    }
    assert_eq!(report["ok"], true);
}

#[test]
fn probe_rejects_an_unknown_op_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_g4"))
        .args(["probe-ops", "--op", "flash_attn"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--op flash_attn: unknown op") && stderr.contains("rms_norm"),
        "{stderr}"
    );
}

/// Ops that run in f32 only (argmax) are reported as not applicable to a bf16 or f16
/// probe, never a crash.
#[test]
fn a_dtype_an_op_does_not_run_in_is_reported_not_applicable() {
    for dtype in ["bf16", "f16"] {
        let out = Command::new(env!("CARGO_BIN_EXE_g4"))
            .args(["probe-ops", "--json", "--dtype", dtype, "--op", "argmax"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{dtype}: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let argmax = &report["ops"][0];
        assert_eq!(argmax["op"], "argmax");
        assert_eq!(
            argmax["not_applicable"], "argmax runs in f32 only",
            "{dtype}"
        );
    }
}

/// The CPU arms' narrower instruction set (AVX2+FMA), forced on a CPU that has wider, passes
/// the same checks; on a CPU without AVX2 the arm reports itself unsupported instead.
#[cfg(target_arch = "x86_64")]
#[test]
fn cpu_arms_pass_with_avx2_forced() {
    for op in [
        "linear",
        "linear_panels",
        "linear_panels_fp8",
        "gelu_mul",
        "gelu_and_mul",
        "softcap",
        "rms_norm",
        "rms_norm_plus_add",
    ] {
        let report = probe_ops_json(&["--op", op], &[("G4_CPU_SIMD", "avx2")]);
        let arms = report["ops"][0]["arms"].as_array().unwrap();
        let cpu = arms.iter().find(|a| a["backend"] == "cpu").unwrap();
        let table = Command::new(env!("CARGO_BIN_EXE_g4"))
            .args(["probe-ops", "--op", op])
            .env("G4_CPU_SIMD", "avx2")
            .output()
            .unwrap();
        let header = String::from_utf8_lossy(&table.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            assert!(header.contains("CPU arms in AVX2+FMA"), "{header}");
            assert_eq!(cpu["status"], "available", "{op}");
            assert_eq!(cpu["check"]["ok"], true, "{op}");
        } else {
            assert_eq!(cpu["status"], "unavailable", "{op}");
        }
    }
}

/// `--device hip` is understood and refused in one line that says what is missing, by every
/// command (candle has no ROCm backend; the runtime's state is asked, not assumed).
#[test]
fn the_hip_device_is_refused_with_what_is_missing() {
    for args in [
        &["probe-ops", "--device", "hip"][..],
        &["generate", "--device", "hip:1", "-n", "2"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_g4"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("candle has no ROCm backend")
                && stderr.contains("HIP runtime")
                && stderr.contains("--device cpu"),
            "{stderr}"
        );
    }
}

/// `G4_COMPOSED` puts the named ops on their composed arm (probe-ops reports what runs), and an
/// unknown name is refused by every command in one line.
#[test]
fn g4_composed_selects_the_composed_arm_and_refuses_unknown_ops() {
    let selected = |composed: &str| {
        let report = probe_ops_json(&["--op", "linear_panels"], &[("G4_COMPOSED", composed)]);
        report["ops"][0]["selected_arm"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(selected("linear_panels"), "composed");
    assert_eq!(selected("all"), "composed");
    if g4::kernels::native::cpu::simd().is_some() {
        assert!(selected("rms_norm").starts_with("cpu"));
    }
    for command in [&["probe-ops"][..], &["generate", "--max-tokens", "1"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_g4"))
            .args(command)
            .env("G4_COMPOSED", "linear,no_such_op")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("unknown op 'no_such_op'"), "{stderr}");
    }
}

/// Several devices: each distinct one is probed, and the group's all-reduce is checked against
/// an f64 sum with every rank receiving the same bits (CPU ranks sum in host memory).
#[test]
fn probe_over_several_devices_checks_their_all_reduce() {
    let report = probe_ops_json(&["--device", "cpu,cpu", "--op", "softcap"], &[]);
    assert_eq!(
        report["devices"].as_array().unwrap().len(),
        1,
        "the CPU once"
    );
    let group = &report["all_reduce"];
    assert_eq!(group["transport"], "host memory");
    assert_eq!(group["ranks"], 2);
    assert_eq!(group["ok"], true);
    assert_eq!(group["identical_on_every_rank"], true);
    assert!(group["max_relative_error"].as_f64().unwrap() < 1e-2);
}
