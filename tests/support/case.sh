# shellcheck shell=bash
# The harness of the CLI script suites, sourced as `source .../support/case.sh PREFIX CASE`:
# CASE, a private WORK directory (/tmp/ht-PREFIX-*, removed on exit), MPIFLAGS from ctest's
# MPIEXEC_FLAGS (a ;-list) and FORTUNES; fail naming the case, mpirun with a hang timeout
# (HT_MPI_TIMEOUT seconds, default 300), "this command exits with code N and prints X" checks on
# $WORK/out.txt, and the small real-text dataset most cases train on.
CASE="$2"
WORK=$(mktemp -d "/tmp/ht-$1-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
IFS=';' read -r -a MPIFLAGS <<<"${MPIEXEC_FLAGS:-}"
FORTUNES=/usr/share/games/fortunes

fail() { echo "FAIL($CASE): $*" >&2; exit 1; }
note() { echo "--- $*"; }
mpi() { local np=$1; shift; timeout "${HT_MPI_TIMEOUT:-300}" "$MPIEXEC" -np "$np" "${MPIFLAGS[@]}" "$@"; }
# expect_rc WANT CMD...: output in $WORK/out.txt (also printed).
expect_rc() {
  local want=$1; shift
  "$@" >"$WORK/out.txt" 2>&1; local rc=$?
  cat "$WORK/out.txt"
  [ "$rc" -eq 124 ] && fail "timed out (a rank hung?)"
  [ "$rc" -eq "$want" ] || fail "exit code $rc, expected $want"
}
expect_text() { grep -q -- "$1" "$WORK/out.txt" || fail "output lacks '$1'"; }
# expect_once TEXT: $WORK/out.txt holds TEXT (fixed string) exactly once for the whole job, without a backtrace.
expect_once() {
  local n; n=$(grep -c -F -- "$1" "$WORK/out.txt")
  [ "$n" -eq 1 ] || fail "'$1' printed $n times, expected once per job"
  grep -qi "backtrace\|terminate called" "$WORK/out.txt" && fail "backtrace in the output"
  return 0
}
# lm_data: $WORK/lm.h5, one fortunes file as a causal-lm dataset with a 10 % validation split.
lm_data() {
  "$HPCTRAIN" prepare --input "$FORTUNES/fortunes" --output "$WORK/lm.h5" --val-fraction 0.1 >"$WORK/prepare.log" 2>&1 \
    || { cat "$WORK/prepare.log"; fail "prepare failed"; }
}
