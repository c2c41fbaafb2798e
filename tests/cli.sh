#!/usr/bin/env bash
# cli.sh — the command-line contract: output lines and exit codes of `kiln`.
# usage: cli.sh KILN_BINARY TESTS_DIR [FAKE_LIBCUDA]
# FAKE_LIBCUDA: the fake CUDA driver of tests/unit/test_cuda.c (its attn_fwd is a float64 attention
# for f16, D 64, non-causal unless told otherwise), to run `kiln run --target sm_90a` without a GPU
set -u
kiln=$1 tests=$2 fake=${3:-}
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/expect.sh"
# runs through the API (host, sm_*, auto) use the disk cache: never the user's
export KILN_CACHE_DIR="$tmp/cache"
unset KILN_AUTOTUNE KILN_TUNE_SPACE KILN_CACHE_FAULT

expect run-interp-causal 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --target interp --head-dim 64 --seqlen-q 200 --seqlen-k 200 --causal
expect run-interp-ragged-bf16 0 ' PASS$' -- \
  "$kiln" run --target interp --dtype bf16 --head-dim 128 --seqlen-q 33 --seqlen-k 77 --heads 4 --kv-heads 2
# the last line is the contract line
"$kiln" run --target interp --seqlen-q 20 --seqlen-k 20 >"$tmp/last" 2>&1
if tail -n 1 "$tmp/last" | grep -Eq '^max_abs_err=.* (PASS|FAIL)$'; then echo "PASS run-last-line"
else echo "FAIL run-last-line"; cat "$tmp/last"; fails=$((fails + 1)); fi

expect run-host-1000-causal 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --target host --head-dim 128 --seqlen-q 1000 --seqlen-k 1000 --causal
expect run-auto-is-host 0 'target=host .* PASS' -- \
  sh -c "\"$kiln\" run --target auto --dtype bf16 --seqlen-q 77 --seqlen-k 300 --causal | tr '\n' ' '"
expect run-host-ir-file 0 ' PASS$' -- \
  "$kiln" run --target host --ir "$tests/golden/attn_fwd_causal_lse.tile" --dtype bf16 --seqlen-q 130 --seqlen-k 61
# kiln run on the host goes through the API: the second run of a shape loads from the cache
expect run-host-compiled 0 '^prepare: compiled .*(default tiling)' -- \
  "$kiln" run --target host --cache-dir "$tmp/c1" --head-dim 32 --seqlen-q 40 --seqlen-k 40
expect run-host-cache-hit 0 '^prepare: cache hit ' -- \
  "$kiln" run --target host --cache-dir "$tmp/c1" --head-dim 32 --seqlen-q 40 --seqlen-k 40
expect run-host-no-cache 0 '^prepare: compiled ' -- \
  "$kiln" run --target host --no-cache --head-dim 32 --seqlen-q 40 --seqlen-k 40
expect run-host-warps 0 'warps=2;.*\(forced tiling\)' -- \
  sh -c "\"$kiln\" run --target host --cache-dir '$tmp/c1' --head-dim 32 --warps 2 --block-m 32 --block-n 32 --seqlen-q 40 --seqlen-k 40 | tr '\n' ' '"
expect run-host-tune-none 0 ' PASS$' -- \
  "$kiln" run --target host --cache-dir "$tmp/c1" --tune none --head-dim 32 --seqlen-q 40 --seqlen-k 40
expect run-bad-tune 2 "--tune expects none, cached or auto, got 'sometimes'" -- \
  "$kiln" run --target host --tune sometimes
expect run-host-stages 2 '--stages is not a prepare option' -- "$kiln" run --target host --stages 2
expect run-interp-cache-dir 2 '--cache-dir, --no-cache and --tune apply to runs through the API' -- \
  "$kiln" run --target interp --cache-dir "$tmp/c1"
expect run-sm90a-ir 2 '--ir runs on interp, host and the emulated targets' -- \
  "$kiln" run --target sm_90a --ir "$tests/golden/attn_fwd_default.tile"
