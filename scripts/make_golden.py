#!/usr/bin/env python3
"""Builds tiny random-weight Gemma-4 checkpoints with transformers and writes their goldens.

Every golden comes from the reference implementation (HF transformers, float32, eager attention),
never from g4. Usage (a venv outside the repo keeps torch out of the tree):

    python3 -m venv /tmp/g4-golden && /tmp/g4-golden/bin/pip install torch==2.11.0 \
        transformers==5.24.0 safetensors==0.8.0 compressed-tensors==0.20.1
    /tmp/g4-golden/bin/python scripts/make_golden.py [--out golden] [--only NAME ...]

With --trained DIR it instead writes goldens for an existing checkpoint (the embedded default
model, golden/kjv-tiny), from text prompts encoded with the checkpoint's own tokenizer.

With --chat-fixture it builds golden/chat-fixture: a tiny random-weight model over kjv-tiny's
tokenizer plus Gemma-4's channel, think and tool markers as special tokens, with the hand-written
template golden/chat-fixture/model/chat_template.jinja; each case's prompt ids are transformers'
apply_chat_template of its messages, tools and enable_thinking.

Each variant lands in golden/<name>/: model/ (config.json, safetensors, generation_config.json)
and golden.json (format g4-golden/1). Together the variants cover every branch of
GEMMA4_TEXT.md: both layer patterns, sliding windows much shorter than the prompts, proportional
RoPE, PLE on and off, KV sharing, double-wide MLP, k_eq_v, MoE, both checkpoint layouts, both
config eras, f32 and bf16 storage, sharded files, dead consumer K/V weights and ignored tower
tensors.
"""

import argparse
import json
import shutil
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4TextConfig
from transformers import GenerationConfig
from compressed_tensors.quantization import apply_quantization_config

from fp8_checkpoint import EXPERTS as FP8_EXPERTS, LINEAR as FP8_LINEAR
from fp8_checkpoint import quantization_config, quantize_rows, stored_tensors

REQUIRED_TRANSFORMERS = "5.24.0"
MIN_MARGIN = 1e-3  # top-1 / top-2 logprob gap every golden step must keep (GEMMA4_TEXT.md §9)
TOP_K = 5

S, F = "sliding_attention", "full_attention"

BASE = dict(
    vocab_size=512, vocab_size_per_layer_input=512, hidden_size=64, intermediate_size=128,
    num_attention_heads=4, head_dim=16, sliding_window=8, final_logit_softcapping=30.0,
    max_position_embeddings=512, pad_token_id=0, bos_token_id=2, eos_token_id=1,
    tie_word_embeddings=True, rms_norm_eps=1e-6,
)

