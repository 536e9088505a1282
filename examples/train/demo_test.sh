#!/bin/sh
# The README's first command in a short configuration (label "example"): scripts/demo with this
# build's binaries on 4 ranks, 8 steps of the C++ job and, with "torch", 3 of the PyTorch job. The
# report of each job must name every rank with its steps, and the HTML pages and the Chrome trace
# must be written, the trace with each rank's dl.loss counter track; the C++ job's step 6 (three
# quarters of 8), stalled on rank 1, must be captured by every rank's flight recorder, rank 1
# listed first.
#
#   demo_test.sh SCRIPTS_DEMO BUILD_DIR OUT_DIR torch|no-torch
set -u
demo=$1 build_dir=$2 out=$3 torch=$4
if [ "$torch" = torch ]; then job=--torch-steps; steps=3; else job=--no-torch; steps=; fi
if ! "$demo" --no-build --build-dir "$build_dir" --ranks 4 --steps 8 $job $steps --out "$out" \
    >"$out.log" 2>&1; then
  echo "FAIL: scripts/demo failed; its output:"
  cat "$out.log"
  exit 1
fi
status=0
check_steps() {  # check_steps REPORT N: every rank has N train_step spans in REPORT
  for rank in 0 1 2 3; do
    if ! grep -Eq "^  $rank +train_step +$2 " "$out/$1"; then
      echo "FAIL: rank $rank's $2 steps are missing from $1"
      status=1
    fi
  done
}
files="report.html report.json trace.json spans.jsonl"
if [ "$torch" = torch ]; then
  check_steps report.txt 8  # both jobs, one section each
  check_steps report.txt 3
  check_steps report-cpp.txt 8
  check_steps report-torch.txt 3
  grep -q "allreduce_bucket" "$out/report-torch.txt" || { echo "FAIL: no DDP bucket spans"; status=1; }
  files="$files report-torch.html torch_train.log"
  cpp_report=report-cpp.txt
else
  check_steps report.txt 8
  cpp_report=report.txt
fi
if ! grep -q "^  train_step iteration 6: 4 ranks (slow_step)" "$out/$cpp_report"; then
  echo "FAIL: the stalled step 6 is not among the captured steps of every rank in $cpp_report"
  status=1
elif ! grep -A2 "^  train_step iteration 6: 4 ranks" "$out/$cpp_report" | grep -Eq "^    1 +slow_step"; then
  echo "FAIL: rank 1, which stalled, is not listed first under the captured step 6"
  status=1
fi
# The metrics as counter tracks beside each rank's spans (docs/report.md#lens-convert).
for rank in 0 1 2 3; do
  if ! grep -q "\"name\":\"dl.loss\",\"cat\":\"metric\",\"ph\":\"C\",\"pid\":$rank," "$out/trace.json"; then
    echo "FAIL: no dl.loss counter track for rank $rank in trace.json"
    status=1
  fi
done
for file in $files; do
  [ -s "$out/$file" ] || { echo "FAIL: $out/$file is missing or empty"; status=1; }
done
[ $status -eq 0 ] || cat "$out/report.txt"
exit $status