# --ir: the file's attrs decide; an option that contradicts them is an error naming both values
ir=$tests/golden/attn_fwd_causal_lse.tile  # bf16, HEAD_DIM 128, CAUSAL 1, BLOCK 128x64
expect ir-conflict-head-dim 2 '--head-dim 64 conflicts with the kernel.s HEAD_DIM = 128' -- \
  "$kiln" run --target interp --ir "$ir" --head-dim 64
expect ir-conflict-block-m 2 '--block-m 64 conflicts with the kernel.s BLOCK_M = 128' -- \
  "$kiln" run --target interp --ir "$ir" --block-m 64
expect ir-conflict-block-n 2 '--block-n 32 conflicts with the kernel.s BLOCK_N = 64' -- \
  "$kiln" run --target interp --ir "$ir" --block-n 32
expect ir-conflict-dtype 2 '--dtype f16 conflicts with the kernel.s element type bf16' -- \
  "$kiln" run --target interp --ir "$ir" --dtype f16
expect ir-conflict-causal 2 '--causal conflicts with the kernel.s CAUSAL = 0' -- \
  "$kiln" run --target interp --ir "$tests/golden/attn_fwd_default.tile" --causal
expect ir-agree 0 ' PASS$' -- \
  "$kiln" run --target interp --ir "$ir" --dtype bf16 --head-dim 128 --causal --block-m 128 \
  --block-n 64 --seqlen-q 20 --seqlen-k 20
expect bad-seed 2 "--seed expects a non-negative integer, got 'abc'" -- "$kiln" run --seed abc
expect bad-seed-negative 2 "--seed expects a non-negative integer" -- "$kiln" run --seed -1
# numbers are digits (issue 16, case 10): strtol alone took " 64" and "+64"
expect bad-seed-minus-5 2 "--seed expects a non-negative integer, got '-5'" -- "$kiln" run --seed -5
expect bad-seed-space 2 "--seed expects a non-negative integer, got ' 5'" -- "$kiln" run --seed " 5"
expect bad-head-dim-space 2 "--head-dim expects an integer in \[1, 4096\], got ' 64'" -- \
  "$kiln" run --target interp --head-dim " 64"
expect bad-head-dim-plus 2 "--head-dim expects an integer in \[1, 4096\], got '\+64'" -- \
  "$kiln" run --target interp --head-dim "+64"
expect bad-seqlen-trailing 2 "--seqlen-q expects an integer in \[1, 16777216\], got '64 '" -- \
  "$kiln" run --target interp --seqlen-q "64 "
expect run-help 0 'not served by the API' -- "$kiln" run --help
# varlen (docs/serving.md): ragged packed sequences, an empty one and length 1, in one launch
expect run-varlen-interp 0 ' PASS$' -- \
  "$kiln" run --target interp --varlen 1,17,0,40 --heads 4 --kv-heads 2 --causal --head-dim 32
expect run-varlen-emu 0 ' PASS$' -- \
  "$kiln" run --target gfx942-emu --varlen 3,0,21/5,2,21 --window 4,0 --head-dim 32
expect run-varlen-checked 0 ' PASS$' -- \
  "$kiln" run --target host --check-bounds --varlen 1,17/30,2 --causal-top-left --dtype bf16
expect run-varlen-header 0 'B=3 H=2 HK=2 Nq=17 Nk=17 seed=1 varlen total_q=18 total_k=18' -- \
  "$kiln" run --target interp --varlen 1,0,17 --head-dim 16
expect bad-varlen 2 "--varlen wants lengths >= 0 separated by commas" -- \
  "$kiln" run --varlen 1,-3
"$kiln" dump --stage ir --varlen 3,5 --head-dim 16 >"$tmp/varlen.tile" 2>/dev/null
expect run-varlen-ir 0 ' PASS$' -- "$kiln" run --target interp --ir "$tmp/varlen.tile" --varlen 2,0,9
expect run-varlen-ir-dense 2 'LAYOUT is 1 \(varlen\), so the run needs --varlen LENS' -- \
  "$kiln" run --target interp --ir "$tmp/varlen.tile"
