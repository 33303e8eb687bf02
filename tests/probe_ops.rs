//! The fused-op registry: every composed arm against the f64 reference (table-driven: op ×
//! dtype × shapes), the check catching deliberately broken arms, and `g4 probe-ops`' JSON
//! contract — including that the selected arm it reports is the one the model runs.

use candle_core::{DType, Device, Result, Tensor};
use g4::kernels::check::{check_arm, check_with, dtypes, Case};
use g4::kernels::{arm_for, Arm, Backend, Op};
use std::process::Command;

const SEEDS: [u64; 3] = [1, 2, 3];

#[test]
fn every_composed_arm_matches_the_f64_reference_in_every_dtype() {
    let mut failures = Vec::new();
    for op in Op::ALL {
        for &dtype in dtypes(op) {
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

/// Broken stand-ins for real arms: the same check probe-ops runs must reject each of them.
#[test]
fn the_check_catches_deliberately_broken_arms() {
    type Broken = fn(&Case) -> Result<Vec<Tensor>>;
    let mutants: [(Op, &str, Broken); 8] = [
        (Op::GeluMul, "gate and up swapped", |c| {
            Ok(vec![(c.float(1).gelu()? * c.float(0))?])
        }),
        (Op::RmsNorm, "epsilon 1e-2 instead of 1e-6", |c| {
            let weight = (c.float_count() > 1).then(|| c.float(1));
            Ok(vec![g4::kernels::rms_norm::composed(
                c.float(0),
                weight,
                1e-2,
            )?])
        }),
        (Op::RmsNorm, "Gemma-3 style (1 + w) weight", |c| {
            if c.float_count() == 1 {
                return Ok(vec![g4::kernels::rms_norm::composed(
                    c.float(0),
                    None,
                    c.eps,
                )?]);
            }
            let w = (c.float(1).to_dtype(DType::F32)? + 1.0)?.to_dtype(c.float(1).dtype())?;
            Ok(vec![g4::kernels::rms_norm::composed(
                c.float(0),
                Some(&w),
                c.eps,
            )?])
        }),
        (Op::Attention, "1/sqrt(d) scaling", |c| {
            let d = c.float(0).dim(3)? as f64;
            Ok(vec![g4::kernels::attention::composed(
                c.float(0),
                c.float(1),
                c.float(2),
                Some(c.raw(0)),
                d.powf(-0.5),
            )?])
        }),
        (Op::Softcap, "tanh without the cap", |c| {
            Ok(vec![c.float(0).tanh()?])
        }),
        (Op::MoeRouterTopk, "no renormalisation after top-k", |c| {
            let (w, idx) = g4::kernels::moe_router_topk::composed(c.float(0), c.k, c.float(1))?;
            Ok(vec![(w * 0.9)?, idx])
        }),
        (
            Op::Linear,
            "the last element of K dropped (a tail bug)",
            |c| {
                let k = c.float(0).dim(1)?;
                Ok(vec![g4::kernels::linear::composed(
                    &c.float(0).narrow(1, 0, k - 1)?,
                    &c.float(1).narrow(1, 0, k - 1)?,
                )?])
            },
        ),
        (
            Op::Argmax,
            "the largest magnitude instead of the largest value",
            |c| {
                let indices = g4::kernels::argmax::composed(&c.float(0).abs()?)?;
                Ok(vec![c.float(0).gather(&indices.unsqueeze(1)?, 1)?, indices])
            },
        ),
    ];
    for (op, what, broken) in mutants {
        let result = check_with(op, &Device::Cpu, DType::F32, 1, &broken).unwrap();
        assert!(!result.ok, "{} with {what} passed the check", op.name());
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
    let result = check_with(Op::Softcap, &Device::Cpu, DType::F32, 1, &scribbler).unwrap();
    assert!(!result.ok);
    assert!(result.failure.unwrap().contains("wrote outside its output"));
}

fn probe_json() -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_g4"))
        .args(["probe-ops", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
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
        assert_eq!(
            entry["selected_arm"],
            arm_for(op, &Device::Cpu, DType::F32).name()
        );
        let arms = entry["arms"].as_array().unwrap();
        assert_eq!(arms.len(), 4, "cuda, hip, metal, composed");
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
        let hip = arms.iter().find(|a| a["backend"] == "hip").unwrap();
        assert!(hip["reason"].as_str().unwrap().contains("ROCm"));
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