# name -> (text config overrides, options)
VARIANTS = {
    # E2B-like: 4 sliding : 1 full, one KV head, KV sharing, double-wide MLP on consumers, PLE.
    "e2b-style": (dict(
        num_hidden_layers=10, layer_types=[S, S, S, S, F] * 2, num_key_value_heads=1,
        global_head_dim=32, hidden_size_per_layer_input=8, num_kv_shared_layers=4,
        use_double_wide_mlp=True,
    ), dict(layout="text_only", storage="float32")),
    # E4B-like: 5:1, two KV heads, KV sharing, PLE; multimodal layout, weights stored in bf16.
    "e4b-style-bf16": (dict(
        num_hidden_layers=12, layer_types=[S, S, S, S, S, F] * 2, num_key_value_heads=2,
        global_head_dim=32, hidden_size_per_layer_input=8, num_kv_shared_layers=4,
    ), dict(layout="multimodal", storage="bfloat16")),
    # 26B-A4B-like: MoE + k_eq_v, no PLE; no layer_types in config.json (default 5:1 pattern);
    # sharded safetensors with an index.
    "moe-keqv": (dict(
        num_hidden_layers=6, num_key_value_heads=2, global_head_dim=32, num_global_key_value_heads=1,
        attention_k_eq_v=True, hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=4,
        top_k_experts=2, moe_intermediate_size=32,
    ), dict(layout="text_only", storage="float32", drop_layer_types=True, max_shard_size="300KB")),
    # compressed-tensors FP8: every projection and expert stored as e4m3 with one f32 scale per
    # output row, experts exploded per expert; the reference runs on the dequantised values.
    "fp8-moe": (dict(
        num_hidden_layers=6, layer_types=[S, S, F, S, S, F], num_key_value_heads=2, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=8,
        num_kv_shared_layers=2, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
    ), dict(layout="text_only", storage="float32", fp8=True)),
    # Every branch at once, saved the way Google's released checkpoints look: multimodal layout,
    # flat global_head_dim fields (no per_layer_config), eos [1, 106], dead K/V weights on
    # consumer layers and tower tensors the text model must ignore.
    "released-combo": (dict(
        num_hidden_layers=6, layer_types=[S, S, F, S, S, F], num_key_value_heads=2, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=8,
        num_kv_shared_layers=2, use_double_wide_mlp=True, enable_moe_block=True, num_experts=4,
        top_k_experts=2, moe_intermediate_size=32,
    ), dict(layout="multimodal", storage="float32", released_style=True)),
    # FP8_DYNAMIC ("W8A8"), the scheme of RedHatAI's Gemma-4 FP8-dynamic releases: e2b-style's
    # projections in e4m3, each input rounded to e4m3 per token at run time. The reference is
    # the written checkpoint loaded back by transformers, whose compressed-tensors integration
    # does that rounding.
    "fp8-dynamic": (dict(
        num_hidden_layers=10, layer_types=[S, S, S, S, F] * 2, num_key_value_heads=1,
        global_head_dim=32, hidden_size_per_layer_input=8, num_kv_shared_layers=4,
        use_double_wide_mlp=True,
    ), dict(layout="text_only", storage="float32", fp8=True, fp8_inputs=True)),
    # FP8_DYNAMIC with its experts quantised too, exploded per expert: the layout of
    # SilentEight's gemma-4-26B-A4B-it-FP8-Dynamic (llm-compressor's model_free_ptq). fp8-moe's
    # architecture; the reference rounds every expert projection's input as well (see
    # `ExplodedExperts`).
    "fp8-dynamic-moe": (dict(
        num_hidden_layers=6, layer_types=[S, S, F, S, S, F], num_key_value_heads=2, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=8,
        num_kv_shared_layers=2, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
    ), dict(layout="text_only", storage="float32", fp8=True, fp8_inputs=True)),
}

# (case name, prompt length, new tokens); prompts are drawn from a seeded generator and redrawn
# until every step keeps MIN_MARGIN.
CASES = [("short", 5, 16), ("medium", 20, 24), ("long", 45, 32)]


def fill_weights(model, seed):
    """Non-trivial values everywhere, so that no norm, scalar or scale can hide a bug at 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if not tensor.is_floating_point() or "inv_freq" in name or "embed_scale" in name:
                continue
            if name.endswith("layer_scalar"):
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            elif tensor.dim() == 1 or name.endswith("router.scale"):
                tensor.copy_(1.0 + 0.2 * torch.randn(tensor.shape, generator=gen))
            elif "embed_tokens" in name:
                tensor.copy_(0.05 * torch.randn(tensor.shape, generator=gen))
            else:
                tensor.copy_(0.25 * torch.randn(tensor.shape, generator=gen))


def greedy_with_scores(model, prompt, new_tokens):
    ids = torch.tensor([prompt])
    # No eos: every case runs its full length (a model-level eos id would otherwise stop it).
    model.generation_config = GenerationConfig(eos_token_id=None, pad_token_id=0, do_sample=False)
    out = model.generate(ids, max_new_tokens=new_tokens, output_scores=True, return_dict_in_generate=True)
    if out.sequences.shape[1] - len(prompt) != new_tokens:
        raise SystemExit(f"generation stopped after {out.sequences.shape[1] - len(prompt)} of {new_tokens} tokens")
    tokens = out.sequences[0, len(prompt):].tolist()
    logprobs = [torch.log_softmax(s[0].double(), dim=-1) for s in out.scores]
    return tokens, logprobs


def cache_free_greedy(model, prompt, new_tokens):
    """Recomputes every position each step: an independent check of HF's own cached path."""
    seq = list(prompt)
    for _ in range(new_tokens):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        seq.append(int(logits.argmax()))
    return seq[len(prompt):]


