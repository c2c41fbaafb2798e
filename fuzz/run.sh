#!/usr/bin/env bash
# run.sh — builds kiln's libFuzzer targets with clang-22 and runs each for a fixed time.
# usage: run.sh SOURCE_DIR BUILD_DIR [SECONDS_PER_TARGET [TARGET...]]
#
# Targets (fuzz/*.c): fuzz_ir (parse, verify, print round trip, bounded interpreter; with a
# structure-aware mutator), fuzz_cache (the cache entry reader), fuzz_space (the tuning-space
# parser), fuzz_bundle (the AOT offload bundle and index readers), fuzz_codeobj (the code-object
# reader of `kiln inspect` and the HIP loader, the kernarg packer), fuzz_cli (the command line's
# option parsers), fuzz_api (the public API's descriptor checks and kiln_forward's and
# kiln_backward's argument checks, the launches on the interpreter: forward, decode, backward).  Each is built with -fsanitize=fuzzer,address,undefined from the
# sources it tests (none needs LLVM), so coverage guides the inputs and any memory error or
# undefined behaviour is a crash.  Seeds: the golden and malformed .tile files; cache entries,
# code objects and an AOT bundle written by BUILD_DIR/tools/kiln; a few space specs and command
# lines.  The corpora grow under BUILD_DIR/fuzz/corpus-*; a crash leaves its input in
# BUILD_DIR/fuzz and fails the run (exit 1).  Exit 77 (CTest: skipped) when clang-22 with
# libFuzzer is absent.  KILN_FUZZ_CC names another clang (a libFuzzer-capable one) to use
# instead.
#
# Environment: KILN_FUZZ_BUILD_ONLY=1 builds the binaries and runs nothing; KILN_FUZZ_STATIC=1
# links xxHash and the C++ runtime statically (the sanitizer and libFuzzer runtimes always are),
# so the binaries need only glibc and can be carried to another machine (bench/fuzz_long.sh);
# KILN_FUZZ_ARGS adds libFuzzer options to every run (-jobs=N -workers=N, -runs=N ...).
set -u
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) secs=${3:-20}
shift $(( $# < 3 ? $# : 3 ))
targets=${*:-fuzz_ir fuzz_cache fuzz_space fuzz_bundle fuzz_codeobj fuzz_cli fuzz_api}
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
       -I"$src/autotune" -I"$src/compiler/amdgpu" -I"$src/templates" -I"$src/api"
       -I"$src/include" -I"$src/tools")
xxhash=-lxxhash
if [ "${KILN_FUZZ_STATIC:-0}" = 1 ]; then
  # libFuzzer is C++: its runtime library statically too; xxHash's archive by name
  flags+=(-static-libstdc++ -static-libgcc)
  xxhash=$(for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
             [ -f "$d/libxxhash.a" ] && echo "$d/libxxhash.a" && break; done)
  xxhash=${xxhash:--lxxhash}
fi
ir=("$src"/ir/{arena,types,builder,parse,print,verify,numeric,interp}.c "$src/base/status.c")
# the API's argument checks and what they stand on: the template, its modifier library (generated
# by the build), the registry, the IR
api=("$src"/api/{args,status}.c
     "$src"/templates/{attn_fwd,attn_decode,attn_paged,attn_mods,attn_ref,attn_bwd,attn_bwd_ref,attn_grad}.c
     "$build/templates/mods_lib.c" "$src/compiler/arch.c" "${ir[@]}")
declare -A sources=(
  [fuzz_ir]="${ir[*]}"
  [fuzz_cache]="$src/runtime/cache.c $src/base/status.c"
  [fuzz_space]="$src/autotune/space.c $src/compiler/arch.c ${ir[*]}"
  [fuzz_bundle]="$src/runtime/bundle.c $src/base/status.c"
  [fuzz_codeobj]="$src/compiler/amdgpu/codeobj.c $src/compiler/amdgpu/msgpack.c $src/runtime/hip.c $src/runtime/comgr.c $src/runtime/bundle.c $src/compiler/arch.c ${ir[*]}"
  [fuzz_cli]="$src/tools/options.c ${api[*]}"
  [fuzz_api]="${api[*]}"
)
declare -A libs=([fuzz_ir]="-lm" [fuzz_cache]="$xxhash -lpthread" [fuzz_space]="-lm"
                 [fuzz_bundle]="$xxhash" [fuzz_codeobj]="$xxhash -lm -ldl -lpthread"
                 [fuzz_cli]="$xxhash -lm" [fuzz_api]="$xxhash -lm")
# the generated sources come from a build of kiln (op_cases.h, mods_lib.c)
for f in ir/op_cases.h templates/mods_lib.c; do
  [ -f "$build/$f" ] || { echo "fuzz: build kiln first ($build/$f)"; exit 2; }
done

# seeds
for t in fuzz_ir fuzz_cache fuzz_space fuzz_bundle fuzz_codeobj fuzz_cli fuzz_api; do
  mkdir -p "$out/corpus-$t"
done
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
if [ -x "$build/tools/kiln" ] && [ -z "$(ls -A "$out/corpus-fuzz_codeobj")" ]; then
  for t in gfx90a gfx942 gfx950; do
    "$build/tools/kiln" compile --target $t --head-dim 16 --block-m 16 --block-n 16 \
      -o "$out/corpus-fuzz_codeobj/$t.hsaco" >/dev/null 2>&1
  done
fi
cp "$src"/tests/hostile/*.hsaco "$out/corpus-fuzz_codeobj/" 2>/dev/null
i=0
for line in 'run --target host --head-dim 64 --causal' 'run --varlen 1,17,0,300/5,30,2,7' \
            'run --paged 16:1,17,0,300 --seqlen-q 4' \
            'run --window 16,-1 --softcap 30 --alibi --bias --documents 3 --prefix 8' \
            'run --dtype bf16 --seed 7 --max-steps 100 --tune auto --mod-arg chunk=4' \
            'cache verify --cache-dir d' 'run --head-dim +64 --seqlen-q 1' '--help'; do
  printf '%s' "$line" | tr ' ' '\0' >"$out/corpus-fuzz_cli/seed$((i += 1))"
done
i=0
for hex in 00 0100000010011111111111111111 ffffffff3f1f1f1f1f1f1f1f0101010101 \
           00400000012222222222010101010101 03c00000304444444444000000000000000000 \
           0000000110011111111111111111111111111111 0000000210011010111111111111111111 \
           411501008a203840e68b1400000000101111c241 7a1111ffffffffff7fffff1170; do
  # (the last two: a varlen kernel with a document tensor on CUDA and a sequence longer than
  # max_seqlen_k, which read outside the segment ids before the kernel clamped each length into
  # max_seqlen (kiln_forward refused the call in between); a head dim
  # of INT_MAX, whose padding overflowed)
  # shellcheck disable=SC2059
  printf "$(printf '%s' "$hex" | sed 's/../\\x&/g')" >"$out/corpus-fuzz_api/seed$((i += 1))"
done
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
  [ "${KILN_FUZZ_BUILD_ONLY:-0}" = 1 ] && { echo "built $out/$t"; continue; }
  # fuzz_ir's mutator grows texts to many functions and attributes: room for them
  max_len=65536
  [ "$t" = fuzz_ir ] && max_len=262144
  # shellcheck disable=SC2086
  # The test's run is deterministic: a fixed seed and a fixed number of executions (at most
  # $secs seconds), so CI explores the same inputs on every run and a red fuzz test is a
  # finding anyone can replay, not the luck of a machine's speed.  KILN_FUZZ_ARGS (the long
  # campaign, bench/fuzz_long.sh) replaces both.
  det="-seed=${KILN_FUZZ_SEED:-1} -runs=${KILN_FUZZ_RUNS:-8000}"
  [ -n "${KILN_FUZZ_ARGS:-}" ] && det=""
  # shellcheck disable=SC2086
  (cd "$out" && TMPDIR=${TMPDIR:-/tmp} "./$t" -max_total_time="$secs" -max_len=$max_len \
     -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 $det ${KILN_FUZZ_ARGS:-} "corpus-$t" \
     >"$log" 2>&1)
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
