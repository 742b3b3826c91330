"""A Llama decoder in plain PyTorch, computed as Hugging Face's LlamaForCausalLM
computes it and with its state-dict names, the reference that tensorgrad's
tg_llama is checked and timed against (fixtures, training script, benchmark).

Per layer, with n = post_attention_layernorm(h):
    h = x + o_proj(attention(input_layernorm(x)))
    x = h + down_proj(silu(gate_proj(n)) * up_proj(n))
RMSNorm(x) = weight * x / sqrt(mean(x^2 over the last dim) + eps). Attention
is causal with n_kv_head key/value heads; query head h reads kv head
h // (n_head // n_kv_head) (Hugging Face's repeat_kv order), scores scaled by
1/sqrt(head_dim). Rotary embeddings rotate q and k at their positions:
  pairing "half"        (Hugging Face) pairs (i, i + hd/2), rotate_half;
  pairing "interleaved" (Meta's original) pairs (2i, 2i + 1), the product
                        of the complex number x[2i] + j x[2i+1] with e^(j angle);
angle(pos, i) = pos * theta^(-2i / hd), i < hd/2. A final RMSNorm (model.norm),
then lm_head, untied or tied to model.embed_tokens. Every Linear is bias-free.
Initialised as Hugging Face does: Linears and the embedding N(0, 0.02), norms 1.

forward(idx, targets, pos0, cache) also continues a sequence: pos0 is the
position of idx's first token, and cache (from new_cache()) holds every earlier
position's keys and values per layer, so generate(..., use_cache=True) runs a
token at a time; without a cache it recomputes the whole window each step.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAIRINGS = ("half", "interleaved")


@dataclass
class LlamaConfig:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_kv_head: int
    n_embd: int
    hidden: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie: bool = True
    pairing: str = "half"

    def check(self):
        if self.n_embd % self.n_head or self.n_head % self.n_kv_head:
            raise ValueError(f"n_head {self.n_head} must divide n_embd {self.n_embd} "
                             f"and n_kv_head {self.n_kv_head} must divide n_head")
        if (self.n_embd // self.n_head) % 2 or self.pairing not in PAIRINGS:
            raise ValueError(f"head_dim {self.n_embd // self.n_head} must be even and "
                             f"pairing one of {PAIRINGS}, not {self.pairing!r}")


# ---- rotary position embedding -----------------------------------------------

def rope_angles(pos0, t, head_dim, theta, dtype):
    """[t, hd/2]: angle of pair i at positions pos0..pos0+t-1, computed in float64."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    pos = torch.arange(pos0, pos0 + t, dtype=torch.float64)
    return torch.outer(pos, inv_freq).to(dtype)


def rope(x, pos0, theta, pairing):
    """x [..., T, hd] rotated at positions pos0..pos0+T-1 (along dim -2)."""
    t, hd = x.shape[-2], x.shape[-1]
    ang = rope_angles(pos0, t, hd, theta, torch.float64)
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)
    if pairing == "half":
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    # (a + jb) * (cos + j sin), with a, b the even and odd elements
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


# ---- layers ---------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        # half-precision inputs are normalised in float32, as Hugging Face does
        xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.n_embd // c.n_head
        self.q_proj = nn.Linear(c.n_embd, c.n_head * hd, bias=False)
        self.k_proj = nn.Linear(c.n_embd, c.n_kv_head * hd, bias=False)
        self.v_proj = nn.Linear(c.n_embd, c.n_kv_head * hd, bias=False)
        self.o_proj = nn.Linear(c.n_head * hd, c.n_embd, bias=False)

    def forward(self, x, pos0, layer_cache):
        c = self.c
        b, t, _ = x.shape
        hd = c.n_embd // c.n_head
        # [B, T, H*hd] -> [B, H, T, hd]
        q = self.q_proj(x).view(b, t, c.n_head, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, c.n_kv_head, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, c.n_kv_head, hd).transpose(1, 2)
        q = rope(q, pos0, c.rope_theta, c.pairing)
        k = rope(k, pos0, c.rope_theta, c.pairing)
        if layer_cache is not None:  # keys and values of positions < pos0 come first
            if layer_cache:
                k = torch.cat((layer_cache[0], k), dim=2)
                v = torch.cat((layer_cache[1], v), dim=2)
            layer_cache[:] = [k, v]
        if k.shape[2] != pos0 + t:
            raise ValueError(f"{k.shape[2]} cached+new positions, expected pos0 {pos0} + T {t}")
        # repeat_kv: kv head j serves query heads j*g .. j*g+g-1, [B, H, S, hd]
        g = c.n_head // c.n_kv_head
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # [B, H, T, S]
        future = torch.ones(t, pos0 + t, dtype=torch.bool).triu(pos0 + 1)
        y = s.masked_fill(future, float("-inf")).softmax(-1) @ v  # [B, H, T, hd]
        return self.o_proj(y.transpose(1, 2).reshape(b, t, c.n_head * hd))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.n_embd, c.hidden, bias=False)
        self.up_proj = nn.Linear(c.n_embd, c.hidden, bias=False)
        self.down_proj = nn.Linear(c.hidden, c.n_embd, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.n_embd, c.norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.n_embd, c.norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, pos0, layer_cache):
        h = x + self.self_attn(self.input_layernorm(x), pos0, layer_cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.n_embd)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.n_embd, c.norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        c.check()
        self.config = c
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
        if c.tie:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, idx, targets=None, pos0=0, cache=None):
        """idx [B, T] at positions pos0..pos0+T-1 -> logits [B, T, V] and the mean
        cross-entropy over targets != -1 (None without targets)."""
        if pos0 + idx.shape[1] > self.config.block_size:
            raise ValueError(f"positions up to {pos0 + idx.shape[1]} exceed block_size "
                             f"{self.config.block_size}")
        x = self.model.embed_tokens(idx)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, pos0, None if cache is None else cache[i])
        logits = self.lm_head(self.model.norm(x))
        loss = None
        if targets is not None:
            lf = logits if logits.dtype == torch.float64 else logits.float()
            loss = F.cross_entropy(lf.reshape(-1, lf.shape[-1]), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    def new_cache(self):
        return [[] for _ in range(self.config.n_layer)]

    def stored_params(self):
        """The state dict under Hugging Face's names, without lm_head.weight when tied."""
        sd = self.state_dict()
        if self.config.tie:
            del sd["lm_head.weight"]
        return sd

    @torch.no_grad()
    def generate(self, idx, n, use_cache=False):
        """Appends n greedy tokens to idx [B, P]; P + n <= block_size."""
        if idx.shape[1] + n > self.config.block_size:
            raise ValueError(f"prompt {idx.shape[1]} + {n} tokens exceed block_size "
                             f"{self.config.block_size}")
        cache, pos = (self.new_cache(), 0) if use_cache else (None, 0)
        for _ in range(n):
            step = idx[:, pos:] if use_cache else idx
            logits, _ = self(step, pos0=pos, cache=cache)
            if use_cache:
                pos = idx.shape[1]
            idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
        return idx
