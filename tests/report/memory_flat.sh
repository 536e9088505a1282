#!/bin/sh
# lens report's memory follows the aggregates and the largest trace, not the span count (the spans
# of the steps wait in temporary files, docs/report.md): the same job shape with four times the
# spans (100,000 then 400,000 spans, 8 ranks) must not raise the report's peak resident memory by
# more than 8 MiB. report_scale writes the input, runs the report, checks its counts and
# prints the peak RSS (from wait4).
#
#   memory_flat.sh REPORT_SCALE LENS_BINARY WORK_DIR
set -u
scale=$1 lens=$2 dir=$3
rss() {  # peak RSS in KiB of `lens report` on $1 spans
  out=$("$scale" "$lens" "$dir/$1" "$1" 8) || { echo "FAIL: report_scale $1 failed:"; echo "$out"; exit 1; }
  echo "$out" >&2
  echo "$out" | sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' | awk '{ printf "%d", $1 * 1024 }'
}
small=$(rss 100000)
large=$(rss 400000)
[ -n "$small" ] && [ -n "$large" ] || { echo "FAIL: no peak RSS in report_scale's output"; exit 1; }
growth=$((large - small))
echo "peak RSS: ${small} KiB for 100k spans, ${large} KiB for 400k spans (growth ${growth} KiB)"
if [ "$growth" -gt 8192 ]; then
  echo "FAIL: 4x the spans raised the report's peak memory by ${growth} KiB (bound 8192 KiB)"
  exit 1
fi
