#!/bin/bash
# The smoke job runs on 2 nodes x 2 tasks, its ranks form one MPI world, and it passes.
source "$(dirname "$0")/lib.sh"
new_workdir smoke
# Two nodes need the node namespaces (see slurm_cluster.sh); otherwise one node x 4 tasks.
nodes=2; [ "$("$HPCTRAIN_SOURCE_DIR/tests/slurm/slurm_cluster.sh" ns)" = private ] || nodes=1
jid=$(submit --time=5 --nodes=$nodes --ntasks-per-node=$((4 / nodes)) --export=ALL,HPCTRAIN="$HPCTRAIN" "$JOBS/smoke.sbatch") || fail "sbatch refused the smoke job"
say "submitted smoke job $jid"
st=$(wait_job "$jid"); out=$(ls hpctrain-*"$jid".out)
show_output "$out"
[ "$st" = COMPLETED ] || fail "smoke job $jid ended $st"
grep -q "smoke test passed" "$out" || fail "no 'smoke test passed' line"
grep -q "MPI: one world of 4 ranks" "$out" || fail "ranks did not form one MPI world of 4"
seen=$(sed -n 's/^task [0-9]* on node \([^ ]*\) .*/\1/p' "$out" | sort -u | wc -l)
[ "$seen" -eq "$nodes" ] || fail "tasks ran on $seen node(s), expected $nodes"
say "PASS: smoke job $jid completed on $nodes node(s)"
