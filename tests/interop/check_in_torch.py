#!/usr/bin/env python3
"""The PyTorch half of the C -> PyTorch interop check.

  check_in_torch.py FILE.safetensors             checks a file train_and_save wrote
  check_in_torch.py TRAIN_AND_SAVE OUT.safetensors  runs the program first (for meson)

Loads the GPT that tensorgrad trained (param.<name>) into the torch GPT of
tests/fixtures/gen_fixtures.py and asserts that torch's logits and loss on
input.idx / input.targets match the ones C computed (rtol 1e-4, atol 1e-5).
Exits 1 on any difference.
"""
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gen_fixtures import GPT, load  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def check(path):
    t = load(path)
    params = {k[len("param."):]: v for k, v in t.items() if k.startswith("param.")}
    model = GPT(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8)
    missing, unexpected = model.load_state_dict(params, strict=False)
    ok = True
    # lm_head.weight is tied to transformer.wte.weight, so C saves it once
    if missing != ["lm_head.weight"] or unexpected:
        print(f"FAIL names: missing {missing}, unexpected {unexpected}")
        ok = False
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        print("FAIL lm_head is no longer tied to wte")
        ok = False
    with torch.no_grad():
        logits, loss = model(t["input.idx"], t["input.targets"])
    for name, got, want in (("logits", logits, t["output.logits"]), ("loss", loss, t["output.loss"])):
        same = got.shape == want.shape and torch.allclose(got, want, rtol=RTOL, atol=ATOL)
        diff = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
        print(f"{'ok  ' if same else 'FAIL'} {name} {tuple(want.shape)}: max |torch - C| = {diff:.3g}")
        ok &= same
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


def main():
    if len(sys.argv) == 3:
        subprocess.run([sys.argv[1], sys.argv[2]], check=True)
        return check(sys.argv[2])
    if len(sys.argv) == 2:
        return check(sys.argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
