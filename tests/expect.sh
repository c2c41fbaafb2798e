# expect.sh — the assertion the command-line tests share (sourced by cli.sh and api_cli.sh).
# The sourcing script sets $tmp (a scratch directory) and fails=0 before using it.

# expect NAME WANT_RC REGEX -- CMD...: CMD exits WANT_RC and its output matches REGEX
expect() {
  local name=$1 want=$2 re=$3
  shift 4
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, wanted $want"; sed 's/^/  | /' "$tmp/out"; fails=$((fails + 1))
  elif ! grep -Eq -- "$re" "$tmp/out"; then
    echo "FAIL $name: output does not match /$re/"; sed 's/^/  | /' "$tmp/out"; fails=$((fails + 1))
  else
    echo "PASS $name"
  fi
}
