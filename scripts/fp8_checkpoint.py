#!/usr/bin/env python3
"""Rewrites a Hugging Face Gemma-4 checkpoint as compressed-tensors FP8, the format of FP8 releases:
every attention, MLP and per-layer-input projection, the model-level per-layer projection (a
Linear, which llm-compressor's "Linear" target quantises too), and every MoE expert (exploded into one
gate/up/down weight per expert) stored as e4m3 with one f32 scale per output row (absmax / 448);
embeddings, norms, the router and the head kept as they are.

    python3 scripts/fp8_checkpoint.py SRC_DIR DST_DIR [--delete-source] [--dynamic-inputs]

Quantises on the GPU when there is one, one shard at a time; --delete-source removes each source
shard once it is converted (a disk that holds one full-size checkpoint). The dequantised weights
(e4m3 × scale) are what a reference run on the FP8 checkpoint computes with. --dynamic-inputs writes
llm-compressor's FP8_DYNAMIC scheme instead ("W8A8": every quantised projection's input rounded to
e4m3 per token at run time), the scheme of RedHatAI's Gemma-4 FP8-dynamic releases.
"""

import copy
import json
import re
import shutil
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

FP8_MAX = 448.0
LINEAR = re.compile(
    r"(layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|per_layer_input_gate|per_layer_projection)|per_layer_model_projection)\.weight$")
EXPERTS = re.compile(r"layers\.\d+\.experts\.(gate_up_proj|down_proj)$")
QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
        "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False}}},
    "ignore": ["lm_head", "re:.*embed.*", "re:.*router.*", "re:.*norm.*"],
    # What llm-compressor writes; transformers decompresses a checkpoint only when it says so.
    "quantization_status": "compressed",
}
DYNAMIC_INPUTS = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}


def quantization_config(dynamic_inputs):
    """The config.json entry: weight-only FP8, or FP8_DYNAMIC with `dynamic_inputs`."""
    config = copy.deepcopy(QUANTIZATION_CONFIG)
    if dynamic_inputs:
        config["config_groups"]["group_0"]["input_activations"] = dict(DYNAMIC_INPUTS)
    return config


def quantize_rows(w):
    """e4m3 values and per-row f32 scales `[..., rows, 1]` (absmax / 448) of a [..., rows, cols]
    tensor."""
    w = w.float()
    scale = (w.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    return (w / scale).to(torch.float8_e4m3fn), scale


def stored_tensors(name, q, scale):
    """The checkpoint tensors of one quantised weight: `name` and `name_scale`, or for a packed
    experts tensor one gate/up/down weight and scale per expert (exploded, as FP8 releases are)."""
    if not EXPERTS.search(name):
        return {name: q.contiguous(), name + "_scale": scale.contiguous()}
    out = {}
    base = name.rsplit(".", 1)[0]
    for e in range(q.shape[0]):
        if name.endswith("gate_up_proj"):
            half = q.shape[1] // 2
            parts = {"gate_proj": slice(0, half), "up_proj": slice(half, None)}
        else:
            parts = {"down_proj": slice(None)}
        for part, rows in parts.items():
            out[f"{base}.{e}.{part}.weight"] = q[e][rows].contiguous()
            out[f"{base}.{e}.{part}.weight_scale"] = scale[e][rows].contiguous()
    return out


def convert_shard(src, device):
    out = {}
    with safe_open(src, "pt", device=device) as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if LINEAR.search(name) or EXPERTS.search(name):
                q, scale = quantize_rows(t)
                out.update(stored_tensors(name, q.cpu(), scale.cpu()))
            else:
                out[name] = t.cpu()
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    delete_source = "--delete-source" in sys.argv[1:]
    dynamic_inputs = "--dynamic-inputs" in sys.argv[1:]
    src, dst = Path(args[0]), Path(args[1])
    dst.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    weight_map = {}
    shards = sorted(src.glob("*.safetensors"))
    for other in src.iterdir():
        if other.suffix != ".safetensors" and other.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(other, dst / other.name)
    config = json.loads((src / "config.json").read_text())
    for shard in shards:
        tensors = convert_shard(shard, device)
        if delete_source:
            shard.unlink()
        save_file(tensors, dst / shard.name, metadata={"format": "pt"})
        weight_map.update({name: shard.name for name in tensors})
    if len(shards) > 1:
        (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1))
    config["quantization_config"] = quantization_config(dynamic_inputs)
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(json.dumps({"fp8_checkpoint": str(dst), "shards": len(shards)}), flush=True)


if __name__ == "__main__":
    main()
