#!/usr/bin/env bash
# device_run.sh — what runs ON the lent H200, from the repository root, with bench/h200/pack
# carried (see docs/nvidia.md):
#     device tool: command "bash bench/h200/device_run.sh", carry ["bench/h200/pack"]
#
# It unpacks the static build (bench/h200/build_static.sh made it here), records the machine
# (nvidia-smi, driver, ptxas), runs the GPU part of test_cuda and the ptxas test, `kiln targets`,
# then the hooks for the later tables (kiln's correctness and throughput runs, and the torch
# SDPA anchor, bench/h200/sdpa_anchor.py).  Every step's output goes to a log under $OUT (at
# most 8 files come back, so they are few: summary.txt, steps.log and one log per heavy step)
# and a one-line verdict to summary.txt, printed last.  A failing step is recorded and the
# script goes on; the exit status is the number of failed steps (0: all passed).
#
#   KILN_DEVICE_STEPS   space-separated steps to run (default: info tests kiln sdpa; also
#                       variants and flex: kiln_variant_bench and flex_anchor.py; aot: test_aot
#                       and test_aot_rt (libkiln_rt) on the packed bundle, through the API and
#                       the generated launcher, and aot_example, against float64 — docs/aot.md)
#   KILN_SDPA_ARGS      extra arguments for sdpa_anchor.py (e.g. "--quick")
#   steps "backward" and "sdpa_bwd" (issue 14): `kiln run --backward --target sm_90a` checks
#                       (mma.sync, and the wgmma kernels with --mma wgmma) and kiln_bwd_bench
#                       (KILN_BWD_ARGS, e.g. "--quick", "--tilings" or "--wgmma"; pack
#                       it: KILN_STATIC_TARGETS), and sdpa_bwd_anchor.py (KILN_SDPA_BWD_ARGS);
#                       step "bwd_serial": kiln_bwd_bench again with KILN_WGMMA_SERIAL=1 (each
#                       wgmma dot waits for itself: the lowering before codegen-3)
#   step "wgmma"        kiln_attn_bench --no-perf --mma wgmma, then `kiln run` forward checks at
#                       the wgmma tilings whose two dots share a shape (block_n = padded head
#                       dim), with KILN_WGMMA_A_REGS=1 once (the old lowering, expected FAIL),
#                       and `kiln run --backward --mma wgmma` at head dims 32..128
#   step "dropout"      (issue 14 item 2) `kiln run --target sm_90a --dropout 0.17` forward and
#                       --backward checks, then kiln_bwd_bench --dropout 0.17 (KILN_DROPOUT_ARGS,
#                       e.g. "--quick") and sdpa_bwd_anchor.py --dropout 0.17 (same args as sdpa_bwd)
#   step "python"       bench/h200/python_torch_check.py through the Python binding on the
#                       libkiln.so of pack/pylib.tar.xz (build_pylib.sh): forward and autograd
#   step "api"          (issue 15) sdpa_anchor.py --kiln: kiln.attention through the Python binding
#                       at the API default beside SDPA flash and cuDNN, one table
#                       (KILN_API_ARGS, e.g. "--dtypes f16 --quick"); needs pack/pylib.tar.xz
#   step "overhead"     api_overhead.py: the host cost of one call (kiln.attention, the prepared
#                       Kernel.forward, prepare alone, the Python planning alone, SDPA), wall
#                       time and events, and a cProfile of the binding; needs pack/pylib.tar.xz
#   step "serve"        kiln_serve_bench (varlen prefill mix, paged vs dense prefill; KILN_SERVE_ARGS)
#                       and `sdpa_anchor.py --varlen` on the lengths it wrote
#   KILN_DECODE_ARGS    extra arguments for kiln_decode_bench (step decode; e.g. "--sweep", or
#                       "--paged": the same table through a paged KV cache of 16-row pages,
#                       "--page-size P" for others, paged and dense side by side);
#                       step decode also runs `sdpa_anchor.py --decode` (FA2, cuDNN)
#   step "pdecode"      kiln_decode_bench --paged --quick for each page size of
#                       KILN_PDECODE_PAGES (default "16 256") and paged tiling of
#                       KILN_PDECODE_TILINGS ("default 64x16:4 ...": KILN_DECODE_PAGED_TILING),
#                       the rows of KILN_BENCH_ROWS (e.g. "16x32768 1x4096"; unset: B 1 / 16 x
#                       Nk 4k / 32k), each step at most KILN_PDECODE_TIMEOUT s (default 240); the
#                       log names the split kernel each page size runs (in_page / pages / gather).
#                       Pages of 16 against dense at B 16 x 32k and B 1 x 4k in ~2 minutes:
#                       KILN_DEVICE_STEPS=pdecode KILN_PDECODE_PAGES=16 KILN_PDECODE_TILINGS=default
#                       KILN_BENCH_ROWS="16x32768 1x4096"
#   step "splits"       kiln_decode_bench --paged --quick per piece count of KILN_SPLITS_LIST
#                       (KILN_BENCH_SPLITS; rows KILN_BENCH_ROWS) and page size of KILN_PDECODE_PAGES
#   step "bwd_ncu"      Nsight Compute: each backward kernel's time and counters, one row of
#                       kiln_bwd_bench at a time (KILN_BWD_NCU_ROWS "D,CAUSAL,N ...")
#   step "ncu"          Nsight Compute counters of the decode kernels (dense and paged, rows
#                       KILN_BENCH_ROWS, default 16x32768) through kiln_decode_bench
#   step "fp8"          kiln_decode_bench --fp8 $KILN_FP8_FORMAT (default f8e4m3) $KILN_FP8_ARGS
#                       (e.g. "--quick"): fp8 inputs checked against float64 (each decode
#                       call's route named: the split-KV decode kernels), then prefill and
#                       decode (dense and paged fp8 KV) beside the f16 kernels and beside the
#                       fp8 call through the prefill kernel (KILN_DECODE=0)
#   step "tune"         (issue 13) kiln_tune_bench $KILN_TUNE_ARGS (e.g. "--d 128", "--causal 1",
#                       "--space SPEC"): kiln_tune on the GPU at B 4 x H 32 x N 4096, D 64/128,
#                       causal off/on (every candidate checked against float64, timed with CUDA
#                       events), then the default and the tuned kernel timed on the same call
#                       and compared (pack it: KILN_STATIC_TARGETS="kiln kiln_tune_bench")
#   step "tune_test"    test_api_cuda (pack it too), whose test_tune_cuda tunes on the real driver
set -u

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/kiln-out}
mkdir -p "$out"
work=${TMPDIR:-/tmp}/kiln-h200-run
steps=${KILN_DEVICE_STEPS:-"info tests kiln sdpa"}
summary="$out/summary.txt"
steplog="$out/steps.log"
: >"$summary"
: >"$steplog"
failed=0

