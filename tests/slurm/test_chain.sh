#!/bin/bash
# chain.sbatch end to end with Slurm's own time-limit signal: a 2-link job array (%1), each link
# with a 1-minute limit and --signal=B:USR1@5, so Slurm itself signals each link before its
# limit (Slurm checks limits every 30 s and signals up to 30 s early: between 25 s and 55 s after
# the start); link 0 checkpoints and ends, link 1 resumes from that checkpoint, and is signalled too.
source "$(dirname "$0")/lib.sh"
new_workdir chain
jid=$(submit --array=0-1%1 --time=1 --signal=B:USR1@5 --nodes=1 --ntasks-per-node=2 --job-name=chain \
      --export="ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,RUN_DIR=chainrun,SETS=train.max_steps=1000000,HPCTRAIN_ROOT=$HPCTRAIN_SOURCE_DIR" \
      "$JOBS/chain.sbatch") || fail "sbatch refused the chain"
say "chain job array $jid"
st0=$(wait_job "${jid}_0" 150); st1=$(wait_job "${jid}_1" 150)
out="hpctrain-chain-$jid.out"; show_output "$out"
[ "$st0" = COMPLETED ] && [ "$st1" = COMPLETED ] || fail "links ended $st0 / $st1"
[ "$(grep -c 'signal USR1 received by the batch script' "$out")" -eq 2 ] || fail "expected Slurm's USR1 in both links"
s0=$(grep -v '\[rank ' "$out" | sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' | sed -n 1p)
r1=$(sed -n 's/.*resumed at step \([0-9]*\).*/\1/p' "$out" | sed -n 1p)
s1=$(grep -v '\[rank ' "$out" | sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' | sed -n 2p)
[ -n "$s0" ] && [ "$s0" = "$r1" ] || fail "link 0 checkpointed at step '$s0', link 1 resumed at '$r1'"
[ -n "$s1" ] && [ "$s1" -gt "$s0" ] || fail "link 1 did not progress beyond step $s0 ($s1)"
say "PASS: link 0 signalled by Slurm at its time limit, checkpointed at step $s0; link 1 resumed there and reached $s1"