expect bad-varlen-count 2 "2 query lengths and 1 key lengths" -- "$kiln" run --varlen 1,2/3
# paged KV (docs/serving.md): pages in shuffled order through a block table, page sizes off the
# blocks, an empty sequence and length 1, the queries each sequence's last ones
expect run-paged-interp 0 ' PASS$' -- \
  "$kiln" run --target interp --paged 16:1,17,0,40 --seqlen-q 3 --heads 4 --kv-heads 2 --causal \
  --head-dim 32
expect run-paged-emu 0 ' PASS$' -- \
  "$kiln" run --target gfx90a-emu --paged 5:3,0,21 --seqlen-q 2 --window 4,0 --causal --head-dim 32
expect run-paged-checked 0 ' PASS$' -- \
  "$kiln" run --target host --check-bounds --paged 1:7,2 --seqlen-q 4 --dtype bf16
expect run-paged-header 0 'B=2 H=2 HK=2 Nq=1 Nk=48 seed=1 paged page_size=16 num_pages=5 max_pages=3' -- \
  "$kiln" run --target interp --paged 16:17,30 --seqlen-q 1 --head-dim 16
expect bad-paged 2 "--paged wants PAGE_SIZE \\(1..256\\)" -- "$kiln" run --paged 257
# fp8 inputs (docs/serving.md): q/k/v or only the KV pages in fp8 with per-head descales
expect run-fp8-interp 0 ' PASS$' -- \
  "$kiln" run --target interp --q-dtype f8e4m3 --kv-dtype f8e4m3 --heads 4 --kv-heads 2 \
  --seqlen-q 33 --seqlen-k 70 --causal --head-dim 32
expect run-fp8-paged-emu 0 ' PASS$' -- \
  "$kiln" run --target gfx942-emu --paged 5:3,0,21 --seqlen-q 2 --kv-dtype f8e4m3fnuz --head-dim 32
expect run-fp8-varlen-host 0 ' PASS$' -- \
  "$kiln" run --target host --varlen 1,17,0,40 --kv-dtype f8e5m2 --q-dtype f8e5m2 --dtype bf16 \
  --head-dim 40
expect run-fp8-key 0 'layout=0;mods=0;kv=f8e5m2fnuz\]' -- \
  "$kiln" run --target interp --kv-dtype f8e5m2fnuz --head-dim 16 --seqlen-q 5 --seqlen-k 9
expect bad-fp8 2 "unknown fp8 format 'f16'" -- "$kiln" run --kv-dtype f16
expect bad-fp8-f32 2 "computed in f16 or bf16" -- "$kiln" run --kv-dtype f8e4m3 --dtype f32
expect bad-fp8-backward 2 "not with .*--kv-dtype" -- "$kiln" run --backward --kv-dtype f8e4m3
expect bad-paged-both 2 "--varlen and --paged are two call shapes" -- \
  "$kiln" run --paged 16 --varlen 1,2
"$kiln" dump --stage ir --paged 16 --head-dim 16 >"$tmp/paged.tile" 2>/dev/null
expect run-paged-ir 0 ' PASS$' -- "$kiln" run --target interp --ir "$tmp/paged.tile" --paged 4:9,0
expect run-paged-ir-dense 2 'LAYOUT is 2 \(paged\), so the run needs --paged' -- \
  "$kiln" run --target interp --ir "$tmp/paged.tile"
expect version 0 '^kiln [0-9]+\.[0-9]+\.[0-9]+ \(LLVM [0-9]+\.' -- "$kiln" --version
# checked mode: the same kernel with the bounds of its V load removed reads past V (seqlen 61 is
# not a multiple of BLOCK_N): unchecked that goes unnoticed, checked it is the access named
sed 's/ bounds \[%seqlen_k, %c_head_dim\] : tile<64x128xbf16>/ : tile<64x128xbf16>/' \
  "$tests/golden/attn_fwd_causal_lse.tile" >"$tmp/attn_oob.tile"
