#!/usr/bin/env bash
# usage: rank_dies.sh <mpiexec> <comm_rank_dies binary> [mpiexec flags...]
# For each way rank 1 can die, mpirun must exit non-zero well within the timeout (no hang).
set -u
mpiexec=$1; bin=$2; shift 2
log=$(mktemp)
for mode in kill abort exit; do
  start=$(date +%s)
  timeout 60 "$mpiexec" -np 2 "$@" "$bin" "$mode" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 124 ]; then echo "FAIL ($mode): job still running after 60 s: rank 0 hangs"; cat "$log"; exit 1; fi
  if [ "$rc" -eq 0 ]; then echo "FAIL ($mode): mpirun exited 0 although rank 1 died"; cat "$log"; exit 1; fi
  if ! grep -q "rank 1: dying" "$log"; then echo "FAIL ($mode): rank 1 did not reach the failure point"; cat "$log"; exit 1; fi
  echo "ok ($mode): mpirun exited $rc after ${took} s; its message:"
  grep -i -m3 -E "noticed|exited|abort|signal" "$log" | sed 's/^/    /'
done
rm -f "$log"
