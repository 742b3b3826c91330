#!/usr/bin/env python3
"""PyTorch reference for the Llama benchmark configs, with the options, timing
and JSON lines of bench/torch_ref.py (its helpers), so bench/compare.py can
join them with tensorgrad's lines of the same config names.

    /usr/bin/python3 bench/torch_llama.py [--threads N] [--bf16] [llama-medium] [llama-generate]

llama-medium: one training step (forward, cross-entropy, backward, AdamW lr
  1e-3 weight decay 0.1) of the Llama of examples/llama_torch.py at vocab 65,
  context 256, 6 layers, 6 heads, 2 kv heads, width 384, SwiGLU hidden 1024,
  tied head, rope theta 10000 (pairing half), batch 8, random tokens; the
  median of 5 timed steps after 2 warm-up steps, in ms.
llama-generate: 200 new tokens, greedy, batch 1, from a one-token prompt, at
  llama-medium's shape: tokens/s. As torch_ref.py's `generate`, every token
  recomputes the whole window (no KV cache); the line also carries the bytes
  a float32 KV cache of the full context needs with the 2 kv heads
  (kv_cache_bytes) and with one per query head (kv_cache_bytes_mha).
--bf16: the forward under torch.autocast("cpu", dtype=torch.bfloat16) with
  float32 parameters and AdamW state; lines carry "precision": "bf16".
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

import torch_ref  # the reference's precision switch, JSON lines and timing
from torch_ref import autocast, emit, timed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from llama_torch import LlamaConfig, LlamaForCausalLM  # noqa: E402

BATCH = 8


def llama_medium_config():
    return LlamaConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_kv_head=2,
                       n_embd=384, hidden=1024, rope_theta=10000.0, norm_eps=1e-5, tie=True,
                       pairing="half")



def bench_train(threads):
    torch.manual_seed(0)
    c = llama_medium_config()
    model = LlamaForCausalLM(c)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x = torch.randint(0, c.vocab_size, (BATCH, c.block_size))
    y = torch.randint(0, c.vocab_size, (BATCH, c.block_size))

    def step():
        with autocast():
            logits, _ = model(x)
        loss = F.cross_entropy(logits.float().view(-1, c.vocab_size), y.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    dt = timed(step, 2, 5)
    emit(config="llama-medium", threads=threads, metric="train_step", value=round(dt * 1e3, 2),
         unit="ms", tokens_per_s=round(BATCH * c.block_size / dt, 1))


def kv_cache_bytes(c, kv_heads):
    """float32 keys and values of every layer for one sequence of block_size tokens."""
    return c.n_layer * 2 * kv_heads * c.block_size * (c.n_embd // c.n_head) * 4


def bench_generate(threads):
    torch.manual_seed(0)
    c = llama_medium_config()
    model = LlamaForCausalLM(c).eval()
    idx = torch.zeros(1, 1, dtype=torch.long)
    t = time.perf_counter()
    with torch.no_grad(), autocast():
        for _ in range(200):
            logits, _ = model(idx[:, -c.block_size:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    dt = time.perf_counter() - t
    emit(config="llama-generate", threads=threads, metric="tokens_per_s",
         value=round(200 / dt, 1), unit="tok/s", kv_cache_bytes=kv_cache_bytes(c, c.n_kv_head),
         kv_cache_bytes_mha=kv_cache_bytes(c, c.n_head))


BENCHES = {"llama-medium": bench_train, "llama-generate": bench_generate}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="PyTorch's bfloat16 mixed precision")
    ap.add_argument("configs", nargs="*", default=list(BENCHES), help=" ".join(BENCHES))
    a = ap.parse_args()
    for name in a.configs:
        if name not in BENCHES:
            ap.error(f"unknown config {name!r} (known: {', '.join(BENCHES)})")
    torch_ref.PRECISION = "bf16" if a.bf16 else "fp32"
    torch.set_num_threads(a.threads)
    for name in a.configs:
        BENCHES[name](a.threads)
