#!/usr/bin/env bash
# api_cli.sh — `kiln tune` and `kiln cache ls|verify|clear` (the JIT service's command line).
# usage: api_cli.sh KILN_BINARY
set -u
kiln=$1
fails=0
tmp=$(mktemp -d)
trap 'chmod -R u+rwx "$tmp"; rm -rf "$tmp"' EXIT
export KILN_TUNE_PROGRESS=0
unset KILN_AUTOTUNE KILN_TUNE_SPACE KILN_CACHE_FAULT

. "$(dirname "$0")/expect.sh"

c=$tmp/cache
expect tune 0 '^best: block_m=(16|32) block_n=16 warps=4 stages=1 median_us=[0-9.]+ \(recorded' -- \
  "$kiln" tune --cache-dir "$c" --head-dim 32 --seqlen-q 64 --seqlen-k 64 --heads 2 --causal \
  --space "block_m=16,32;block_n=16,1000"
# BLOCK_N 1000 cannot compile: the space never offers it (no candidate line with 1000)
! grep -qE '^ +(16|32) +1000 ' "$tmp/out" && grep -qE '^ +16 +16 ' "$tmp/out" &&
  echo "PASS tune-invalid" || { echo "FAIL tune-invalid"; fails=$((fails + 1)); }
# a space none of whose values the template accepts is bad usage, as is a malformed one
expect tune-space-invalid-value 2 'none of the 2 points of the tuning space is a tiling' -- \
  "$kiln" tune --cache-dir "$c" --head-dim 32 --seqlen-q 32 --space "block_m=24;block_n=16,32"
expect tune-space-malformed 2 'error' -- \
  "$kiln" tune --cache-dir "$c" --head-dim 32 --seqlen-q 32 --space "block_q=16"
# empty items and values are errors (issue 16, case 10: they were passed over)
expect tune-space-empty-value 2 "an empty value for block_m in '16,,32'" -- \
  "$kiln" tune --cache-dir "$c" --head-dim 32 --seqlen-q 32 --space "block_m=16,,32"
expect tune-space-only-separators 2 "an empty item in ';;;'" -- \
  "$kiln" tune --cache-dir "$c" --head-dim 32 --seqlen-q 32 --space ";;;"
expect cache-ls 0 '1 entries' -- "$kiln" cache ls --cache-dir "$c"
expect cache-ls-records 0 \
  'fwd dtype=f16;d=32;causal=1;lse=1;window=0;softcap=0;alibi=0;bias=0;doc=0;prefix=0;layout=0;mods=0 f16 D32 bucket 64 host-' \
  -- "$kiln" cache ls --cache-dir "$c"
expect cache-verify 0 '1 entries, 1 valid, 0 corrupt' -- "$kiln" cache verify --cache-dir "$c"
# a flipped byte in the one entry: verify finds and removes it (exit 1)
f=$(ls "$c"/objects-v1/* | head -n 1)
printf '\x5a' | dd of="$f" bs=1 seek=200 conv=notrunc status=none
expect cache-verify-corrupt 1 '1 corrupt removed' -- "$kiln" cache verify --cache-dir "$c"
expect cache-clear 0 'removed 0 entries' -- "$kiln" cache clear --cache-dir "$c"
expect cache-bad-sub 2 'usage: kiln cache' -- "$kiln" cache frobnicate
# looking changes nothing (issue 16, case 9): a missing directory is not created, a bad tuning
# database is a warning and stays as it is (it was moved aside and replaced before)
expect cache-ls-missing 0 'no such directory \(nothing cached; not created\)' -- \
  "$kiln" cache ls --cache-dir "$tmp/none"
[ ! -e "$tmp/none" ] && echo "PASS cache-ls-not-created" ||
  { echo "FAIL cache-ls-not-created"; fails=$((fails + 1)); }
mkdir -m 0700 "$tmp/baddb" && echo 'not a database, some notes' >"$tmp/baddb/tuning.sqlite3"
chmod 0600 "$tmp/baddb/tuning.sqlite3" && cp "$tmp/baddb/tuning.sqlite3" "$tmp/baddb.copy"
expect cache-ls-bad-db 0 'tuning.sqlite3: file is not a database; left as it is' -- \
  "$kiln" cache ls --cache-dir "$tmp/baddb"
cmp -s "$tmp/baddb/tuning.sqlite3" "$tmp/baddb.copy" && [ -z "$(ls "$tmp/baddb" | grep bad-)" ] &&
  echo "PASS cache-ls-bad-db-kept" || { echo "FAIL cache-ls-bad-db-kept"; fails=$((fails + 1)); }
# a directory at an entry's name is removed by verify (it stayed, reported removed), and clear
# leaves a temp file younger than an hour (another process's write in flight)
mkdir -p "$c/objects-v1/0123456789abcdef0123456789abcdef/sub"
expect cache-verify-dir-entry 1 '1 corrupt removed' -- "$kiln" cache verify --cache-dir "$c"
[ ! -e "$c/objects-v1/0123456789abcdef0123456789abcdef" ] && echo "PASS cache-dir-entry-gone" ||
  { echo "FAIL cache-dir-entry-gone"; fails=$((fails + 1)); }
: >"$c/objects-v1/.tmp-01234567-0000000000000001"
expect cache-clear-fresh-temp 0 '1 temp files younger than an hour left alone' -- \
  "$kiln" cache clear --cache-dir "$c"
[ -e "$c/objects-v1/.tmp-01234567-0000000000000001" ] && echo "PASS cache-clear-kept-temp" ||
  { echo "FAIL cache-clear-kept-temp"; fails=$((fails + 1)); }
# a directory writable by all users is refused
mkdir -m 0777 "$tmp/open" && chmod 0777 "$tmp/open"
expect tune-insecure 2 'writable by all users' -- \
  "$kiln" tune --cache-dir "$tmp/open" --head-dim 32 --seqlen-q 32 --space "block_m=16;block_n=16"
expect cache-insecure 2 'writable by all users' -- "$kiln" cache ls --cache-dir "$tmp/open"
expect targets-auto 0 '^auto = host' -- "$kiln" targets
# a varlen run through the API (capacities described), then its kernel from the cache
v=$tmp/varlen
expect run-varlen-api 0 ' PASS$' -- \
  "$kiln" run --target host --cache-dir "$v" --varlen 1,17,0,70/1,30,5,70 --heads 4 --kv-heads 1 \
  --causal --head-dim 48
expect run-varlen-api-cached 0 'prepare: cache hit' -- \
  "$kiln" run --target host --cache-dir "$v" --varlen 2,9 --heads 4 --kv-heads 1 --causal \
  --head-dim 48
expect tune-varlen 2 'varlen kernels are not tuned yet' -- \
  "$kiln" tune --target host --cache-dir "$v" --varlen 2,9 --head-dim 48
# a paged KV run through the API (the block table checked, capacities described), then cached
expect run-paged-api 0 ' PASS$' -- \
  "$kiln" run --target host --cache-dir "$v" --paged 16:1,33,0,70 --seqlen-q 2 --heads 8 \
  --kv-heads 2 --causal --head-dim 48
expect run-paged-api-cached 0 'prepare: cache hit' -- \
  "$kiln" run --target host --cache-dir "$v" --paged 7:9 --seqlen-q 2 --heads 8 --kv-heads 2 \
  --causal --head-dim 48
expect tune-paged 2 'paged kernels are not tuned yet' -- \
  "$kiln" tune --target host --cache-dir "$v" --paged 16 --head-dim 48

echo "api_cli: $fails failed"
[ "$fails" -eq 0 ]
