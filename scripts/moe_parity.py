#!/usr/bin/env python3
"""Parity of g4 with transformers at full size (issue #9 item 7), on the GPU.

Random-weight checkpoints this large are numerically chaotic, so parity is judged relatively.
Reference: transformers in float32 (eager attention) on the checkpoint's weights. For each prompt
(random token ids; one longer than the sliding window) the reference's greedy continuation, with
its top-5 log-probabilities at every step, becomes a g4 golden (format g4-golden/1). transformers
in bfloat16 is teacher-forced on the reference's tokens and scored like `g4 verify-golden` scores
g4: top-1 agreement over every step, and the largest |Δ log-prob| over the reference's top-5 at
the steps before its first disagreement. g4 is scored by `g4 verify-golden` in f32 and bf16.

    python3 scripts/moe_parity.py CHECKPOINT OUT_DIR [--g4 BIN] [--new 32] [--lengths 64,300,1100]
        [--device cuda|cpu]     (cpu: a smoke test on a tiny checkpoint)

Prints one JSON line per (implementation, dtype, case) and a table.
"""

import argparse
import json
import subprocess
from pathlib import Path

import torch
import transformers
from transformers import Gemma4ForCausalLM, GenerationConfig

TOP_K = 5


def load(path, dtype, device):
    # Straight onto the GPU (device_map; accelerate is in the GPU image): 26B-A4B in f32 is
    # 101 GB, too much to stage in host memory first.
    placement = {"device_map": device} if device != "cpu" else {}
    model = Gemma4ForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager", **placement)
    model = model.eval()
    model.generation_config = GenerationConfig(eos_token_id=None, pad_token_id=0, do_sample=False)
    return model


def reference_case(model, prompt, new):
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, output_scores=True,
                         return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    top = [torch.log_softmax(s[0].double(), dim=-1).topk(TOP_K) for s in out.scores]
    return tokens, [[[int(i), float(v)] for v, i in zip(t.values, t.indices)] for t in top]


def teacher_forced_score(model, prompt, tokens, top):
    ids = torch.tensor([prompt + tokens[:-1]], device=model.device)
    logprobs = torch.log_softmax(model(ids).logits[0, len(prompt) - 1:].double(), dim=-1)
    chosen = logprobs.argmax(dim=-1).tolist()
    agreement = sum(int(c == t) for c, t in zip(chosen, tokens))
    first_miss = next((i for i, (c, t) in enumerate(zip(chosen, tokens)) if c != t), len(tokens))
    delta = max((abs(float(logprobs[i, tid]) - v) for i in range(first_miss) for tid, v in top[i]), default=0.0)
    return agreement, delta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("out", type=Path)
    ap.add_argument("--g4", default="target/cuda/release/g4")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--lengths", default="64,300,1100")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(7)
    config = json.loads((Path(args.checkpoint) / "config.json").read_text())
    vocab = config.get("text_config", config)["vocab_size"]
    prompts = [[2] + torch.randint(3, vocab, (n - 1,), generator=gen).tolist()
               for n in map(int, args.lengths.split(","))]

    reference = load(args.checkpoint, torch.float32, args.device)
    cases = []
    for prompt in prompts:
        tokens, top = reference_case(reference, prompt, args.new)
        cases.append({"name": f"prompt-{len(prompt)}", "prompt_ids": prompt, "expected_ids": tokens,
                      "top_logprobs": top})
    del reference
    if args.device == "cuda":
        torch.cuda.empty_cache()
    golden = args.out / "golden.json"
    golden.write_text(json.dumps({
        "format": "g4-golden/1", "model": str(Path(args.checkpoint).resolve()),
        "reference": {"implementation": "transformers", "version": transformers.__version__,
                      "torch": torch.__version__, "dtype": "float32", "attention": "eager"},
        "cases": cases,
    }) + "\n")

    rows = []
    bf16 = load(args.checkpoint, torch.bfloat16, args.device)
    for case in cases:
        agreement, delta = teacher_forced_score(bf16, case["prompt_ids"], case["expected_ids"], case["top_logprobs"])
        rows.append(("transformers", "bf16", case["name"], agreement, len(case["expected_ids"]), delta))
    del bf16
    if args.device == "cuda":
        torch.cuda.empty_cache()

    for dtype in ["f32", "bf16"]:
        run = subprocess.run([args.g4, "verify-golden", str(golden), "--device", args.device, "--dtype", dtype,
                              "--decode", "eager", "--min-agreement", "0.01", "--json"],
                             capture_output=True, text=True)
        if not run.stdout.strip():
            raise SystemExit(f"g4 verify-golden --dtype {dtype} failed: {run.stderr.strip()}")
        report = json.loads(run.stdout)
        for case in report["goldens"][0]["cases"]:
            rows.append(("g4", dtype, case["name"], case["top1_agreement"], case["total"],
                         case["max_logprob_delta"] or 0.0))

    for implementation, dtype, name, agreement, total, delta in rows:
        print(json.dumps({"implementation": implementation, "dtype": dtype, "case": name,
                          "top1_agreement": agreement, "steps": total, "max_logprob_delta": delta}))
    print(f"{'implementation':<14} {'dtype':<5} {'case':<12} {'top-1 agreement':>16} {'max |Δ logprob|':>16}")
    for implementation, dtype, name, agreement, total, delta in rows:
        print(f"{implementation:<14} {dtype:<5} {name:<12} {f'{agreement}/{total}':>16} {delta:>16.2e}")


if __name__ == "__main__":
    main()
