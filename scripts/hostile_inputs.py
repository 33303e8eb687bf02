#!/usr/bin/env python3
"""Runs g4's CLI on hostile inputs, as a user with broken or malicious files would, and reports
every panic, abort, hang, multi-line error and invalid flag value accepted.

Each case mutates one thing — a config.json field, a safetensors header or its bytes, a
golden.json, a chat template, a messages file, generation_config.json, or a flag value — in a
private copy of a committed tiny checkpoint, then runs `g4 generate` or `g4 verify-golden` on it.
Usage (after `cargo build --release`):

    python3 scripts/hostile_inputs.py [--cases 400] [--seed 1] [--g4 target/release/g4]

Exit status 1 when any case found a problem. Standard library only.
"""

import argparse
import json
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 30

HOSTILE_NUMBERS = [0, -1, 1, 2**31, 2**32 + 1, 2**63, 2**64 - 1, 10**12, 10**9, 1e308, -1e308, 0.5, 1e-300,
                   "7", "", None, [], {}, [1, 2], True]
CONFIG_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "intermediate_size", "vocab_size", "sliding_window", "max_position_embeddings", "rms_norm_eps",
                 "final_logit_softcapping", "hidden_size_per_layer_input", "vocab_size_per_layer_input",
                 "num_kv_shared_layers", "global_head_dim", "layer_types", "rope_parameters", "bos_token_id",
                 "eos_token_id", "pad_token_id", "num_experts", "top_k_experts", "moe_intermediate_size",
                 "enable_moe_block", "attention_k_eq_v", "num_global_key_value_heads", "use_double_wide_mlp",
                 "per_layer_config", "quantization_config", "model_type", "tie_word_embeddings"]

# (flag, invalid values): every one must be refused with exit 2.
INVALID_FLAGS = [
    ("--temperature", ["-1", "NaN", "inf", "-inf", "-0.001", "x"]),
    ("--top-p", ["2", "-0.5", "NaN", "0", "1.0001"]),
    ("--min-p", ["2", "-1", "NaN", "1.5"]),
    ("--repeat-penalty", ["0", "-1", "NaN", "inf"]),
    ("--top-k", ["-1", "x", "1.5"]),
    ("-n", ["-1", "x"]),
    ("--logprobs", ["-1", "101", "1e3"]),
    ("--decode", ["fast", "", "GRAPH"]),
    ("--device", ["tpu", "cuda:x", "cpu:0:1", "metal:99", ",", "cpu,", "cpu,,cpu", "cpu,cpu,cpu", "cpu,tpu",
                  "cpu,cuda"]),
    ("--dtype", ["int4", "fp8", "", "f64"]),
    ("--seed", ["-1", "x"]),
    ("--ple", ["gpu", "", "HOST"]),
    ("--prompt-ids", ["", "x", "1,,x", "-3", "4294967296", "99999999"]),
]
# The same for `g4 bench` (the embedded model's context is 1024 positions).
INVALID_BENCH_FLAGS = [
    ("--depth", ["-1", "x", "2000", "18446744073709551615", "1,x"]),
    ("--tests", ["tg0", "pp", "xx1", "tg18446744073709551615", "pp2000"]),
    ("-r", ["0", "-1", "x"]),
]


def run(g4, args, stdin=None):
    try:
        p = subprocess.run([g4, *args], capture_output=True, text=True, timeout=TIMEOUT_S, input=stdin, cwd=ROOT)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def copy_model(tmp, variant):
    src = ROOT / "golden" / variant
    dst = Path(tmp) / variant
    shutil.copytree(src, dst)
    return dst


def mutate_config(rng, model):
    path = model / "config.json"
    cfg = json.loads(path.read_text())
    target = cfg.get("text_config", cfg)
    field = rng.choice(CONFIG_FIELDS)
    target[field] = rng.choice(HOSTILE_NUMBERS)
    path.write_text(json.dumps(cfg))
    return f"config {field}={target[field]!r}"


def safetensors_files(model):
    return sorted(model.glob("*.safetensors"))