expect run-host-check-bounds 2 'attn_oob.tile:[0-9]+:[0-9]+: error: @attn_fwd: load out of bounds: element \[61, 0\] .*outside every buffer; the nearest is buffer 2' -- \
  "$kiln" run --target host --check-bounds --ir "$tmp/attn_oob.tile" --dtype bf16 --seqlen-q 130 --seqlen-k 61
expect run-host-check-bounds-pass 0 ' PASS$' -- \
  "$kiln" run --target host --check-bounds --ir "$tests/golden/attn_fwd_causal_lse.tile" --dtype bf16 --seqlen-q 130 --seqlen-k 61
expect run-check-bounds-not-host 2 'check-bounds is for --target host' -- "$kiln" run --target gfx942 --check-bounds
# an --ir kernel on the host is always checked, as on the interpreter and the emulator (it ran
# unchecked before: an out-of-bounds access went unnoticed or crashed)
expect run-host-ir-checked 2 'attn_oob.tile:[0-9]+:[0-9]+: error: @attn_fwd: load out of bounds: element \[61, 0\] at address 0x[0-9a-f]+ .*outside every buffer' -- \
  "$kiln" run --target host --ir "$tmp/attn_oob.tile" --dtype bf16 --seqlen-q 130 --seqlen-k 61
expect run-interp-ir-oob 2 'attn_oob.tile:[0-9]+:[0-9]+: error: .*element \[61, 0\]' -- \
  "$kiln" run --target interp --ir "$tmp/attn_oob.tile" --dtype bf16 --seqlen-q 130 --seqlen-k 61
# the interpreter's step budget: a KV loop to 2^31 - 1 stops with the error (it ran for hours
# before); the default budget lets the ordinary runs above through
sed -e 's/for %start_n = %c0 to %seqlen_k step/for %start_n = %c0 to %c_forever step/' \
  -e 's/^  %c_block_m = const 128 : i32$/&\n  %c_forever = const 2147483647 : i32/' \
  "$tests/golden/attn_fwd_default.tile" >"$tmp/forever.tile"
expect run-interp-step-budget 2 'forever.tile:[0-9]+:[0-9]+: error: step budget of 20000000 exhausted \(a loop that does not end\?\)' -- \
  "$kiln" run --target interp --ir "$tmp/forever.tile" --seqlen-q 20 --seqlen-k 20 --max-steps 20000000
expect run-max-steps-not-interp 2 'max-steps is the interpreter.s step budget' -- \
  "$kiln" run --target host --ir "$tmp/forever.tile" --max-steps 5
expect run-max-steps-negative 2 "--max-steps expects a non-negative integer, got '-5'" -- \
  "$kiln" run --target interp --max-steps -5
# inputs kiln reads: only regular files of at most 16 MiB (/dev/zero grew without bound, a FIFO
# without a writer blocked for ever)
mkfifo "$tmp/fifo"
expect check-dev-zero 2 "cannot read '/dev/zero': not a regular file" -- "$kiln" check /dev/zero
expect check-fifo 2 "cannot read '.*fifo': not a regular file" -- timeout 20 "$kiln" check "$tmp/fifo"
# a gfx942 code object of kiln's with two bytes changed (at 1989 and 7517) on which LLVM 22's
# AMDGPU disassembler crashes (kiln inspect died of SIGSEGV): disassembled in a child process,
# the crash is an error naming the kernel
expect inspect-disasm-crash 2 "kernel 'attn_fwd': LLVM's gfx942 disassembler crashed on its 9588 bytes of code \(signal 11\): the code object is damaged" -- \
  "$kiln" inspect "$tests/hostile/disasm_crash_gfx942.hsaco"