note() { echo "$*" | tee -a "$summary"; }

# step NAME LOGFILE TIMEOUT_S COMMAND...: runs the command with a time limit, appending its
# output to LOGFILE; records PASS/FAIL (exit status) and the time it took
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local t0 t1 rc
  t0=$(date +%s.%N)
  {
    echo
    echo "===== $name: $*"
  } >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc -eq 0 ]; then
    note "PASS  $name (${secs}s)"
  else
    [ $rc -eq 124 ] && echo "(timed out after ${limit}s)" >>"$log"
    note "FAIL  $name (exit $rc, ${secs}s; see $(basename "$log"))"
    failed=$((failed + 1))
  fi
  return 0
}

want() { [[ " $steps " == *" $1 "* ]]; }

note "kiln on the device: $(date -u +%Y-%m-%dT%H:%M:%SZ), host $(hostname), steps: $steps"

# ---- unpack ----
tarball="$here/pack/kiln-h200.tar.xz"
if [ ! -f "$tarball" ]; then
  note "FAIL  unpack: $tarball missing (run bench/h200/build_static.sh here and carry bench/h200/pack)"
  failed=$((failed + 1))
else
  rm -rf "$work"
  mkdir -p "$work"
  if tar -C "$work" -xJf "$tarball" >>"$steplog" 2>&1; then
    note "PASS  unpack ($(stat -c %s "$tarball") bytes)"
    sed 's/^/      /' "$work/kiln-h200/MANIFEST" | tee -a "$summary"
  else
    note "FAIL  unpack (see steps.log)"
    failed=$((failed + 1))
  fi
