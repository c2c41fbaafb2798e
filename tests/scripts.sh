#!/usr/bin/env bash
# scripts.sh — every shell script and Python file of the repository parses (CTest `scripts`):
# the device scripts (bench/h200/) run only on the lent GPU, so a merge that breaks one would
# otherwise be found there, at the cost of a device session.
# usage: scripts.sh SOURCE_DIR
set -u
src=$1
fails=0
while IFS= read -r f; do
  if ! bash -n "$f" 2>"${TMPDIR:-/tmp}/kiln-scripts.$$"; then
    echo "FAIL $f: $(cat "${TMPDIR:-/tmp}/kiln-scripts.$$")"
    fails=$((fails + 1))
  fi
done < <(find "$src" -name '*.sh' -not -path "$src/build*/*" -not -path '*/.git/*' -not -path '*/pack/*')
rm -f "${TMPDIR:-/tmp}/kiln-scripts.$$"
while IFS= read -r f; do
  if ! python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f"; then
    echo "FAIL $f"
    fails=$((fails + 1))
  fi
done < <(find "$src" -name '*.py' -not -path "$src/build*/*" -not -path '*/.git/*' -not -path '*/pack/*')
echo "scripts: $fails failed"
[ "$fails" -eq 0 ]
