#!/usr/bin/env bash
# Instructions per disabled call-site gate, counted by callgrind (exact and repeatable, unlike
# timings on a shared machine). Usage: bench/count_gate_instructions.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
n=1000000
out=$(mktemp)
trap 'rm -f "$out" "$out".*' EXIT
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out.$1" --toggle-collect="*$1*" \
    "$build/bench/gate_instructions" "$n" >/dev/null 2>&1
  callgrind_annotate "$out.$1" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}
empty=$(count empty_loop)
sites=$(count disabled_sites)
awk -v e="$empty" -v s="$sites" -v n="$n" 'BEGIN {
  printf "empty loop: %.2f instructions/iteration\n", e / n
  printf "disabled site loop: %.2f instructions/iteration\n", s / n
  printf "disabled call-site gate: %.2f instructions\n", (s - e) / n
}'
