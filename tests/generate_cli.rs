//! `g4 generate` end to end: the embedded model writes text, greedy output equals the
//! transformers golden of the trained model, seeded sampling repeats, stop strings and eos stop,
//! streaming detokenisation is exact, and every bad input is one clear error line.

use g4::model::source::ModelSource;
use std::path::{Path, PathBuf};

mod common;
use common::g4;

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["generate", "--json"];
    all.extend_from_slice(args);
    let out = g4(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

fn kjv_golden_case(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/kjv-tiny/golden.json");
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    golden["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
        .clone()
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect()
}

#[test]
fn the_embedded_default_writes_readable_text_and_statistics() {
    let out = g4(&["generate", "--prompt", "In the beginning", "-n", "24"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let words = stdout
        .split_whitespace()
        .filter(|w| {
            w.chars()
                .all(|c| c.is_ascii_alphabetic() || ",.;:'".contains(c))
        })
        .count();
    assert!(words >= 10, "not readable text: {stdout}");
    for field in [
        "prompt",
        "generated",
        "first token",
        "prefill",
        "decode",
        "tok/s",
        "peak memory",
    ] {
        assert!(
            stderr.contains(field),
            "statistics lack '{field}': {stderr}"
        );
    }
}

#[test]
fn greedy_output_equals_the_reference_golden_for_the_trained_model() {
    for (case, prompt) in [
        ("beginning", "In the beginning"),
        ("moses", "And the LORD spake unto Moses, saying,"),
    ] {
        let golden = kjv_golden_case(case);
        let n = golden["expected_ids"].as_array().unwrap().len().to_string();
        for (model, decode) in [
            (None, "eager"),
            (None, "graph"),
            (Some("golden/kjv-tiny/model"), "auto"),
        ] {
            let mut args = vec![
                "--temperature",
                "0",
                "-n",
                &n,
                "--prompt",
                prompt,
                "--decode",
                decode,
            ];
            if let Some(dir) = model {
                args.extend(["--model", dir]);
            }
            let result = json(&args);
            assert_eq!(
                ids(&result["prompt_ids"]),
                ids(&golden["prompt_ids"]),
                "{case}: prompt tokenisation"
            );
            assert_eq!(
                ids(&result["token_ids"]),
                ids(&golden["expected_ids"]),
                "{case} ({model:?}, {decode} decode)"
            );
            assert_eq!(result["text"], golden["expected_text"], "{case}");
        }
    }
}

/// `--prompt-ids` feeds the golden's prompt ids as given and reproduces its greedy ids.
#[test]
fn prompt_ids_reproduce_the_reference_golden_id_for_id() {
    let golden = kjv_golden_case("long-context");
    let prompt: Vec<String> = ids(&golden["prompt_ids"])
        .iter()
        .map(u64::to_string)
        .collect();
    let n = golden["expected_ids"].as_array().unwrap().len().to_string();
    let result = json(&["--prompt-ids", &prompt.join(","), "-n", &n]);
    assert_eq!(ids(&result["prompt_ids"]), ids(&golden["prompt_ids"]));
    assert_eq!(ids(&result["token_ids"]), ids(&golden["expected_ids"]));
}

#[test]
fn the_chat_template_is_applied_and_eos_stops_generation() {
    let golden = kjv_golden_case("chat");
    let result = json(&[
        "--chat",
        "--prompt",
        "Ge1:3",
        "--temperature",
        "0",
        "-n",
        "100",
    ]);
    assert_eq!(ids(&result["prompt_ids"]), ids(&golden["prompt_ids"]));
    assert_eq!(result["stop_reason"], "eos");
    let expected: Vec<u64> = ids(&golden["expected_ids"]);
    let got = ids(&result["token_ids"]);
    assert!(
        got.len() < 100 && expected.starts_with(&got),
        "{got:?} vs {expected:?}"
    );
}

#[test]
fn streamed_text_equals_the_json_text() {
    let args = ["--prompt", "And God said", "-n", "40", "--seed", "5"];
    let result = json(&args);
    let mut plain = vec!["generate"];
    plain.extend_from_slice(&args);
    let out = g4(&plain);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end_matches('\n'),
        result["text"].as_str().unwrap()
    );
}

#[test]
fn sampling_with_a_fixed_seed_is_reproducible() {
    let run = |seed: &str| {
        json(&[
            "--prompt",
            "And it came to pass",
            "-n",
            "30",
            "--temperature",
            "1.0",
            "--seed",
            seed,
        ])["token_ids"]
            .clone()
    };
    assert_eq!(run("42"), run("42"));
    assert_ne!(run("42"), run("43"));
}

#[test]
fn a_stop_string_ends_generation_and_is_not_printed() {
    let golden = kjv_golden_case("beginning");
    let reference = golden["expected_text"].as_str().unwrap();
    let expected = &reference[..reference.find("Josiah").unwrap()];
    let result = json(&[
        "--prompt",
        "In the beginning",
        "--temperature",
        "0",
        "-n",
        "40",
        "--stop",
        "Josiah",
    ]);
    assert_eq!(result["stop_reason"], "stop-string");
    assert_eq!(result["text"], expected);
}

#[test]
fn streaming_detokenisation_is_exact_on_multibyte_text() {
    let tokenizer = ModelSource::Embedded.tokenizer().unwrap();
    let text = "Ünïcödé ✝ 日本語 — “quoted” and plain words, 🙏 amen.";
    let ids = tokenizer.encode(text).unwrap();
    assert!(
        ids.len() > text.split_whitespace().count(),
        "byte fallback should split the rare characters"
    );
    let mut stream = tokenizer.stream();
    let mut streamed = String::new();
    for id in &ids {
        if let Some(piece) = stream.step(*id).unwrap() {
            assert!(
                !piece.contains('\u{FFFD}'),
                "a broken UTF-8 piece was released: {piece:?}"
            );
            streamed.push_str(&piece);
        }
    }
    assert_eq!(streamed, tokenizer.decode(&ids).unwrap());
    assert_eq!(streamed, text);
}

/// A copy of the trained checkpoint to break.
fn model_copy() -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/kjv-tiny/model");
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("model");
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
    }
    (dir, dst)
}

#[test]
fn every_bad_input_is_one_clear_error_line() {
    let (_keep, broken) = model_copy();
    let no_tokenizer = broken.join("no-tokenizer");
    std::fs::create_dir_all(&no_tokenizer).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(broken.join(f), no_tokenizer.join(f)).unwrap();
    }
    let truncated = broken.join("truncated");
    std::fs::create_dir_all(&truncated).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(broken.join(f), truncated.join(f)).unwrap();
    }
    let bytes = std::fs::read(broken.join("model.safetensors")).unwrap();
    std::fs::write(
        truncated.join("model.safetensors"),
        &bytes[..bytes.len() - 1000],
    )
    .unwrap();
    let small_vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/e2b-style/model");
    let mismatched = broken.join("mismatched");
    std::fs::create_dir_all(&mismatched).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(small_vocab.join(f), mismatched.join(f)).unwrap();
    }
    std::fs::copy(
        broken.join("tokenizer.json"),
        mismatched.join("tokenizer.json"),
    )
    .unwrap();
    let long_prompt = "and the LORD said ".repeat(300);
    let bad_defaults = broken.join("bad-defaults");
    std::fs::create_dir_all(&bad_defaults).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(broken.join(f), bad_defaults.join(f)).unwrap();
    }
    std::fs::write(
        bad_defaults.join("generation_config.json"),
        r#"{"do_sample": true, "top_p": 2.0}"#,
    )
    .unwrap();

    let s = |p: &Path| p.to_str().unwrap().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--model".into(), "/no/such/dir".into()],
            "/no/such/dir: model directory not found",
        ),
        (
            vec!["--model".into(), s(&no_tokenizer)],
            "tokenizer.json not found",
        ),
        (
            vec!["--model".into(), s(&truncated)],
            "model.safetensors: not a valid safetensors file",
        ),
        (
            vec!["--model".into(), s(&mismatched)],
            "tokenizer.json has 4096 tokens but the model's vocab_size is 512",
        ),
        (
            vec!["--prompt".into(), long_prompt],
            "the model's context is 1024 positions",
        ),
        (
            vec!["--device".into(), "tpu".into()],
            "--device tpu: unknown device",
        ),
        (
            vec!["--device".into(), "cuda".into()],
            "rebuild with --features cuda",
        ),
        (
            vec!["--dtype".into(), "int4".into()],
            "--dtype int4: unsupported compute dtype",
        ),
        (
            vec!["--decode".into(), "sometimes".into()],
            "--decode sometimes: expected auto, eager or graph",
        ),
        (
            vec!["--model".into(), s(&bad_defaults)],
            "generation_config.json: top_p = 2 is not valid: expected a number in (0, 1]",
        ),
        (
            vec!["--ple".into(), "gpu".into()],
            "--ple gpu: expected auto, host or device",
        ),
        (
            vec!["--prompt-ids".into(), "2 x".into()],
            "'x' is not a token id",
        ),
        (
            vec!["--stop".into(), String::new()],
            "a stop string must not be empty",
        ),
        (
            vec!["--prompt-ids".into(), "2 99999".into()],
            "token id 99999 is outside the model's vocabulary of 4096",
        ),
    ];
    let flag_cases = [
        (
            "--temperature",
            ["-1", "NaN", "inf", "-inf"].as_slice(),
            "expected a finite number >= 0",
        ),
        (
            "--top-p",
            &["2", "-0.5", "NaN", "0"],
            "expected a number in (0, 1]",
        ),
        (
            "--min-p",
            &["2", "-1", "NaN"],
            "expected a number in [0, 1]",
        ),
        (
            "--repeat-penalty",
            &["0", "-1", "NaN", "inf"],
            "expected a finite number > 0",
        ),
    ];
    let mut cases = cases;
    for (flag, values, needle) in flag_cases {
        for value in values {
            cases.push((vec![flag.into(), value.to_string()], needle));
        }
    }
    for (args, needle) in cases {
        if needle.contains("--features cuda") && cfg!(feature = "cuda") {
            continue;
        }
        let mut all = vec!["generate".to_string(), "-n".into(), "2".into()];
        all.extend(args.clone());
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = g4(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: expected one line, got {stderr}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(needle),
            "{args:?}: '{needle}' not in {stderr}"
        );
    }
}