def mutate_safetensors(rng, model):
    path = rng.choice(safetensors_files(model))
    data = bytearray(path.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    kind = rng.choice(["truncate", "header-byte", "length", "dtype", "shape", "offsets", "duplicate", "data-nan"])
    if kind == "truncate":
        cut = rng.randrange(0, len(data))
        path.write_bytes(data[:cut])
        return f"safetensors truncated at {cut}"
    if kind == "header-byte":
        i = rng.randrange(8, 8 + n)
        data[i] = rng.randrange(256)
        path.write_bytes(data)
        return f"safetensors header byte {i} changed"
    if kind == "length":
        value = rng.choice([0, 1, n - 1, n + 1, len(data), 2**63, 2**64 - 1])
        data[:8] = struct.pack("<Q", value)
        path.write_bytes(data)
        return f"safetensors header length {value}"
    header = json.loads(data[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    entries = list(header.items())
    if kind == "dtype":
        header[name]["dtype"] = rng.choice(["I32", "F64", "U8", "BOOL", "Q4", "F8_E5M2", "I64"])
    elif kind == "shape":
        header[name]["shape"] = rng.choice([[], [0], [2**62, 2**62], [1] * 9, [-1]])
    elif kind == "offsets":
        header[name]["data_offsets"] = rng.choice([[0, 0], [5, 1], [0, 2**64 - 1], [2**63, 2**63 + 4]])
    elif kind == "duplicate":
        entries.append((name, header[name]))
    if kind == "data-nan":
        begin, end = header[name]["data_offsets"]
        if header[name]["dtype"] in ("F32",) and end > begin:
            data[8 + n + begin:8 + n + begin + 4] = struct.pack("<f", float("nan"))
        elif header[name]["dtype"] == "BF16" and end > begin:
            data[8 + n + begin:8 + n + begin + 2] = b"\xc0\x7f"
        path.write_bytes(data)
        return f"NaN written into {name}"
    if kind != "duplicate":
        entries = list(header.items())
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in entries) + "}"
    raw = text.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data[8 + n:]))
    return f"safetensors {kind} of {name}"


def mutate_golden(rng, golden_dir):
    path = golden_dir / "golden.json"
    text = path.read_text()
    kind = rng.choice(["truncate", "id", "format", "cases", "type"])
    if kind == "truncate":
        path.write_text(text[: rng.randrange(len(text))])
        return "golden truncated"
    g = json.loads(text)
    case = rng.choice(g["cases"])
    if kind == "id":
        key = rng.choice(["prompt_ids", "expected_ids"])
        case[key][rng.randrange(len(case[key]))] = rng.choice([-1, 2**32, 2**31, 10**6, 1.5, "a", None])
    elif kind == "format":
        g["format"] = rng.choice(["g4-golden/2", "", None, 1])
    elif kind == "cases":
        g["cases"] = rng.choice([[], None, {}, [{}]])
    else:
        case["top_logprobs"] = rng.choice([[], [[1, 2, 3]], "x", [[[0, "a"]]]])
    path.write_text(json.dumps(g))
    return f"golden {kind}"


TEMPLATES = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ messages[0]['content'] * 100000000 }}",
    "{{ 'x' * 10000000000 }}",
    "{% for m in messages %}{{ m.content",
    "{{ raise_exception('no') }}",
    "{{ messages[5]['content'] }}",
    "{{ undefined_function() }}",
    "{% set ns = namespace(a=1) %}{% for i in range(1000000) %}{% set ns.a = ns.a ~ 'x' %}{% endfor %}{{ ns.a | length }}",
    "{{ strftime_now('%Q') }}",
    "{{ (messages | tojson)[:10] }}{{ bos_token }}",
    "\udcff",
]


def mutate_template(rng, model):
    (model / "chat_template.jinja").write_text(rng.choice(TEMPLATES), errors="surrogateescape")
    return "template"


