#!/usr/bin/env bash
# amdgpu_vs_triton.sh — kiln's gfx942 attention code object side by side with Triton's, one run.
#
# The tile of the anchors (bench/RESULTS.md): BLOCK 128x64, head dim 128, 4 waves, f16, causal.
# kiln's figures come from its code-object inspector; Triton's code object (compiled here for
# gfx942 by bench/triton_compile_anchor.py, Triton 3.6 from PyPI) is read by the same inspector,
# and its compile latency is measured in the same run.  Both through `kiln inspect --loop`: the
# whole KV loop and its interior iteration (kiln's), and the loop of Triton's single-loop kernel
# and of its split-loop kernel (attn_fwd_split, whose unmasked loop is the anchor).  No AMD GPU is involved: these are static
# figures of the code objects, not run times.
#   usage: bench/amdgpu_vs_triton.sh BUILD_DIR PYTHON_WITH_TRITON
set -u
b=${1:-build} py=${2:-python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "== kiln $(git rev-parse --short HEAD 2>/dev/null), $(nproc) CPUs"
"$b/tools/kiln" compile --target gfx942 --head-dim 128 --causal --block-m 128 --block-n 64 \
  --warps 4 -o "$tmp/kiln.hsaco" --loop
for t in gfx942 gfx90a; do
  "$b/bench/compile_latency" --target "$t" --causal --block-m 128 --block-n 64 --warps 4 --repeats 7
done
echo "== Triton"
"$py" "$(dirname "$0")/triton_compile_anchor.py" 5 "$tmp" && \
  for f in triton_gfx942 triton_gfx942_split; do "$b/tools/kiln" inspect --loop "$tmp/$f.hsaco"; done
