#!/usr/bin/env bash
# amd_loop.sh — the KV loop of the default gfx942 and gfx90a attention kernels, statically
# (CTest `amd_loop`; docs/amdgpu.md "The KV loop"): for each row of the budget file, compiles the
# kernel (`kiln compile --loop`: head dim 128, f16, the default tiling), prints the loop's
# figures and fails when its instructions per iteration or llvm-mca's cycles per iteration
# exceed the row's budget (the whole loop, every path, and its interior iteration: the path an
# iteration that needs no mask takes), or when the kernel spills or falls below 2 waves per SIMD.  Without
# llvm-mca (KILN_LLVM_MCA=none, or none installed) the cycles are not checked, and it says so.
# usage: amd_loop.sh KILN BUDGET_FILE
set -u
kiln=$1
budget=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-amdloop.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0

# over BUDGET_INSTR BUDGET_CYCLES INSTR CYCLES: 0 when within budget (CYCLES "-": not measured)
over() {
  [ "$3" -gt "$1" ] && return 0
  [ "$4" != "-" ] && awk -v c="$4" -v b="$2" 'BEGIN { exit !(c > b) }' && return 0
  return 1
}
# the comparison itself must be able to fail
if ! over 100 100.0 101 50.0 || ! over 100 100.0 90 100.5 || over 100 100.0 100 100.0; then
  echo "FAIL amd_loop: the budget comparison is broken"
  exit 1
fi

while read -r target kind binstr bcycles hinstr hcycles _; do
  case "$target" in ''|'#'*) continue ;; esac
  flags=""
  [ "$kind" = causal ] && flags="--causal"
  out=$tmp/$target-$kind.txt
  if ! "$kiln" compile --target "$target" --head-dim 128 --dtype f16 $flags \
       -o "$tmp/k.hsaco" --loop >"$out" 2>&1; then
    echo "FAIL $target $kind: kiln compile --loop failed:"; cat "$out"
    fails=$((fails + 1)); continue
  fi
  instr=$(sed -n 's/.*: \([0-9]*\) instructions per iteration$/\1/p' "$out")
  cycles=$(sed -n 's/.*: \([0-9.]*\) cycles per iteration.*/\1/p' "$out")
  # the interior iteration (printed when it differs from the whole loop): else the whole loop
  hot=$(sed -n 's/^  interior iteration .*: \([0-9]*\) instructions.*/\1/p' "$out")
  hot_cycles=$(sed -n 's/^  interior iteration .*, llvm-mca \([0-9.]*\) cycles$/\1/p' "$out")
  row=$(awk '$1 == "attn_fwd" { print $6, $NF }' "$out")   # spills "v/s", then occupancy's last
  waves=$(awk '$1 == "attn_fwd" { for (i = 1; i <= NF; i++) if ($i ~ /^\(/) print $(i-1) }' "$out")
  spill=${row%% *}
  echo "$target $kind: $(sed -n 's/^kernel attn_fwd: //p' "$out")"
  sed -n 's/^  /    /p' "$out"
  if [ -z "$instr" ]; then
    echo "FAIL $target $kind: no KV loop found"; cat "$out"; fails=$((fails + 1)); continue
  fi
  if [ -z "$cycles" ]; then
    echo "    (llvm-mca did not run: the cycles are not checked)"
    cycles=-
  fi
  if over "$binstr" "$bcycles" "$instr" "$cycles"; then
    echo "FAIL $target $kind: $instr instructions / $cycles cycles per iteration, budget $binstr / $bcycles"
    fails=$((fails + 1))
  fi
  hot=${hot:-$instr}
  [ "$cycles" = - ] && hot_cycles=-
  hot_cycles=${hot_cycles:-$cycles}
  if [ -z "${hcycles:-}" ]; then
    echo "FAIL $target $kind: the budget row has no interior budget (instructions, cycles)"
    fails=$((fails + 1))
  elif over "$hinstr" "$hcycles" "$hot" "$hot_cycles"; then
    echo "FAIL $target $kind: interior iteration $hot instructions / $hot_cycles cycles, budget $hinstr / $hcycles"
    fails=$((fails + 1))
  fi
  if [ "$spill" != "0/0" ] || [ "${waves:-0}" -lt 2 ]; then
    echo "FAIL $target $kind: spills $spill, $waves waves per SIMD (budget: no spill, 2 waves)"
    fails=$((fails + 1))
  fi
done <"$budget"
echo "amd_loop: $fails failed"
[ "$fails" -eq 0 ]
