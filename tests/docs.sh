#!/usr/bin/env bash
# docs.sh — keeps the documentation true (CTest `docs`).
# usage: docs.sh SOURCE_DIR BUILD_DIR
#
# 1. Samples.  In README.md, docs/*.md, examples/*.md, autotune/*.md and bench/*.md, a line
#    `$ COMMAND` inside a fenced block is a command, and the lines after it up to the next `$ `
#    line or the end of the block are its output (stdout and stderr together).  Each file's
#    commands run in order in a fresh directory that holds links to the repository's top-level
#    entries (so `build/tools/kiln`, `examples/...`, `tests/...` resolve) and a fresh cache
#    (KILN_CACHE_DIR), with no GPU driver (KILN_CUDA_LIBRARY=none, KILN_HIP_LIBRARY=none).
#    The output must equal the documented text after both are masked:
#      - a number followed by ms, s, us, µs, GFLOP/s or TFLOP/s, and median_us= / min_us= values
#        (timings), the three timing columns and the *best* mark of a `kiln tune` table row;
#      - 32 hex digits (cache keys), dates (`2026-12-01 01:46:01`);
#      - the host CPU's name after `target=host device=` and in `host-<cpu>` (tuning records);
#      - the run directory's absolute path (shown as <tmp>).
#    In the documented text a line `...` stands for any number of lines and `<...>` within a line
#    for any text (machine-dependent parts: CPU model, driver messages, object sizes).  A last
#    output line `[exit N]` says the command exits N (otherwise it must exit 0).
# 2. Links.  Every relative markdown link [text](path) and every `path` in backquotes that
#    starts with a top-level directory of the repository names a file or directory that
#    exists, every kn_* / kiln_* / api_* name in backquotes is a name in the code, and no
#    document sends the reader outside the repository (../shared, /work/).
# 3. The command line.  Every command and option `kiln --help` lists appears in docs/cli.md,
#    and every `--option` docs/cli.md names is listed by `kiln --help` (the few accepted but
#    unlisted ones below are checked to be accepted instead).
# 4. The check can fail: a copy of the docs with a documented option renamed, a command's
#    option dropped from docs/cli.md, a broken link and an unknown name must fail steps 1-3 (skipped with
#    KILN_DOCS_NO_SELF_TEST=1, as the copy's own run does).
# KILN_DOCS_FILES="README.md docs/cli.md" restricts steps 1 and 2 to those files.
set -u
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
kiln=$build/tools/kiln
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

