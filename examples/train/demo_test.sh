#!/bin/sh
# The README's first command in a short configuration (label "example"): scripts/demo with this
# build's binaries on 4 ranks for 8 steps. Its report must name every rank, and the HTML page and
# the Chrome trace must be written.
#
#   demo_test.sh SCRIPTS_DEMO BUILD_DIR OUT_DIR
set -u
demo=$1 build_dir=$2 out=$3
if ! "$demo" --no-build --build-dir "$build_dir" --ranks 4 --steps 8 --out "$out" >"$out.log" 2>&1; then
  echo "FAIL: scripts/demo failed; its output:"
  cat "$out.log"
  exit 1
fi
status=0
for rank in 0 1 2 3; do
  if ! grep -Eq "^  $rank +train_step +8 " "$out/report.txt"; then
    echo "FAIL: rank $rank's 8 steps are missing from the report"
    status=1
  fi
done
for file in report.html report.json trace.json spans.jsonl; do
  [ -s "$out/$file" ] || { echo "FAIL: $out/$file is missing or empty"; status=1; }
done
[ $status -eq 0 ] || cat "$out/report.txt"
exit $status
