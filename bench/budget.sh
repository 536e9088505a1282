# What the --check of bench/count_span_instructions.sh and bench/count_python_instructions.sh
# share: their options, the skip when valgrind is missing, and the comparison with a budget file
# (lines "MODE CEILING GOAL  # note"). Sourced, not run.

# budget_options DEFAULT_BUDGET ARGS...: sets check (0/1), budget (the file) and rest (an array:
# the arguments after the options).
budget_options() {
  check=0
  budget=$1
  shift
  while (($#)); do
    case "$1" in
      --check) check=1; shift ;;
      --budget) budget=$2; shift 2 ;;
      *) break ;;
    esac
  done
  rest=("$@")
}

# budget_modes SCRIPT: the modes of $budget, or exit 77 (ctest's skip) when valgrind is missing.
budget_modes() {
  if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
    echo "$1: valgrind is not installed (scripts/install-deps)" >&2
    exit 77
  fi
  awk '!/^#/ && NF { print $1 }' "$budget"
}

# budget_of MODE: "CEILING GOAL" of MODE in $budget.
budget_of() {
  awk -v m="$1" '$1 == m { print $2, $3 }' "$budget"
}

# budget_verdict COUNT CEILING: "ok" when COUNT is at most CEILING, else "OVER".
budget_verdict() {
  awk -v c="$1" -v l="$2" 'BEGIN { print (c + 0 <= l + 0) ? "ok" : "OVER" }'
}
