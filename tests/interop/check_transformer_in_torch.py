#!/usr/bin/env python3
"""The PyTorch half of the encoder-decoder interop check.

  check_transformer_in_torch.py FILE.safetensors                checks a file transformer_save wrote
  check_transformer_in_torch.py TRANSFORMER_SAVE OUT.safetensors   runs the program first (for meson)

Loads the parameters tensorgrad saved (param.<name>) into torch.nn.Transformer
with strict names (the keys must be exactly the state dict's, in its order),
runs it on the saved inputs and masks, and asserts that the output matches the
one C computed (rtol 1e-4, atol 1e-5). Exits 1 on any difference.
"""
import os
import subprocess
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from gen_fixtures import load  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def check(path):
    t = load(path)
    params = {k[len("param."):]: v for k, v in t.items() if k.startswith("param.")}
    model = nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16,
                           dropout=0.0, batch_first=True)
    ok = list(params) == list(model.state_dict())
    if not ok:
        print("FAIL names: C's parameter names are not the state dict's, in its order")
    model.load_state_dict(params, strict=True)
    model.train()  # dropout is 0; training mode keeps torch off its nested-tensor fast path
    with torch.no_grad():
        y = model(t["input.src"], t["input.tgt"], tgt_mask=t["input.tgt_mask"],
                  src_key_padding_mask=t["input.src_key_padding_mask"],
                  tgt_key_padding_mask=t["input.tgt_key_padding_mask"],
                  memory_key_padding_mask=t["input.src_key_padding_mask"])
    want = t["output.out"]
    same = y.shape == want.shape and torch.allclose(y, want, rtol=RTOL, atol=ATOL)
    diff = (y - want).abs().max().item() if y.shape == want.shape else float("nan")
    print(f"{'ok  ' if same else 'FAIL'} out {tuple(want.shape)}: max |torch - C| = {diff:.3g}")
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
