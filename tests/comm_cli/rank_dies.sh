#!/usr/bin/env bash
# usage: rank_dies.sh <mpiexec> <comm_rank_dies binary> [mpiexec flags...]
# For each way rank 1 can die while rank 0 waits in an all-reduce, mpirun must end the whole job
# well within the timeout (no hang), with the exit code and the message that name what happened.
# Under Open MPI (what scripts/setup.sh installs) mpirun exits with the status of the first rank
# that failed: 128 + the signal for a rank killed by one (SIGKILL 137, SIGABRT 134), the rank's own
# code for a rank that exited (3), and says which rank, how and on which node. Another MPI is only
# required to end the job with a non-zero code (its messages are its own).
set -u
mpiexec=$1; bin=$2; shift 2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
openmpi=0
"$mpiexec" --version 2>&1 | grep -qE "Open MPI|OpenRTE" && openmpi=1

# mode  exit code  Open MPI's message (extended regex)
cases=(
  "kill  137 (mpirun|mpiexec) noticed that process rank 1 with PID [0-9]+ on node [^ ]+ exited on signal 9 \(Killed\)"
  "abort 134 (mpirun|mpiexec) noticed that process rank 1 with PID [0-9]+ on node [^ ]+ exited on signal 6 \(Aborted\)"
  "exit  3   (mpirun|mpiexec) detected that one or more processes exited with non-zero status"
)
for c in "${cases[@]}"; do
  read -r mode want msg <<<"$c"
  start=$(date +%s)
  timeout 60 "$mpiexec" -np 2 "$@" "$bin" "$mode" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 124 ]; then echo "FAIL ($mode): job still running after 60 s: rank 0 hangs"; cat "$log"; exit 1; fi
  if ! grep -q "rank 1: dying ($mode)" "$log"; then echo "FAIL ($mode): rank 1 did not reach the failure point"; cat "$log"; exit 1; fi
  if [ "$openmpi" = 0 ]; then
    [ "$rc" -ne 0 ] || { echo "FAIL ($mode): mpirun exited 0 although rank 1 died"; cat "$log"; exit 1; }
    echo "ok ($mode): mpirun (not Open MPI) exited $rc after ${took} s"
    continue
  fi
  if [ "$rc" -ne "$want" ]; then echo "FAIL ($mode): mpirun exited $rc, expected $want"; cat "$log"; exit 1; fi
  if ! grep -qE "$msg" "$log"; then echo "FAIL ($mode): mpirun's output lacks /$msg/"; cat "$log"; exit 1; fi
  # The exit mode: Open MPI names the process (rank 1) and its exit code on the lines after.
  if [ "$mode" = exit ] && ! { grep -qE "Process name: +\[\[[0-9]+,[0-9]+\],1\]" "$log" && grep -qE "Exit code: +3" "$log"; }; then
    echo "FAIL ($mode): mpirun does not name rank 1 and its exit code 3"; cat "$log"; exit 1
  fi
  echo "ok ($mode): mpirun exited $rc after ${took} s: $(grep -m1 -oE "$msg" "$log")"
done