/// `--logprobs` reports the model's distribution: against the log-probabilities transformers
/// recorded for the trained model's golden, step by step.
#[test]
fn logprobs_match_the_references_recorded_top_five() {
    let golden = kjv_golden_case("beginning");
    let result = json(&[
        "--prompt",
        golden["prompt"].as_str().unwrap(),
        "--temperature",
        "0",
        "-n",
        "40",
        "--logprobs",
        "5",
    ]);
    assert_eq!(ids(&result["token_ids"]), ids(&golden["expected_ids"]));
    let steps = result["logprobs"].as_array().unwrap();
    assert_eq!(steps.len(), 40);
    let mut worst: f64 = 0.0;
    for (step, (ours, theirs)) in steps
        .iter()
        .zip(golden["top_logprobs"].as_array().unwrap())
        .enumerate()
    {
        assert_eq!(ours["token"], ours["top"][0]["token"], "step {step}");
        assert_eq!(ours["logprob"], ours["top"][0]["logprob"], "step {step}");
        let top = ours["top"].as_array().unwrap();
        assert_eq!(top.len(), 5);
        for (mine, reference) in top.iter().zip(theirs.as_array().unwrap()) {
            assert_eq!(mine["token"], reference[0], "step {step}");
            let delta = (mine["logprob"].as_f64().unwrap() - reference[1].as_f64().unwrap()).abs();
            worst = worst.max(delta);
        }
    }
    assert!(worst < 1e-4, "max |Δ logprob| {worst}");
    let out = g4(&["generate", "--logprobs", "101"]);
    assert_eq!(out.status.code(), Some(2));
}

/// The embedded model split over two CPU ranks generates the transformers golden's tokens, as
/// on one device, with eager and graph decode steps; a device list that does not parse or a model
/// that does not split is refused with the reason.
#[test]
fn generate_split_over_two_cpu_ranks_matches_the_golden() {
    let case = kjv_golden_case("long-context");
    let prompt: Vec<String> = ids(&case["prompt_ids"])
        .iter()
        .map(u64::to_string)
        .collect();
    let expected = ids(&case["expected_ids"]);
    let n = expected.len().to_string();
    for decode in ["auto", "graph"] {
        let out = json(&[
            "--device",
            "cpu,cpu",
            "--decode",
            decode,
            "--prompt-ids",
            &prompt.join(","),
            "-n",
            &n,
        ]);
        assert_eq!(out["device"], "cpu,cpu");
        assert_eq!(ids(&out["token_ids"]), expected, "--decode {decode}");
    }
    for (device, why) in [
        ("cpu,,cpu", "empty device name"),
        (
            "cpu,cpu,cpu",
            "4 attention heads do not split evenly over 3",
        ),
    ] {
        let out = g4(&["generate", "-n", "2", "--device", device]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{device}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
    }
}
