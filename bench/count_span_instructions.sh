#!/usr/bin/env bash
# The calling thread's instructions per span, counted by callgrind (exact and repeatable, unlike
# timings on a shared machine), the `file` exporter working on its own thread: LENS_SPAN with two
# attributes, managed_span by name with two set_attribute calls, a disabled managed_span by name
# and is_span_group_enabled (bench/span_instructions.cpp says how).
# Usage: bench/count_span_instructions.sh [BUILD_DIR] [span|managed|disabled|enabled ...]
#        bench/count_span_instructions.sh --check [--budget FILE] [BUILD_DIR]
# --check counts the modes of the budget (default bench/instruction_budget.txt) and exits 1 when
# one is above its ceiling, 77 when valgrind is missing (the ctest bench.instruction_budget).
set -euo pipefail
source "$(dirname "$0")/budget.sh"
budget_options "$(dirname "$0")/instruction_budget.txt" "$@"
set -- "${rest[@]}"
build=${1:-build}
shift || true
modes=${*:-span managed disabled enabled}
if ((check)); then modes=$(budget_modes count_span_instructions.sh); fi
chunks=20
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for mode in $modes; do
  valgrind --tool=callgrind --separate-threads=yes --collect-atstart=no \
    --callgrind-out-file="$dir/$mode" "$build/bench/span_instructions" "$mode" "$chunks" \
    >"$dir/$mode.log" 2>&1 || { cat "$dir/$mode.log" >&2; exit 1; }
  # Collection was on only on the main thread (the first profile), around the measured loops.
  total=$(callgrind_annotate "$dir/$mode-01" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  count=$(awk -v t="$total" -v n=$((chunks * 1000)) 'BEGIN { printf "%.1f", t / n }')
  if ((check)); then
    read -r ceiling goal < <(budget_of "$mode")
    verdict=$(budget_verdict "$count" "$ceiling")
    echo "$mode: $count instructions on the calling thread (ceiling $ceiling, goal $goal): $verdict"
    [[ $verdict == ok ]] || failed=1
  else
    echo "$mode: $count instructions on the calling thread"
  fi
done
if ((${failed:-0})); then
  echo "count_span_instructions.sh: above the ceiling of $budget: a change made the span dearer" >&2
  exit 1
fi