cd "$src" || exit 2
if [ -n "${KILN_DOCS_FILES:-}" ]; then files=$KILN_DOCS_FILES
else files=$(ls README.md docs/*.md examples/*.md autotune/*.md bench/*.md 2>/dev/null); fi

export KILN_CUDA_LIBRARY=none KILN_HIP_LIBRARY=none KILN_TUNE_PROGRESS=0
unset KILN_AUTOTUNE KILN_TUNE_SPACE KILN_CACHE_FAULT KILN_DUMP KILN_CACHE_MAX_BYTES \
      KILN_HOST_THREADS KILN_PTXAS KILN_VERIFY_EACH

# ---- 1. samples ------------------------------------------------------------------------------

# masks what depends on timing and on the machine (stdin -> stdout); $1: the run directory
mask() {
  sed -E -e "s#$1#<tmp>#g" \
    -e 's/[0-9]+(\.[0-9]+)? (ms|s|us|µs|GFLOP\/s|TFLOP\/s)([^A-Za-z0-9_]|$)/<t> \2\3/g' \
    -e 's/(median_us|min_us)=[0-9.]+/\1=<t>/g' \
    -e 's/^(( +[0-9]+){5}) +[0-9.]+ +[0-9.]+ +[0-9.]+  timed( \*best\*)?$/\1 <t> <t> <t>  timed/' \
    -e 's/[0-9a-f]{32}/<hash>/g' \
    -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}/<date>/g' \
    -e 's/(target=host device=).*( kernel=)/\1<cpu>\2/; s/(target=host device=)[^=]*$/\1<cpu>/' \
    -e 's/(^|[ (])host-[A-Za-z0-9_.-]+/\1host-<cpu>/g' \
    -e 's/[[:space:]]+$//'
}

# documented (with ... and <...>) against actual, both masked: 0 when they match
match() {
  awk -v want="$1" -v got="$2" '
    function glob(p, s,   n, parts, i, at, k) {   # p with <...> wildcards against s
      n = split(p, parts, /<\.\.\.>/)
      if (n == 1) return p == s
      if (substr(s, 1, length(parts[1])) != parts[1]) return 0
      at = length(parts[1]) + 1
      for (i = 2; i < n; i++) {
        k = index(substr(s, at), parts[i])
        if (parts[i] != "" && k == 0) return 0
        if (parts[i] != "") at += k - 1 + length(parts[i])
      }
      if (length(s) - at + 1 < length(parts[n])) return 0
      return substr(s, length(s) - length(parts[n]) + 1) == parts[n]
    }
    BEGIN {
      nw = 0; while ((getline l < want) > 0) w[++nw] = l
      ng = 0; while ((getline l < got) > 0) g[++ng] = l
      i = 1; j = 1
      while (i <= nw) {
        if (w[i] == "...") {
          if (i == nw) exit 0
          while (j <= ng && !glob(w[i + 1], g[j])) j++
          if (j > ng) exit 1
          i++
          continue
        }
        if (j > ng || !glob(w[i], g[j])) exit 1
        i++; j++
      }
      exit j <= ng
    }'
}

# one file's samples as numbered files: N.cmd, N.want (output), N.rc (exit code)
extract() {
  awk -v dir="$2" '
    function flush() {
      if (n == 0 || done[n]) return
      while (nl > 0 && out[nl] ~ /^[ \t]*$/) nl--
      rc = 0
      if (nl > 0 && out[nl] ~ /^\[exit [0-9]+\]$/) { rc = out[nl]; gsub(/[^0-9]/, "", rc); nl-- }
      f = dir "/" n ".want"; printf "" > f
      for (k = 1; k <= nl; k++) print out[k] > f
      close(f)
      print rc > (dir "/" n ".rc"); close(dir "/" n ".rc")
      done[n] = 1
    }
    /^[ \t]*```/ { if (fence) flush(); fence = !fence; next }
    fence && /^\$ / {
      flush(); n++; nl = 0
      c = dir "/" n ".cmd"; print substr($0, 3) > c; close(c)
      print FILENAME ":" FNR > (dir "/" n ".where"); close(dir "/" n ".where")
      next
    }
    fence && n && !done[n] { out[++nl] = $0 }
    END { flush() }' "$1"
}

nsamples=0
for f in $files; do
  grep -q '^[[:space:]]*\$ ' "$f" || continue
  d=$tmp/samples/$(echo "$f" | tr / _)
  run=$tmp/run/$(echo "$f" | tr / _)
  mkdir -p "$d" "$run"
  for e in "$src"/*; do
    case $(basename "$e") in build*) ;; *) ln -s "$e" "$run/$(basename "$e")" ;; esac
  done
  ln -s "$build" "$run/build"
  extract "$f" "$d"
  n=1
  while [ -f "$d/$n.cmd" ]; do
    cmd=$(cat "$d/$n.cmd") where=$(cat "$d/$n.where") want_rc=$(cat "$d/$n.rc")
    (cd "$run" && KILN_CACHE_DIR="$run/.cache" bash -c "$cmd") >"$d/$n.out" 2>&1
    rc=$?
    mask "$run" <"$d/$n.want" >"$d/$n.want.m"
    mask "$run" <"$d/$n.out" >"$d/$n.out.m"
    if [ "$rc" -ne "$want_rc" ]; then
      fail "$where: \$ $cmd: exit $rc, documented $want_rc"; sed 's/^/  | /' "$d/$n.out"
    elif ! match "$d/$n.want.m" "$d/$n.out.m"; then
      fail "$where: \$ $cmd: the output differs from the documented text (masked; - documented, + actual):"
      diff -u "$d/$n.want.m" "$d/$n.out.m" | tail -n +3 | sed 's/^/  /'
    fi
    nsamples=$((nsamples + 1))
    n=$((n + 1))
  done
done
echo "docs: $nsamples samples run"

# ---- 2. links and file references ------------------------------------------------------------

tops=$(ls -d */ | tr -d / | grep -v "^build" | paste -sd "|")
# every kn_* / kiln_* / api_* name of the sources, tests, scripts and build files
grep -rhoE '\b(kn|kiln|api)_[A-Za-z0-9_]+' --include='*.[ch]' --include='*.cpp' --include='*.py' \
  --include='*.sh' --include='*.txt' --include='*.cmake' --include='*.map' --exclude=docs.sh \
  $(ls -d */ | grep -v '^build\|^docs/') CMakeLists.txt | sort -u >"$tmp/ids"
for f in $files; do
  dir=$(dirname "$f")
  # markdown links, outside fenced blocks: [text](target), not URLs or anchors
  awk '/^[ \t]*```/ { fence = !fence; next } !fence' "$f" |
    grep -o '\]([^)]*)' | sed -E 's/^\]\(//; s/\)$//; s/#.*//' | grep -v -E '^(https?:|mailto:|$)' |
    sort -u | while read -r t; do
      [ -e "$dir/$t" ] || echo "$f: link to a missing file: $t"
    done
  # `path` in backquotes under a top-level directory (a trailing /, a *, `x.c/.h` for a pair);
  # bench/h200/pack/ is what bench/h200/build_static.sh writes (gitignored)
  grep -o '`[A-Za-z0-9_./*-]*`' "$f" | tr -d '`' | grep -E "^($tops)/" |
    grep -v '^bench/h200/pack/' | sed -E 's#^(.*)\.([a-z]+)/\.([a-z]+)$#\1.\2 \1.\3#' |
    tr ' ' '\n' | sort -u | while read -r p; do
      case $p in *'*'*) ls -d $p >/dev/null 2>&1 || echo "$f: no file matches \`$p\`";;
        *) [ -e "$p" ] || echo "$f: \`$p\` does not exist";; esac
    done
  grep -n -E '\.\./shared|/work/' "$f" | sed "s#^#$f: sends the reader outside the repository: #"
  # kn_*, kiln_*, api_* names in backquotes are in the code (`kn_rt_*`: a prefix)
  grep -oE '`[^`]*`' "$f" | grep -oE '\b(kn|kiln|api)_[A-Za-z0-9_]+\*?' | sort -u |
    while read -r id; do
      case $id in *'*') grep -q "^${id%\*}" "$tmp/ids" ;; *) grep -qx -- "$id" "$tmp/ids" ;; esac ||
        echo "$f: \`$id\` is not a name in the code"
    done
