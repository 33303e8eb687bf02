//! `g4 bench`: prompt-processing and token-generation throughput of a checkpoint, with
//! repetitions, as a markdown table or JSON.

use anyhow::{bail, Context, Result};
use g4::bench::{measure, positions_needed, Test};
use g4::device::{device_name, device_names, dtype_name};
use g4::model::ple::PlePlacement;
use g4::model::session::DecodeChoice;
use g4::model::Gemma4;
use serde_json::json;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: super::ModelArgs,
    /// Tests to run, e.g. pp512 tg128 (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', default_values_t = ["pp512".to_string(), "tg128".to_string()])]
    tests: Vec<String>,
    /// Decode paths to measure side by side, e.g. eager,graph (auto, eager, graph).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    decode: Vec<DecodeChoice>,
    /// Context depths to run every test at, e.g. 0,4096,16384: D tokens prefilled (untimed)
    /// before the timed region, like llama-bench's -d.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    depth: Vec<usize>,
    /// Timed repetitions per test (after one warm-up run).
    #[arg(long, short = 'r', default_value_t = 5)]
    repetitions: usize,
    /// Print one JSON object instead of the markdown table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let (devices, dtype, source, ple) = args.target.resolve()?;
    let device = devices[0].clone();
    let tests = args
        .tests
        .iter()
        .map(|t| Test::parse(t).with_context(|| format!("--tests {t}: expected ppN or tgN")))
        .collect::<Result<Vec<_>>>()?;
    if args.repetitions == 0 {
        bail!("--repetitions must be at least 1");
    }
    let memory_before = g4::device::memory_in_use(&device);
    let started = Instant::now();
    let config = source.config()?;
    let context = config.max_position_embeddings;
    let model = Gemma4::load_on(&source, config, &devices, dtype, ple, None)
        .with_context(|| source.name())?;
    for device in &devices {
        device.synchronize()?;
    }
    let load_s = started.elapsed().as_secs_f64();
    let memory_weights = g4::device::memory_in_use(&device);
    for test in &tests {
        for &depth in &args.depth {
            let needed = positions_needed(*test, depth);
            if needed > context {
                bail!(
                    "{} at depth {depth}: needs {needed} positions but the model's context is {context}",
                    test.name()
                );
            }
        }
    }

    let paths = args
        .decode
        .iter()
        .map(|choice| choice.resolve(&model))
        .collect::<Result<Vec<_>>>()?;
    let mut rows = Vec::new();
    for &test in &tests {
        // Prompt processing does not depend on the decode path.
        let paths = match test {
            Test::Prompt(_) => &paths[..1],
            Test::Generate(_) => &paths[..],
        };
        for &depth in &args.depth {
            for &path in paths {
                rows.push((
                    path.name(&device),
                    measure(&model, test, depth, path, args.repetitions, 42)?,
                ));
            }
        }
    }
    let memory_peak = g4::device::memory_in_use(&device);
    let mib = |b: Option<u64>| b.map(|b| b as f64 / 1048576.0);
    if args.json {
        let value = json!({
            "model": source.name(),
            "device": device_names(&devices),
            "dtype": dtype_name(dtype),
            "ple": model.ple_placement().map(|p| p.name()),
            "load_s": load_s,
            "weights_mib": {
                "device": model.device_weight_bytes() as f64 / 1048576.0,
                "host": model.host_weight_bytes() as f64 / 1048576.0,
            },
            "memory_mib": {
                "before_load": mib(memory_before), "after_load": mib(memory_weights), "after_tests": mib(memory_peak),
                "measure": g4::device::memory_measure(&device),
                "after_tests_per_device": devices.iter().map(|d| json!({
                    "device": device_name(d), "mib": mib(g4::device::memory_in_use(d)),
                })).collect::<Vec<_>>(),
            },
            "results": rows.iter().map(|(decode, row)| json!({
                "decode": (!row.test.starts_with("pp")).then_some(decode), "measurement": row,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("| model | device | dtype | decode | test | t/s |");
        println!("| --- | --- | --- | --- | --- | ---: |");
        for (decode, row) in &rows {
            let decode = match row.test.starts_with("pp") {
                true => "-",
                false => decode,
            };
            println!(
                "| {} | {} | {} | {decode} | {} | {:.2} ± {:.2} |",
                source.name(),
                device_names(&devices),
                dtype_name(dtype),
                row.test,
                row.tokens_per_s_mean,
                row.tokens_per_s_stddev
            );
        }
        let show = |b: Option<u64>| mib(b).map_or("unknown".to_string(), |m| format!("{m:.0} MiB"));
        println!();
        let queued: Vec<String> = rows
            .iter()
            .filter_map(|(_, row)| {
                let share = row.host_queued_share?;
                Some(format!("{} {:.0}%", row.test, share * 100.0))
            })
            .collect();
        if !queued.is_empty() {
            println!(
                "host had queued each prompt's forward after (share of its time): {}",
                queued.join(", ")
            );
        }
        print!(
            "weights: {:.0} MiB on {}{}",
            model.device_weight_bytes() as f64 / 1048576.0,
            device_name(&device),
            if model.is_parallel() {
                " (rank 0's part)"
            } else {
                ""
            }
        );
        match model.ple_placement() {
            Some(PlePlacement::Host) => println!(
                ", per-layer table {:.0} MiB in host memory",
                model.host_weight_bytes() as f64 / 1048576.0
            ),
            Some(PlePlacement::Device) => println!(", per-layer table included"),
            None => println!(),
        }
        println!(
            "load {load_s:.2}s; {} in use: before load {}, after load {}, after tests {}",
            g4::device::memory_measure(&device),
            show(memory_before),
            show(memory_weights),
            show(memory_peak)
        );
        if model.is_parallel() {
            let each: Vec<String> = devices
                .iter()
                .map(|d| format!("{} {}", device_name(d), show(g4::device::memory_in_use(d))))
                .collect();
            println!("after tests, per device: {}", each.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
