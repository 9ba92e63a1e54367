#!/usr/bin/env bash
# The MPI test harness turns a failure on rank 1 alone into a failed test: runs the deliberately
# failing test under mpirun and requires exactly that failure (exit 1, the rank-1 failure line,
# rank 0's note), so a launch refusal, a crash or a hang cannot pass for it.
# Usage: expect_rank1_failure.sh MPIEXEC NP BINARY [MPIEXEC_FLAGS...]
set -uo pipefail
mpiexec=$1 np=$2 binary=$3
shift 3
log=$(mktemp /tmp/ht-harness-XXXXXX.log)
trap 'rm -f "$log"' EXIT
timeout 120 "$mpiexec" -np "$np" "$@" "$binary" >"$log" 2>&1
rc=$?
fail() { cat "$log"; echo "FAIL: $*" >&2; exit 1; }
[ "$rc" -eq 1 ] || fail "exit code $rc, expected 1 (the OR of the ranks' gtest results)"
grep -q "^\[rank 1\] FAILURE .*test_harness_rank1_fails.cpp" "$log" || fail "no '[rank 1] FAILURE' line naming the test"
grep -q "deliberate failure on rank 1" "$log" || fail "the failure message of rank 1 is missing"
grep -q "a test failed on another rank" "$log" || fail "rank 0 did not report the failure of another rank"
[ "$(grep -c '^\[rank [02-9]' "$log")" -eq 0 ] || fail "a rank other than 1 reported a failure"
echo "PASS: rank 1's failure failed the $np-rank test (exit 1)"
