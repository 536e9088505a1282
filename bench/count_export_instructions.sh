#!/usr/bin/env bash
# Instructions per span on the exporter thread (drain, ids, encoding, recycling), counted by
# callgrind: exact and repeatable, unlike timings on a shared machine. Two runs of
# export_instructions per encoding, of 20,000 and 100,000 spans; the difference of the exporter
# thread's totals over the 80,000 spans between them leaves out what a run costs once (the
# thread's start, the first allocations, the final flush).
# Usage: bench/count_export_instructions.sh [BUILD_DIR] [proto|json ...]
set -euo pipefail
build=${1:-build}
shift || true
modes=${*:-proto json}
small=20000
large=100000
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The exporter thread's total: the one thread whose profile has Pipeline::drain.
count() {
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/$1.$2" \
    "$build/bench/export_instructions" "$1" "$2" >"$dir/$1.$2.log" 2>&1
  for f in "$dir/$1.$2"-*; do
    if grep -q 'Pipeline::drain' "$f"; then
      callgrind_annotate "$f" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
      return
    fi
  done
  echo "no exporter thread found in $dir/$1.$2-*" >&2
  exit 1
}
for mode in $modes; do
  a=$(count "$mode" $small)
  b=$(count "$mode" $large)
  awk -v m="$mode" -v a="$a" -v b="$b" -v s="$small" -v l="$large" 'BEGIN {
    printf "%s: exporter thread %.0f instructions/span (%d spans: %.0f/span all in)\n",
      m, (b - a) / (l - s), l, b / l
  }'
done
