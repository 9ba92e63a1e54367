#!/bin/bash
# A 2-node x 2-task training job: its ranks run on two distinct nodes (two slurmd, each in its own
# UTS/mount namespace, MPI between them over TCP), and its result equals the same 4-rank training
# run on one node, bit for bit.
source "$(dirname "$0")/lib.sh"
new_workdir multinode
if [ "$("$HPCTRAIN_SOURCE_DIR/tests/slurm/slurm_cluster.sh" ns)" != private ]; then
  skip_suite "without node namespaces both nodes share one hostname and OpenMPI cannot run across them"
fi
SETS="train.max_steps=${MULTINODE_TEST_STEPS:-20}"
env_for() { echo "ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,RUN_DIR=$1,SETS=$SETS"; }

two=$(submit --time=5 --nodes=2 --ntasks-per-node=2 --job-name=two --export="$(env_for two)" "$JOBS/train.sbatch") || fail "sbatch refused"
st=$(wait_job "$two"); show_output "hpctrain-two-$two.out"
[ "$st" = COMPLETED ] || fail "2-node job $two ended $st"
one=$(submit --time=5 --nodes=1 --ntasks-per-node=4 --job-name=one --export="$(env_for one),PREFLIGHT=0" "$JOBS/train.sbatch") || fail "sbatch refused"
st=$(wait_job "$one"); show_output "hpctrain-one-$one.out"
[ "$st" = COMPLETED ] || fail "1-node job $one ended $st"

out="hpctrain-two-$two.out"
grep -q "pre-flight: one MPI world of 4 ranks" "$out" || fail "2-node job: no one-world pre-flight line"
grep -q "2 node(s) \[" "$out" || fail "2-node job did not get 2 nodes"
# hpctrain logs "rank R on host H" for every rank.
hosts=$(sed -n 's/.*rank \([0-9]*\) on host \(.*\)$/\1 \2/p' "$out")
echo "$hosts"
[ "$(echo "$hosts" | wc -l)" -eq 4 ] || fail "expected 4 'rank R on host H' lines"
distinct=$(echo "$hosts" | awk '{print $2}' | sort -u | wc -l)
[ "$distinct" -eq 2 ] || fail "ranks saw $distinct distinct host(s), expected 2"
say "ranks saw 2 distinct hosts: $(echo "$hosts" | awk '{print $2}' | sort -u | tr '\n' ' ')"
one_hosts=$(sed -n 's/.*rank [0-9]* on host \(.*\)$/\1/p' "hpctrain-one-$one.out" | sort -u | wc -l)
[ "$one_hosts" -eq 1 ] || fail "1-node job ranks saw $one_hosts hosts"
same_model "$(final_ckpt two/checkpoints)" "$(final_ckpt one/checkpoints)"
say "PASS: 2 nodes x 2 ranks == 1 node x 4 ranks"
