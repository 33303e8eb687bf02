#!/usr/bin/env python3
"""Trains g4's embedded default model: a tiny Gemma-4 (PLE, sliding + full layers with
proportional RoPE, KV sharing) with its own byte-fallback BPE tokenizer, on the King James Bible
(public domain) as Debian's bible-kjv package prints it.

    apt-get install bible-kjv && bible -f "Gen1:1-Rev22:21" > kjv.txt
    python3 scripts/train_default_model.py --corpus kjv.txt --out OUT [--steps 2500]

Runs on CUDA when present (about two minutes on an H200), else on CPU. Writes an HF-layout
checkpoint (bf16) with tokenizer.json, tokenizer_config.json, chat_template.jinja and
generation_config.json. Verse references become chat turns ("Ge1:3" -> the verse), so the chat
template means something to this model too.
"""

import argparse
import json
import random
import re
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, Gemma4ForCausalLM, Gemma4TextConfig

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>"]
VOCAB = 4096
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] | trim }}<turn|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)


def read_verses(path):
    verses = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = re.match(r"^(\S+?\d+:\d+) (.*)$", line.strip())
        if m:
            verses.append((m.group(1), m.group(2)))
    return verses


def train_tokenizer(texts):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(byte_tokens), special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    # Byte-fallback tokens go right after the specials; learned pieces keep their order after them.
    spec = json.loads(tok.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    pieces = [t for t, _ in learned if t not in SPECIALS]
    vocab = {t: i for i, t in enumerate(SPECIALS + byte_tokens + pieces)}
    spec["model"]["vocab"] = vocab
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    return Tokenizer.from_str(json.dumps(spec))


def build_stream(tok, verses, rng):
    bos, eos = tok.token_to_id("<bos>"), tok.token_to_id("<eos>")
    docs = []
    chapter, current = None, []
    for ref, text in verses:
        ch = ref.split(":")[0]
        if ch != chapter and current:
            docs.append(" ".join(current))
            current = []
        chapter = ch
        current.append(text)
    docs.append(" ".join(current))
    chats = [f"<|turn>user\n{ref}<turn|>\n<|turn>model\n{text}<turn|>\n" for ref, text in verses]
    items = docs + rng.sample(chats, len(chats) // 3)
    rng.shuffle(items)
    stream = []
    for item in items:
        stream += [bos] + tok.encode(item).ids + [eos]
    return torch.tensor(stream)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    rng = random.Random(0)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    verses = read_verses(args.corpus)
    tok = train_tokenizer([t for _, t in verses])
    stream = build_stream(tok, verses, rng)
    print(f"{len(verses)} verses, {len(stream)} tokens, vocab {tok.get_vocab_size()}", flush=True)

    S, F = "sliding_attention", "full_attention"
    cfg = Gemma4TextConfig(
        vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB, hidden_size=256, intermediate_size=640,
        num_hidden_layers=6, layer_types=[S, S, F, S, S, F], num_attention_heads=4, num_key_value_heads=1,
        head_dim=64, global_head_dim=128, sliding_window=64, hidden_size_per_layer_input=32,
        num_kv_shared_layers=2, final_logit_softcapping=30.0, max_position_embeddings=1024,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    )
    cfg._attn_implementation = "sdpa"
    model = Gemma4ForCausalLM(cfg).to(device)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=args.steps, pct_start=0.05)
    stream = stream.to(device)
    start = time.time()
    for step in range(args.steps):
        idx = torch.randint(0, len(stream) - args.seq - 1, (args.batch,), device=device)
        batch = torch.stack([stream[i:i + args.seq] for i in idx.tolist()])
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 250 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - start:.0f}s)", flush=True)

    model.eval()
    prompt = torch.tensor([[2] + tok.encode("In the beginning").ids], device=device)
    out = model.generate(prompt, do_sample=False, max_new_tokens=40)
    print("sample:", tok.decode(out[0].tolist()), flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=2, pad_token_id=0, eos_token_id=[1, 5], do_sample=True, temperature=0.8, top_k=40, top_p=0.95)
    model.to(torch.bfloat16).save_pretrained(args.out)
    tok.save(str(args.out / "tokenizer.json"))
    (args.out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (args.out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "add_bos_token": False, "model_max_length": 1024, "tokenizer_class": "PreTrainedTokenizerFast",
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