expect inspect-fifo 2 "cannot read '.*fifo': not a regular file" -- timeout 20 "$kiln" inspect "$tmp/fifo"
truncate -s 17M "$tmp/big.tile"
expect check-too-big 2 "cannot read '.*big.tile': larger than the 16 MiB kiln reads" -- "$kiln" check "$tmp/big.tile"
expect run-ir-fifo 2 "cannot read '.*fifo': not a regular file" -- timeout 20 "$kiln" run --target interp --ir "$tmp/fifo"
expect run-mods-dev-zero 2 "cannot read '/dev/zero': not a regular file" -- "$kiln" run --target interp --mods /dev/zero
expect run-max-steps-enough 0 ' PASS$' -- \
  "$kiln" run --target interp --ir "$tests/golden/attn_fwd_default.tile" --seqlen-q 20 --seqlen-k 20 --max-steps 20000000
expect dump-llvm 0 'define .*kiln_attn_fwd' -- "$kiln" dump --stage llvm --target host --head-dim 64
expect dump-asm 0 'kiln_attn_fwd' -- "$kiln" dump --stage asm --target host --head-dim 64
expect dump-bad-stage 2 "is not a stage" -- "$kiln" dump --stage bogus --target host
expect dump-layout-host 2 "a stage of GPU targets" -- "$kiln" dump --stage layout --target host
expect targets 0 'host' -- "$kiln" targets
expect compile-gfx942 0 'attn_fwd .* 64 ' -- \
  "$kiln" compile --target gfx942 --head-dim 128 --causal -o "$tmp/attn.hsaco" --stats
if [ "$(head -c 4 "$tmp/attn.hsaco" | od -An -c | tr -d ' ')" = '177ELF' ]; then echo "PASS hsaco-is-elf"
else echo "FAIL hsaco-is-elf"; fails=$((fails + 1)); fi
expect compile-gfx90a-asm 0 'v_mfma_f32_32x32x8' -- \
  "$kiln" compile --target gfx90a --head-dim 64 --dtype bf16 --emit asm
expect compile-head-dim-600 2 'head dim 600 is not supported' -- \
  "$kiln" compile --target gfx942 --head-dim 600 -o "$tmp/x.hsaco"
# any head dim up to 256 (padded to 16 inside the kernel), 512 where registers allow
expect run-host-head-dim-59 0 ' PASS$' -- \
  "$kiln" run --target host --head-dim 59 --seqlen-q 70 --seqlen-k 133 --causal
expect compile-gfx942-head-dim-512 0 '^attn_fwd( +[0-9]+){4} +0/' -- \
  "$kiln" compile --target gfx942 --head-dim 512 -o "$tmp/x512.hsaco" --stats
expect compile-sm90a-head-dim-512 2 'head dims above 256 are not supported there' -- \
  "$kiln" compile --target sm_90a --head-dim 512 -o "$tmp/x512.ptx"
expect compile-unknown-target 3 "target 'gfx1234' is not available" -- \
  "$kiln" compile --target gfx1234 -o "$tmp/x.hsaco"
expect compile-needs-target 2 'compile needs --target' -- "$kiln" compile -o "$tmp/x"
expect dump-layout 0 '#mma<mfma_32x32x8' -- "$kiln" dump --stage layout --target gfx942
expect run-gfx-no-device 3 'no gfx942 device is present' -- "$kiln" run --target gfx942
expect run-gfx942-emu 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --target gfx942-emu --head-dim 64 --seqlen-q 100 --seqlen-k 100 --causal
expect run-gfx90a-emu-bf16 0 ' PASS$' -- \
  "$kiln" run --target gfx90a-emu --dtype bf16 --head-dim 128 --seqlen-q 70 --seqlen-k 133
expect run-sm90a-no-device 3 'no sm_90a device is present to run on' -- \
  env KILN_CUDA_LIBRARY=none "$kiln" run --target sm_90a
expect run-sm80-no-device 3 'no sm_80 device is present .*disabled by KILN_CUDA_LIBRARY=none' -- \
  env KILN_CUDA_LIBRARY=none "$kiln" run --target sm_80
expect tune-sm90a-no-device 3 'no sm_90a device is present to tune on' -- \
  env KILN_CUDA_LIBRARY=none "$kiln" tune --target sm_90a
expect tune-gfx942 3 "target 'gfx942': kiln tune runs on host, sm_80, sm_90a or auto" -- \
  "$kiln" tune --target gfx942
