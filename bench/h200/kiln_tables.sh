#!/usr/bin/env bash
# kiln_tables.sh — kiln's correctness and throughput tables on the H200, called by device_run.sh
# (step "kiln tables", output appended to $OUT/kiln.log) as
#     bash kiln_tables.sh <pack>/bin/kiln <out dir>
# It runs the pack's kiln_attn_bench (bench/h200/kiln_attn_bench.c: PASS/FAIL lines against the
# float64 reference, then CSV lines and a markdown table of TFLOP/s at batch 4, 32 heads) and,
# when the pack has it (KILN_STATIC_TARGETS="... test_nvptx_attn"), the NVPTX unit test with its
# GPU part.  Its key lines (FAIL lines, the failure count, the markdown table) are added to
# summary.txt, so they come back even if kiln.log is long.  No new files under $OUT (device_run
# brings back at most 8).  The exit status is non-zero when a correctness case or a run failed.
#   KILN_BENCH_ARGS   extra arguments for kiln_attn_bench (e.g. "--quick", "--no-perf")
#   KILN_BENCH_MMA    sync (default), wgmma or both: kiln_attn_bench's candidate tilings; with
#                     wgmma or both, four `kiln run --target sm_90a --mma wgmma` checks first
set -u
bin=$(dirname "$1")   # the kiln binary itself need not exist: only its folder is used
out=${2:-${OUT:-/tmp/kiln-out}}
mkdir -p "$out"
# the pack's lib/ (cmocka for test_nvptx_attn), also when run outside device_run.sh
export LD_LIBRARY_PATH="$bin/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summary="$out/summary.txt"
status=0
tmp=$(mktemp)

if [ -x "$bin/test_nvptx_attn" ]; then
  echo "===== test_nvptx_attn"
  timeout 300 "$bin/test_nvptx_attn" 2>&1 | tee "$tmp"
  rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && status=1
  {
    echo "      test_nvptx_attn: exit $rc"
    grep -E "^  (FAIL|device 0|[0-9]+ of [0-9]+ GPU cases)" "$tmp" | sed 's/^/    /'
  } >>"$summary"
fi

# wgmma through the public API (kiln run goes through kiln_prepare / kiln_forward on sm_90a),
# each run checked against float64 on a ragged shape: when KILN_BENCH_MMA asks for wgmma
case "${KILN_BENCH_MMA:-sync}" in
wgmma|both)
  if [ -x "$bin/kiln" ]; then
    echo "===== kiln run --mma wgmma (the public API)"
    for args in "--head-dim 64 --causal --seqlen-q 1000 --seqlen-k 1000" \
                "--head-dim 64 --dtype bf16 --seqlen-q 129 --seqlen-k 77 --heads 4 --kv-heads 2 --warps 4" \
                "--head-dim 128 --seqlen-q 300 --seqlen-k 511" \
                "--head-dim 128 --dtype bf16 --causal --seqlen-q 1000 --seqlen-k 64 --warps 4"; do
      # shellcheck disable=SC2086
      line=$(timeout 120 "$bin/kiln" run --target sm_90a --mma wgmma --no-cache $args 2>&1 | tail -1)
      echo "kiln run --mma wgmma $args: $line"
      case "$line" in *PASS) ;; *) status=1 ;; esac
      echo "      kiln run --mma wgmma $args: $line" >>"$summary"
    done
  fi
  ;;
esac

if [ ! -x "$bin/kiln_attn_bench" ]; then
  echo "kiln_attn_bench is not in the pack" | tee -a "$summary"
  rm -f "$tmp"
  exit 1
fi
echo "===== kiln_attn_bench ${KILN_BENCH_ARGS:-}"
# shellcheck disable=SC2086
timeout 420 "$bin/kiln_attn_bench" ${KILN_BENCH_ARGS:-} 2>&1 | tee "$tmp"
rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] && status=1
{
  echo "      kiln_attn_bench: exit $rc ($(grep -c '^PASS' "$tmp") PASS, $(grep -c '^FAIL' "$tmp") FAIL)"
  grep -E "^(FAIL|# device|# [0-9]+ failure)" "$tmp" | sed 's/^/      /'
  grep -E "^# (f16|bf16) D" "$tmp" | sed 's/^/      /'
  grep -E "^\|" "$tmp"
} >>"$summary"
rm -f "$tmp"
exit $status
