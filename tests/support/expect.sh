# shellcheck shell=bash
# Shared by the CLI script suites (sourced): fail naming the case, mpirun with a hang timeout, and
# "this command exits with code N and prints X" checks on $WORK/out.txt.
# Expects CASE, WORK, MPIEXEC and MPIFLAGS (an array) from the sourcing script.
fail() { echo "FAIL($CASE): $*" >&2; exit 1; }
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
