#!/usr/bin/env python3
"""PyTorch reference for the benchmark configs in bench/README.md.

Run with Debian's PyTorch (apt-get install python3-torch python3-numpy):
    /usr/bin/python3 bench/torch_ref.py [--threads N] [--bf16] [CONFIG ...]
Each config prints one JSON line: {"config", "threads", "metric", "value", "unit", ...}.

--bf16 runs PyTorch's mixed precision instead: matmul on bfloat16 tensors, and the
models' forward under torch.autocast("cpu", dtype=torch.bfloat16) with float32
parameters and optimizer state (PyTorch's fastest setting on a CPU with
AVX512-BF16, where its bfloat16 products go through oneDNN). Its lines carry
"precision": "bf16"; the default lines carry "precision": "fp32".
"""
import contextlib
import argparse, json, math, resource, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F


PRECISION = "fp32"


def autocast():
    if PRECISION == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def emit(**kw):
    kw["precision"] = PRECISION
    kw["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(kw), flush=True)


def timed(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    best = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best.append(time.perf_counter() - t)
    best.sort()
    return best[len(best) // 2]


def lm_step(model, opt, x, y, vocab):
    """One training step of a language model: forward, cross-entropy, backward, update."""
    with autocast():
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


# ---- matmul -----------------------------------------------------------------
def bench_matmul(threads):
    for (m, n, k) in [(64, 64, 64), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                      (1024, 384, 128), (2048, 1152, 384)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        if PRECISION == "bf16":
            a, b = a.bfloat16(), b.bfloat16()
        reps = max(3, int(2e9 / (2 * m * n * k)))
        dt = timed(lambda: [a @ b for _ in range(reps)], 1, 5) / reps
        emit(config="matmul", threads=threads, shape=[m, n, k], metric="gflops",
             value=round(2 * m * n * k / dt / 1e9, 1), unit="GFLOP/s")


# ---- seed toy: single-head attention LM on "abab..." ---------------------------
class SingleHeadAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.W_q = nn.Linear(dim, dim, bias=False)
        self.W_k = nn.Linear(dim, dim, bias=False)
        self.W_v = nn.Linear(dim, dim, bias=False)
        self.W_o = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        T = x.size(1)
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        mask = torch.triu(torch.ones(T, T), diagonal=1).bool()
        w = F.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        return self.W_o(w @ v)


def bench_attn_toy(threads):
    torch.manual_seed(0)
    text = "ababababababab abc abc abc xyzxyzxyz" * 100
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text])
    V, D, CTX = len(chars), 32, 16

    class ToyAttnLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(CTX, D)
            self.attn, self.head = SingleHeadAttention(D), nn.Linear(D, V)

        def forward(self, x):
            h = self.tok(x) + self.pos(torch.arange(x.size(1)))
            return self.head(self.attn(h))

    model = ToyAttnLM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t = time.perf_counter()
    for step in range(800):
        idx = torch.randint(0, len(data) - CTX - 1, (32,))
        x = torch.stack([data[i:i + CTX] for i in idx])
        y = torch.stack([data[i + 1:i + CTX + 1] for i in idx])
        loss = lm_step(model, opt, x, y, V)
    dt = time.perf_counter() - t
    emit(config="attn-toy", threads=threads, metric="train_800_steps", value=round(dt, 3),
         unit="s", final_loss=round(loss.item(), 4))


# ---- encoder: 2 post-norm encoder layers ------------------------------------
def bench_encoder(threads):
    torch.manual_seed(0)
    B, T, D, H, FF = 16, 64, 128, 4, 512
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=True),
                                num_layers=2, enable_nested_tensor=False)
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    x = torch.randn(B, T, D)
    target = torch.randn(B, T, D)

    def step():
        with autocast():
            out = enc(x)
        loss = F.mse_loss(out.float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    dt = timed(step, 3, 20)
    emit(config="encoder", threads=threads, metric="train_step", value=round(dt * 1e3, 3), unit="ms")


# ---- GPT (GPT-2 architecture: pre-norm, GELU-tanh, tied embeddings) -------------
class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        y = F.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, n_layer, n_head, d):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


GPT_CONFIGS = {  # name: (vocab, ctx, n_layer, n_head, d, batch)
    "gpt-small": (65, 64, 4, 4, 128, 32),
    "gpt-medium": (65, 256, 6, 6, 384, 8),
}


def bench_gpt(name, threads):
    torch.manual_seed(0)
    V, T, L, H, D, B = GPT_CONFIGS[name]
    model = GPT(V, T, L, H, D)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))

    dt = timed(lambda: lm_step(model, opt, x, y, V), 2, 10 if name == "gpt-small" else 5)
    emit(config=name, threads=threads, metric="train_step", value=round(dt * 1e3, 2), unit="ms",
         tokens_per_s=round(B * T / dt, 1))


def bench_generate(threads):
    """gpt-medium shape, batch 1: 200 new tokens from a 1-token prompt, greedy, no KV cache."""
    torch.manual_seed(0)
    V, T, L, H, D, _ = GPT_CONFIGS["gpt-medium"]
    model = GPT(V, T, L, H, D).eval()
    idx = torch.zeros(1, 1, dtype=torch.long)
    t = time.perf_counter()
    with torch.no_grad(), autocast():
        for _ in range(200):
            logits = model(idx[:, -T:])
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    dt = time.perf_counter() - t
    emit(config="generate", threads=threads, metric="tokens_per_s", value=round(200 / dt, 1), unit="tok/s")


BENCHES = {"matmul": bench_matmul, "attn-toy": bench_attn_toy, "encoder": bench_encoder,
           "gpt-small": lambda t: bench_gpt("gpt-small", t), "gpt-medium": lambda t: bench_gpt("gpt-medium", t),
           "generate": bench_generate}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="PyTorch's bfloat16 mixed precision")
    ap.add_argument("configs", nargs="*", default=list(BENCHES))
    a = ap.parse_args()
    PRECISION = "bf16" if a.bf16 else "fp32"
    torch.set_num_threads(a.threads)
    for c in a.configs:
        BENCHES[c](a.threads)
