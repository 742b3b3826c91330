"""The run `gpt train --data FILE` does, in PyTorch, to compare validation losses.

Same model (GPT-2 blocks, tied head, GPT-2 init; or with --arch llama the
Llama of examples/llama_torch.py: RMSNorm, RoPE (theta 10000, pairing half),
grouped-query attention, SwiGLU, bias-free, head tied to the embedding,
Hugging Face's init), same data handling (bytes,
vocabulary = the file's distinct bytes, 90/10 split), same optimiser (AdamW
betas 0.9/0.99, eps 1e-8, weight decay 0.1 on every parameter, gradients
clipped to norm 1), same schedule (linear warmup over min(steps/10, 100)
steps, then cosine down to lr/10) and the same validation set (256 windows
spread evenly over the validation split). Only the random numbers differ.

    /usr/bin/python3 examples/gpt_train_torch.py --data FILE --config small \
        --batch 32 --lr 1e-3 --steps 3000 --seed 1337 [--arch llama]
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch import LlamaConfig, LlamaForCausalLM  # noqa: E402

CONFIGS = {  # context, layers, heads, width: the shapes of examples/gpt_model.c
    "tiny": (16, 1, 2, 32),
    "small": (64, 4, 4, 128),
    "medium": (256, 6, 6, 384),
}
LLAMA_CONFIGS = {  # context, layers, heads, kv heads, width, SwiGLU hidden (gpt_model.c, llama)
    "tiny": (16, 1, 2, 1, 32, 96),
    "small": (64, 4, 4, 2, 128, 384),
    "medium": (256, 6, 6, 2, 384, 1024),
}


class Block(nn.Module):
    def __init__(self, d, heads, proj_std):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        for lin, std in ((self.c_attn, 0.02), (self.attn_proj, proj_std),
                         (self.c_fc, 0.02), (self.mlp_proj, proj_std)):
            nn.init.normal_(lin.weight, 0.0, std)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        y = att.masked_fill(causal, float("-inf")).softmax(-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, d):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        proj_std = 0.02 / math.sqrt(2 * layers)
        self.blocks = nn.ModuleList(Block(d, heads, proj_std) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def lr_at(step, warmup, total, lr_max, lr_min):
    if step < warmup:
        return lr_max * (step + 1) / warmup
    if step >= total:
        return lr_min
    progress = (step - warmup) / (total - warmup)
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--config", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--arch", default="gpt", choices=["gpt", "llama"])
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    raw = open(args.data, "rb").read()
    chars = sorted(set(raw))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in raw], dtype=torch.long)
    n_val = len(data) // 10
    n_train = len(data) - n_val
    T, layers, heads, d = CONFIGS[args.config]
    with torch.random.fork_rng():  # counted only: the GPT run draws the same numbers
        gpt_params = sum(p.numel() for p in GPT(len(chars), T, layers, heads, d).parameters())
    if args.arch == "llama":
        T, layers, heads, kv_heads, d, hidden = LLAMA_CONFIGS[args.config]
        llama = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(chars), block_size=T, n_layer=layers, n_head=heads,
            n_kv_head=kv_heads, n_embd=d, hidden=hidden, rope_theta=10000.0, norm_eps=1e-5,
            tie=True, pairing="half"))
        model, shape = llama, f"{heads} heads, {kv_heads} kv heads, d {d}, hidden {hidden}"

        def forward(x):
            return llama(x)[0]
    else:
        model = GPT(len(chars), T, layers, heads, d)
        forward, shape = model, f"{heads} heads, d {d}"
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), eps=1e-8,
                            weight_decay=0.1)
    warmup = min(args.steps // 10, 100)
    eval_every = args.eval_every or (100 if args.steps // 20 > 100 else max(1, args.steps // 20))

    rows = min(n_val - T, 8 * args.batch)
    starts = [n_train + (n_val - T - 1) * r // rows for r in range(rows)]
    val_x = torch.stack([data[s:s + T] for s in starts])
    val_y = torch.stack([data[s + 1:s + T + 1] for s in starts])

    def validation_loss():
        with torch.no_grad():
            logits = forward(val_x)
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), val_y.view(-1)).item()

    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab {len(chars)}, context {T}, {layers} layers, {shape}, {n_params} parameters"
          + (f" (the GPT of config {args.config}: {gpt_params})" if args.arch == "llama" else ""))
    start = time.time()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, warmup, args.steps, args.lr, args.lr / 10)
        at = torch.randint(0, n_train - T, (args.batch,))
        x = torch.stack([data[s:s + T] for s in at])
        y = torch.stack([data[s + 1:s + T + 1] for s in at])
        logits = forward(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % eval_every == 0 or step + 1 == args.steps:
            print(f"step {step + 1}/{args.steps}  loss {loss.item():.6f}  "
                  f"val {validation_loss():.6f}  {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
