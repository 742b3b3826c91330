#!/usr/bin/env python3
"""PyTorch reference for the seq2seq benchmark config, with the options, timing
and JSON lines of bench/torch_ref.py (its helpers), so bench/compare.py can
join them with tensorgrad's line of the same name.

    /usr/bin/python3 bench/torch_seq2seq.py [--threads N] [--bf16] [seq2seq]

seq2seq: one training step (forward, MSE loss, backward, AdamW lr 1e-3 weight
  decay 0.01) of torch.nn.Transformer(d_model 256, nhead 4, 3 encoder and 3
  decoder layers, dim_feedforward 1024, dropout 0.1, relu, post-norm,
  batch_first) on source and target already embedded, batch 16, 64 source
  and 64 target positions, a causal target mask
  (generate_square_subsequent_mask), a random target; the median of 5 timed
  steps after 2 warm-up steps, in ms.
--bf16: the forward under torch.autocast("cpu", dtype=torch.bfloat16) with
  float32 parameters and AdamW state; lines carry "precision": "bf16".
"""
import argparse

import torch
import torch.nn.functional as F

import torch_ref  # the reference's precision switch, JSON lines and timing
from torch_ref import autocast, emit, timed

BATCH, SRC, TGT, D_MODEL = 16, 64, 64, 256


def bench_seq2seq(threads):
    torch.manual_seed(0)
    model = torch.nn.Transformer(d_model=D_MODEL, nhead=4, num_encoder_layers=3,
                                 num_decoder_layers=3, dim_feedforward=1024, dropout=0.1,
                                 batch_first=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    src = torch.randn(BATCH, SRC, D_MODEL)
    tgt = torch.randn(BATCH, TGT, D_MODEL)
    target = torch.randn(BATCH, TGT, D_MODEL)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(TGT)

    def step():
        with autocast():
            out = model(src, tgt, tgt_mask=mask)
        loss = F.mse_loss(out.float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    dt = timed(step, 2, 5)
    emit(config="seq2seq", threads=threads, metric="train_step", value=round(dt * 1e3, 2),
         unit="ms", tokens_per_s=round(BATCH * (SRC + TGT) / dt, 1))


BENCHES = {"seq2seq": bench_seq2seq}

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
