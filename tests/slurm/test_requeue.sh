#!/bin/bash
# Pre-emption end to end: a training job gets USR1 (as Slurm sends it before a time limit),
# checkpoints, exits 75, requeues itself, resumes from the checkpoint and finishes with the same
# final parameters as the same training run without interruption.
source "$(dirname "$0")/lib.sh"
new_workdir requeue
STEPS=40
HOLD=5   # the signalled run holds at this step until the signal arrives (HPCTRAIN_TEST_HOLD_AT_STEP)
SETS="train.max_steps=$STEPS"
common=(--time=5 --nodes=1 --ntasks-per-node=2)
env_for() { echo "ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,RUN_DIR=$1,SETS=$SETS,MAX_REQUEUES=2"; }
HOLD_LINE="holding at step $HOLD until SIGTERM or SIGUSR1"

# 1. The reference: no interruption.
ref=$(submit "${common[@]}" --job-name=ref --export="$(env_for ref),PREFLIGHT=0" "$JOBS/train.sbatch") || fail "sbatch refused the reference job"
say "reference job $ref"
st=$(wait_job "$ref"); show_output "hpctrain-ref-$ref.out"
[ "$st" = COMPLETED ] || fail "reference job $ref ended $st"

# 2. The same run, signalled mid-training.
# It holds before step $HOLD's signal check until the signal has arrived: the signal lands at step
# $HOLD however fast the machine trains (the resumed run passes that step without holding).
jid=$(submit "${common[@]}" --job-name=pre --export="$(env_for pre),HPCTRAIN_TEST_HOLD_AT_STEP=$HOLD" "$JOBS/train.sbatch") ||
  fail "sbatch refused the job"
out="hpctrain-pre-$jid.out"
say "job $jid: waiting for '$HOLD_LINE'"
wait_for_line "$out" "$HOLD_LINE" "$jid" || { show_output "$out"; fail "job $jid never printed '$HOLD_LINE' within ${JOB_TIMEOUT_S}s"; }
say "sending USR1 to the batch shell: scancel --batch --signal=USR1 $jid"
timeout 10 scancel --batch --signal=USR1 "$jid" || fail "scancel failed"

# Slurm holds a requeued job back (BeginTime = requeue + ~2 min); the test lets it start at once.
deadline=$((SECONDS + JOB_TIMEOUT_S))
while [ $SECONDS -lt $deadline ]; do
  [ "$(job_field "$jid" Restarts)" = 1 ] && [ "$(job_field "$jid" JobState)" = PENDING ] && break
  case "$(job_field "$jid" JobState)" in COMPLETED|FAILED|CANCELLED|TIMEOUT) break ;; esac
  sleep 0.3
done
[ "$(job_field "$jid" Restarts)" = 1 ] || { show_output "$out"; fail "job $jid was not requeued within ${JOB_TIMEOUT_S}s of the signal (state $(job_field "$jid" JobState), Restarts $(job_field "$jid" Restarts))"; }
say "job $jid requeued (Restarts=1); releasing it early: scontrol update JobId=$jid StartTime=now+3"
release_requeued "$jid"
st=$(wait_job "$jid"); show_output "$out"
[ "$st" = COMPLETED ] || fail "requeued job $jid ended $st"

# 3. The output tells the whole story, in order.
expect() { grep -nE "$1" "$out" | head -n 1 | grep . || fail "job output lacks: $2"; }
l1=$(expect 'signal USR1 received by the batch script' "the batch shell receiving USR1" | cut -d: -f1)
l2=$(expect 'signal (SIGUSR1|10) received: checkpointing at step' "hpctrain receiving the signal" | cut -d: -f1)
l3=$(expect 'checkpoint \(signal\) written' "the signal checkpoint" | cut -d: -f1)
l4=$(expect 'requeue 1 of at most 2: scontrol requeue' "the requeue" | cut -d: -f1)
l5=$(expect "job $jid restart 1:" "the restarted job" | cut -d: -f1)
l6=$(expect 'resumed at step [1-9]' "hpctrain resuming from the checkpoint" | cut -d: -f1)
l7=$(expect 'training finished' "the end of training" | cut -d: -f1)
[ "$l1" -lt "$l2" ] && [ "$l2" -le "$l3" ] && [ "$l3" -lt "$l4" ] && [ "$l4" -lt "$l5" ] && [ "$l5" -lt "$l6" ] && [ "$l6" -lt "$l7" ] ||
  fail "events out of order (lines $l1 $l2 $l3 $l4 $l5 $l6 $l7)"
echo "--- the story (signal, checkpoint, requeue, resume) ---"
sed -n "${l1}p;${l2}p;${l3}p;${l4}p;${l5}p;${l6}p;${l7}p" "$out"
step_ckpt=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "$out" | head -n 1)
step_resumed=$(sed -n 's/.*resumed at step \([0-9]*\).*/\1/p' "$out" | head -n 1)
[ "$step_ckpt" = "$step_resumed" ] || fail "checkpointed at step $step_ckpt but resumed at step $step_resumed"
[ "$step_ckpt" = "$HOLD" ] || fail "the signal checkpoint is at step $step_ckpt, the run held for it at step $HOLD"

# 4. Same final parameters as the uninterrupted run.
same_model "$(final_ckpt pre/checkpoints)" "$(final_ckpt ref/checkpoints)"
say "PASS: interrupted at step $step_ckpt, requeued, resumed, final model identical to the uninterrupted run"
