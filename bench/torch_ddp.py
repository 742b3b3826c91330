#!/usr/bin/env python3
"""tensorgrad's data parallelism against PyTorch's DistributedDataParallel
(gloo backend on 127.0.0.1, 2 processes, one thread each, the gpt-small config
of bench/README.md: vocab 65, ctx 64, 4 layers, 4 heads, d 128).

  torch_ddp.py grads FILE   FILE from `mpiexec -np 2 build/bench/bench_dist grads FILE`:
                            loads its initial weights and its combined batch, splits the
                            batch between the two processes as the ranks did, and checks
                            DDP's averaged gradients against tensorgrad's (float32
                            tolerance). Exit 0 when they agree, 1 when not.
  torch_ddp.py grads FILE MPIEXEC BENCH_DIST   runs that mpiexec first (as meson's test does)
  torch_ddp.py bench [STEPS] [--bf16]  times DDP's 2-process step (forward, cross-entropy,
                            backward with the all-reduce, AdamW lr 1e-3 wd 0.1), batch 32
                            per process, and prints one JSON line, as
                            `mpiexec -np 2 build/bench/bench_dist bench gpt-small STEPS` does;
                            --bf16 runs forward and loss under bfloat16 autocast.
Run with Debian's PyTorch: /usr/bin/python3 bench/torch_ddp.py ...
"""
import json
import os
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
from gen_fixtures import GPT, load  # noqa: E402

WORLD = 2
CONFIG = dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128)
RTOL, ATOL = 2e-3, 2e-6  # float32 sums in another order, over a batch of 2048 tokens


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join(rank, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)


def grads_worker(rank, port, path, result):
    join(rank, port)
    t = load(path)
    model = GPT(**CONFIG)
    params = {k[len("param."):]: v for k, v in t.items() if k.startswith("param.")}
    model.load_state_dict(params, strict=False)  # lm_head.weight is tied to wte
    ddp = DDP(model)
    x, y = t["input.x"].chunk(WORLD)[rank], t["input.y"].chunk(WORLD)[rank]
    _, loss = ddp(x, y)
    loss.backward()
    if rank == 0:
        worst, bad = 0.0, []
        for name, p in model.named_parameters():
            want = t["grad." + name]
            err = ((p.grad - want).abs() - RTOL * want.abs()).max().item()
            worst = max(worst, (p.grad - want).abs().max().item())
            if err > ATOL:
                bad.append(name)
        print(f"{len(list(model.parameters()))} gradients, max |torch - tensorgrad| = {worst:.3g}; "
              + ("FAIL: " + ", ".join(bad) if bad else "PASS"))
        result.value = 0 if not bad else 1
    dist.destroy_process_group()


def bench_worker(rank, port, steps, bf16, result):
    join(rank, port)
    torch.manual_seed(0)
    V, T, B = CONFIG["vocab_size"], CONFIG["block_size"], 32
    ddp = DDP(GPT(**CONFIG))
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)
    times = []
    for i in range(steps + 2):
        x, y = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            _, loss = ddp(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        dist.barrier()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        dt = sum(times) / len(times)
        print(json.dumps({"config": "gpt-small", "framework": "torch-ddp-gloo", "ranks": WORLD,
                          "batch_per_rank": B, "step_ms": round(1e3 * dt, 2),
                          "tokens_per_s": round(WORLD * B * T / dt),
                          "precision": "bf16" if bf16 else "fp32"}))
        result.value = 0
    dist.destroy_process_group()


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("grads", "bench"):
        print(__doc__, file=sys.stderr)
        return 2
    result = mp.get_context("spawn").Value("i", 1)
    if sys.argv[1] == "grads":
        if len(sys.argv) == 5:
            subprocess.run([sys.argv[3], "--bind-to", "none", "-np", str(WORLD), sys.argv[4],
                            "grads", sys.argv[2]], check=True)
        args = (free_port(), sys.argv[2], result)
        mp.spawn(grads_worker, args=args, nprocs=WORLD)
    else:
        bf16 = "--bf16" in sys.argv[2:]
        rest = [a for a in sys.argv[2:] if a != "--bf16"]
        steps = int(rest[0]) if rest else 10
        mp.spawn(bench_worker, args=(free_port(), steps, bf16, result), nprocs=WORLD)
    return result.value


if __name__ == "__main__":
    sys.exit(main())
