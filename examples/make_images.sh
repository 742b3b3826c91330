#!/usr/bin/env bash
# Regenerates the pictures examples/README.md shows, from the examples' own output:
# the toy model's attention heatmap and the GPT's loss curve on its built-in
# task. Usage: examples/make_images.sh [build dir]   (takes a few minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=examples/images
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/examples/toy_attention_lm" --svg "$out/attention_heatmap.svg" | tail -n 12
"$build/examples/gpt" train --out "$work/gpt.safetensors" --svg "$out/loss_curve.svg" | tail -n 4
echo "wrote $out/attention_heatmap.svg and $out/loss_curve.svg"
