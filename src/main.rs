//! The g4 command line. Argument structs and output live in `cmd/`; nothing else lives here.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmd;

#[derive(Parser)]
#[command(
    name = "g4",
    version,
    about = "Gemma-4 text models on candle: run them, prove them, probe their kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a Gemma-4 checkpoint (or the embedded tiny model).
    Generate(cmd::generate::Args),
    /// Prompt-processing and token-generation throughput (ppN / tgN) of a checkpoint.
    Bench(cmd::bench::Args),
    /// Which arm of every fused op runs on this device, and whether it is numerically right.
    ProbeOps(cmd::probe_ops::Args),
    /// Check g4 token-exact against golden outputs of the reference implementation.
    VerifyGolden(cmd::verify_golden::Args),
}

fn main() -> ExitCode {
    g4::device::keep_freed_host_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if !error.use_stderr() => error.exit(),
        Err(error) => {
            eprintln!("{}", one_line_usage_error(&error.render().to_string()));
            return ExitCode::from(2);
        }
    };
    if let Err(error) = g4::kernels::forced_composed() {
        eprintln!("error: {error}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Generate(args) => cmd::generate::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::ProbeOps(args) => cmd::probe_ops::run(args),
        Command::VerifyGolden(args) => cmd::verify_golden::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", cmd::one_line(&error));
            ExitCode::from(2)
        }
    }
}

/// clap's message up to its usage block, on one line like every other g4 error.
fn one_line_usage_error(rendered: &str) -> String {
    let mut line = String::new();
    for part in rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
    {
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    line
}
