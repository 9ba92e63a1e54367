#!/bin/bash
# The smoke job runs on 2 nodes x 2 tasks, its ranks form one MPI world, and it passes.
source "$(dirname "$0")/lib.sh"
new_workdir smoke
jid=$(submit --time=5 --export=ALL,HPCTRAIN="$HPCTRAIN" "$JOBS/smoke.sbatch") || fail "sbatch refused the smoke job"
say "submitted smoke job $jid"
st=$(wait_job "$jid"); out=$(ls hpctrain-*"$jid".out)
show_output "$out"
[ "$st" = COMPLETED ] || fail "smoke job $jid ended $st"
grep -q "smoke test passed" "$out" || fail "no 'smoke test passed' line"
grep -q "MPI: one world of 4 ranks" "$out" || fail "ranks did not form one MPI world of 4"
nodes=$(sed -n 's/^task [0-9]* on node \([^ ]*\) .*/\1/p' "$out" | sort -u | wc -l)
[ "$nodes" -eq 2 ] || fail "tasks ran on $nodes node(s), expected 2"
say "PASS: smoke job $jid completed on 2 nodes"
