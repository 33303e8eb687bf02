//! One module per subcommand: its argument struct, `run`, and its output formatting.

pub mod bench;
pub mod generate;
pub mod probe_ops;
pub mod verify_golden;

use g4::model::ple::{PleChoice, PlePlacement};

/// Which model to run, where, and in which dtype: shared by `generate` and `bench`.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// Checkpoint directory in Hugging Face layout (config.json, tokenizer.json, *.safetensors).
    /// Without it, g4 runs its embedded tiny model (trained on the King James Bible).
    #[arg(long)]
    pub model: Option<std::path::PathBuf>,
    /// Device: cpu, cuda, cuda:N, metal; or several, comma-separated (cuda:0,cuda:1), to split
    /// the model over them by tensor parallelism.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtype: f32, bf16, f16 (default: f32 on CPU, bf16 on GPUs).
    #[arg(long)]
    pub dtype: Option<String>,
    #[arg(long, default_value = "auto", help = PLE_HELP)]
    pub ple: PleChoice,
}

/// `--ple`: where E2B/E4B's per-layer embedding table lives.
pub const PLE_HELP: &str = "Per-layer embedding table (E2B/E4B): auto (host memory on GPUs, device on CPU), host, or device";

/// `--decode`: auto (graph steps on CUDA, eager elsewhere), eager (every
/// step launched from the host), or graph (one device-resident step, captured as a CUDA graph and
/// replayed on CUDA; run directly on other devices).
pub const DECODE_HELP: &str =
    "Decode steps: auto, eager, or graph (device-resident step, captured as a CUDA graph on CUDA)";

impl ModelArgs {
    /// Opens the devices (the first is rank 0's, where the logits are) and resolves the dtype
    /// and the model's source.
    pub fn resolve(
        &self,
    ) -> anyhow::Result<(
        Vec<candle_core::Device>,
        candle_core::DType,
        g4::model::source::ModelSource,
        PlePlacement,
    )> {
        let devices = g4::device::open_devices(&self.device)?;
        let device = &devices[0];
        let dtype = match &self.dtype {
            Some(spec) => g4::device::parse_dtype(spec)?,
            None if device.is_cpu() => candle_core::DType::F32,
            None => candle_core::DType::BF16,
        };
        let source = match &self.model {
            Some(dir) => g4::model::source::ModelSource::Dir(dir.clone()),
            None => g4::model::source::ModelSource::Embedded,
        };
        let ple = self.ple.resolve(device);
        Ok((devices, dtype, source, ple))
    }
}

/// An error and its causes on one line, outermost first.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text.lines().next().unwrap_or_default().trim().to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
