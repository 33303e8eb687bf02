//! `g4 generate`: streams text from a Gemma-4 checkpoint, or from the embedded tiny model when no
//! `--model` is given.

use anyhow::{Context, Result};
use g4::device::{device_names, dtype_name};
use g4::model::chat::{self, Chat};
use g4::model::generation::{self, Request};
use g4::model::sampling::{Sampler, SamplingParams};
use g4::model::session::DecodeChoice;
use g4::model::thinking::Channel;
use g4::model::Gemma4;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Instant;

/// Sampling flags left unset fall back to the checkpoint's generation_config.json, then to
/// greedy decoding. `--temperature 0` is always greedy.
#[derive(clap::Args)]
#[command(
    after_help = "Sampling: options left unset come from the checkpoint's generation_config.json \
(do_sample, temperature, top_k, top_p, min_p, repetition_penalty); without one, decoding is greedy. \
Generation stops at the checkpoint's eos ids (config.json, generation_config.json, and <turn|>), \
at a --stop string, after --max-tokens, or at the end of the model's context. Statistics go to \
stderr; the text alone goes to stdout.

Thinking: text the model writes inside a reasoning channel (<|channel>thought ... <channel|>) is \
streamed to stderr (dimmed on a terminal), apart from the answer on stdout; --json gives it as \
\"reasoning\" beside \"text\". Stop strings apply to the answer only."
)]
#[command(group = clap::ArgGroup::new("chat_input").args(["chat", "messages"]))]
pub struct Args {
    #[command(flatten)]
    target: super::ModelArgs,
    #[arg(long, default_value = "auto", help = super::DECODE_HELP)]
    decode: DecodeChoice,
    /// Prompt text; `-` reads it from standard input. Empty: generate from <bos> alone.
    #[arg(long, short, default_value = "")]
    prompt: String,
    /// The prompt as token ids (space- or comma-separated), used as given: no <bos> is added
    /// and no template applied (to reproduce another engine's run id for id).
    #[arg(long, value_name = "IDS", conflicts_with_all = ["prompt", "chat_input"], value_parser = token_ids)]
    prompt_ids: Option<TokenIds>,
    /// Wrap the prompt in the checkpoint's chat template (as a user turn).
    #[arg(long)]
    chat: bool,
    /// System prompt for --chat.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// A conversation to continue, rendered by the checkpoint's chat template: a JSON file
    /// (`-`: standard input) holding a list of {"role": system|user|assistant|tool, "content":
    /// a string or a list of {"type": "text", "text": ...} parts}.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "system", "chat"])]
    messages: Option<String>,
    /// Tool declarations for the chat template (a JSON list of {"type": "function",
    /// "function": {"name", "description", "parameters"}}); rendered into the prompt only.
    #[arg(long, value_name = "FILE", requires = "chat_input")]
    tools: Option<std::path::PathBuf>,
    /// Let the model think before it answers: sets the chat template's `enable_thinking`
    /// (left to the template's default, off, without this flag).
    #[arg(long, requires = "chat_input")]
    think: bool,
    /// Maximum number of tokens to generate.
    #[arg(long, short = 'n', default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| sampling_value("temperature", s))]
    temperature: Option<f64>,
    /// Keep only the k most likely tokens (0: off).
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches p (1.0: off).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| sampling_value("top_p", s))]
    top_p: Option<f64>,
    /// Drop tokens less likely than min_p × the most likely one (0: off).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| sampling_value("min_p", s))]
    min_p: Option<f64>,
    /// Penalise tokens seen in the last --repeat-last-n tokens (1.0: off).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| sampling_value("repetition_penalty", s).map(|p| p as f32))]
    repeat_penalty: Option<f32>,
    /// How many recent tokens --repeat-penalty looks at.
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// RNG seed for sampling; the same seed and options give the same text.
    #[arg(long, default_value_t = 299_792_458)]
    seed: u64,
    /// Stop when this text is produced (not printed). Repeatable.
    #[arg(long, value_parser = stop_string)]
    stop: Vec<String>,
    /// Report each generated token's log-probability under the model (before temperature,
    /// truncation and penalties) and its N most likely alternatives: in --json as "logprobs",
    /// otherwise a table on stderr after the text.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=100))]
    logprobs: Option<u16>,
    /// Print one JSON object (text, token ids, timings, stop reason) instead of streaming.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let (devices, dtype, source, ple) = args.target.resolve()?;
    let device = devices[0].clone();
    let prompt = read_prompt(&args.prompt)?;
    let chat = chat_request(&args, &prompt)?;

    let load_started = Instant::now();
    let config = source.config()?;
    let tokenizer = source.tokenizer()?;
    tokenizer.check_vocab(config.vocab_size)?;
    let defaults = source.generation_defaults()?;
    let bar = load_bar(args.json);
    let model = Gemma4::load_on(&source, config, &devices, dtype, ple, Some(bar.clone()))
        .with_context(|| source.name())?;
    bar.finish_and_clear();
    let load_time = load_started.elapsed();

    let prompt_ids = if let Some(TokenIds(ids)) = &args.prompt_ids {
        ids.clone()
    } else if let Some(chat) = chat {
        let (prompt, unread) = tokenizer.apply_chat_template(&chat)?;
        for request in unread {
            eprintln!(
                "note: this checkpoint's chat template does not read {request}; it has no effect"
            );
        }
        tokenizer.encode(&prompt)?
    } else {
        // Gemma's tokenizer adds no BOS; raw prompts get it here.
        let mut ids = vec![model.config().bos_token_id];
        ids.extend(tokenizer.encode(&prompt)?);
        ids
    };

    let mut eos_ids = defaults.eos_token_ids.clone();
    for id in model
        .config()
        .eos_token_ids
        .iter()
        .copied()
        .chain(tokenizer.token_id("<turn|>"))
    {
        if !eos_ids.contains(&id) {
            eos_ids.push(id);
        }
    }
    let sampling = sampling_params(&args, &defaults);
    let mut sampler = Sampler::new(sampling.clone());
    let request = Request {
        prompt_ids,
        max_tokens: args.max_tokens,
        eos_ids,
        stop_strings: args.stop.clone(),
        decode: args.decode.resolve(&model)?,
        logprobs: args.logprobs.map(usize::from),
    };

    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr();
    let dim = stderr.is_terminal();
    let streaming = !args.json;
    let mut reasoning_shown = false;
    let result = generation::generate(
        &model,
        &tokenizer,
        &mut sampler,
        &request,
        &mut |channel, piece| {
            if !streaming || piece.is_empty() {
                return;
            }
            // A closed pipe (e.g. `| head`) just ends the output.
            let _ = match channel {
                Channel::Answer => stdout
                    .write_all(piece.as_bytes())
                    .and_then(|_| stdout.flush()),
                Channel::Reasoning => {
                    reasoning_shown = true;
                    let text = if dim {
                        format!("\x1b[2m{piece}\x1b[0m")
                    } else {
                        piece.to_string()
                    };
                    stderr
                        .write_all(text.as_bytes())
                        .and_then(|_| stderr.flush())
                }
            };
        },
    )?;
    if reasoning_shown {
        eprintln!();
    }

    let generated = result.token_ids.len();
    let prefill_rate = request.prompt_ids.len() as f64 / result.prefill.as_secs_f64();
    let decode_rate = if generated > 1 {
        (generated - 1) as f64 / result.decode.as_secs_f64()
    } else {
        0.0
    };
    let peak = g4::device::memory_in_use(&device);
    if args.json {
        let mut value = json!({
            "model": source.name(),
            "device": device_names(&devices),
            "dtype": dtype_name(dtype),
            "ple": model.ple_placement().map(|p| p.name()),
            "text": result.text,
            "reasoning": result.reasoning,
            "prompt_tokens": request.prompt_ids.len(),
            "generated_tokens": generated,
            "prompt_ids": request.prompt_ids,
            "token_ids": result.token_ids,
            "stop_reason": result.stop_reason,
            "sampling": {
                "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                "min_p": sampling.min_p, "repeat_penalty": sampling.repeat_penalty, "seed": sampling.seed,
            },
            "timings": {
                "load_s": load_time.as_secs_f64(),
                "time_to_first_token_s": result.prefill.as_secs_f64(),
                "prefill_tokens_per_s": prefill_rate,
                "decode_tokens_per_s": decode_rate,
            },
            "peak_memory_bytes": peak,
        });
        if args.logprobs.is_some() {
            let entry = |id: u32, logprob: f32| json!({"token": id, "text": tokenizer.token_text(id), "logprob": logprob});
            value["logprobs"] = result
                .logprobs
                .iter()
                .map(|step| {
                    let mut e = entry(step.token, step.logprob);
                    e["top"] = step.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
                    e
                })
                .collect();
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        writeln!(stdout)?;
        stdout.flush()?;
        eprintln!(
            "[{} on {} {}{}] prompt {} tok, generated {generated} tok (stop: {}); load {:.2}s, first token {:.3}s, prefill {prefill_rate:.1} tok/s, decode {decode_rate:.1} tok/s, peak memory {}",
            source.name(),
            device_names(&devices),
            dtype_name(dtype),
            model
                .ple_placement()
                .map_or(String::new(), |p| format!(", PLE table on the {}", p.name())),
            request.prompt_ids.len(),
            result.stop_reason.name(),
            load_time.as_secs_f64(),
            result.prefill.as_secs_f64(),
            peak.map_or("unknown".to_string(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
        );
        if args.logprobs.is_some() {
            eprintln!("step  token                 logprob  top alternatives");
            for (step, entry) in result.logprobs.iter().enumerate() {
                let top: Vec<String> = entry
                    .top
                    .iter()
                    .map(|&(id, lp)| format!("{:?} {lp:.3}", tokenizer.token_text(id)))
                    .collect();
                eprintln!(
                    "{step:>4}  {:<20} {:>8.4}  {}",
                    format!("{:?}", tokenizer.token_text(entry.token)),
                    entry.logprob,
                    top.join(", ")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The chat to render, read and checked before the model loads; `None` for a raw prompt.
/// `--chat` makes the prompt a user turn, after `--system`'s turn.
fn chat_request(args: &Args, prompt: &str) -> Result<Option<Chat>> {
    if !args.chat && args.messages.is_none() {
        return Ok(None);
    }
    let messages = match &args.messages {
        Some(spec) => {
            let (what, text) = read_file_or_stdin(spec)?;
            chat::messages_from_json(&what, &text)?
        }
        None => chat::prompt_messages(args.system.as_deref(), prompt),
    };
    let tools = match &args.tools {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --tools file {}", path.display()))?;
            Some(chat::tools_from_json(&path.display().to_string(), &text)?)
        }
        None => None,
    };
    Ok(Some(Chat {
        messages,
        tools,
        enable_thinking: args.think.then_some(true),
    }))
}

/// A sampling flag's number, range-checked as generation_config.json's fields are.
fn sampling_value(name: &str, text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number"))?;
    g4::model::sampling::ranges::check(name, value)
}

/// A file's name and text, or standard input's for `-`.
fn read_file_or_stdin(spec: &str) -> Result<(String, String)> {
    if spec == "-" {
        return Ok(("standard input".to_string(), read_prompt("-")?));
    }
    let text = std::fs::read_to_string(spec)
        .with_context(|| format!("cannot read --messages file {spec}"))?;
    Ok((spec.to_string(), text))
}

#[derive(Clone, Debug)]
struct TokenIds(Vec<u32>);

fn token_ids(spec: &str) -> Result<TokenIds, String> {
    let ids = spec
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .map_err(|_| format!("'{s}' is not a token id"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err("no token ids given".to_string());
    }
    Ok(TokenIds(ids))
}

// An empty stop string can stop nothing (the matcher skips it): refused, not silently ignored.
fn stop_string(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("a stop string must not be empty".to_string());
    }
    Ok(text.to_string())
}

fn read_prompt(spec: &str) -> Result<String> {
    if spec != "-" {
        return Ok(spec.to_string());
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("cannot read the prompt from standard input")?;
    Ok(text)
}

fn sampling_params(
    args: &Args,
    defaults: &g4::model::source::GenerationDefaults,
) -> SamplingParams {
    // generation_config.json's do_sample=false means greedy unless the user asks for a temperature.
    let default_temperature = match defaults.do_sample {
        Some(true) => defaults.temperature.unwrap_or(1.0),
        _ => 0.0,
    };
    SamplingParams {
        temperature: args.temperature.unwrap_or(default_temperature),
        top_k: args.top_k.or(defaults.top_k),
        top_p: args.top_p.or(defaults.top_p),
        min_p: args.min_p.or(defaults.min_p),
        repeat_penalty: args
            .repeat_penalty
            .or(defaults.repetition_penalty)
            .unwrap_or(1.0),
        repeat_last_n: args.repeat_last_n,
        seed: args.seed,
    }
}

/// Its length is set when the checkpoint is open.
fn load_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "loading {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("static template"),
    );
    bar
}