if [ -n "$fake" ] && [ -f "$fake" ]; then
  # the PTX is compiled, loaded by the (fake) driver and launched with the API's launch helper
  expect run-sm90a-fake 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
    env KILN_CUDA_LIBRARY="$fake" "$kiln" run --target sm_90a --seqlen-q 130 --seqlen-k 77 --heads 4 --kv-heads 2 --repeats 3
  # the backward through kiln_backward's CUDA path: three PTX kernels loaded and launched with
  # their 43 parameters, which the fake driver computes in float64 (f16, D 64, as it assumes)
  expect run-backward-sm90a-fake 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
    env KILN_CUDA_LIBRARY="$fake" "$kiln" run --backward --target sm_90a --no-cache --seqlen-q 130 --seqlen-k 77 --heads 4 --kv-heads 2 --repeats 2
  expect run-auto-fake-gpu 0 'target=sm_90a device=Fake CUDA device .* PASS' -- \
    sh -c "KILN_CUDA_LIBRARY='$fake' \"$kiln\" run --target auto --seqlen-q 33 --seqlen-k 40 | tr '\n' ' '"
  expect targets-auto-fake-gpu 0 '^auto = sm_90a \(Fake CUDA device' -- env KILN_CUDA_LIBRARY="$fake" "$kiln" targets
  # kiln tune on the (fake) GPU: each candidate's PTX loaded by the driver, launched, checked
  # and timed with its events, the winner recorded; then `kiln run` (--tune cached) gets the
  # record's tiling and the tuner's code from the cache
  expect tune-sm90a-fake 0 '^best: block_m=(64|128) block_n=(32|64) warps=4 stages=2.* \(recorded in the tuning database\)' -- \
    env KILN_TUNE_PROGRESS=0 KILN_CUDA_LIBRARY="$fake" "$kiln" tune --target sm_90a --cache-dir "$tmp/ct" --seqlen-q 100 --seqlen-k 100 --heads 2 --space 'block_m=64,128;block_n=32,64;warps=4;stages=2'
  expect run-sm90a-fake-tuned 0 'prepare: cache hit [0-9.]+ ms \(tuned tiling\).* PASS' -- \
    sh -c "KILN_CUDA_LIBRARY='$fake' \"$kiln\" run --target sm_90a --cache-dir '$tmp/ct' --seqlen-q 100 --seqlen-k 100 | tr '\n' ' '"
else
  echo "SKIP run-sm90a-fake (no fake libcuda given)"
fi
expect compile-sm90a-ptx 0 'wgmma.mma_async.sync.aligned.m64n128k16' -- "$kiln" compile --target sm_90a --head-dim 64
expect compile-sm90a-ptx-d32 0 'mma.sync.aligned.m16n8k16' -- "$kiln" compile --target sm_90a --head-dim 32
# --decode-read: each paged split kernel by itself, at the tiling the API builds it with
expect dump-decode-in-page 0 'kernel @attn_decode_in_page\(.*BLOCK_M = 16, BLOCK_N = 64,.* WARPS = 1' -- \
  "$kiln" dump --stage ir --decode --paged 64 --decode-read in_page --head-dim 128 --target sm_90a
expect dump-decode-gather 0 'kernel @attn_decode_gather\(.*BLOCK_M = 16, BLOCK_N = 32,.* WARPS = 1' -- \
  "$kiln" dump --stage ir --decode --paged 16 --decode-read gather --head-dim 128 --target sm_90a
expect dump-decode-pages 0 'kernel @attn_decode_pages\(.*BLOCK_M = 16, BLOCK_N = 64,.* WARPS = 1' -- \
  "$kiln" dump --stage ir --decode --paged 16 --decode-read pages --head-dim 128 --target sm_90a
expect dump-decode-any 0 'kernel @attn_decode\(' -- \
  "$kiln" dump --stage ir --decode --paged 16 --decode-read any --head-dim 128 --target sm_90a
