#!/bin/sh
# Runs a command and checks its exit status, its standard output against a golden file and its
# standard error for expected phrases. Used by the `cli` tests (tests/cli/CMakeLists.txt).
#
#   run_golden.sh [-o GOLDEN] [-x STATUS] [-e PHRASE]... -- COMMAND [ARG]...
#
#   -o GOLDEN  stdout must equal the file GOLDEN byte for byte; without -o it must be empty
#   -x STATUS  the expected exit status (default 0)
#   -e PHRASE  stderr must contain PHRASE (fixed string; repeatable); without -e it must be empty
#
# With LENS_UPDATE_GOLDEN=1 in the environment, GOLDEN is overwritten with the actual stdout
# instead (review the change with git diff).
set -u

golden=
expected_status=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/phrases"
while getopts o:x:e: opt; do
  case $opt in
    o) golden=$OPTARG ;;
    x) expected_status=$OPTARG ;;
    e) printf '%s\n' "$OPTARG" >>"$tmp/phrases" ;;
    *)
      echo "usage: run_golden.sh [-o GOLDEN] [-x STATUS] [-e PHRASE]... -- COMMAND..." >&2
      exit 2
      ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
  echo "run_golden.sh: no command given" >&2
  exit 2
fi

"$@" >"$tmp/stdout" 2>"$tmp/stderr"
status=$?

failed=0
fail() {
  printf 'FAIL: %s\n' "$1"
  failed=1
}

if [ "$status" -ne "$expected_status" ]; then
  fail "exit status $status, expected $expected_status"
fi
if [ -n "$golden" ] && [ "${LENS_UPDATE_GOLDEN:-0}" = 1 ]; then
  cp "$tmp/stdout" "$golden"
elif [ -n "$golden" ]; then
  if ! cmp -s "$golden" "$tmp/stdout"; then
    fail "stdout differs from $golden (diff -u expected actual):"
    diff -u "$golden" "$tmp/stdout"
  fi
elif [ -s "$tmp/stdout" ]; then
  fail "stdout should be empty"
fi
if [ -s "$tmp/phrases" ]; then
  while IFS= read -r phrase; do
    if ! grep -qF -- "$phrase" "$tmp/stderr"; then
      fail "stderr does not contain: $phrase"
    fi
  done <"$tmp/phrases"
elif [ -s "$tmp/stderr" ]; then
  fail "stderr should be empty"
fi

if [ "$failed" -ne 0 ]; then
  printf 'command:'
  for arg in "$@"; do printf " '%s'" "$arg"; done
  printf '\n--- stdout ---\n'
  cat "$tmp/stdout"
  printf -- '--- stderr ---\n'
  cat "$tmp/stderr"
  exit 1
fi
exit 0
