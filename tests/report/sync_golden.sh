#!/bin/sh
# Writes a synthetic synchronous job (report_sync_job) and runs `lens report` on it, for the
# straggler goldens (tests/report/CMakeLists.txt):
#
#   sync_golden.sh SYNC_JOB LENS_BINARY [JOB_ARGS...] -- [REPORT_ARGS...]
set -u
job=$1 lens=$2
shift 2
job_args=
while [ $# -gt 0 ] && [ "$1" != -- ]; do job_args="$job_args $1"; shift; done
[ $# -gt 0 ] && shift
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086 # the job's arguments are words
"$job" $job_args >"$tmp/job.jsonl" || exit 1
cd "$tmp" && "$lens" report job.jsonl "$@"
