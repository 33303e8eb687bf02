#!/usr/bin/env python3
"""g4, llama.cpp and transformers on the CPU, side by side, on one random-weight Gemma-4 text
checkpoint; prints one table.

    python3 -m venv ~/.cache/g4/cpu-peers
    ~/.cache/g4/cpu-peers/bin/pip install -r scripts/cpu-peers-requirements.txt
    cargo build --release
    ~/.cache/g4/cpu-peers/bin/python scripts/cpu_peers.py [--work DIR] [--threads 2] [--reps 3]

The checkpoint (built once into --work, default ~/.cache/g4/cpu-peers-model): 12 layers, hidden
512, 5:1 sliding/full, PLE 64, the last 6 layers sharing K/V, vocab 262,144, f32; 382 M
parameters, seeded. Its tokenizer is a byte-fallback BPE padded to the vocabulary, only so that
llama.cpp's own converter (vendored in llama-cpp-python) can write an f32 GGUF of it.

Every engine runs the same tests with the same thread count: ppN is one forward over N random
token ids (tok/s), tgN is N greedy decode steps after a one-token prompt (tok/s); each is timed
--reps times after a warm-up. Peak RSS is the process's VmHWM after its runs (g4 and llama.cpp run
in their own processes). Greedy agreement: 16 greedy steps after a 64-token prompt, compared with
transformers f32 (the reference).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 262144
PROMPT_SEED = 1234


def config():
    from transformers import Gemma4TextConfig

    s, f = "sliding_attention", "full_attention"
    return Gemma4TextConfig(
        vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=512, intermediate_size=2048,
        num_hidden_layers=12, layer_types=([s] * 5 + [f]) * 2, num_attention_heads=8, num_key_value_heads=1,
        head_dim=64, global_head_dim=128, sliding_window=512, hidden_size_per_layer_input=64,
        num_kv_shared_layers=6, final_logit_softcapping=30.0, max_position_embeddings=4096,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


def write_tokenizer(out):
    """A byte-fallback BPE over the kjv-tiny tokenizer's conventions, padded to VOCAB tokens."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    # llama.cpp refuses a BPE vocabulary without merges: one real merge.
    for t in ["\u2581", "t", "\u2581t"]:
        vocab[t] = len(vocab)
    while len(vocab) < VOCAB:
        vocab[f"\u2581t{len(vocab)}"] = len(vocab)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, t in enumerate(specials)
        ],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": False, "vocab": vocab, "merges": ["\u2581 t"]},
    }
    (out / "tokenizer.json").write_text(json.dumps(tokenizer))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "unk_token": "<unk>", "pad_token": "<pad>", "add_bos_token": False, "add_eos_token": False}))


def build(work):
    import torch
    from transformers import Gemma4ForCausalLM

    model_dir = work / "model"
    gguf = work / "model-f32.gguf"
    if not (model_dir / "config.json").exists():
        torch.manual_seed(0)
        model = Gemma4ForCausalLM(config()).float().eval()
        model_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(model_dir)
        write_tokenizer(model_dir)
    if not gguf.exists():
        vendored = llama_cpp_sources(work)
        subprocess.run([sys.executable, str(vendored / "convert_hf_to_gguf.py"), str(model_dir), "--outtype", "f32",
                        "--outfile", str(gguf)], check=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           [str(vendored / "gguf-py")] + [p for p in [os.environ.get("PYTHONPATH")] if p])))
    return model_dir, gguf


def llama_cpp_sources(work):
    """llama.cpp as vendored by the installed llama-cpp-python: its converter ships only in the
    source distribution, fetched here (the same version, from PyPI)."""
    import tarfile
    from importlib.metadata import version

    release = version("llama-cpp-python")
    root = work / f"llama_cpp_python-{release}"
    archive = work / f"{root.name}.tar.gz"
    if not (root / "vendor/llama.cpp/convert_hf_to_gguf.py").exists():
        if not archive.exists():
            import urllib.request

            with urllib.request.urlopen(f"https://pypi.org/pypi/llama-cpp-python/{release}/json") as r:
                files = json.load(r)["urls"]
            url = next(f["url"] for f in files if f["packagetype"] == "sdist")
            urllib.request.urlretrieve(url, archive)
        with tarfile.open(archive) as sdist:
            members = [m for m in sdist.getmembers() if m.name.startswith(f"{root.name}/vendor/llama.cpp/")
                       and "/vendor/llama.cpp/" in m.name and m.name.split("/vendor/llama.cpp/")[1].split("/")[0]
                       in ("convert_hf_to_gguf.py", "conversion", "gguf-py")]
            sdist.extractall(work, members=members, filter="data")
    return root / "vendor/llama.cpp"


