#!/usr/bin/env bash
# python_binding.sh — runs tests/python_binding.py against a built libkiln.so.
# usage: python_binding.sh LIBKILN_SO
# Exit 77 (CTest's skip) when python3 is missing.
set -u
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP python_binding: python3 not found"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
KILN_LIBRARY=$1 exec python3 "$here/python_binding.py"