def hostile_messages(rng):
    return rng.choice([
        "[]", "{}", "null", "[1]", '[{"role": "user"}]', '[{"role": "user", "content": 5}]',
        '[{"role": "user", "content": [{"type": "image"}]}]', "[" * 10000 + "]" * 10000,
        '[{"role": "user", "content": "' + "a" * 100000 + '"}]', "\xff\xfe", '[{"role": "x", "content": "a"}]',
    ])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--g4", default=str(ROOT / "target/release/g4"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    problems, counts = [], {}

    def judge(what, result, must_refuse=False):
        rc, out, err = result
        counts[what.split()[0]] = counts.get(what.split()[0], 0) + 1
        lines = [l for l in err.splitlines() if l.startswith("error")]
        if rc == "timeout":
            problems.append(f"HANG {what}")
        elif rc == 101 or "panicked" in err:
            problems.append(f"PANIC {what}: {err.strip()[:300]}")
        elif isinstance(rc, int) and rc < 0:
            problems.append(f"SIGNAL {-rc} {what}: {err.strip()[:300]}")
        elif must_refuse and rc == 0:
            problems.append(f"ACCEPTED {what}")
        elif rc == 2 and (len(lines) != 1 or len(err.strip().splitlines()) != 1):
            problems.append(f"NOT ONE LINE {what}: {err.strip()[:300]}")
        elif rc == 0 and "!!!" in out:
            problems.append(f"NAN OUTPUT {what}: {out.strip()[:100]}")

    for i in range(args.cases):
        with tempfile.TemporaryDirectory() as tmp:
            kind = rng.choice(["config", "safetensors", "golden", "template", "messages", "genconfig", "flag",
                               "tokenizer"])
            if kind == "flag":
                command, base, flags = rng.choice([("generate", ["-n", "2"], INVALID_FLAGS),
                                                   ("bench", ["--tests", "tg2", "-r", "1"], INVALID_BENCH_FLAGS)])
                flag, values = rng.choice(flags)
                value = rng.choice(values)
                judge(f"flag {command} {flag}={value!r}", run(args.g4, [command, *base, f"{flag}={value}"]),
                      must_refuse=True)
                continue
            variant = rng.choice(["kjv-tiny", "chat-fixture", "e2b-style", "moe-keqv", "fp8-moe", "released-combo",
                                  "fp8-dynamic", "fp8-dynamic-moe"])
            golden = copy_model(tmp, variant)
            model = golden / "model"
            if kind == "config":
                what = mutate_config(rng, model)
            elif kind == "safetensors":
                what = mutate_safetensors(rng, model)
            elif kind == "golden":
                what = mutate_golden(rng, golden)
                judge(f"{what} ({variant})", run(args.g4, ["verify-golden", str(golden)]))
                continue
            elif kind == "genconfig":
                field = rng.choice(["temperature", "top_p", "min_p", "repetition_penalty", "top_k", "eos_token_id"])
                value = rng.choice(HOSTILE_NUMBERS)
                (model / "generation_config.json").write_text(json.dumps({"do_sample": True, field: value}))
                what = f"generation_config {field}={value!r}"
            elif kind == "tokenizer":
                tok = model / "tokenizer.json"
                if not tok.exists():
                    shutil.copy(ROOT / "golden/kjv-tiny/model/tokenizer.json", tok)
                text = tok.read_text()
                cut = rng.randrange(len(text))
                tok.write_text(rng.choice([text[:cut], text.replace('"BPE"', '"Nope"'), "{}", "[]"]))
                what = "tokenizer.json mutated"
            elif kind == "template":
                what = mutate_template(rng, model)
            else:
                what = "messages"
            if not (model / "tokenizer.json").exists():
                shutil.copy(ROOT / "golden/kjv-tiny/model/tokenizer.json", model / "tokenizer.json")
            # Half the broken checkpoints load split over two CPU ranks: a rank's failure must
            # still be one line, and must not leave the other waiting.
            devices = rng.choice(["cpu", "cpu,cpu"])
            gen_args = ["generate", "--model", str(model), "-n", "3", "--temperature", "0", "--device", devices]
            if kind == "template":
                gen_args += ["--chat", "--prompt", "hi"]
            if kind == "messages":
                gen_args += ["--messages", "-"]
                result = run(args.g4, gen_args, stdin=hostile_messages(rng))
            else:
                result = run(args.g4, gen_args)
            judge(f"{what} ({variant}, generate --device {devices})", result)
            if kind in ("config", "safetensors"):
                judge(f"{what} ({variant}, verify-golden --device {devices})",
                      run(args.g4, ["verify-golden", "--device", devices, str(golden)]))

    total = sum(counts.values())
    print(f"hostile inputs: {total} runs, seed {args.seed}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for p in problems:
        print(p)
    print(f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
