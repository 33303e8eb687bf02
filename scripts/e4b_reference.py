#!/usr/bin/env python3
"""Builds a full-size random-weight Gemma-4 checkpoint (bf16, real preset dimensions from
GEMMA4_TEXT.md §6: E4B, or E2B / 26B-A4B / 31B with --preset) with transformers on the GPU, or
benchmarks transformers on it.

    python3 scripts/e4b_reference.py build DIR [--preset e4b|e2b|26b-a4b|31b|e4b-12l|26b-a4b-6l]
    python3 scripts/e4b_reference.py bench DIR --prompt 128 --new 128 --prefill 512 [--caches dynamic,static]

`bench` prints one JSON line per setting: prefill of --prefill tokens (ms), and greedy decode of
--new tokens after a --prompt-token prompt (tok/s), with the dynamic cache and with the static
cache (which transformers compiles; the setting that reached ~120 tok/s on an H200 per
CUDA_BUILD.md).
"""

import argparse
import json
import time

import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

S, F = "sliding_attention", "full_attention"


def e4b_config():
    return Gemma4TextConfig(
        vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size=2560, intermediate_size=10240,
        num_hidden_layers=42, layer_types=([S] * 5 + [F]) * 7, num_attention_heads=8, num_key_value_heads=2,
        head_dim=256, global_head_dim=512, sliding_window=512, hidden_size_per_layer_input=256,
        num_kv_shared_layers=18, final_logit_softcapping=30.0, max_position_embeddings=131072,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


def e2b_config():
    return Gemma4TextConfig(
        vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size=1536, intermediate_size=6144,
        num_hidden_layers=35, layer_types=([S] * 4 + [F]) * 7, num_attention_heads=8, num_key_value_heads=1,
        head_dim=256, global_head_dim=512, sliding_window=512, hidden_size_per_layer_input=256,
        num_kv_shared_layers=20, use_double_wide_mlp=True, final_logit_softcapping=30.0,
        max_position_embeddings=131072, pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


def moe_26b_config():
    return Gemma4TextConfig(
        vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size=2816, intermediate_size=2112,
        num_hidden_layers=30, layer_types=([S] * 5 + [F]) * 5, num_attention_heads=16, num_key_value_heads=8,
        head_dim=256, global_head_dim=512, num_global_key_value_heads=2, attention_k_eq_v=True,
        sliding_window=1024, hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=128,
        top_k_experts=8, moe_intermediate_size=704, final_logit_softcapping=30.0, max_position_embeddings=262144,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


def dense_31b_config():
    return Gemma4TextConfig(
        vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size=5376, intermediate_size=21504,
        num_hidden_layers=60, layer_types=([S] * 5 + [F]) * 10, num_attention_heads=32, num_key_value_heads=16,
        head_dim=256, global_head_dim=512, num_global_key_value_heads=4, attention_k_eq_v=True,
        sliding_window=1024, hidden_size_per_layer_input=0, final_logit_softcapping=30.0,
        max_position_embeddings=262144, pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


def e4b_12_layers_config():
    """E4B's widths (hidden, MLP, heads, head dims, PLE) in 12 layers (4 KV-shared) and a 32,768-token
    vocabulary: 1.3 B parameters, small enough for an f64 reference next to g4 in seconds."""
    return Gemma4TextConfig(
        vocab_size=32768, vocab_size_per_layer_input=32768, hidden_size=2560, intermediate_size=10240,
        num_hidden_layers=12, layer_types=([S] * 5 + [F]) * 2, num_attention_heads=8, num_key_value_heads=2,
        head_dim=256, global_head_dim=512, sliding_window=512, hidden_size_per_layer_input=256,
        num_kv_shared_layers=4, final_logit_softcapping=30.0, max_position_embeddings=131072,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


def moe_26b_6_layers_config():
    """26B-A4B's widths (hidden, 128 experts top-8 of width 704, shared MLP, heads, k_eq_v full layer)
    in 6 layers and a 32,768-token vocabulary: 4.7 B parameters, small enough for an f64 reference."""
    return Gemma4TextConfig(
        vocab_size=32768, vocab_size_per_layer_input=32768, hidden_size=2816, intermediate_size=2112,
        num_hidden_layers=6, layer_types=[S] * 5 + [F], num_attention_heads=16, num_key_value_heads=8,
        head_dim=256, global_head_dim=512, num_global_key_value_heads=2, attention_k_eq_v=True,
        sliding_window=1024, hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=128,
        top_k_experts=8, moe_intermediate_size=704, final_logit_softcapping=30.0, max_position_embeddings=262144,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )


PRESETS = {"e4b": e4b_config, "e2b": e2b_config, "26b-a4b": moe_26b_config, "31b": dense_31b_config,
           "e4b-12l": e4b_12_layers_config, "26b-a4b-6l": moe_26b_6_layers_config}


def build(out, preset):
    config = PRESETS[preset]()
    with torch.device("meta"):
        params = sum(p.numel() for p in Gemma4ForCausalLM(config).parameters())
    # Drawn in f32 and saved in bf16 where f32 fits the GPU, as every earlier checkpoint was; drawn
    # in bf16 where it does not (26B-A4B and 31B on an 80 GB card).
    fits_f32 = 4 * params < 0.9 * torch.cuda.get_device_properties(0).total_memory
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float32 if fits_f32 else torch.bfloat16)
    with torch.device("cuda"), torch.no_grad():
        model = Gemma4ForCausalLM(config).to(torch.bfloat16)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(out)
    print(json.dumps({"built": out, "parameters": params}), flush=True)


def sync_time(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, result


def bench(path, prompt_len, new_tokens, prefill_len, reps, caches):
    model = Gemma4ForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    gen = torch.Generator(device="cuda").manual_seed(0)
    prefill_ids = torch.randint(3, 262144, (1, prefill_len), device="cuda", generator=gen)
    prompt = torch.randint(3, 262144, (1, prompt_len), device="cuda", generator=gen)
    with torch.no_grad():
        model(prefill_ids, use_cache=False)
        times = [sync_time(lambda: model(prefill_ids, use_cache=False))[0] for _ in range(reps)]
        print(json.dumps({"implementation": "transformers", "test": f"pp{prefill_len}",
                          "tokens_per_s": [prefill_len / t for t in times]}), flush=True)
        for cache in caches:
            kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            if cache == "static":
                # transformers compiles the forward itself for a static cache.
                kwargs["cache_implementation"] = "static"
            # Warm-up (and, for the static cache, compilation and CUDA-graph capture).
            for _ in range(1 if cache == "dynamic" else 2):
                model.generate(prompt, **kwargs)
            rates = []
            for _ in range(1 if cache == "dynamic" else reps):
                # Decode rate: the whole generate minus a one-token generate (prefill and setup).
                total, _ = sync_time(lambda: model.generate(prompt, **kwargs))
                first, _ = sync_time(lambda: model.generate(prompt, **dict(kwargs, max_new_tokens=1, min_new_tokens=1)))
                rates.append((new_tokens - 1) / (total - first))
            print(json.dumps({"implementation": "transformers", "cache": cache, "test": f"tg{new_tokens}",
                              "prompt": prompt_len, "tokens_per_s": rates,
                              "max_memory_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["build", "bench"])
    ap.add_argument("dir")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="e4b")
    ap.add_argument("--caches", default="dynamic,static", help="decode settings to measure")
    args = ap.parse_args()
    if args.mode == "build":
        build(args.dir, args.preset)
    else:
        bench(args.dir, args.prompt, args.new, args.prefill, args.reps, args.caches.split(","))


if __name__ == "__main__":
    main()
