//! `g4 probe-ops`: which arm of every fused op runs on this device, why the others cannot, and
//! whether what runs is numerically right.

use anyhow::{bail, Result};
use g4::device::{compute_capability, device_name, device_names, open_devices, parse_dtype};
use g4::kernels::probe::{probe, OpReport, ProbeOptions};
use g4::kernels::Op;
use serde_json::json;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Device to probe: cpu, cuda, cuda:N, metal; or several, comma-separated: each is probed,
    /// and their all-reduce (the sum tensor parallelism needs) is checked.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Check only this dtype (f32, bf16, f16); default: each the op supports.
    #[arg(long)]
    dtype: Option<String>,
    /// Probe only this op (e.g. rms_norm).
    #[arg(long)]
    op: Option<String>,
    /// Also time every available arm: µs per call, GB/s, TFLOP/s for GEMMs.
    #[arg(long)]
    perf: bool,
    /// Seed of the random inputs; default: a fresh one each run (printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let devices = open_devices(&args.device)?;
    let dtypes = match &args.dtype {
        Some(spec) => vec![parse_dtype(spec)?],
        None => vec![
            candle_core::DType::F32,
            candle_core::DType::BF16,
            candle_core::DType::F16,
        ],
    };
    let ops: Vec<Op> = match &args.op {
        Some(name) => match Op::from_name(name) {
            Some(op) => vec![op],
            None => {
                let names: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
                bail!("--op {name}: unknown op; known: {}", names.join(", "))
            }
        },
        None => Op::ALL.to_vec(),
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let options = ProbeOptions {
        dtypes,
        seed,
        perf: args.perf,
    };
    // Every distinct device of a list (its ranks may differ); the CPU once.
    let mut probed: Vec<&candle_core::Device> = Vec::new();
    for device in &devices {
        if !probed.iter().any(|d| d.location() == device.location()) {
            probed.push(device);
        }
    }
    let mut failed = Vec::new();
    let mut values = Vec::new();
    for (i, device) in probed.iter().enumerate() {
        if i > 0 && !args.json {
            println!();
        }
        let reports = ops
            .iter()
            .map(|&op| probe(op, device, &options))
            .collect::<Result<Vec<_>>>()?;
        values.push(report_device(device, &reports, seed, &args)?);
        failed.extend(
            failures(&reports)
                .into_iter()
                .map(|f| format!("{}: {f}", device_name(device))),
        );
    }
    let group = match devices.len() {
        1 => None,
        _ => Some(g4::kernels::native::collective::check(&devices, seed)?),
    };
    if let Some(group) = group.as_ref().filter(|g| !g.ok) {
        failed.push(format!(
            "all-reduce over {}: {}",
            device_names(&devices),
            group.failure.clone().unwrap_or_default()
        ));
    }
    if args.json {
        let value = match (values.len(), &group) {
            (1, None) => values.remove(0),
            _ => json!({
                "devices": values, "seed": seed, "ok": failed.is_empty(), "all_reduce": group,
            }),
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if let Some(group) = &group {
        println!();
        println!(
            "all-reduce over {} ({}, {} ranks, f32/bf16/f16 against an f64 sum): {}, max error {:.1e} of the largest sum, {}",
            device_names(&devices),
            group.transport,
            group.ranks,
            if group.ok { "ok" } else { "FAIL" },
            group.max_relative_error,
            if group.identical_on_every_rank {
                "the same bits on every rank"
            } else {
                "DIFFERENT bits on the ranks"
            }
        );
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        bail!(
            "{} check(s) failed with input seed {seed} (rerun with --seed {seed}): {}",
            failed.len(),
            failed.join("; ")
        )
    }
}

/// One device's report: printed as a table, or returned as JSON (printed by the caller).
fn report_device(
    device: &candle_core::Device,
    reports: &[OpReport],
    seed: u64,
    args: &Args,
) -> Result<serde_json::Value> {
    let backend = match device {
        candle_core::Device::Cpu => "cpu",
        candle_core::Device::Cuda(_) => "cuda",
        candle_core::Device::Metal(_) => "metal",
    };
    let features: Vec<&str> = [
        ("cuda", cfg!(feature = "cuda")),
        ("hip", cfg!(feature = "hip")),
        ("metal", cfg!(feature = "metal")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    let capability = compute_capability(device).map(|(a, b)| format!("{a}.{b}"));
    if !args.json {
        print_table(
            reports,
            &device_name(device),
            capability.as_deref(),
            &features,
            seed,
            args.perf,
        );
    }
    Ok(json!({
        "device": {
            "name": device_name(device), "backend": backend,
            "compute_capability": capability, "build_features": features,
        },
        "seed": seed,
        "ok": reports.iter().all(OpReport::ok),
        "ops": reports,
    }))
}

/// Every failed arm check as `op / backend dtype: why`, and every op with no arm that runs here.
fn failures(reports: &[OpReport]) -> Vec<String> {
    let mut failures = Vec::new();
    for report in reports.iter().filter(|r| !r.ok()) {
        let before = failures.len();
        for arm in &report.arms {
            for by_dtype in arm.check.iter().flat_map(|c| &c.by_dtype) {
                if let Some(why) = &by_dtype.failure {
                    failures.push(format!(
                        "{} / {} {}: {why}",
                        report.op, arm.backend, by_dtype.dtype
                    ));
                }
            }
        }
        if failures.len() == before {
            failures.push(format!("{}: no arm runs here", report.op));
        }
    }
    failures
}

fn print_table(
    reports: &[OpReport],
    device: &str,
    capability: Option<&str>,
    features: &[&str],
    seed: u64,
    perf: bool,
) {
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(", ")
    };
    let capability = match (capability, device) {
        (Some(c), _) => format!(", compute capability {c}"),
        (None, "cpu") => g4::kernels::native::cpu::simd().map_or_else(
            || {
                format!(
                    ", no SIMD the CPU arms use ({})",
                    g4::kernels::native::cpu::REQUIREMENT
                )
            },
            |simd| format!(", CPU arms in {}", simd.name()),
        ),
        (None, _) => String::new(),
    };
    println!("device {device}{capability}; build features: {features}; input seed {seed}");
    println!();
    let selected_width = reports
        .iter()
        .map(|r| r.selected_arm.len())
        .chain([10])
        .max()
        .unwrap_or(10);
    println!(
        "{:<26} {:<selected_width$} {:<20} {:<12} {:<12} {:<20} {:<30}",
        "op", "selected", "cuda", "hip", "metal", "cpu", "composed"
    );
    let mut reasons: Vec<(String, Vec<&str>)> = Vec::new();
    for report in reports {
        if let Some(why) = &report.not_applicable {
            println!(
                "{:<26} {:<selected_width$} not checked: {why}",
                report.op, "-"
            );
            continue;
        }
        let mut cell = |backend: &str| -> String {
            let Some(arm) = report.arms.iter().find(|a| a.backend == backend) else {
                return "-".to_string();
            };
            match (&arm.check, arm.reason_kind) {
                (Some(check), _) => {
                    let verdict = if check.ok { "ok" } else { "FAIL" };
                    format!("{verdict} nmse {:.1e}", check.nmse)
                }
                (None, Some(kind)) => {
                    let reason = format!("{backend}: {}", arm.reason.clone().unwrap_or_default());
                    match reasons.iter_mut().find(|(r, _)| *r == reason) {
                        Some((_, ops)) => ops.push(report.op),
                        None => reasons.push((reason, vec![report.op])),
                    }
                    kind.to_string()
                }
                (None, None) => "-".to_string(),
            }
        };
        let cuda = cell("cuda");
        let hip = cell("hip");
        let metal = cell("metal");
        let cpu = cell("cpu");
        let composed = cell("composed");
        let mark = if report.ok() { "" } else { "  <-- FAILED" };
        println!(
            "{:<26} {:<selected_width$} {cuda:<20} {hip:<12} {metal:<12} {cpu:<20} {composed:<30}{mark}",
            report.op, report.selected_arm
        );
    }
    for report in reports {
        for arm in &report.arms {
            if let Some(failure) = arm.check.as_ref().and_then(|c| {
                c.by_dtype
                    .iter()
                    .find_map(|d| d.failure.clone().map(|f| (d.dtype.clone(), f)))
            }) {
                println!(
                    "  {} / {} {}: {}",
                    report.op, arm.backend, failure.0, failure.1
                );
            }
        }
    }
    let paths: Vec<_> = reports
        .iter()
        .flat_map(|r| r.shape_paths.iter().map(move |p| (r.op, p)))
        .collect();
    if !paths.is_empty() {
        println!();
        println!("shapes the native arms hand to another path (each covered by a check case):");
        for (op, path) in paths {
            println!("  {op}: {} -> {}", path.shapes, path.path);
        }
    }
    for report in reports {
        if let g4::kernels::contract::ModelUse::NotYet(why) = report.model_use {
            println!(
                "  {} is checked but not called by the model yet: {why}",
                report.op
            );
        }
    }
    if perf {
        println!();
        println!(
            "{:<26} {:<10} {:<6} {:<34} {:>10} {:>9} {:>9}",
            "op", "arm", "dtype", "case", "µs/call", "GB/s", "TFLOP/s"
        );
        for report in reports {
            for arm in &report.arms {
                for p in &arm.perf {
                    let tflops = p.tflop_per_s.map_or("-".to_string(), |t| format!("{t:.3}"));
                    println!(
                        "{:<26} {:<10} {:<6} {:<34} {:>10.1} {:>9.2} {:>9}",
                        report.op, arm.backend, p.dtype, p.case, p.us_per_call, p.gb_per_s, tflops
                    );
                }
            }
        }
    }
    if !reasons.is_empty() {
        println!();
        println!("why arms are unavailable:");
        let total = reports.len();
        for (reason, ops) in reasons {
            let which = if ops.len() == total {
                "every op".to_string()
            } else {
                ops.join(", ")
            };
            println!("  {reason} ({which})");
        }
    }
}
