//! Chat prompts end to end on golden/chat-fixture: a tiny model whose tokenizer has Gemma-4's
//! turn, channel, think and tool markers as special tokens, and a hand-written template that
//! uses every construct of the official Gemma-4 template. Each case's prompt ids and greedy
//! tokens were made by transformers (`apply_chat_template`, then `generate`).

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;
use common::g4;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/chat-fixture")
}

fn golden_cases() -> Vec<Value> {
    let text = std::fs::read_to_string(fixture_dir().join("golden.json")).unwrap();
    let golden: Value = serde_json::from_str(&text).unwrap();
    golden["cases"].as_array().unwrap().clone()
}

fn generate_json(args: &[&str]) -> Value {
    let mut all = vec!["generate", "--json", "--temperature", "0", "-n", "16"];
    all.extend_from_slice(args);
    let out = g4(&all);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

fn write_json(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(value).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn every_conversation_renders_and_generates_as_transformers_does() {
    let model = fixture_dir().join("model").display().to_string();
    let scratch = tempfile::tempdir().unwrap();
    let cases = golden_cases();
    assert!(cases.len() >= 8, "the fixture lost cases");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let messages = write_json(scratch.path(), "messages.json", &case["messages"]);
        let mut args = vec!["--model", &model, "--messages", &messages];
        let tools;
        if !case["tools"].is_null() {
            tools = write_json(scratch.path(), "tools.json", &case["tools"]);
            args.extend(["--tools", &tools]);
        }
        // Without --think, enable_thinking stays undefined: the template's default (off).
        if case["enable_thinking"] == true {
            args.push("--think");
        }
        let result = generate_json(&args);
        assert_eq!(
            result["prompt_ids"], case["prompt_ids"],
            "{name}: prompt ids"
        );
        assert_eq!(result["token_ids"], case["expected_ids"], "{name}: tokens");
        assert_eq!(result["text"], case["expected_text"], "{name}: answer");
        assert_eq!(
            result["reasoning"], case["expected_reasoning"],
            "{name}: reasoning"
        );
        for marker in ["<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|\"|>"] {
            assert!(!result["text"].as_str().unwrap().contains(marker), "{name}");
        }
    }
}

#[test]
fn chat_and_system_flags_render_like_a_messages_file() {
    let model = fixture_dir().join("model").display().to_string();
    for case in golden_cases() {
        let name = case["name"].as_str().unwrap();
        if !["one-turn", "system", "padded"].contains(&name) {
            continue;
        }
        let messages = case["messages"].as_array().unwrap();
        let user = messages.last().unwrap()["content"].as_str().unwrap();
        let mut args = vec!["--model", &model, "--chat", "--prompt", user];
        if messages.len() == 2 {
            args.extend(["--system", messages[0]["content"].as_str().unwrap()]);
        }
        let result = generate_json(&args);
        assert_eq!(result["prompt_ids"], case["prompt_ids"], "{name}");
        assert_eq!(result["token_ids"], case["expected_ids"], "{name}");
    }
}

/// A template that opens the thought channel in the generation prompt (as some Gemma-4
/// templates do when thinking is on) leaves every generated token inside the channel.
#[test]
fn reasoning_is_streamed_apart_from_the_answer_and_ignores_stop_strings() {
    let scratch = tempfile::tempdir().unwrap();
    let source = fixture_dir().join("model");
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, scratch.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        scratch.path().join("chat_template.jinja"),
        "{{ bos_token }}<|turn>user\n{{ messages[-1]['content'] }}<turn|>\n<|turn>model\n\
         {% if enable_thinking %}<|channel>thought\n{% endif %}",
    )
    .unwrap();
    let model = scratch.path().display().to_string();
    let thinking = generate_json(&["--model", &model, "--chat", "--think", "--prompt", "Ge1:3"]);
    let reasoning = thinking["reasoning"].as_str().unwrap();
    assert_eq!(thinking["text"], "", "all of it is inside the channel");
    assert_eq!(thinking["generated_tokens"], 16);

    let tokenizer = g4::model::tokenizer::TextTokenizer::from_dir(scratch.path()).unwrap();
    let ids: Vec<u32> = thinking["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(reasoning, tokenizer.decode(&ids).unwrap());

    // A stop string met inside the reasoning does not stop generation.
    let word = reasoning.split_whitespace().next().unwrap();
    let with_stop = generate_json(&[
        "--model", &model, "--chat", "--think", "--prompt", "Ge1:3", "--stop", word,
    ]);
    assert_eq!(with_stop["reasoning"], thinking["reasoning"]);
    assert_eq!(with_stop["stop_reason"], "max-tokens");

    // Streaming: the answer (empty) on stdout, the reasoning on stderr.
    let out = g4(&[
        "generate",
        "--model",
        &model,
        "--chat",
        "--think",
        "--prompt",
        "Ge1:3",
        "--temperature",
        "0",
        "-n",
        "16",
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "\n");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(reasoning));
}

#[test]
fn bad_chat_inputs_are_one_clear_error_line() {
    let model = fixture_dir().join("model").display().to_string();
    let scratch = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = scratch.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let bad_role = file(
        "role.json",
        r#"[{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]"#,
    );
    let bad_part = file(
        "part.json",
        r#"[{"role": "user", "content": [{"type": "text"}]}]"#,
    );
    let not_list = file("object.json", r#"{"role": "user", "content": "a"}"#);
    let good = file("good.json", r#"[{"role": "user", "content": "a"}]"#);
    let bad_tool = file(
        "tool.json",
        r#"[{"type": "function", "function": {"description": "x"}}]"#,
    );
    let raising = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_dir().join("model")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, raising.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        raising.path().join("chat_template.jinja"),
        "{{ raise_exception('System role not supported') }}",
    )
    .unwrap();
    let raising_model = raising.path().display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--messages", &bad_role],
            "messages[1].role: \"bot\" is not one of",
        ),
        (
            vec!["--messages", &bad_part],
            "messages[0].content[0]: a text part has no \"text\"",
        ),
        (
            vec!["--messages", &not_list],
            "expected a JSON list of messages, found an object",
        ),
        (
            vec!["--messages", "/nonexistent/m.json"],
            "cannot read --messages file /nonexistent/m.json",
        ),
        (
            vec!["--messages", &good, "--tools", &bad_tool],
            "tools[0].function.name",
        ),
        (vec!["--think", "--prompt", "a"], "--chat|--messages"),
        (
            vec!["--messages", &good, "--prompt", "a"],
            "cannot be used with",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["generate", "--model", &model];
        all.extend(args.iter().copied());
        let out = g4(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    }
    let out = g4(&[
        "generate",
        "--model",
        &raising_model,
        "--chat",
        "--prompt",
        "a",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("System role not supported"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
