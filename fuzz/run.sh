#!/usr/bin/env bash
# run.sh — builds kiln's libFuzzer targets with clang-22 and runs each for a fixed time.
# usage: run.sh SOURCE_DIR BUILD_DIR [SECONDS_PER_TARGET [TARGET...]]
#
# Targets (fuzz/*.c): fuzz_ir (parse, verify, print round trip, bounded interpreter), fuzz_cache
# (the cache entry reader), fuzz_space (the tuning-space parser), fuzz_bundle (the AOT offload
# bundle and index readers).  Each is built with
# -fsanitize=fuzzer,address,undefined from the sources it tests, so coverage guides the inputs
# and any memory error or undefined behaviour is a crash.  Seeds: the golden and malformed .tile
# files; cache entries written by `kiln run` (BUILD_DIR/tools/kiln); a few space specs.  The
# corpora grow under BUILD_DIR/fuzz/corpus-*; a crash leaves its input in BUILD_DIR/fuzz and
# fails the run (exit 1).  Exit 77 (CTest: skipped) when clang-22 with libFuzzer is absent.
# KILN_FUZZ_CC names another clang (a libFuzzer-capable one) to use instead.
set -u
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) secs=${3:-20}
shift $(( $# < 3 ? $# : 3 ))
targets=${*:-fuzz_ir fuzz_cache fuzz_space fuzz_bundle}
cc=${KILN_FUZZ_CC:-$(command -v clang-22 || true)}
out=$build/fuzz
mkdir -p "$out"
if [ -z "$cc" ] || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    "$cc" -x c -fsanitize=fuzzer - -o "$out/probe" 2>/dev/null; then
  echo "fuzz: clang-22 with libFuzzer not found (set KILN_FUZZ_CC to use another clang): skipped"
  exit 77
fi
flags=(-std=gnu17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/ir" -I"$build/ir" -I"$src/base" -I"$src/runtime" -I"$src/compiler"
       -I"$src/autotune")
ir=("$src"/ir/{arena,types,builder,parse,print,verify,numeric,interp}.c "$src/base/status.c")
declare -A sources=(
  [fuzz_ir]="${ir[*]}"
  [fuzz_cache]="$src/runtime/cache.c $src/base/status.c"
  [fuzz_space]="$src/autotune/space.c $src/compiler/arch.c ${ir[*]}"
  [fuzz_bundle]="$src/runtime/bundle.c $src/base/status.c"
)
declare -A libs=([fuzz_ir]="-lm" [fuzz_cache]="-lxxhash -lpthread" [fuzz_space]="-lm"
                 [fuzz_bundle]="-lxxhash")
[ -f "$build/ir/op_cases.h" ] || { echo "fuzz: build kiln first ($build/ir/op_cases.h)"; exit 2; }

# seeds
mkdir -p "$out/corpus-fuzz_ir" "$out/corpus-fuzz_cache" "$out/corpus-fuzz_space" \
         "$out/corpus-fuzz_bundle"
cp "$src"/tests/golden/*.tile "$src"/tests/malformed/*.tile "$out/corpus-fuzz_ir/" 2>/dev/null
if [ -x "$build/tools/kiln" ] && [ -z "$(ls -A "$out/corpus-fuzz_cache")" ]; then
  seeds=$(mktemp -d)
  "$build/tools/kiln" run --target host --cache-dir "$seeds/c" --head-dim 16 --seqlen-q 16 \
    --seqlen-k 16 >/dev/null 2>&1
  cp "$seeds"/c/objects-v1/* "$out/corpus-fuzz_cache/" 2>/dev/null
  rm -rf "$seeds"
fi
if [ -x "$build/tools/kiln" ] && [ -z "$(ls -A "$out/corpus-fuzz_bundle")" ]; then
  seeds=$(mktemp -d)
  "$build/tools/kiln" aot "$src/tests/aot/small.manifest" -o "$seeds/b" -j 1 >/dev/null 2>&1
  cp "$seeds"/b/index.kiln "$seeds"/b/*.hipfb "$out/corpus-fuzz_bundle/" 2>/dev/null
  rm -rf "$seeds"
fi
i=0
for spec in 'block_m=16,32;block_n=16' 'max_tile_bytes=100000;block_m=64' 'warps=1,2,4;stages=1' \
            'block_m=16;;' 'matrix_instr=x'; do
  printf '%s' "$spec" >"$out/corpus-fuzz_space/seed$((i += 1))"
done

fails=0
for t in $targets; do
  # shellcheck disable=SC2086
  if ! "$cc" "${flags[@]}" "$src/fuzz/$t.c" ${sources[$t]} ${libs[$t]} -o "$out/$t"; then
    echo "FAIL $t: does not build"; fails=$((fails + 1)); continue
  fi
  log=$out/$t.log
  (cd "$out" && TMPDIR=${TMPDIR:-/tmp} "./$t" -max_total_time="$secs" -max_len=65536 \
     -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "corpus-$t" >"$log" 2>&1)
  rc=$?
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$')
  if [ $rc -ne 0 ]; then
    echo "FAIL $t: exit $rc after ${execs:-?} executions (input and report in $out, $log)"
    tail -n 30 "$log"
    fails=$((fails + 1))
  else
    echo "PASS $t: ${execs:-?} executions in ${secs} s, 0 crashes"
  fi
done
echo "fuzz: $fails failed"
[ "$fails" -eq 0 ]