expect bad-decode-read 2 "--decode-read expects any, in_page, gather or pages, got 'both'" -- \
  "$kiln" compile --target sm_90a --decode --paged 16 --decode-read both
expect decode-read-dense 2 '--decode-read picks a paged split kernel: it needs --decode and --paged' -- \
  "$kiln" compile --target sm_90a --decode --decode-read gather
expect compile-emu-refused 2 'runs under `kiln run`' -- "$kiln" compile --target gfx942-emu
if command -v ptxas >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/ptxas ]; then
  expect compile-sm80-stats 0 'spill stores 0 B' -- \
    "$kiln" compile --target sm_80 --head-dim 64 --causal -o "$tmp/a.ptx" --stats
  expect compile-sm90a-decode-in-page-stats 0 '^attn_decode_in_page sm_90a: [0-9]+ registers, spill stores 0 B' -- \
    "$kiln" compile --target sm_90a --decode --paged 256 --decode-read in_page --head-dim 128 -o "$tmp/dip.ptx" --stats
  expect compile-sm90a-decode-pages-stats 0 '^attn_decode_pages sm_90a: [0-9]+ registers, spill stores 0 B' -- \
    "$kiln" compile --target sm_90a --decode --paged 16 --decode-read pages --head-dim 128 -o "$tmp/dpg.ptx" --stats
else
  echo "SKIP compile-sm80-stats (no ptxas)"
fi
expect unsupported-head-dim 2 'head dim 600' -- "$kiln" run --target interp --head-dim 600
expect unsupported-dtype 2 "unknown dtype 'f64'" -- "$kiln" run --dtype f64
expect unknown-target 3 "target 'gfx1234' is not available" -- "$kiln" run --target gfx1234
expect bad-option 2 "unknown or incomplete option '--bogus'" -- "$kiln" run --bogus
expect bad-int 2 "--seqlen-q expects an integer" -- "$kiln" run --seqlen-q 12x