fi
bin="$work/kiln-h200/bin"
export LD_LIBRARY_PATH="$work/kiln-h200/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# ptxas for test_ptxas and test_cuda's cubin test, where the image has it
if [ -z "${KILN_PTXAS:-}" ] && ! command -v ptxas >/dev/null 2>&1; then
  for p in /usr/local/cuda/bin/ptxas /usr/local/cuda-*/bin/ptxas; do
    [ -x "$p" ] && export KILN_PTXAS="$p" && break
  done
fi

# ---- the machine ----
if want info; then
  step "nvidia-smi -L" "$steplog" 30 nvidia-smi -L
  step "nvidia-smi" "$steplog" 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  step "ptxas --version" "$steplog" 30 bash -c 'p=${KILN_PTXAS:-$(command -v ptxas)}; echo "$p"; "$p" --version'
  step "system" "$steplog" 30 bash -c 'uname -a; ldd --version | head -1; nproc; free -g | head -2'
  grep -E "^GPU [0-9]+:" "$steplog" | sed 's/^/      /' | tee -a "$summary"
fi

# ---- the tests ----
if want tests; then
  # (test_api_cuda only when packed: KILN_STATIC_TARGETS="... test_api_cuda"; its varlen,
  # paged and decode launches, varlen with a bias and documents among them, and the dense and
  # varlen backward through kiln_backward, against float64)
  for t in test_cuda test_ptxas test_api_cuda; do
    if [ -x "$bin/$t" ]; then
      step "$t" "$out/$t.log" 300 "$bin/$t"
      # the lines a reader wants without opening the log
      grep -E "^(device 0|vadd n=|kn_vadd:|cubin for|block reverse|bad PTX|sm_(80|90a) kn_vadd|kn_spill|  (PASS|FAIL) (varlen|backward))" \
        "$out/$t.log" | sed 's/^/      /' | tee -a "$summary"
    elif [ "$t" = test_api_cuda ]; then
      continue
    else
      note "FAIL  $t: not in the pack"
      failed=$((failed + 1))
    fi
  done
fi

# ---- AOT bundles: the NVIDIA half of the packed bundle through the API (libkiln, and libkiln_rt
# without the compiler), the generated launcher, and examples/aot's program ----
if want aot; then
  ran=0
  for t in test_aot test_aot_rt; do
    if [ -x "$bin/$t" ] && [ -d "$work/kiln-h200/aot_bundle" ]; then
      ran=1
      step "$t" "$out/$t.log" 480 env KILN_AOT_DIR="$work/kiln-h200/aot_bundle" \
        KILN_AOT_VARIANTS_DIR="$work/kiln-h200/aot_variants" KILN_HIP_LIBRARY=none "$bin/$t"
      grep -E "^  (CUDA device|[a-z0-9_]+ +sm_|bundle load|cc |libkiln_rt)|OK|FAIL" "$out/$t.log" \
        | sed 's/^/      /' | tee -a "$summary"
    fi
  done
  if [ -x "$bin/aot_example" ]; then
    ran=1
    step "aot_example cuda" "$out/test_aot.log" 120 env KILN_HIP_LIBRARY=none \
      "$bin/aot_example" cuda
    grep -E "^(causal|window)_.* on sm_" "$out/test_aot.log" | sed 's/^/      /' | tee -a "$summary"
  fi
  if [ $ran = 0 ]; then
    note "FAIL  aot: nothing to run in the pack (KILN_STATIC_TARGETS with test_aot / test_aot_rt)"
    failed=$((failed + 1))
  fi
fi

# ---- kiln itself ----
if want kiln; then
  if [ -x "$bin/kiln" ]; then
    step "kiln targets" "$out/kiln.log" 60 "$bin/kiln" targets
    # HOOK (later): the correctness table — `kiln run --target sm_90a ...` over head dims 64/128,
    # causal on/off, f16/bf16, ragged N, each line ending PASS|FAIL; then the throughput table
    # (`kiln run` timing lines at N 1k/4k/16k, batch 4, 32 heads) next to SDPA's numbers below.
    # Put each table in $out/kiln.log (step appends) and its summary lines into $summary.
    if [ -f "$here/kiln_tables.sh" ]; then
      step "kiln tables" "$out/kiln.log" 480 bash "$here/kiln_tables.sh" "$bin/kiln" "$out"
    else
      note "SKIP  kiln tables (bench/h200/kiln_tables.sh not written yet)"
    fi
  else
    note "FAIL  kiln: not in the pack"
    failed=$((failed + 1))
  fi