def prompt_ids(n, seed):
    import random

    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def timed(fn, reps):
    fn()
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        tokens = fn()
        rates.append(tokens / (time.perf_counter() - start))
    return rates


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_transformers(model_dir, args):
    import torch
    from transformers import Gemma4ForCausalLM

    torch.set_num_threads(args.threads)
    model = Gemma4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    pp = torch.tensor([prompt_ids(args.prompt, PROMPT_SEED)])
    with torch.no_grad():
        def prefill():
            model(pp, use_cache=False)
            return args.prompt

        def decode():
            ids = torch.tensor([[2]])
            out = model(ids, use_cache=True)
            cache = out.past_key_values
            for _ in range(args.new):
                ids = out.logits[:, -1:].argmax(-1)
                out = model(ids, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
            return args.new

        greedy = model.generate(torch.tensor([[2] + prompt_ids(63, PROMPT_SEED + 1)]), max_new_tokens=16,
                                do_sample=False)[0, 64:].tolist()
        return {"pp": timed(prefill, args.reps), "tg": timed(decode, args.reps), "greedy": greedy,
                "rss_mib": peak_rss_mib()}


def run_llama(gguf, args):
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(gguf), n_threads=args.threads, n_threads_batch=args.threads,
                          n_ctx=512, n_batch=512, logits_all=False, verbose=False)
    pp = prompt_ids(args.prompt, PROMPT_SEED)

    def prefill():
        llm.reset()
        llm.eval(pp)
        return args.prompt

    def next_token():
        # The last position's logits straight from llama.cpp (llm.scores stays empty unless
        # every position's logits are computed, which would slow the prefill).
        logits = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(llm.n_vocab(),))))

    def decode():
        llm.reset()
        llm.eval([2])
        for _ in range(args.new):
            llm.eval([next_token()])
        return args.new

    result = {"pp": timed(prefill, args.reps), "tg": timed(decode, args.reps)}
    llm.reset()
    llm.eval([2] + prompt_ids(63, PROMPT_SEED + 1))
    greedy = []
    for _ in range(16):
        greedy.append(next_token())
        llm.eval([greedy[-1]])
    result["greedy"] = greedy
    result["rss_mib"] = peak_rss_mib()
    return result


def run_g4(model_dir, args):
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    out = subprocess.run([str(args.g4), "bench", "--model", str(model_dir), "--tests",
                          f"pp{args.prompt},tg{args.new}", "-r", str(args.reps), "--json"],
                         check=True, capture_output=True, text=True, env=env).stdout
    bench = json.loads(out)
    rates = {r["measurement"]["test"][:2]: r["measurement"]["samples_tokens_per_s"] for r in bench["results"]}
    ids = " ".join(str(i) for i in [2] + prompt_ids(63, PROMPT_SEED + 1))
    gen = subprocess.run([str(args.g4), "generate", "--model", str(model_dir), "--prompt-ids", ids, "-n", "16",
                          "--json"], check=True, capture_output=True, text=True, env=env).stdout
    return {"pp": rates["pp"], "tg": rates["tg"], "greedy": json.loads(gen)["token_ids"],
            "rss_mib": bench["memory_mib"]["after_tests"], "load_s": bench["load_s"]}


def summary(rates):
    mean = sum(rates) / len(rates)
    return f"{mean:.1f} ({', '.join(f'{r:.1f}' for r in rates)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache/g4/cpu-peers-model")
    ap.add_argument("--g4", type=Path, default=ROOT / "target/release/g4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine", choices=["g4", "llama.cpp", "transformers"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    model_dir, gguf = build(args.work)
    if args.engine:
        run = {"g4": lambda: run_g4(model_dir, args), "llama.cpp": lambda: run_llama(gguf, args),
               "transformers": lambda: run_transformers(model_dir, args)}[args.engine]
        print(json.dumps(run()))
        return
    results = {}
    for engine in ["g4", "llama.cpp", "transformers"]:
        # Each engine in its own process, so that each peak RSS is its own.
        out = subprocess.run([sys.executable, __file__, "--engine", engine, "--work", str(args.work), "--g4",
                              str(args.g4), "--threads", str(args.threads), "--prompt", str(args.prompt),
                              "--new", str(args.new), "--reps", str(args.reps)],
                             check=True, capture_output=True, text=True).stdout
        results[engine] = json.loads(out.strip().splitlines()[-1])
    weights_mib = sum(f.stat().st_size for f in model_dir.glob("*.safetensors")) / 2**20
    reference = results["transformers"]["greedy"]
    print(f"CPU, {args.threads} threads, f32; pp{args.prompt} and tg{args.new} tok/s, mean (runs); "
          f"f32 weights {weights_mib:.0f} MiB")
    print()
    print(f"| engine | pp{args.prompt} tok/s | tg{args.new} tok/s | peak RSS MiB | greedy vs transformers (16 steps) |")
    print("|---|---:|---:|---:|---|")
    for engine, r in results.items():
        agree = next((i for i, (a, b) in enumerate(zip(r["greedy"], reference)) if a != b), None)
        verdict = "reference" if engine == "transformers" else (
            "token-exact 16/16" if agree is None else f"diverges at step {agree}")
        print(f"| {engine} | {summary(r['pp'])} | {summary(r['tg'])} | {r['rss_mib']:.0f} | {verdict} |")
    g4, llama = results["g4"], results["llama.cpp"]
    ratio = lambda a, b: (sum(a) / len(a)) / (sum(b) / len(b))
    print()
    print(f"g4 / llama.cpp: prefill {ratio(g4['pp'], llama['pp']):.2f}x, decode {ratio(g4['tg'], llama['tg']):.2f}x; "
          f"g4 peak RSS / f32 weights: {g4['rss_mib'] / weights_mib:.2f}x")


if __name__ == "__main__":
    main()
