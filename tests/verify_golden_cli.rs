//! `g4 verify-golden` as a user runs it: it passes the committed goldens, fails on an altered
//! checkpoint, never reads green when a checkpoint is missing, and names the file and tensor
//! when a checkpoint is broken.

use candle_core::{Device, Tensor};
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::g4;

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A private copy of one committed golden (golden.json + model/) to break in a test.
fn copy_golden(variant: &str) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(variant);
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join(variant);
    std::fs::create_dir_all(dst.join("model")).unwrap();
    std::fs::copy(src.join("golden.json"), dst.join("golden.json")).unwrap();
    for entry in std::fs::read_dir(src.join("model")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join("model").join(entry.file_name())).unwrap();
    }
    (dir, dst)
}

fn rewrite_tensor(file: &Path, name: &str, edit: impl Fn(&Tensor) -> Tensor) {
    let mut tensors = candle_core::safetensors::load(file, &Device::Cpu).unwrap();
    let edited = edit(&tensors[name]);
    tensors.insert(name.to_string(), edited);
    candle_core::safetensors::save(&tensors, file).unwrap();
}

#[test]
fn committed_goldens_pass_with_a_summary_line() {
    let out = g4(&["verify-golden"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.lines().filter(|l| l.starts_with("PASS ")).count() >= 12,
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("passed, 0 failed"), "{stdout}");
}

#[test]
fn one_altered_norm_weight_fails_the_gate_with_a_diagnosis() {
    let (_dir, golden) = copy_golden("e2b-style");
    rewrite_tensor(
        &golden.join("model/model.safetensors"),
        "model.layers.3.post_attention_layernorm.weight",
        |t| (t * 1.5).unwrap(),
    );
    let out = g4(&[
        "verify-golden",
        golden.join("golden.json").to_str().unwrap(),
    ]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let fail = stdout
        .lines()
        .find(|l| l.starts_with("FAIL "))
        .expect("a FAIL line");
    assert!(
        fail.contains("got") && fail.contains("expected") && fail.contains("rank"),
        "{fail}"
    );
    assert!(stdout.contains(" failed"), "{stdout}");
}

#[test]
fn dead_consumer_kv_weights_are_ignored_but_live_ones_are_not() {
    // Layer 4 of released-combo is a KV consumer: its shipped k_proj must not matter.
    let (_dir, golden) = copy_golden("released-combo");
    let file = golden.join("model/model.safetensors");
    // K is RMS-normalised, so a uniform scale would hide nothing: square each entry instead.
    rewrite_tensor(
        &file,
        "model.language_model.layers.4.self_attn.k_proj.weight",
        |t| t.sqr().unwrap(),
    );
    let out = g4(&["verify-golden", golden.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out).0);
    // Layer 3 produces the sliding K/V that layer 4 reads: changing it must be caught.
    rewrite_tensor(
        &file,
        "model.language_model.layers.3.self_attn.k_proj.weight",
        |t| t.sqr().unwrap(),
    );
    let out = g4(&["verify-golden", golden.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).0);
}

#[test]
fn a_missing_checkpoint_is_skipped_loudly_and_fails_unless_allowed() {
    let (_dir, golden) = copy_golden("moe-keqv");
    std::fs::remove_dir_all(golden.join("model")).unwrap();
    let path = golden.join("golden.json");
    let out = g4(&["verify-golden", path.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stderr.contains("SKIPPED"), "{stderr}");
    assert!(stdout.contains("0 passed, 0 failed, 1 skipped"), "{stdout}");
    let out = g4(&["verify-golden", "--allow-missing", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).0);
}

#[test]
fn no_goldens_at_all_is_an_error_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out = g4(&["verify-golden", dir.path().to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr.contains("no golden files found"), "{stderr}");
}

#[test]
fn json_report_parses_and_counts_cases() {
    let out = g4(&["verify-golden", "--json", "golden/moe-keqv"]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(report["passed"], 3);
    assert_eq!(report["failed"], 0);
    let case = &report["goldens"][0]["cases"][0];
    assert_eq!(case["token_exact"], true);
    assert_eq!(case["matched"], case["total"]);
}

/// The report says which decode path ran; a path the model cannot take fails with the reason.
#[test]
fn the_decode_path_is_reported_and_an_impossible_one_is_refused() {
    let out = g4(&[
        "verify-golden",
        "--json",
        "--decode",
        "graph",
        "golden/e2b-style",
    ]);
    assert!(out.status.success(), "{}", text(&out).1);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(report["passed"], 3);
    assert_eq!(
        report["goldens"][0]["decode"],
        "graph (uncaptured: no CUDA graphs here)"
    );

    let out = g4(&["verify-golden", "--decode", "graph", "golden/moe-keqv"]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.contains("routes tokens to experts on the host")
            && stdout.contains("--decode eager"),
        "{stdout}"
    );
}

#[test]
fn an_fp8_weight_without_its_scale_is_named() {
    let (_dir, golden) = copy_golden("fp8-moe");
    let file = golden.join("model/model.safetensors");
    let mut tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    tensors
        .remove("model.layers.1.mlp.up_proj.weight_scale")
        .unwrap();
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let out = g4(&["verify-golden", golden.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FP8 tensor model.layers.1.mlp.up_proj.weight has no model.layers.1.mlp.up_proj.weight_scale"),
        "{stdout}"
    );
}

/// Each broken checkpoint gives one FAIL line that names what is wrong, and exit 1.
#[test]
fn broken_checkpoints_fail_with_the_file_and_tensor_named() {
    type Break = fn(&Path);
    let cases: [(&str, Break, &str); 5] = [
        (
            "missing tensor",
            |m| {
                let file = m.join("model.safetensors");
                let mut t = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
                t.remove("model.layers.2.mlp.up_proj.weight");
                candle_core::safetensors::save(&t, &file).unwrap();
            },
            "missing tensor model.layers.2.mlp.up_proj.weight",
        ),
        (
            "wrong shape",
            |m| {
                rewrite_tensor(
                    &m.join("model.safetensors"),
                    "model.layers.1.self_attn.q_norm.weight",
                    |t| t.narrow(0, 0, 8).unwrap(),
                )
            },
            "tensor model.layers.1.self_attn.q_norm.weight has shape [8], expected [16]",
        ),
        (
            "truncated file",
            |m| {
                let file = m.join("model.safetensors");
                let bytes = std::fs::read(&file).unwrap();
                std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
            },
            "model.safetensors: not a valid safetensors file",
        ),
        (
            "malformed config",
            |m| std::fs::write(m.join("config.json"), "{\"hidden_size\": 64,").unwrap(),
            "config.json: not valid JSON",
        ),
        (
            "bad config value",
            |m| {
                let file = m.join("config.json");
                let text = std::fs::read_to_string(&file).unwrap().replace(
                    "\"num_attention_heads\": 4",
                    "\"num_attention_heads\": \"four\"",
                );
                std::fs::write(file, text).unwrap();
            },
            "num_attention_heads must be a non-negative integer",
        ),
    ];
    for (what, break_it, needle) in cases {
        let (_dir, golden) = copy_golden("e2b-style");
        break_it(&golden.join("model"));
        let out = g4(&["verify-golden", golden.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {stdout}{stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        let line = stdout
            .lines()
            .find(|l| l.starts_with("FAIL "))
            .unwrap_or_else(|| panic!("{what}: {stdout}"));
        assert!(
            line.contains(needle),
            "{what}: expected '{needle}' in: {line}"
        );
    }
}
