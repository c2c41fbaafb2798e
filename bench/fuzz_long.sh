#!/usr/bin/env bash
# fuzz_long.sh — the long fuzz campaign (issue 16): every libFuzzer target of fuzz/ for at least
# 10^7 executions, spread over N cores.  Not a test; the figures go to bench/RESULTS.md.
#
#   bench/fuzz_long.sh build [DIR]           here (needs clang-22 and a build of kiln in build/):
#                                            the fuzz binaries, linked so that they need only
#                                            glibc (libFuzzer's, ASan's and UBSan's runtimes are
#                                            static archives of clang's; -static-libstdc++, and
#                                            xxHash's archive), checked with ldd, and their seed
#                                            corpora, into DIR (default build-fuzz-long/, which
#                                            .gitignore's /build*/ keeps out of git)
#   bench/fuzz_long.sh run DIR [N [RUNS [TARGET...]]]
#                                            anywhere (no clang needed): each target with
#                                            -jobs=N -workers=N, each job RUNS/N executions
#                                            (RUNS default 10^7, N default nproc), the jobs
#                                            sharing the target's corpus; prints per target the
#                                            executions (the jobs' final stats added up), the
#                                            crashes (crash-, leak-, timeout-, oom- files:
#                                            the inputs, in DIR/artifacts-TARGET) and the time
#
# Expected time at N cores: RUNS / (N x the target's executions per second per core); the rates
# measured on one core of the 2-core build machine are in bench/RESULTS.md ("Fuzzing"), and a
# rate falls as the corpus grows (fuzz_ir's mutator makes texts of up to 256 KiB).
# KILN_FUZZ_LONG_SECONDS=S stops each job after S seconds as well (-max_total_time: a device
# command has 10 minutes); the corpora stay in DIR, so a later run of the same target goes on
# from them and the executions of the runs add up.  KILN_FUZZ_LONG_TOTAL=S instead gives the
# whole run S seconds: each target in turn gets the time left divided by the targets left, so a
# target that reaches RUNS early leaves its time to the next ones (one 10-minute device command:
# KILN_FUZZ_LONG_TOTAL=540 ... 16 10000000 fuzz_cli fuzz_ir fuzz_api).
# A crash ends its job only: the others go on, so the total can fall short of RUNS — the line
# says so.  Exit 1 when any target crashed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
all="fuzz_ir fuzz_cache fuzz_space fuzz_bundle fuzz_codeobj fuzz_cli fuzz_api"

build() {
  local dir=${1:-$root/build-fuzz-long}
  [ -x "$root/build/tools/kiln" ] || { echo "fuzz_long: build kiln first (tools/build.sh)"; exit 2; }
  # run.sh builds the binaries (and the seed corpora) in build/fuzz
  KILN_FUZZ_STATIC=1 KILN_FUZZ_BUILD_ONLY=1 "$root/fuzz/run.sh" "$root" "$root/build" 0 $all
  mkdir -p "$dir"
  local bad=0
  for t in $all; do
    cp "$root/build/fuzz/$t" "$dir/$t"
    rm -rf "$dir/seeds-$t"
    cp -r "$root/build/fuzz/corpus-$t" "$dir/seeds-$t"
    # glibc's own libraries only: anything else would be missing on the machine that runs them
    extra=$(ldd "$dir/$t" | awk '{print $1}' |
            grep -Ev '^(linux-vdso\.so|/lib64/ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so)' || true)
    if [ -n "$extra" ]; then echo "fuzz_long: $t needs $extra"; bad=1; fi
  done
  [ $bad -eq 0 ] || exit 1
  du -sh "$dir"
  echo "built: $dir (carry it; run: bench/fuzz_long.sh run $dir N)"
}

run() {
  local dir=$1 n=${2:-$(nproc)} runs=${3:-10000000}
  shift $(( $# < 3 ? $# : 3 ))
  local targets=${*:-$all} fails=0 start left
  dir=$(cd "$dir" && pwd)
  start=$(date +%s)
  left=$(echo $targets | wc -w)
  for t in $targets; do
    local secs_max=${KILN_FUZZ_LONG_SECONDS:-0}
    if [ -n "${KILN_FUZZ_LONG_TOTAL:-}" ]; then  # the time left, shared by the targets left
      secs_max=$(( (KILN_FUZZ_LONG_TOTAL - ($(date +%s) - start)) / left ))
      [ "$secs_max" -ge 10 ] || secs_max=10
    fi
    left=$((left - 1))
    local work=$dir/work-$t art=$dir/artifacts-$t
    rm -rf "$work"
    mkdir -p "$work" "$dir/corpus-$t" "$art"
    [ -d "$dir/seeds-$t" ] && cp -n "$dir/seeds-$t"/* "$dir/corpus-$t/" 2>/dev/null || true
    local max_len=65536
    [ "$t" = fuzz_ir ] && max_len=262144
    local t0 rc
    t0=$(date +%s)
    # (the jobs' logs: work/fuzz-<i>.log; TMPDIR for fuzz_cache's private cache directory)
    (cd "$work" && TMPDIR=$work "$dir/$t" -jobs="$n" -workers="$n" -runs=$(( (runs + n - 1) / n )) \
       -max_total_time="$secs_max" -max_len=$max_len -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$art/" "$dir/corpus-$t" >"$work/main.log" 2>&1) && rc=0 || rc=$?
    local secs=$(( $(date +%s) - t0 ))
    local execs crashes
    execs=$(cat "$work"/fuzz-*.log 2>/dev/null | grep -Eo 'stat::number_of_executed_units: *[0-9]+' |
            grep -Eo '[0-9]+$' | awk '{s += $1} END {print s + 0}')
    crashes=$(find "$art" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
              -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    local rate=$(( execs / (secs > 0 ? secs : 1) ))
    printf '%-13s %12s executions  %3s crashes  %6s s  %9s exec/s on %s cores%s\n' "$t" "$execs" \
      "$crashes" "$secs" "$rate" "$n" "$( [ "$execs" -lt "$runs" ] && echo "  (short of $runs: rc $rc)")"
    [ "$crashes" -eq 0 ] || { fails=$((fails + 1)); ls "$art"; }
  done
  [ $fails -eq 0 ]
}

case "${1:-}" in
  build) shift; build "$@" ;;
  run) shift; [ $# -ge 1 ] || { echo "usage: $0 run DIR [N [RUNS [TARGET...]]]"; exit 2; }; run "$@" ;;
  *) sed -n '2,31p' "$0"; exit 2 ;;
esac
