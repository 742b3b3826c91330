#!/usr/bin/env bash
# Runs the soak suite: a small GPT trained for 10,000 steps while its RSS and
# live-tensor count are watched. Usage: tests/soak/run.sh [build dir]
set -euo pipefail
build=${1:-build}
meson test -C "$build" --setup soak --suite soak -v
