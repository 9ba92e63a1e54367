#!/bin/bash
# Bad input to the job scripts: each case must end with its exact exit code (README "Exit codes":
# 1 usage/config, 2 data or I/O; train.sbatch's pre-flight uses the same codes) and its specific
# message, never a job that runs forever.
#   test_bad_input.sh no_allocation|world_size|pmi|missing_ckpt|data_one_node
source "$(dirname "$0")/lib.sh"
case_name="${1:?case}"
new_workdir "bad_$case_name"

# expect_failed_job JID OUT WANT_CODE MESSAGE_REGEX: the job ended FAILED with exit code WANT_CODE
# (Slurm's ExitCode is CODE:SIGNAL; the signal must be 0) and MESSAGE_REGEX is in its output.
expect_failed_job() {
  local jid="$1" out="$2" want="$3" msg="$4" st code
  st=$(wait_job "$jid"); show_output "$out"
  code=$(job_field "$jid" ExitCode)
  [ "$st" = FAILED ] || fail "job $jid ended $st, expected FAILED"
  [ "$code" = "$want:0" ] || fail "job $jid exit code $code, expected $want:0"
  grep -qE "$msg" "$out" || fail "job output lacks the message /$msg/"
  say "job $jid FAILED with exit code $code and the message: $(grep -E "$msg" "$out" | head -n 1)"
}

case "$case_name" in
no_allocation)
  # The job script run by hand on a login node, outside any allocation.
  out=$(env -u SLURM_JOB_ID timeout 60 bash "$JOBS/train.sbatch" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 1 ] || fail "train.sbatch outside an allocation exited $rc, expected 1"
  grep -q "error: not inside a Slurm allocation (SLURM_JOB_ID is unset)" <<<"$out" || fail "no clear message"
  # And srun with no usable cluster configuration: fails at once, no hang.
  : >"$WORK/empty.conf"
  out=$(SLURM_CONF="$WORK/empty.conf" timeout 60 srun -n 1 true 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 1 ] || fail "srun without a usable cluster configuration: exit $rc, expected 1 (124 = it hung)"
  grep -q "srun: fatal: Unable to process configuration file" <<<"$out" || fail "srun did not say why it cannot start"
  say "PASS: exit code 1 and a clear message without an allocation"
  ;;
world_size)
  # Every task starts its own 1-rank world (fake_singletons.sh): the pre-flight must refuse.
  jid=$(submit --time=5 --nodes=2 --ntasks-per-node=2 --job-name=ws \
        --export="ALL,HPCTRAIN=$HPCTRAIN_SOURCE_DIR/tests/slurm/fake_singletons.sh,CONFIG=tiny.toml" "$JOBS/train.sbatch")
  expect_failed_job "$jid" "hpctrain-ws-$jid.out" 1 "world-size mismatch: 4 tasks formed 4 separate MPI worlds"
  grep -q "rank 0 of a 1-rank world" "hpctrain-ws-$jid.out" && fail "training started despite the mismatch"
  say "PASS"
  ;;
pmi)
  # A PMI plugin this OpenMPI cannot use (pmi2): MPI_Init fails in the pre-flight, loudly. OpenMPI
  # aborts inside MPI_Init with exit code 1 (before hpctrain runs); the pre-flight passes it on.
  jid=$(submit --time=5 --nodes=1 --ntasks-per-node=2 --job-name=pmi \
        --export="ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,MPI_PLUGIN=pmi2" "$JOBS/train.sbatch")
  expect_failed_job "$jid" "hpctrain-pmi-$jid.out" 1 "pre-flight failed .*MPI could not start under 'srun --mpi=pmi2"
  say "PASS"
  ;;
missing_ckpt)
  # Signalled and requeued, but the checkpoint directory is gone before the restart.
  # The run holds at step 3 until the signal arrives (HPCTRAIN_TEST_HOLD_AT_STEP): no race with the clock.
  jid=$(submit --time=5 --nodes=1 --ntasks-per-node=2 --job-name=mc \
        --export="ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,RUN_DIR=mc,SETS=train.max_steps=40,HPCTRAIN_TEST_HOLD_AT_STEP=3" \
        "$JOBS/train.sbatch")
  out="hpctrain-mc-$jid.out"
  hold="holding at step 3 until SIGTERM or SIGUSR1"
  wait_for_line "$out" "$hold" "$jid" || { show_output "$out"; fail "job $jid never printed '$hold' within ${JOB_TIMEOUT_S}s"; }
  timeout 10 scancel --batch --signal=USR1 "$jid" || fail "scancel --batch --signal=USR1 $jid failed"
  deadline=$((SECONDS + JOB_TIMEOUT_S))
  until [ "$(job_field "$jid" Restarts)" = 1 ] && [ "$(job_field "$jid" JobState)" = PENDING ]; do
    [ $SECONDS -lt $deadline ] || { show_output "$out"; fail "job $jid not requeued within ${JOB_TIMEOUT_S}s of the signal"; }
    st=$(job_field "$jid" JobState)
    case "$st" in COMPLETED|FAILED|CANCELLED) show_output "$out"; fail "job $jid ended $st before its requeue";; esac
    sleep 0.3
  done
  say "job requeued; removing its checkpoint directory mc/checkpoints before it restarts"
  rm -rf mc/checkpoints
  release_requeued "$jid"
  expect_failed_job "$jid" "$out" 2 "restart 1 of job $jid: checkpoint directory 'mc/checkpoints' is missing"
  grep -q "launching:.*--resume" <(sed -n '/restart 1:/,$p' "$out") && fail "restart launched training anyway"
  say "PASS"
  ;;
data_one_node)
  [ "$("$HPCTRAIN_SOURCE_DIR/tests/slurm/slurm_cluster.sh" ns)" = private ] || skip_suite "no node-local storage without namespaces"
  # The data file is staged on the first node's local scratch only; the second node cannot see it.
  first=$(timeout 10 sinfo -h -N -o %N | head -n 1); second=$(timeout 10 sinfo -h -N -o %N | sed -n 2p)
  cp "$DATA" "$HT_SLURM_DIR/nodes/$first/local/data.h5"
  local_data="$HT_SLURM_DIR/local/data.h5"
  jid=$(submit --time=5 --nodes=2 --ntasks-per-node=1 --job-name=dn \
        --export="ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,DATA=$local_data" "$JOBS/train.sbatch")
  expect_failed_job "$jid" "hpctrain-dn-$jid.out" 2 "data file $local_data is not readable on node $second"
  # Without the pre-flight, hpctrain itself must stop with a message and non-zero exit, not hang.
  jid=$(submit --time=5 --nodes=2 --ntasks-per-node=1 --job-name=dn0 \
        --export="ALL,HPCTRAIN=$HPCTRAIN,CONFIG=tiny.toml,DATA=$local_data,PREFLIGHT=0" "$JOBS/train.sbatch")
  expect_failed_job "$jid" "hpctrain-dn0-$jid.out" 2 "\\[error\\] \\[rank 1\\] $local_data: file not found"
  say "PASS"
  ;;
*) fail "unknown case $case_name" ;;
esac
