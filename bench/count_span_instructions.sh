#!/usr/bin/env bash
# The calling thread's instructions per span, counted by callgrind (exact and repeatable, unlike
# timings on a shared machine), the `file` exporter working on its own thread: LENS_SPAN with two
# attributes, managed_span by name with two set_attribute calls, a disabled managed_span by name
# and is_span_group_enabled (bench/span_instructions.cpp says how).
# Usage: bench/count_span_instructions.sh [BUILD_DIR] [span|managed|disabled|enabled ...]
set -euo pipefail
build=${1:-build}
shift || true
modes=${*:-span managed disabled enabled}
chunks=20
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for mode in $modes; do
  valgrind --tool=callgrind --separate-threads=yes --collect-atstart=no \
    --callgrind-out-file="$dir/$mode" "$build/bench/span_instructions" "$mode" "$chunks" \
    >"$dir/$mode.log" 2>&1 || { cat "$dir/$mode.log" >&2; exit 1; }
  # Collection was on only on the main thread (the first profile), around the measured loops.
  total=$(callgrind_annotate "$dir/$mode-01" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  awk -v m="$mode" -v t="$total" -v n=$((chunks * 1000)) \
    'BEGIN { printf "%s: %.1f instructions on the calling thread\n", m, t / n }'
done
