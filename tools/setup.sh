#!/usr/bin/env bash
# setup.sh — README's first command: install dependencies, build, and run kiln's main job
# (the attention forward kernel on the best target present, checked against float64).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
tools/build.sh
exec build/tools/kiln run --target auto --head-dim 128 --seqlen-q 1000 --seqlen-k 1000 --causal --heads 8