def make_case(model, name, length, new_tokens, seed, vocab, redraw_on_disagreement=False):
    """A prompt drawn until every step keeps MIN_MARGIN. With `redraw_on_disagreement` (inputs
    rounded to e4m3, where a last-bit difference between HF's cached and cache-free sums can move
    an activation across a rounding boundary), also until both paths agree."""
    gen = torch.Generator().manual_seed(seed)
    rejected = {"margin": 0, "disagreement": 0}
    for attempt in range(50):
        prompt = [2] + torch.randint(3, vocab, (length - 1,), generator=gen).tolist()
        tokens, logprobs = greedy_with_scores(model, prompt, new_tokens)
        top = [lp.topk(TOP_K) for lp in logprobs]
        margins = [float(t.values[0] - t.values[1]) for t in top]
        if min(margins) < MIN_MARGIN:
            rejected["margin"] += 1
            continue
        if cache_free_greedy(model, prompt, new_tokens) != tokens:
            if redraw_on_disagreement:
                rejected["disagreement"] += 1
                continue
            raise SystemExit(f"{name}: HF cached and cache-free greedy disagree; refusing to write a golden")
        return {
            "name": name,
            "prompt_ids": prompt,
            "expected_ids": tokens,
            "top_logprobs": [[[int(i), round(float(v), 6)] for v, i in zip(t.values, t.indices)] for t in top],
            "min_margin": round(min(margins), 6),
            "prompt_attempt": attempt,
        }
    raise SystemExit(f"{name}: no usable prompt in 50 attempts (rejected: {rejected})")


def fp8_quantize_in_place(model):
    """Replaces every quantised weight by its dequantised value; returns name -> (e4m3, scale)."""
    stored = {}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if FP8_LINEAR.search(name) or FP8_EXPERTS.search(name):
                q, scale = quantize_rows(param.data)
                param.copy_(q.float() * scale)
                stored[name] = (q, scale)
    return stored


