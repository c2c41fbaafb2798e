#!/usr/bin/env bash
# aot.sh — an offline (ahead-of-time) build: the attention kernel compiled with `kiln compile`
# for a list of GPU targets and variants, one artefact per (target, variant), and a manifest of
# what a launcher needs to run each one.  Nothing here needs a GPU.
#
# usage: examples/aot.sh [OUT_DIR]            (default: aot)
# environment:
#   KILN          the kiln binary (default: build/tools/kiln)
#   AOT_TARGETS   default "gfx90a gfx942 gfx950 sm_80 sm_90a" (`kiln targets` lists them)
#   AOT_VARIANTS  dtype:head_dim:causal, default "f16:64:0 f16:64:1 f16:128:1 bf16:128:1"
#
# Each artefact is what the target's driver loads: an AMDGPU code object (`.hsaco`, code object
# v5: hipModuleLoadData) or PTX (`.ptx`: cuModuleLoadDataEx, which JIT-compiles it for the GPU;
# ptxas makes a cubin from it offline, `kiln compile --emit cubin`).  The kernel is `attn_fwd`
# with the 24 parameters of templates/attention.h; launch it with grid
# (ceil(seqlen_q / block_m), batch * heads, 1), exactly `threads` threads per block and
# `shared_bytes` of dynamic shared memory (NVIDIA; the AMDGPU code object's LDS is static).
# The manifest (OUT_DIR/MANIFEST.tsv) has one line per artefact with those numbers, read from the
# kernel's own attrs (`kiln dump --stage ir`) and the compile's stats (`kiln compile --stats`).
set -euo pipefail
out=${1:-aot}
kiln=${KILN:-build/tools/kiln}
targets=${AOT_TARGETS:-gfx90a gfx942 gfx950 sm_80 sm_90a}
variants=${AOT_VARIANTS:-f16:64:0 f16:64:1 f16:128:1 bf16:128:1}
mkdir -p "$out"
manifest=$out/MANIFEST.tsv
printf 'file\ttarget\tdtype\thead_dim\tcausal\tblock_m\tblock_n\twarps\tthreads\tshared_bytes\n' \
  >"$manifest"
for t in $targets; do
  case $t in gfx*) ext=hsaco lanes=64 ;; sm_*) ext=ptx lanes=32 ;;
    *) echo "aot.sh: $t is not a GPU target" >&2; exit 2 ;; esac
  for v in $variants; do
    IFS=: read -r dtype d causal <<<"$v"
    opts=(--target "$t" --dtype "$dtype" --head-dim "$d") name=attn_fwd_${dtype}_d$d
    if [ "$causal" = 1 ]; then opts+=(--causal) name=${name}_causal; fi
    name=$name.$t.$ext
    # the tiling the target's default gives this variant (the registry, compiler/arch.c)
    ir=$("$kiln" dump --stage ir "${opts[@]}")
    attrs=$(echo "$ir" | grep '^kernel @attn_fwd')
    attr() { echo "$attrs" | grep -o "$1 = [0-9]*" | grep -o '[0-9]*$'; }
    bm=$(attr BLOCK_M) bn=$(attr BLOCK_N) warps=$(attr WARPS)
    # the artefact; --stats ends with the shared-memory plan (on NVIDIA without ptxas, ptxas's
    # absence is reported on stderr and the PTX is still written)
    stats=$("$kiln" compile "${opts[@]}" -o "$out/$name" --stats 2>/dev/null)
    smem=$(echo "$stats" | grep -o 'shared memory plan [0-9]*' | grep -o '[0-9]*$')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$t" "$dtype" "$d" "$causal" \
      "$bm" "$bn" "$warps" $((lanes * warps)) "$smem" >>"$manifest"
    echo "$out/$name: block ${bm}x${bn}, $warps warps, $((lanes * warps)) threads, $smem bytes shared"
  done
done
echo "$manifest: $(($(wc -l <"$manifest") - 1)) artefacts"