for f in "$tests"/malformed/*.tile; do
  expect "check-$(basename "$f")" 2 "^$f:[0-9]+:[0-9]+: error: " -- "$kiln" check "$f"
  break  # one is enough here; the golden runner checks every file's message and location
done
expect check-good 0 ': ok \(' -- "$kiln" check "$tests/golden/attn_fwd_default.tile"
expect check-missing 2 "cannot read" -- "$kiln" check "$tmp/nope.tile"
expect dump-ir 0 '^kernel @attn_fwd\(' -- "$kiln" dump --stage ir --head-dim 64
expect run-ir-file 0 ' PASS$' -- \
  "$kiln" run --target interp --ir "$tests/golden/attn_fwd_default.tile" --seqlen-q 70 --seqlen-k 90

expect example-variant 0 ' PASS$' -- \
  "$kiln" run --target interp --ir "$tests/../examples/attention_f16_d64.tile" --seqlen-q 150 --seqlen-k 97

# KILN_DUMP works for every target and stage, through the one pipeline; an unknown stage is an
# error naming the stages (before: GPU targets printed nothing, and one unknown word silenced all)
expect dump-env-ir-gfx942 0 '// kiln: tile IR of @attn_fwd after kiln passes' -- \
  env KILN_DUMP=ir "$kiln" compile --target gfx942 --head-dim 64 -o "$tmp/d.hsaco"
expect dump-env-layout-llvm-sm90a 0 '; kiln: LLVM IR after optimisation of @attn_fwd for sm_90a' -- \
  env KILN_DUMP=layout,llvm "$kiln" compile --target sm_90a --head-dim 64 -o "$tmp/d.ptx"
expect dump-env-layout-has-layouts 0 '// kiln: layouts of @attn_fwd for gfx950' -- \
  env KILN_DUMP=layout "$kiln" compile --target gfx950 --head-dim 64 -o "$tmp/d950.hsaco"
expect dump-env-unknown 2 'KILN_DUMP=layout,bogus: not a list of stages \(ir, layout, lowered, llvm, asm, all\)' -- \
  env KILN_DUMP=layout,bogus "$kiln" compile --target host --head-dim 64 -o "$tmp/d.s"
expect compile-gfx950 0 'v_mfma_f32_32x32x16_f16' -- \
  sh -c "\"$kiln\" compile --target gfx950 --head-dim 64 --emit asm"
expect targets-registry 0 'gfx950 .*CDNA 4' -- "$kiln" targets

# run --backward (docs/backward.md): dQ, dK, dV against float64, the same PASS/FAIL line
expect run-backward-interp 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --backward --target interp --head-dim 24 --seqlen-q 37 --seqlen-k 50 --causal --heads 4 --kv-heads 2
expect run-backward-host-variant 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --backward --target host --no-cache --dtype bf16 --head-dim 59 --seqlen-q 90 --seqlen-k 70 --softcap 3 --window 20,5
expect run-backward-emu 0 ' PASS$' -- \
  "$kiln" run --backward --target gfx942-emu --head-dim 32 --seqlen-q 40 --seqlen-k 33 --causal --block-m 32 --block-n 32 --warps 2
# dropout (docs/backward.md): the forward and the backward with the same Philox mask, checked
# against the float64 reference with that mask
expect run-dropout-host 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --target host --no-cache --head-dim 40 --seqlen-q 90 --seqlen-k 77 --causal --heads 4 --kv-heads 2 --dropout 0.17 --seed 9
expect run-dropout-key 0 ';mods=0;dropout=0.17\]' -- \
  "$kiln" run --target interp --head-dim 16 --seqlen-q 20 --seqlen-k 17 --dropout 0.17 --dropout-offset 12345
expect run-backward-dropout-interp 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --backward --target interp --head-dim 16 --seqlen-q 37 --seqlen-k 29 --causal --heads 4 --kv-heads 2 --dropout 0.17 --seed 3
expect run-backward-dropout-host 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --backward --target host --no-cache --head-dim 64 --seqlen-q 100 --seqlen-k 130 --dropout 0.17
expect run-dropout-bad 2 '--dropout wants a probability in \[0, 1\)' -- "$kiln" run --dropout 1.5
expect run-dropout-paged 2 'dropout is not supported with a paged KV cache' -- \
  "$kiln" run --target host --dropout 0.1 --paged 16
expect run-backward-varlen-host 0 '^max_abs_err=[^ ]+ rel_err=[^ ]+ tol=[^ ]+ PASS$' -- \
  "$kiln" run --backward --target host --no-cache --head-dim 59 --varlen 1,17,0,90/40,3,9,70 --heads 4 --kv-heads 2 --causal --dropout 0.17
expect run-backward-varlen-interp 0 'varlen total_q=21 total_k=17 .* PASS' -- \
  sh -c "\"$kiln\" run --backward --target interp --head-dim 16 --varlen 5,0,16/9,7,1 --heads 2 --kv-heads 1 --window 4,2 | tr '\n' ' '"
# --dq atomic: dQ added with atomics by the dK/dV kernel (its key says adq=1), then rounded
expect run-backward-atomic-host 0 'adq=1.* PASS' -- \
  sh -c "\"$kiln\" run --backward --dq atomic --target host --no-cache --head-dim 59 --seqlen-q 90 --seqlen-k 70 --causal --heads 4 --kv-heads 2 | tr '\n' ' '"
expect run-backward-atomic-varlen 0 'adq=1.* PASS' -- \
  sh -c "\"$kiln\" run --backward --dq atomic --target host --no-cache --head-dim 32 --varlen 1,17,0,40/20,3,9,33 --dropout 0.17 | tr '\n' ' '"
expect run-dq-needs-backward 2 '--dq picks how the backward sums dQ: it needs --backward' -- \
  "$kiln" run --target host --dq atomic
expect run-dq-bad 2 "--dq expects atomic or deterministic, got 'fast'" -- \
  "$kiln" run --backward --dq fast
expect run-backward-paged 2 '--backward runs the backward template: not with' -- \
  "$kiln" run --backward --target host --paged 4
echo "cli: $fails failed"
[ "$fails" -eq 0 ]