class ExplodedExperts(torch.nn.Module):
    """One layer's experts as the Linear modules an FP8 checkpoint stores them in
    (`experts.{e}.gate_proj` / `up_proj` / `down_proj`), the layout llm-compressor quantises and
    vLLM runs. transformers 5.24 packs experts into 3-D tensors and has no conversion from this
    layout for Gemma-4 (it leaves the packed tensors uninitialised), so its compressed-tensors
    integration never reaches an expert. As Linear modules, each expert projection gets the
    same dynamic per-token input rounding from compressed-tensors as every other projection.
    `forward` is Gemma4TextExperts.forward's arithmetic, expert by expert in the same order."""

    def __init__(self, packed):
        super().__init__()
        width = packed.intermediate_dim
        self.experts = []
        for e, (gate_up, down) in enumerate(zip(packed.gate_up_proj, packed.down_proj)):
            expert = torch.nn.Module()
            for name, weight in (("gate_proj", gate_up[:width]), ("up_proj", gate_up[width:]),
                                 ("down_proj", down)):
                linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
                linear.weight.data.copy_(weight)
                setattr(expert, name, linear)
            self.add_module(str(e), expert)
            self.experts.append(expert)
        self.act_fn = packed.act_fn

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        # [experts, slots, tokens]: each expert's rows in (slot, token) order, as transformers takes them.
        routed = torch.nn.functional.one_hot(top_k_index, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(routed[e])
            if token.numel() == 0:
                continue
            # [1, rows, H]: compressed-tensors rounds per token only along a 3-D input's last
            # dimension (a 2-D one would share one scale).
            rows = hidden_states[token].unsqueeze(0)
            h = self.act_fn(expert.gate_proj(rows)) * expert.up_proj(rows)
            y = expert.down_proj(h)[0] * top_k_weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out


def explode_experts(loaded, source, stored):
    """Puts `source`'s (dequantised) experts into `loaded` as `ExplodedExperts`, each checked
    against transformers' packed experts on random rows before rounding; then has
    compressed-tensors quantise their projections like the loaded model's other projections,
    with the stored row scales. Returns how many projections that adds."""
    quantizer = loaded.hf_quantizer
    # The dense projections decompressed now (as on the first forward), so that the modules
    # added below are not decompressed a second time.
    quantizer.compressor.decompress_model(loaded)
    added = []
    gen = torch.Generator().manual_seed(7)
    for i, layer in enumerate(source.model.layers):
        if not getattr(layer, "enable_moe_block", False):
            continue
        packed = layer.experts
        exploded = ExplodedExperts(packed)
        tokens, experts = 5, len(exploded.experts)
        rows = torch.randn(tokens, packed.hidden_dim, generator=gen)
        ids = torch.stack([torch.randperm(experts, generator=gen)[:2] for _ in range(tokens)])
        weights = torch.rand(tokens, 2, generator=gen)
        want, got = packed(rows, ids, weights), exploded(rows, ids, weights)
        if not torch.allclose(want, got, rtol=1e-5, atol=1e-5 * float(want.abs().max())):
            raise SystemExit(f"layer {i}: exploded experts differ from transformers' packed experts")
        loaded.model.layers[i].experts = exploded
        gate_up_scale = stored[f"model.layers.{i}.experts.gate_up_proj"][1]
        down_scale = stored[f"model.layers.{i}.experts.down_proj"][1]
        width = packed.intermediate_dim
        for e, expert in enumerate(exploded.experts):
            scales = (gate_up_scale[e][:width], gate_up_scale[e][width:], down_scale[e])
            for linear, scale in zip((expert.gate_proj, expert.up_proj, expert.down_proj), scales):
                added.append((linear, scale))
    config = quantizer.compressor.quantization_config
    apply_quantization_config(loaded, config, allowed_modules=[linear for linear, _ in added])
    for linear, scale in added:
        linear.weight_scale.data.copy_(scale)
    return len(added)


def fp8_checkpoint(model_dir, stored, dynamic_inputs):
    """Rewrites a saved f32 checkpoint as compressed-tensors FP8 with exploded experts (FP8_DYNAMIC
    with `dynamic_inputs`)."""
    st_path = model_dir / "model.safetensors"
    tensors = load_file(st_path)
    for name, (q, scale) in stored.items():
        del tensors[name]
        tensors.update(stored_tensors(name, q, scale))
    save_file(tensors, st_path, metadata={"format": "pt"})
    cfg_path = model_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = quantization_config(dynamic_inputs)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def released_style(model_dir, text_cfg, shared_layers):
    """Rewrites a saved multimodal checkpoint into the shape of Google's released files."""
    cfg_path = model_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    text = cfg["text_config"]
    text.pop("per_layer_config", None)
    text["global_head_dim"] = text_cfg["global_head_dim"]
    text["num_global_key_value_heads"] = text_cfg.get("num_global_key_value_heads")
    cfg["eos_token_id"] = [1, 106]
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")

    st_path = model_dir / "model.safetensors"
    tensors = load_file(st_path)
    gen = torch.Generator().manual_seed(99)
    prefix = "model.language_model.layers"
    h, kvh, hd = text_cfg["hidden_size"], text_cfg["num_key_value_heads"], text_cfg["head_dim"]
    for i in shared_layers:
        full = text_cfg["layer_types"][i] == F
        d = text_cfg["global_head_dim"] if full else hd
        heads = text_cfg.get("num_global_key_value_heads", kvh) if full else kvh
        # Dead weights: if g4 used them, the output would change.
        tensors[f"{prefix}.{i}.self_attn.k_proj.weight"] = torch.randn(heads * d, h, generator=gen)
        tensors[f"{prefix}.{i}.self_attn.v_proj.weight"] = torch.randn(heads * d, h, generator=gen)
        tensors[f"{prefix}.{i}.self_attn.k_norm.weight"] = torch.randn(d, generator=gen)
    tensors["model.vision_tower.encoder.layers.0.mlp.fc1.weight"] = torch.randn(16, 8, generator=gen)
    tensors["model.embed_vision.embedding_projection.weight"] = torch.randn(64, 8, generator=gen)
    save_file(tensors, st_path, metadata={"format": "pt"})


def build(name, overrides, opts, out_root, seed):
    text_cfg = dict(BASE, **overrides)
    config = Gemma4TextConfig(**text_cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(config).eval()
    fill_weights(model, seed)
    fp8 = fp8_quantize_in_place(model) if opts.get("fp8") else None
    if opts["storage"] == "bfloat16":
        # The reference runs in f32 on exactly the values that are stored.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
            for n, b in model.named_buffers():
                if n.endswith("layer_scalar"):
                    b.copy_(b.to(torch.bfloat16).float())

    if opts["layout"] == "multimodal":
        mm_cfg = Gemma4Config(text_config=config.to_dict(), vision_config=None, audio_config=None)
        mm_cfg.text_config._attn_implementation = "eager"
        mm_cfg._attn_implementation = "eager"
        reference = Gemma4ForConditionalGeneration(mm_cfg).eval()
        missing, unexpected = reference.model.language_model.load_state_dict(model.model.state_dict(), strict=False)
        if [m for m in missing if "inv_freq" not in m and "embed_scale" not in m] or unexpected:
            raise SystemExit(f"{name}: weight copy into the multimodal layout failed: {missing} {unexpected}")
    else:
        reference = model

    out = out_root / name
    model_dir = out / "model"
    shutil.rmtree(out, ignore_errors=True)
    model_dir.mkdir(parents=True)
    vocab = text_cfg["vocab_size"]
    make_cases = lambda reference: [make_case(reference, case, length, new, seed * 100 + i, vocab,
                                              redraw_on_disagreement=opts.get("fp8_inputs", False))
                                    for i, (case, length, new) in enumerate(CASES)]
    cases = None if opts.get("fp8_inputs") else make_cases(reference)

    saved = reference.to(torch.bfloat16) if opts["storage"] == "bfloat16" else reference
    saved.save_pretrained(model_dir, max_shard_size=opts.get("max_shard_size", "50GB"))
    if opts.get("drop_layer_types"):
        cfg_path = model_dir / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("layer_types")
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    if fp8:
        fp8_checkpoint(model_dir, fp8, opts.get("fp8_inputs", False))
    if cases is None:
        loaded = Gemma4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
        dense = sum(1 for n in fp8 if not FP8_EXPERTS.search(n))
        expected = dense + explode_experts(loaded, model, fp8)
        rounded = [m for m in loaded.modules() if getattr(m, "quantization_scheme", None) is not None
                   and m.quantization_scheme.input_activations is not None]
        if len(rounded) != expected:
            raise SystemExit(f"{name}: transformers rounds the inputs of {len(rounded)} projections, expected {expected}")
        cases = make_cases(loaded.eval())
    if opts.get("released_style"):
        shared = range(text_cfg["num_hidden_layers"] - text_cfg.get("num_kv_shared_layers", 0),
                       text_cfg["num_hidden_layers"])
        released_style(model_dir, text_cfg, shared)

    golden = {
        "format": "g4-golden/1",
        "model": "model",
        "reference": {"implementation": "transformers", "version": transformers.__version__,
                      "torch": torch.__version__, "dtype": "float32", "attention": "eager"},
        "variant": {"name": name, "layout": opts["layout"], "storage": opts["storage"],
                    "text_config": overrides},
        "cases": cases,
    }
    (out / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    margins = ", ".join(f"{c['name']} {c['min_margin']:.4f}" for c in cases)
    print(f"{name}: {len(cases)} cases, min margins {margins}")


# Text prompts for a trained checkpoint: plain continuation and one chat turn.
TRAINED_PROMPTS = [
    ("beginning", "In the beginning", 40),
    ("moses", "And the LORD spake unto Moses, saying,", 40),
    ("long-context", "Blessed are the poor in spirit: for theirs is the kingdom of heaven. Blessed are they that "
     "mourn: for they shall be comforted. Blessed are the meek: for they shall inherit the earth. Blessed are "
     "they which do hunger and thirst after righteousness: for they shall be filled.", 48),
    ("chat", "<|turn>user\nGe1:3<turn|>\n<|turn>model\n", 32),
]


def trained_goldens(model_dir, out):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    model = Gemma4ForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    cases = []
    for name, text, new in TRAINED_PROMPTS:
        prompt = [2] + tok.encode(text).ids
        tokens, logprobs = greedy_with_scores(model, prompt, new)
        top = [lp.topk(TOP_K) for lp in logprobs]
        margins = [float(t.values[0] - t.values[1]) for t in top]
        if min(margins) < MIN_MARGIN:
            raise SystemExit(f"{name}: margin {min(margins):.2e} < {MIN_MARGIN}; choose another prompt")
        if cache_free_greedy(model, prompt, new) != tokens:
            raise SystemExit(f"{name}: HF cached and cache-free greedy disagree; refusing to write a golden")
        cases.append({
            "name": name, "prompt": text, "prompt_ids": prompt, "expected_ids": tokens,
            "expected_text": tok.decode(tokens),
            "top_logprobs": [[[int(i), round(float(v), 6)] for v, i in zip(t.values, t.indices)] for t in top],
            "min_margin": round(min(margins), 6),
        })
        print(f"{name}: min margin {min(margins):.4f}: {tok.decode(tokens)!r}")
    golden = {
        "format": "g4-golden/1",
        "model": "model",
        "reference": {"implementation": "transformers", "version": transformers.__version__,
                      "torch": torch.__version__, "dtype": "float32", "attention": "eager"},
        "cases": cases,
    }
    (out / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")


# The markers Gemma-4's tokenizer has as special tokens, beside <|turn> and <turn|>.
CHAT_MARKERS = ["<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
                "<|tool_response>", "<tool_response|>", '<|"|>']
VERSE_TOOL = {"type": "function", "function": {
    "name": "get_verse", "description": "  Look up one verse of the King James Bible. ",
    "parameters": {"type": "object", "required": ["book", "chapter"], "properties": {
        "book": {"type": "string", "description": "Book of the Bible", "enum": ["gen", "exo"]},
        "chapter": {"type": "integer", "description": "Chapter number"},
        "verse": {"type": "integer"},
    }},
}}
# (case, messages, tools, enable_thinking or None for the template's default)
CHAT_CASES = [
    ("one-turn", [{"role": "user", "content": "Ge1:3"}], None, None),
    ("system", [{"role": "system", "content": "Answer with a verse."}, {"role": "user", "content": "Ge1:3"}],
     None, None),
    ("padded", [{"role": "system", "content": "  \tAnswer with a verse.\n "},
                {"role": "user", "content": "\n  Ge1:3 \t\n"}], None, None),
    ("think", [{"role": "user", "content": "Ge1:3"}], None, True),
    ("think-off", [{"role": "user", "content": "Ge1:3"}], None, False),
    ("multi-turn", [
        {"role": "user", "content": "Ge1:1"},
        {"role": "assistant", "content": "<|channel>thought\nThe first verse.\n<channel|>In the beginning God "
                                         "created the heaven and the earth."},
        {"role": "user", "content": [{"type": "text", "text": "Ge1:"}, {"type": "text", "text": "2"}]},
    ], None, None),
    ("tools", [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Find Ge1:3"}],
     [VERSE_TOOL], None),
    ("tool-round-trip", [
        {"role": "user", "content": "Find Ge1:3"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
            "name": "get_verse", "arguments": {"book": "gen", "chapter": 1, "verse": 3}}}]},
        {"role": "tool", "name": "get_verse", "content": " And God said, Let there be light: and there was light. "},
    ], [VERSE_TOOL], True),
]
CHAT_NEW_TOKENS = 16


def split_channels(tokens, tok, open_id, close_id):
    """Reasoning and answer text of generated tokens: inside <|channel>NAME\n ... <channel|> is reasoning."""
    parts, state, current = {"reasoning": [], "answer": []}, "answer", []
    for t in tokens + [None]:
        if t in (open_id, close_id, None):
            text = tok.decode(current)
            if state == "channel":
                text = text.split("\n", 1)[1] if "\n" in text else ""
            parts["answer" if state == "answer" else "reasoning"].append(text)
            state, current = ("channel" if t == open_id else "answer"), []
        else:
            current.append(t)
    return "".join(parts["reasoning"]), "".join(parts["answer"])


def chat_fixture(out_root, seed):
    from tokenizers import AddedToken, Tokenizer
    from transformers import AutoTokenizer

    out = out_root / "chat-fixture"
    model_dir = out / "model"
    template = (model_dir / "chat_template.jinja").read_text()
    for path in model_dir.iterdir():
        if path.name != "chat_template.jinja":
            path.unlink()
    tok = Tokenizer.from_file(str(out_root / "kjv-tiny/model/tokenizer.json"))
    tok.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in CHAT_MARKERS])
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "add_bos_token": False, "model_max_length": 512, "tokenizer_class": "PreTrainedTokenizerFast",
    }, indent=1) + "\n")
    hf_tok = AutoTokenizer.from_pretrained(model_dir)
    if hf_tok.chat_template != template:
        raise SystemExit("transformers did not load chat_template.jinja as the chat template")
    open_id, close_id = tok.token_to_id("<|channel>"), tok.token_to_id("<channel|>")
    eos_ids = {1, tok.token_to_id("<turn|>")}

    prompts = []
    for name, messages, tools, think in CHAT_CASES:
        kwargs = {} if think is None else {"enable_thinking": think}
        text = hf_tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False, **kwargs)
        ids = hf_tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                         return_dict=False, **kwargs)
        if ids != hf_tok(text, add_special_tokens=False).input_ids:
            raise SystemExit(f"{name}: tokenize=True and encoding the rendered text disagree")
        prompts.append((name, messages, tools, think, text, ids))

    vocab = len(tok.get_vocab(with_added_tokens=True))
    text_cfg = dict(BASE, vocab_size=vocab + 6, vocab_size_per_layer_input=vocab + 6, num_hidden_layers=6,
                    layer_types=[S, S, F, S, S, F], num_key_value_heads=2, global_head_dim=32,
                    hidden_size_per_layer_input=8, num_kv_shared_layers=2, max_position_embeddings=512)
    for attempt in range(100):
        config = Gemma4TextConfig(**text_cfg)
        config._attn_implementation = "eager"
        torch.manual_seed(seed + attempt)
        model = Gemma4ForCausalLM(config).eval()
        fill_weights(model, seed + attempt)
        cases = []
        for name, messages, tools, think, text, ids in prompts:
            tokens, logprobs = greedy_with_scores(model, ids, CHAT_NEW_TOKENS)
            top = [lp.topk(TOP_K) for lp in logprobs]
            margin = min(float(t.values[0] - t.values[1]) for t in top)
            # Every case runs its full length in g4 too: no eos among the expected tokens.
            if margin < MIN_MARGIN or eos_ids & set(tokens):
                break
            if cache_free_greedy(model, ids, CHAT_NEW_TOKENS) != tokens:
                raise SystemExit(f"{name}: HF cached and cache-free greedy disagree; refusing to write a golden")
            reasoning, answer = split_channels(tokens, tok, open_id, close_id)
            cases.append({
                "name": name, "messages": messages, "tools": tools, "enable_thinking": think,
                "prompt_text": text, "prompt_ids": ids, "expected_ids": tokens,
                "expected_text": answer, "expected_reasoning": reasoning,
                "top_logprobs": [[[int(i), round(float(v), 6)] for v, i in zip(t.values, t.indices)] for t in top],
                "min_margin": round(margin, 6),
            })
        if len(cases) == len(prompts):
            break
    else:
        raise SystemExit("no model seed in 100 keeps every chat case above the margin and free of eos")
    model.save_pretrained(model_dir)
    golden = {
        "format": "g4-golden/1",
        "model": "model",
        "reference": {"implementation": "transformers", "version": transformers.__version__,
                      "torch": torch.__version__, "dtype": "float32", "attention": "eager"},
        "variant": {"name": "chat-fixture", "model_seed": seed + attempt, "text_config": text_cfg},
        "cases": cases,
    }
    (out / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
    for c in cases:
        print(f"{c['name']}: {len(c['prompt_ids'])} prompt tokens, margin {c['min_margin']:.4f}, "
              f"reasoning {c['expected_reasoning']!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="golden", type=Path)
    parser.add_argument("--only", nargs="*", help="variants to (re)build")
    parser.add_argument("--seed", default=1234, type=int)
    parser.add_argument("--trained", type=Path, help="golden folder holding a trained model/ to make goldens for")
    parser.add_argument("--chat-fixture", action="store_true", help="(re)build golden/chat-fixture")
    args = parser.parse_args()
    if transformers.__version__ != REQUIRED_TRANSFORMERS:
        raise SystemExit(f"transformers {transformers.__version__} found; goldens are pinned to {REQUIRED_TRANSFORMERS}")
    torch.set_grad_enabled(False)
    if args.trained:
        trained_goldens(args.trained / "model", args.trained)
        return
    if args.chat_fixture:
        chat_fixture(args.out, args.seed)
        return
    for i, (name, (overrides, opts)) in enumerate(VARIANTS.items()):
        if args.only and name not in args.only:
            continue
        build(name, overrides, opts, args.out, args.seed + i)


if __name__ == "__main__":
    main()
