#!/usr/bin/env bash
# Runs the README's test command (./scripts/test.sh, what .ci/run runs) N times, each in a fresh
# `git clone` of the current commit in a temporary directory, with a CPU hog busy on one core beside
# it (a loaded machine is where timing assumptions in tests break). Prints, per run, PASS or FAIL,
# the failing tests, the run's wall time and what the run left new in the temp directory (a suite
# run should leave nothing there); exits 1 if any run failed.
#
#   scripts/stress-tests.sh N [--no-hog] [--keep] [--dry-run] [-- CTEST_ARGS...]
#
#   --no-hog    no CPU hog
#   --keep      keep each run's clone (default: removed after the run; its log is always kept)
#   --dry-run   print what would run, run nothing
#   -- ARGS     passed to ctest through scripts/test.sh, e.g. -- -LE cluster
#
# Only committed work is tested (the clone is of HEAD); a dirty worktree gets a warning. Logs go to
# STRESS_DIR (default a new /tmp/ht-stress-* directory). The caches of scripts/setup.sh (libtorch,
# ccache, the Python venv under ~/.cache/hpctrain) are shared by the clones, so each run costs a
# configure + build with a warm ccache plus the suite (see docs/benchmarks.md for the numbers).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

usage() { echo "usage: scripts/stress-tests.sh N [--no-hog] [--keep] [--dry-run] [-- CTEST_ARGS...]" >&2; exit 1; }
[ $# -ge 1 ] || usage
N=$1; shift
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "stress-tests: N must be a positive integer, not '$N'" >&2; usage; }
HOG=1; KEEP=0; DRY=0; CTEST_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-hog) HOG=0 ;;
    --keep) KEEP=1 ;;
    --dry-run) DRY=1 ;;
    --) shift; CTEST_ARGS=("$@"); break ;;
    *) echo "stress-tests: unknown option '$1'" >&2; usage ;;
  esac
  shift
done

COMMIT=$(git -C "$ROOT" rev-parse HEAD)
SUBJECT=$(git -C "$ROOT" log -1 --format=%s | cut -c1-80)
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
  echo "stress-tests: warning: uncommitted changes in $ROOT are not tested (each run clones commit ${COMMIT:0:12})" >&2
fi
NCPU=$(nproc)
HOG_CPU=$((NCPU - 1))   # the last core: the hog competes with the build and the tests, not with itself

if [ "$DRY" = 1 ]; then
  echo "stress-tests: would run $N time(s): git clone $ROOT -> a temporary directory, switch to ${COMMIT:0:12} ($SUBJECT),"
  echo "  then ./scripts/test.sh${CTEST_ARGS[*]:+ ${CTEST_ARGS[*]}}; CPU hog: $([ "$HOG" = 1 ] && echo "on core $HOG_CPU of $NCPU" || echo off); clones $([ "$KEEP" = 1 ] && echo kept || echo removed)"
  exit 0
fi

OUT="${STRESS_DIR:-$(mktemp -d /tmp/ht-stress-XXXXXX)}"
mkdir -p "$OUT"
CLONE=""; HOG_PID=""
stop_hog() { [ -n "$HOG_PID" ] && kill "$HOG_PID" 2>/dev/null; wait "$HOG_PID" 2>/dev/null; HOG_PID=""; }
cleanup() {
  stop_hog || true
  if [ -n "$CLONE" ] && [ "$KEEP" = 0 ]; then rm -rf "$CLONE"; fi
}
trap cleanup EXIT
trap 'echo "stress-tests: interrupted" >&2; exit 130' INT TERM

# A busy loop on one core, pinned there when taskset exists (util-linux).
start_hog() {
  if command -v taskset >/dev/null; then taskset -c "$HOG_CPU" bash -c 'while :; do :; done' &
  else bash -c 'while :; do :; done' &
  fi
  HOG_PID=$!
}

# The names of the failed tests in a ctest log ("  12 - mpi.x.np2 (Failed)" after "The following
# tests FAILED:"), comma-separated with ctest's reason.
failed_tests() {
  sed -n '/The following tests FAILED:/,$ s/^[[:space:]]*[0-9][0-9]* - \(.*\)$/\1/p' "$1" | paste -sd ',' - | sed 's/,/, /g'
}
# What a run leaves behind in the temp directory (top-level names; anything else on the machine that
# writes there shows up too, so it is reported, not failed).
TMP_ROOT="${TMPDIR:-/tmp}"
tmp_entries() { ls -A "$TMP_ROOT" | sort; }
fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

echo "stress-tests: $N run(s) of ./scripts/test.sh${CTEST_ARGS[*]:+ ${CTEST_ARGS[*]}} on ${COMMIT:0:12} ($SUBJECT)"
echo "stress-tests: CPU hog $([ "$HOG" = 1 ] && echo "on core $HOG_CPU of $NCPU" || echo off); logs in $OUT"
fails=0
results=()
for i in $(seq 1 "$N"); do
  CLONE=$(mktemp -d /tmp/ht-stress-clone-XXXXXX)
  log="$OUT/run-$i.log"
  start=$(date +%s)
  # A clone of the local repository (its objects are copied, so a later commit or gc here changes
  # nothing there), then the commit under test, detached.
  if ! { git clone --quiet --no-checkout "$ROOT" "$CLONE/src" && git -C "$CLONE/src" switch --quiet --detach "$COMMIT"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "stress-tests: run $i: cannot clone $ROOT at $COMMIT" >&2
    exit 2
  fi
  tmp_before=$(tmp_entries)
  [ "$HOG" = 1 ] && start_hog
  set +e
  (cd "$CLONE/src" && ./scripts/test.sh "${CTEST_ARGS[@]}") >>"$log" 2>&1
  rc=$?
  set -e
  stop_hog || true
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ]; then
    line="run $i/$N: PASS in $(fmt_time "$took")"
  else
    fails=$((fails + 1))
    names=$(failed_tests "$log")
    if [ -z "$names" ]; then
      names="no test failed: set-up or build failed (exit $rc), last line: $(grep -v '^[[:space:]]*$' "$log" | tail -n 1)"
    fi
    line="run $i/$N: FAIL (exit $rc) in $(fmt_time "$took"): $names (log: $log)"
  fi
  if [ "$KEEP" = 0 ]; then rm -rf "$CLONE"; else echo "stress-tests: run $i kept in $CLONE/src"; fi
  CLONE=""
  left=$(comm -13 <(echo "$tmp_before") <(tmp_entries) | paste -sd ' ' -)
  line+="; new in $TMP_ROOT: ${left:-nothing}"
  echo "stress-tests: $line"
  results+=("$line")
done

echo "stress-tests: ---- $((N - fails)) of $N run(s) passed (commit ${COMMIT:0:12}, hog $([ "$HOG" = 1 ] && echo on || echo off)) ----"
printf 'stress-tests:   %s\n' "${results[@]}"
[ "$fails" -eq 0 ]