fi

# ---- the anchor: torch SDPA (flash, cuDNN) in the same run ----
if want sdpa; then
  # shellcheck disable=SC2086
  step "sdpa anchor" "$out/sdpa.log" 420 env PYTHONUNBUFFERED=1 python3 "$here/sdpa_anchor.py" \
    --csv "$out/sdpa.csv" ${KILN_SDPA_ARGS:-}
  grep -E "^(\||# )" "$out/sdpa.log" >>"$summary"
fi

# ---- the variants (issue 11): kiln through the API, then FlexAttention / SDPA with dense masks ----
if want variants; then
  if [ -x "$bin/kiln_variant_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln variants" "$out/variants.log" 420 "$bin/kiln_variant_bench" ${KILN_VARIANT_ARGS:-}
    grep -E "^(\||# |PASS|FAIL)" "$out/variants.log" >>"$summary"
  else
    note "FAIL  kiln_variant_bench: not in the pack"
    failed=$((failed + 1))
  fi
fi
if want flex; then
  # shellcheck disable=SC2086
  step "flex anchor" "$out/flex.log" 540 env PYTHONUNBUFFERED=1 python3 "$here/flex_anchor.py" \
    --csv "$out/flex.csv" ${KILN_FLEX_ARGS:-}
  grep -E "^(\||# )" "$out/flex.log" >>"$summary"
fi

# ---- dropout (issue 14 item 2): the Philox mask on the GPU against float64, then timed ----
if want dropout; then
  if [ -x "$bin/kiln" ]; then
    for a in "--head-dim 64 --causal --seqlen-q 1000 --seqlen-k 1000 --dropout 0.17 --seed 5" \
             "--head-dim 128 --dtype bf16 --seqlen-q 301 --seqlen-k 517 --heads 4 --kv-heads 2 --dropout 0.17" \
             "--backward --head-dim 64 --causal --seqlen-q 1000 --seqlen-k 1000 --dropout 0.17" \
             "--backward --head-dim 128 --seqlen-q 517 --seqlen-k 301 --heads 4 --kv-heads 2 --dropout 0.17"; do
      # shellcheck disable=SC2086
      step "kiln run $a" "$out/dropout.log" 240 "$bin/kiln" run --target sm_90a --no-cache $a
    done
  fi
  if [ -x "$bin/kiln_bwd_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln_bwd_bench --dropout 0.17" "$out/dropout.log" 560 "$bin/kiln_bwd_bench" \
      --dropout 0.17 ${KILN_DROPOUT_ARGS:-}
    grep -E "^(\||# |FAIL)" "$out/dropout.log" >>"$summary"
  else
    note "FAIL  kiln_bwd_bench: not in the pack"
    failed=$((failed + 1))
  fi
  # shellcheck disable=SC2086
  step "sdpa backward anchor, dropout 0.17" "$out/dropout.log" 560 env PYTHONUNBUFFERED=1 \
    python3 "$here/sdpa_bwd_anchor.py" --dropout 0.17 ${KILN_SDPA_BWD_ARGS:-}
fi

# ---- the backward (issue 14): kiln checked against float64 first, then SDPA flash / cuDNN ----
# ---- wgmma with both dots of one shape (block_n = padded head dim), forward and backward ----
if want wgmma; then
  if [ -x "$bin/kiln_attn_bench" ]; then
    step "kiln_attn_bench --no-perf --mma wgmma" "$out/wgmma.log" 300 "$bin/kiln_attn_bench" \
      --no-perf --mma wgmma
    grep -cE "FAIL" "$out/wgmma.log" | sed 's/^/      FAIL lines in wgmma.log: /' >>"$summary"
  fi
  if [ -x "$bin/kiln" ]; then
    r="--target sm_90a --mma wgmma --no-cache"
    # the register lowering (before codegen-2) must still fail here: it is what was wrong
    if KILN_WGMMA_A_REGS=1 timeout 120 "$bin/kiln" run $r --head-dim 64 --block-m 64 \
      --block-n 64 --warps 4 --seqlen-q 129 --seqlen-k 77 --heads 4 --kv-heads 2 --causal \
      >>"$out/wgmma.log" 2>&1; then
      note "NOTE  KILN_WGMMA_A_REGS=1 D64 64x64 w4 passed (expected FAIL)"
    else
      note "PASS  KILN_WGMMA_A_REGS=1 D64 64x64 w4 fails as expected (the old lowering)"
    fi
    # the SASS of both lowerings (HGMMA operands), where the device has cuobjdump
    if command -v cuobjdump >/dev/null 2>&1; then
      for e in 0 1; do
        KILN_WGMMA_A_REGS=$e "$bin/kiln" compile $r --head-dim 64 --block-m 64 --block-n 64 \
          --warps 4 --causal --emit cubin -o "$work/wg$e.cubin" >>"$out/wgmma.log" 2>&1 &&
          { echo "== SASS HGMMA, KILN_WGMMA_A_REGS=$e"; cuobjdump -sass "$work/wg$e.cubin" |
            grep -E "HGMMA|WARPGROUP"; } >>"$out/wgmma.log" 2>&1
      done
    fi
    for t in "64 64 64 4" "64 128 64 8" "128 128 128 8" "128 64 128 4" "59 64 64 4" \
             "128 64 64 4" "64 64 128 4"; do
      set -- $t
      for a in "--seqlen-q 129 --seqlen-k 77 --heads 4 --kv-heads 2 --causal" \
               "--dtype bf16 --seqlen-q 300 --seqlen-k 511 --heads 4 --kv-heads 1"; do
        # shellcheck disable=SC2086
        step "kiln run D$1 $2x$3 w$4 $a" "$out/wgmma.log" 120 "$bin/kiln" run $r \
          --head-dim $1 --block-m $2 --block-n $3 --warps $4 $a
      done
    done
    for a in "--head-dim 64 --seqlen-q 300 --seqlen-k 257 --heads 4 --kv-heads 2 --causal" \
             "--head-dim 64 --block-m 32 --block-n 64" \
             "--head-dim 59 --seqlen-q 300 --seqlen-k 257 --heads 4 --kv-heads 2 --causal" \
             "--head-dim 32 --block-m 32 --block-n 64 --seqlen-q 300 --seqlen-k 257 --causal" \
             "--head-dim 128 --seqlen-q 300 --seqlen-k 257 --heads 4 --kv-heads 2 --causal" \
             "--head-dim 64 --dtype bf16 --seqlen-q 130 --seqlen-k 77" \
             "--head-dim 64 --varlen 1,130,0,77/150,5,60,40 --dropout 0.17"; do
      # shellcheck disable=SC2086
      step "kiln run --backward $a" "$out/wgmma.log" 120 "$bin/kiln" run --backward $r $a
    done
  fi
fi

if want backward; then
  if [ -x "$bin/kiln" ]; then
    for a in "--head-dim 64 --causal --seqlen-q 1000 --seqlen-k 1000" \
             "--head-dim 128 --dtype bf16 --seqlen-q 301 --seqlen-k 517 --heads 4 --kv-heads 2" \
             "--head-dim 59 --causal --seqlen-q 517 --seqlen-k 301 --softcap 20" \
             "--head-dim 64 --causal --varlen 1,1000,0,377,64/1,900,5,377,200 --heads 4 --kv-heads 2" \
             "--head-dim 128 --varlen 517,1,301/301,40,600 --dropout 0.17" \
             "--head-dim 128 --causal --seqlen-q 517 --seqlen-k 301 --heads 4 --kv-heads 2 --mma wgmma" \
             "--head-dim 128 --dtype bf16 --seqlen-q 301 --seqlen-k 517 --mma wgmma" \
             "--head-dim 96 --causal --varlen 1,1000,0,377,64/1,900,5,377,200 --heads 4 --kv-heads 2 --mma wgmma" \
             "--head-dim 64 --causal --seqlen-q 300 --seqlen-k 257 --heads 4 --kv-heads 2 --dq atomic" \
             "--head-dim 128 --seqlen-q 517 --seqlen-k 301 --heads 4 --kv-heads 2 --dq atomic" \
             "--head-dim 128 --dtype bf16 --causal --seqlen-q 301 --seqlen-k 517 --dq atomic" \
             "--head-dim 59 --seqlen-q 301 --seqlen-k 517 --dq atomic --mma wgmma" \
             "--head-dim 128 --causal --varlen 517,1,301/301,40,600 --dropout 0.17 --dq atomic"; do
      # shellcheck disable=SC2086
      step "kiln run --backward $a" "$out/backward.log" 240 "$bin/kiln" run --backward \
        --target sm_90a --no-cache $a
    done
  fi
  if [ -x "$bin/kiln_bwd_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln_bwd_bench" "$out/backward.log" 560 "$bin/kiln_bwd_bench" ${KILN_BWD_ARGS:-}
    grep -E "^(\||# |FAIL)" "$out/backward.log" >>"$summary"
  else
    note "FAIL  kiln_bwd_bench: not in the pack"
    failed=$((failed + 1))
  fi
fi
# the same bench on the lowering before codegen-3 (every wgmma dot waits for itself), to compare
if want bwd_serial; then
  # shellcheck disable=SC2086
  step "kiln_bwd_bench KILN_WGMMA_SERIAL=1" "$out/backward_serial.log" 560 env KILN_WGMMA_SERIAL=1 \
    "$bin/kiln_bwd_bench" ${KILN_BWD_ARGS:-}
  grep -E "^(\||# |FAIL)" "$out/backward_serial.log" | sed 's/^/serial /' >>"$summary"
fi
if want sdpa_bwd; then
  # shellcheck disable=SC2086
  step "sdpa backward anchor" "$out/sdpa_bwd.log" 560 env PYTHONUNBUFFERED=1 python3 \
    "$here/sdpa_bwd_anchor.py" --csv "$out/sdpa_bwd.csv" ${KILN_SDPA_BWD_ARGS:-}
  grep -E "^(\||# )" "$out/sdpa_bwd.log" >>"$summary"
fi

# ---- serving prefill (issue 12): varlen mix vs the padded batch, paged vs dense; SDPA padded ----
if want serve; then
  if [ -x "$bin/kiln_serve_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln serve" "$out/serve.log" 480 "$bin/kiln_serve_bench" --lengths "$out/lengths.txt" \
      ${KILN_SERVE_ARGS:-}
    grep -E "^(\||# |PASS|FAIL)" "$out/serve.log" >>"$summary"
  else
    note "FAIL  kiln_serve_bench: not in the pack"
    failed=$((failed + 1))
  fi
  if [ -s "$out/lengths.txt" ]; then
    step "sdpa varlen anchor" "$out/serve.log" 420 env PYTHONUNBUFFERED=1 python3 \
      "$here/sdpa_anchor.py" --varlen "$out/lengths.txt"
    grep -E "^(\||# )" "$out/serve.log" | grep -v -E "^# (kiln|dense|varlen kernel|paged kernel)" \
      | tail -n 8 >>"$summary"
  fi
fi

# ---- decode (issue 12): kiln's split-KV decode through the API, then SDPA's on the same shapes ----
if want decode; then
  if [ -x "$bin/kiln_decode_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln decode" "$out/decode.log" 540 "$bin/kiln_decode_bench" ${KILN_DECODE_ARGS:-}
    grep -E "^(\||# |PASS|FAIL)" "$out/decode.log" >>"$summary"
  else
    note "FAIL  kiln_decode_bench: not in the pack"
    failed=$((failed + 1))
  fi
  step "sdpa decode anchor" "$out/sdpa_decode.log" 420 env PYTHONUNBUFFERED=1 python3 \
    "$here/sdpa_anchor.py" --decode --csv "$out/sdpa_decode.csv"
  grep -E "^(\||# )" "$out/sdpa_decode.log" >>"$summary"
fi
# ---- paged decode tilings (issue 12): kiln_decode_bench --paged --quick per page size and
# paged tiling (KILN_DECODE_PAGED_TILING; the dense kernel keeps its own), to choose the default ----
if want pdecode; then
  if [ -x "$bin/kiln_decode_bench" ]; then
    for ps in ${KILN_PDECODE_PAGES:-16 256}; do
      for t in ${KILN_PDECODE_TILINGS:-default 64x16:4 16x16:1 32x16:2 16x32:1 32x32:2 16x64:1}; do
        tv=$t
        [ "$t" = default ] && tv=
        step "kiln paged decode page $ps tiling $t" "$out/pdecode.log" "${KILN_PDECODE_TIMEOUT:-240}" \
          env KILN_DECODE_PAGED_TILING="$tv" "$bin/kiln_decode_bench" --paged --quick \
          --page-size "$ps"
        echo "# page $ps tiling $t" >>"$summary"
        grep -E "^# paged kernel" "$out/pdecode.log" | tail -n 1 >>"$summary"
        grep -E "^\| (1|16) \|" "$out/pdecode.log" | tail -n 4 >>"$summary"
      done
    done
  else
    note "FAIL  kiln_decode_bench: not in the pack"
    failed=$((failed + 1))
  fi
fi
# ---- paged decode's piece count (issue 12): the --paged --quick rows of KILN_BENCH_ROWS with
# every call in N pieces for each N of KILN_SPLITS_LIST (KILN_BENCH_SPLITS), pages of
# KILN_PDECODE_PAGES; "0" is the heuristic's count ----
if want splits; then
  for ps in ${KILN_PDECODE_PAGES:-16 256}; do
    for n in ${KILN_SPLITS_LIST:-0 8 10 16}; do
      step "kiln paged decode page $ps pieces $n" "$out/splits.log" 240 \
        env KILN_BENCH_SPLITS="$n" KILN_BENCH_ROWS="${KILN_BENCH_ROWS:-16x4096 16x32768}" \
        "$bin/kiln_decode_bench" --paged --quick --page-size "$ps"
      echo "# page $ps pieces $n" >>"$summary"
      grep -E "^\| (1|16|64) \|" "$out/splits.log" | tail -n 2 >>"$summary"
    done
  done
fi
# Nsight Compute for the ncu steps below: where it is, and the counters every ncu step reads
# (time, DRAM and L2 traffic, registers and occupancy, the two main stall reasons)
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
ncu_metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
ncu_metrics=$ncu_metrics,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers
ncu_metrics=$ncu_metrics,sm__warps_active.avg.per_cycle_active,sm__cycles_elapsed.avg
ncu_metrics=$ncu_metrics,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
ncu_metrics=$ncu_metrics,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
ncu_metrics=$ncu_metrics,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct,lts__t_bytes.sum
# ---- Nsight Compute on the decode kernels (issue 12): a few counters of every split-KV decode
# launch of `kiln_decode_bench --paged --quick --repeats 2` on the rows of KILN_BENCH_ROWS
# (default 16x32768), dense and paged side by side (pages of KILN_PDECODE_PAGES' first size);
# clocks left alone (--clock-control none), as the device's METHOD.md asks ----
if want ncu; then
  ps=$(echo "${KILN_PDECODE_PAGES:-256}" | awk '{print $1}')
  metrics=$ncu_metrics,l1tex__t_bytes.sum,smsp__average_warp_latency_per_inst_issued.ratio
  if [ -n "$ncu_bin" ] && [ -x "$bin/kiln_decode_bench" ]; then
    step "ncu decode page $ps" "$out/ncu.log" 420 env KILN_BENCH_ROWS="${KILN_BENCH_ROWS:-16x32768}" \
      "$ncu_bin" --clock-control none --kernel-name regex:attn_decode --metrics "$metrics" \
      --csv --print-units base "$bin/kiln_decode_bench" --paged --quick --repeats 2 --page-size "$ps"
  else
    note "FAIL  ncu: ${ncu_bin:-no ncu} / kiln_decode_bench not in the pack"
    failed=$((failed + 1))
  fi
fi
# ---- Nsight Compute on the backward's kernels (issue 14): the time and a few counters of each
# of attn_bwd_pre / attn_bwd_dkdv / attn_bwd_dq, one row at a time (`kiln_bwd_bench --only
# D,CAUSAL,N --quick --repeats 1`, the API's default tiling; KILN_BWD_NCU_ROWS, default D 128
# N 4k / 16k, causal 16k, D 64 16k), clocks left alone ----
if want bwd_ncu; then
  if [ -n "$ncu_bin" ] && [ -x "$bin/kiln_bwd_bench" ]; then
    for row in ${KILN_BWD_NCU_ROWS:-128,0,4096 128,0,16384 128,1,16384 64,0,16384}; do
      # shellcheck disable=SC2086
      step "ncu backward $row" "$out/bwd_ncu.log" 300 "$ncu_bin" --clock-control none \
        --kernel-name regex:attn_bwd --metrics "$ncu_metrics" --csv --print-units base \
        "$bin/kiln_bwd_bench" --quick --repeats 1 --only "$row" ${KILN_BWD_ARGS:-}
    done
  else
    note "FAIL  bwd_ncu: ${ncu_bin:-no ncu} / kiln_bwd_bench not in the pack"
    failed=$((failed + 1))
  fi
fi
# ---- fp8 inputs (issue 12, docs/serving.md): kiln_decode_bench --fp8, checks then times ----
if want fp8; then
  if [ -x "$bin/kiln_decode_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln fp8" "$out/fp8.log" 540 "$bin/kiln_decode_bench" --fp8 "${KILN_FP8_FORMAT:-f8e4m3}" \
      ${KILN_FP8_ARGS:-}
    grep -E "^(\||# |PASS|FAIL)" "$out/fp8.log" >>"$summary"
  else
    note "FAIL  kiln_decode_bench: not in the pack"
    failed=$((failed + 1))
  fi
fi

# ---- the autotuner on the device (issue 13): default tiling vs tuned, through the public API ----
if want tune; then
  if [ -x "$bin/kiln_tune_bench" ]; then
    # shellcheck disable=SC2086
    step "kiln tune bench" "$out/tune.log" 560 env KILN_TUNE_PROGRESS=0 "$bin/kiln_tune_bench" \
      ${KILN_TUNE_ARGS:-}
    grep -E "^(\||# kiln|PASS|FAIL)" "$out/tune.log" >>"$summary"
  else
    note "FAIL  kiln_tune_bench: not in the pack (KILN_STATIC_TARGETS)"
    failed=$((failed + 1))
  fi
fi
if want tune_test; then
  if [ -x "$bin/test_api_cuda" ]; then
    step "test_api_cuda" "$out/tune_test.log" 420 env KILN_TUNE_PROGRESS=0 "$bin/test_api_cuda"
    grep -E "^  (candidate|PASS|FAIL)|^\[  (FAILED|PASSED) |test_tune_cuda" "$out/tune_test.log" \
      | sed 's/^/      /' >>"$summary"
  else
    note "FAIL  test_api_cuda: not in the pack (KILN_STATIC_TARGETS)"
    failed=$((failed + 1))
  fi
fi

# ---- the Python binding (pack/pylib.tar.xz, build_pylib.sh): unpacked once for the steps using it ----
pylib_ready=
pylib() {
  if [ ! -f "$here/pack/pylib.tar.xz" ]; then
    note "FAIL  $1: bench/h200/pack/pylib.tar.xz missing (bench/h200/build_pylib.sh)"
    failed=$((failed + 1))
    return 1
  fi
  if [ -z "$pylib_ready" ]; then
    rm -rf "$work/pylib" && mkdir -p "$work/pylib" && tar -C "$work/pylib" -xJf "$here/pack/pylib.tar.xz"
    pylib_ready=1
  fi
}
# the environment the steps run python in (an array: `step` runs a command, not a function)
pyenv=(env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$work/pylib/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
       KILN_LIBRARY="$work/pylib/lib/libkiln.so.0" PYTHONPATH="$here/../../python")

# ---- the Python binding on torch CUDA tensors: forward and autograd backward vs float64 ----
if want python && pylib python; then
  step "python torch check" "$out/python.log" 420 "${pyenv[@]}" python3 "$here/python_torch_check.py"
  grep -E "^(PASS|FAIL|# )" "$out/python.log" >>"$summary"
fi

# ---- the host cost of one call: kiln's binding, its prepared kernel, SDPA (api_overhead.py) ----
if want overhead && pylib overhead; then
  step "api overhead" "$out/overhead.log" 300 "${pyenv[@]}" python3 "$here/api_overhead.py"
  grep -E "^(\||#)" "$out/overhead.log" >>"$summary"
fi

# ---- issue 15's table: kiln.attention at the API default next to SDPA flash and cuDNN ----
if want api && pylib api; then
  # shellcheck disable=SC2086
  step "api table" "$out/api.log" 540 "${pyenv[@]}" python3 "$here/sdpa_anchor.py" --kiln \
    --csv "$out/api.csv" ${KILN_API_ARGS:-}
  grep -E "^(\||# )" "$out/api.log" >>"$summary"
fi

note "failed steps: $failed"
echo
echo "===== summary ($summary)"
cat "$summary"
exit "$failed"