done >"$tmp/links"
if [ -s "$tmp/links" ]; then fail "links and file references:"; sed 's/^/  /' "$tmp/links"; fi

# ---- 3. the command line against docs/cli.md -------------------------------------------------

cli=docs/cli.md
if [ ! -f "$cli" ]; then
  fail "$cli is missing"
else
  "$kiln" --help >"$tmp/help" 2>&1
  # commands: the first word of the lines under "commands:"; options: every --word and -o
  awk '/^commands:/ { on = 1; next } /^[a-z]/ { on = 0 } on && /^  [a-z]/ { print $1 }' \
    "$tmp/help" | sort -u >"$tmp/commands"
  grep -o -E -- '(^|[^A-Za-z0-9-])(--[a-z][a-z-]*|-o)\b' "$tmp/help" | sed -E 's/^[^-]*//' |
    sort -u >"$tmp/options"
  [ -s "$tmp/commands" ] && [ -s "$tmp/options" ] || fail "cannot read kiln --help"
  while read -r c; do
    grep -q "^## \`kiln $c" "$cli" || fail "$cli: no section '## \`kiln $c ...\`' for the command $c"
  done <"$tmp/commands"
  while read -r o; do
    grep -q -- "\`$o[\` =]" "$cli" || fail "$cli: the option $o (kiln --help) is not documented"
  done <"$tmp/options"
  # and back: every command section names a command of --help, every --option is listed there
  grep -o '^## `kiln [a-z-]*' "$cli" | sed 's/.* //' | sort -u | while read -r c; do
    grep -qx -- "$c" "$tmp/commands" || echo "the command $c is not in kiln --help"
  done >"$tmp/back"
  # accepted but not listed by --help: each checked to be accepted
  unlisted="--help -h --output"
  grep -o -E -- '`--[a-z][a-z-]*' "$cli" | tr -d '`' | sort -u | while read -r o; do
    grep -qx -- "$o" "$tmp/options" && continue
    case " $unlisted " in *" $o "*) ;; *) echo "the option $o is not in kiln --help";; esac
  done >>"$tmp/back"
  if [ -s "$tmp/back" ]; then fail "$cli documents what the tool does not list:"; sed 's/^/  /' "$tmp/back"; fi
  "$kiln" run -h >/dev/null 2>&1 || fail "kiln run -h does not exit 0"
  "$kiln" compile --target host --emit obj --output "$tmp/o.o" >/dev/null 2>&1 ||
    fail "kiln compile --output is not accepted"
fi

# ---- 4. the check can fail -------------------------------------------------------------------

if [ -z "${KILN_DOCS_NO_SELF_TEST:-}" ] && [ -z "${KILN_DOCS_FILES:-}" ] && [ -f "$cli" ]; then
  copy=$tmp/copy
  mkdir -p "$copy/docs"
  for e in "$src"/*; do
    case $(basename "$e") in docs|README.md|build*) ;; *) ln -s "$e" "$copy/$(basename "$e")" ;; esac
  done
  cp "$src"/docs/*.md "$copy/docs/"
  # a documented option renamed in a sample, an option dropped from cli.md, a broken link
  sed -E '0,/^(\$ build\/tools\/kiln run .*)--head-dim /s//\1--head-dimension /' \
    "$src/README.md" >"$copy/README.md"
  sed -i 's/`--stats`/`--statistics`/g' "$copy/docs/cli.md"
  echo 'See [the missing page](missing.md) and `kn_no_such_function`.' >>"$copy/docs/api.md"
  KILN_DOCS_NO_SELF_TEST=1 KILN_DOCS_FILES="README.md docs/api.md" \
    bash "$0" "$copy" "$build" >"$tmp/self" 2>&1
  for want in 'README.md:[0-9]+: \$ build/tools/kiln run .*--head-dimension' \
              'docs/api.md: link to a missing file: missing.md' \
              'docs/api.md: `kn_no_such_function` is not a name in the code' \
              'the option --stats \(kiln --help\) is not documented' \
              'the option --statistics is not in kiln --help'; do
    grep -Eq -- "$want" "$tmp/self" || { fail "self-test: a broken copy passed /$want/"; sed 's/^/  | /' "$tmp/self"; }
  done
fi

echo "docs: $fails failed"
[ "$fails" -eq 0 ]
