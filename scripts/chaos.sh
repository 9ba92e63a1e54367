#!/usr/bin/env bash
# Chaos soak: a 2-rank local-SGD training run (tiny GPT on Debian's fortunes, dropout on, a
# checkpoint every few steps) is killed at random moments and resumed with --resume each time until
# it reaches its last step; its final checkpoint must then be bit-identical (h5diff) to an
# uninterrupted run's, and every checkpoint file left must verify (hpctrain inspect).
#
#   scripts/chaos.sh MINUTES            # inject faults for MINUTES (decimals allowed), then finish
#   CHAOS_SEED=1234 scripts/chaos.sh 10 # replay the choices of a run (its seed is printed first)
#
# Faults, taken in turn from a seeded shuffle of the three kinds (so every kind happens within any
# three faults), each at a step chosen by the seed between the last checkpoint and the end:
#   kill_rank  SIGKILL of one rank (rank chosen by the seed) once the run has logged that step;
#              mpirun must end the job (exit 137: 128 + SIGKILL, or 3 when the surviving rank sees
#              the MPI failure first).
#   term_job   SIGTERM to every rank, as Slurm does before a time limit: exit 75 with a checkpoint
#              at the step it names, which `latest` must point to. Half of them (seeded) hold the
#              ranks at the chosen step first (HPCTRAIN_TEST_HOLD_AT_STEP), so the signal lands
#              exactly there; the others land wherever the run is.
#   kill_save  SIGKILL of one or both ranks while a checkpoint is being written (saves slowed by
#              HPCTRAIN_TEST_SLOW_SAVE_MS, the signal sent once the .tmp file exists): the next
#              run resumes from the previous checkpoint, and a later save removes the .tmp (none
#              may be left at the end).
# A run is a sequence of episodes (each trains from scratch to the last step under faults); faults
# are injected while time remains and until every kind has been survived at least once. The
# uninterrupted reference run is trained once.
#
# Exit 0 only when every episode's final checkpoint equals the reference's (every group but
# /config, which holds the run's own paths), every checkpoint left verifies, no .tmp is left, every
# fault ended the job with the expected exit code, and no rank was left running (a job that does
# not end within CHAOS_HANG_S seconds after a fault, or a rank that outlives its mpirun, is a hang).
#
# Knobs (environment): CHAOS_SEED, CHAOS_STEPS (40: steps per run), CHAOS_CKPT_EVERY (3),
# CHAOS_HANG_S (180), CHAOS_SLOW_SAVE_MS (1500), CHAOS_WORK (a directory to keep everything in;
# default a temporary one, removed on success), HPCTRAIN (build/bin/hpctrain), MPIEXEC (mpirun),
# MPIEXEC_FLAGS (a ;-list; default --oversubscribe --bind-to none under Open MPI), H5DIFF, H5LS,
# FORTUNES (/usr/share/games/fortunes). ctest runs a short version (label chaos, tests/chaos/).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/chaos.sh MINUTES   (e.g. 1, 0.5, 30; CHAOS_SEED=N to replay)" >&2; exit 1; }
[ $# -eq 1 ] || usage
[[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
BUDGET_S=$(awk -v m="$1" 'BEGIN { printf "%d", m * 60 }')

HPCTRAIN="${HPCTRAIN:-build/bin/hpctrain}"
MPIEXEC="${MPIEXEC:-mpirun}"
H5DIFF="${H5DIFF:-$(command -v h5diff || true)}"
H5LS="${H5LS:-$(command -v h5ls || true)}"
FORTUNES="${FORTUNES:-/usr/share/games/fortunes}"
STEPS="${CHAOS_STEPS:-40}"
EVERY="${CHAOS_CKPT_EVERY:-3}"
HANG_S="${CHAOS_HANG_S:-180}"
SLOW_SAVE_MS="${CHAOS_SLOW_SAVE_MS:-1500}"
SEED="${CHAOS_SEED:-$(( ($(date +%s%N) / 1000 + $$) % 32768 ))}"

die() { echo "chaos: error: $*" >&2; exit 2; }
[ -x "$HPCTRAIN" ] || die "$HPCTRAIN is not built (./scripts/build.sh)"
command -v "$MPIEXEC" >/dev/null || die "$MPIEXEC not found (apt-get install openmpi-bin)"
{ [ -n "$H5DIFF" ] && [ -x "$H5DIFF" ]; } || die "h5diff not found (apt-get install hdf5-tools)"
[ -n "$H5LS" ] || H5LS="$(dirname "$H5DIFF")/h5ls"
[ -x "$H5LS" ] || die "h5ls not found (apt-get install hdf5-tools)"
[ -f "$FORTUNES/fortunes" ] || die "$FORTUNES/fortunes missing (apt-get install fortunes)"
{ [[ "$STEPS" =~ ^[0-9]+$ ]] && [ "$STEPS" -ge 8 ]; } || die "CHAOS_STEPS must be a number >= 8, not '$STEPS'"
[[ "$SEED" =~ ^[0-9]+$ ]] || die "CHAOS_SEED must be a non-negative integer, not '$SEED'"

if [ -n "${MPIEXEC_FLAGS+x}" ]; then
  IFS=';' read -r -a MPIFLAGS <<<"$MPIEXEC_FLAGS"
else
  MPIFLAGS=()
  if "$MPIEXEC" --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
    MPIFLAGS=(--oversubscribe --bind-to none)
    if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  fi
fi
export OMP_NUM_THREADS=1

if [ -n "${CHAOS_WORK:-}" ]; then WORK=$CHAOS_WORK; mkdir -p "$WORK"; KEEP=1
else WORK=$(mktemp -d /tmp/ht-chaos-XXXXXX); KEEP=0; fi

# Every random choice comes from bash's generator seeded here, in this shell only (never inside
# $(...), whose draws would not advance this sequence): the same seed makes the same choices.
RANDOM=$SEED
echo "chaos: seed $SEED (replay: CHAOS_SEED=$SEED scripts/chaos.sh $1), work directory $WORK"
echo "chaos: $BUDGET_S s of faults, $STEPS steps per run, a checkpoint every $EVERY steps, 2 ranks, local SGD N=4, dropout 0.1"

RUNNER=""      # pid of the mpirun in flight
RANK_PIDS=()   # its ranks, index = MPI rank
# Kills the job in flight: its ranks, anything else mpirun started, and mpirun.
cleanup() {
  local p kids=""
  [ -n "$RUNNER" ] && kids=$(pgrep -P "$RUNNER" || true)
  for p in "${RANK_PIDS[@]}" $kids $RUNNER; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

PROBLEMS=()
problem() { echo "chaos: PROBLEM: $*" >&2; PROBLEMS+=("$*"); }

CONFIG=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=64
        --set train.micro_batch_size=4 --set train.lr=3e-3 --set train.warmup_steps=2 --set train.threads=1
        --set train.device=cpu --set eval.strategy=no --set log.every_steps=1 --set log.plot=false
        --set train.max_steps="$STEPS" --set checkpoint.every_steps="$EVERY" --set checkpoint.keep=4
        --set local_sgd.enabled=true --set local_sgd.steps=4 --set model.dropout=0.1)

ckpt_name() { printf 'ckpt-%08d.h5' "$1"; }

# launch OUT LOG [VAR=VALUE...] -- [ARGS...]: the training run in the background (mpirun's pid in
# RUNNER), its output appended to LOG; VAR=VALUE are test hooks for this run only.
launch() {
  local out=$1 log=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  env "${envs[@]}" "$MPIEXEC" -np 2 "${MPIFLAGS[@]}" "$HPCTRAIN" train --set data.path="$WORK/lm.h5" "${CONFIG[@]}" \
    --set train.output_dir="$out" "$@" >>"$log" 2>&1 &
  RUNNER=$!
  RANK_PIDS=()
}

runner_alive() { kill -0 "$RUNNER" 2>/dev/null; }

# find_ranks: RANK_PIDS[r] = the pid of rank r (mpirun's hpctrain children, told apart by the
# OMPI_COMM_WORLD_RANK in their environment). Returns 1 if mpirun ended before both were there.
find_ranks() {
  local deadline=$((SECONDS + HANG_S)) p r
  while [ $SECONDS -lt $deadline ]; do
    RANK_PIDS=()
    for p in $(pgrep -P "$RUNNER" -x hpctrain || true); do
      r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') || r=""
      [ -n "$r" ] && RANK_PIDS[r]=$p
    done
    [ -n "${RANK_PIDS[0]:-}" ] && [ -n "${RANK_PIDS[1]:-}" ] && return 0
    runner_alive || return 1
    sleep 0.05
  done
  problem "the ranks of mpirun $RUNNER did not appear within ${HANG_S} s"
  return 1
}

# wait_for WHAT TEST...: polls TEST until it succeeds (0), mpirun ends (1) or CHAOS_HANG_S pass (2).
wait_for() {
  local what=$1; shift
  local deadline=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $deadline ]; do
    "$@" && return 0
    runner_alive || { "$@" && return 0; return 1; }
    sleep 0.05
  done
  problem "waited ${HANG_S} s for $what"
  return 2
}
# The highest step the run has logged ("step N/STEPS" lines of rank 0) in LOG since byte OFFSET.
last_step() { tail -c +"$(($2 + 1))" "$1" | sed -n "s/.*\] step *\([0-9]*\)\/$STEPS .*/\1/p" | tail -n 1; }
step_reached() { local s; s=$(last_step "$1" "$2"); [ -n "$s" ] && [ "$s" -ge "$3" ]; }
line_seen() { tail -c +"$(($2 + 1))" "$1" | grep -q -- "$3"; }
tmp_exists() { compgen -G "$1/checkpoints/*.tmp" >/dev/null; }

# finish: waits for mpirun to end (at most CHAOS_HANG_S) and puts its exit code in RC; a job that
# does not end, or a rank that outlives mpirun by 10 s, is a hang (problem, everything killed).
finish() {
  local deadline=$((SECONDS + HANG_S)) p
  while runner_alive && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  if runner_alive; then
    problem "mpirun $RUNNER still running ${HANG_S} s after the fault (ranks ${RANK_PIDS[*]:-?}): a rank hangs"
    cleanup
  fi
  set +e; wait "$RUNNER"; RC=$?; set -e
  for p in "${RANK_PIDS[@]}"; do
    deadline=$((SECONDS + 10))
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then problem "rank pid $p outlived its mpirun (exit $RC): left hanging"; kill -9 "$p" 2>/dev/null || true; fi
  done
  RUNNER=""
  RANK_PIDS=()
}

# The step of the checkpoint `latest` names (0 when there is none).
latest_step() {
  local name
  name=$(cat "$1/checkpoints/latest" 2>/dev/null) || { echo 0; return; }
  name=${name%.h5}; echo $((10#${name#ckpt-}))
}

# ---- data and the uninterrupted reference -------------------------------------------------------
"$HPCTRAIN" prepare --input "$FORTUNES/fortunes" --output "$WORK/lm.h5" --val-fraction 0.1 >"$WORK/prepare.log" 2>&1 ||
  { cat "$WORK/prepare.log"; die "hpctrain prepare failed"; }
echo "chaos: reference run ($STEPS steps, no faults)"
launch "$WORK/reference" "$WORK/reference.log" --
find_ranks || true
finish
[ "$RC" -eq 0 ] || { tail -n 30 "$WORK/reference.log"; die "the reference run failed (exit $RC)"; }
REF="$WORK/reference/checkpoints/$(ckpt_name "$STEPS")"
[ -f "$REF" ] || die "the reference run left no final checkpoint $REF"

# ---- episodes under faults ----------------------------------------------------------------------
KINDS=(kill_rank term_job kill_save)
declare -A SURVIVED=([kill_rank]=0 [term_job]=0 [kill_save]=0)
HELD=0; MISSED=0; RESUMES=0; REPEATED=0; EPISODES=0; IDENTICAL=0
BAG=()
next_kind() {  # KIND = the next kind from a seeded shuffle of the three
  if [ ${#BAG[@]} -eq 0 ]; then
    BAG=("${KINDS[@]}")
    local i j t
    for ((i = ${#BAG[@]} - 1; i > 0; i--)); do j=$((RANDOM % (i + 1))); t=${BAG[i]}; BAG[i]=${BAG[j]}; BAG[j]=$t; done
  fi
  KIND=${BAG[0]}; BAG=("${BAG[@]:1}")
}
all_kinds_survived() { local k; for k in "${KINDS[@]}"; do [ "${SURVIVED[$k]}" -gt 0 ] || return 1; done; }
START=$SECONDS
faults_wanted() { [ $((SECONDS - START)) -lt "$BUDGET_S" ] || ! all_kinds_survived; }

# One run from scratch to its last step under faults; then its final checkpoint vs the reference's.
episode() {
  local e=$1 out="$WORK/episode-$1" log="$WORK/episode-$1.log" seg=0 from reached target victim offset what
  local resume=() envs
  : >"$log"
  while :; do
    seg=$((seg + 1))
    from=$(latest_step "$out")
    echo "===== segment $seg (from step $from)" >>"$log"
    offset=$(stat -c %s "$log")   # this segment's output starts here
    KIND=none; target=$STEPS
    if faults_wanted && [ "$from" -lt $((STEPS - 1)) ]; then
      next_kind
      target=$((from + 1 + RANDOM % (STEPS - from - 1)))   # in [from + 1, STEPS - 1]
    fi
    envs=()
    local held=0
    case $KIND in
      term_job) if [ $((RANDOM % 2)) -eq 0 ]; then held=1; envs=(HPCTRAIN_TEST_HOLD_AT_STEP="$target"); fi ;;
      kill_save) envs=(HPCTRAIN_TEST_SLOW_SAVE_MS="$SLOW_SAVE_MS") ;;
    esac
    launch "$out" "$log" "${envs[@]}" -- "${resume[@]}"
    if [ "$seg" -gt 1 ]; then RESUMES=$((RESUMES + 1)); fi
    find_ranks || true
    # The resume: the step it continues from, and the steps trained again since the last fault.
    if [ "$seg" -gt 1 ]; then
      wait_for "segment $seg of episode $e to start training" line_seen "$log" "$offset" "\] step \|resumed at step\|training finished" || true
      local resumed_at
      resumed_at=$(tail -c +"$((offset + 1))" "$log" | sed -n 's/.*resumed at step \([0-9]*\).*/\1/p' | head -n 1)
      REPEATED=$((REPEATED + PREV_REACHED - ${resumed_at:-$from}))
      # Without a checkpoint yet (a fault before the first save), --resume starts from scratch.
      [ -n "$resumed_at" ] || [ "$from" -eq 0 ] || problem "episode $e segment $seg: no 'resumed at step' line although $out/checkpoints/latest names step $from"
    fi
    what=""
    case $KIND in
      kill_rank)
        if wait_for "step $target (episode $e)" step_reached "$log" "$offset" "$target"; then
          victim=$((RANDOM % 2))
          kill -9 "${RANK_PIDS[victim]}" 2>/dev/null || true
          what="SIGKILL of rank $victim after step $(last_step "$log" "$offset") was logged (target $target)"
        fi ;;
      term_job)
        local ready
        if [ "$held" = 1 ]; then ready=(line_seen "$log" "$offset" "holding at step $target until")
        else ready=(step_reached "$log" "$offset" "$target"); fi
        if wait_for "step $target (episode $e)" "${ready[@]}"; then
          kill -TERM "${RANK_PIDS[@]}" 2>/dev/null || true
          what="SIGTERM to both ranks $([ "$held" = 1 ] && echo "held at step $target" || echo "after step $(last_step "$log" "$offset") was logged (target $target)")"
        fi ;;
      kill_save)
        if wait_for "a checkpoint save (.tmp) in episode $e" tmp_exists "$out"; then
          local tmp
          tmp=$(compgen -G "$out/checkpoints/*.tmp" | head -n 1)
          victim=$((RANDOM % 3))
          if [ "$victim" = 2 ]; then kill -9 "${RANK_PIDS[@]}" 2>/dev/null || true; victim="both ranks"
          else kill -9 "${RANK_PIDS[victim]}" 2>/dev/null || true; victim="rank $victim"; fi
          what="SIGKILL of $victim during the save of $(basename "$tmp")"
        fi ;;
    esac
    finish
    reached=$(last_step "$log" "$offset"); reached=${reached:-$from}
    PREV_REACHED=$reached
    resume=(--resume)
    if [ "$RC" -eq 0 ]; then
      grep -q "training finished: $STEPS steps" <(tail -c +"$((offset + 1))" "$log") ||
        problem "episode $e segment $seg: exit 0 without 'training finished: $STEPS steps'"
      if [ "$KIND" != none ]; then MISSED=$((MISSED + 1)); echo "chaos: episode $e: $KIND missed: the run finished first"; fi
      break
    fi
    case $KIND in
      kill_rank|kill_save)
        if [ "$RC" -eq 137 ] || [ "$RC" -eq 3 ]; then SURVIVED[$KIND]=$((SURVIVED[$KIND] + 1))
        else problem "episode $e segment $seg: $what: exit code $RC, expected 137 (or 3)"; fi ;;
      term_job)
        local at
        at=$(tail -c +"$((offset + 1))" "$log" | sed -n 's/.*received: checkpointing at step \([0-9]*\).*/\1/p' | head -n 1)
        if [ "$RC" -ne 75 ]; then problem "episode $e segment $seg: $what: exit code $RC, expected 75"
        elif [ -z "$at" ]; then problem "episode $e segment $seg: exit 75 without 'received: checkpointing at step'"
        elif [ "$(cat "$out/checkpoints/latest" 2>/dev/null)" != "$(ckpt_name "$at")" ]; then
          problem "episode $e segment $seg: checkpointed at step $at but latest is '$(cat "$out/checkpoints/latest" 2>/dev/null)'"
        elif [ "$held" = 1 ] && [ "$at" != "$target" ]; then
          problem "episode $e segment $seg: held at step $target but checkpointed at step $at"
        else
          SURVIVED[term_job]=$((SURVIVED[term_job] + 1)); HELD=$((HELD + held)); what="$what -> checkpoint at step $at"
        fi ;;
      none) tail -n 20 "$log"; problem "episode $e segment $seg: exit code $RC without a fault"; break ;;
    esac
    echo "chaos: episode $e segment $seg: ${what:-$KIND (not delivered)}; exit $RC; last step logged $reached"
    # A run that keeps failing without a fault would loop for ever: stop the episode.
    if [ -z "$what" ]; then tail -n 20 "$log"; problem "episode $e segment $seg: the $KIND fault was never delivered"; break; fi
    [ "$seg" -lt 500 ] || { problem "episode $e: 500 segments without reaching step $STEPS"; break; }
  done
  EPISODES=$((EPISODES + 1))
  compare_final "$e" "$out/checkpoints/$(ckpt_name "$STEPS")"
}

# Every group of the episode's final checkpoint but /config equals the reference's (h5diff exit 0).
compare_final() {
  local e=$1 f=$2 ga gb g differ=()
  [ -f "$f" ] || { problem "episode $e left no final checkpoint $f"; return; }
  ga=$("$H5LS" "$REF" | awk '{print $1}' | sort) || { problem "h5ls $REF failed"; return; }
  gb=$("$H5LS" "$f" | awk '{print $1}' | sort) || { problem "h5ls $f failed"; return; }
  [ "$ga" = "$gb" ] || { problem "episode $e: the final checkpoint holds [${gb//$'\n'/ }], the reference [${ga//$'\n'/ }]"; return; }
  for g in $ga; do
    [ "$g" = config ] && continue
    "$H5DIFF" "$REF" "$f" "/$g" "/$g" >"$WORK/h5diff-$e-$g.txt" 2>&1 || differ+=("/$g")
  done
  if [ ${#differ[@]} -eq 0 ]; then
    IDENTICAL=$((IDENTICAL + 1))
    echo "chaos: episode $e: final checkpoint identical to the uninterrupted run's (h5diff of ${ga//$'\n'/ }: all but config identical)"
  else
    problem "episode $e: ${differ[*]} differ from the uninterrupted run (h5diff $REF $f; output in $WORK/h5diff-$e-*.txt)"
  fi
}

e=0
while :; do
  e=$((e + 1))
  echo "chaos: episode $e"
  PREV_REACHED=0
  episode "$e"
  [ ${#PROBLEMS[@]} -eq 0 ] || break
  faults_wanted || break
done

# ---- every checkpoint file left verifies; no .tmp is left ---------------------------------------
VERIFIED=0; DAMAGED=0
for f in "$WORK"/reference/checkpoints/*.h5 "$WORK"/episode-*/checkpoints/*.h5; do
  [ -e "$f" ] || continue
  rc=0; "$HPCTRAIN" inspect "$f" >"$WORK/inspect.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then VERIFIED=$((VERIFIED + 1))
  else DAMAGED=$((DAMAGED + 1)); problem "hpctrain inspect $f: exit $rc ($(grep -m1 -i "damaged\|error" "$WORK/inspect.log" || true))"; fi
done
for f in "$WORK"/episode-*/checkpoints/*.tmp; do
  [ -e "$f" ] && problem "a .tmp file is left after the run finished: $f"
done

echo "chaos: ---- summary (seed $SEED) ----"
echo "chaos: faults survived: kill_rank ${SURVIVED[kill_rank]}, term_job ${SURVIVED[term_job]} ($HELD held at their step), kill_save ${SURVIVED[kill_save]}; missed (run finished first): $MISSED"
CLEANED=$(cat "$WORK"/episode-*.log | grep -c "left by an interrupted save" || true)
echo "chaos: resumes $RESUMES, steps repeated $REPEATED (trained again after a fault), episodes $EPISODES, .tmp files of killed saves removed by a later run: $CLEANED"
echo "chaos: h5diff vs the uninterrupted run: $IDENTICAL of $EPISODES final checkpoints identical"
echo "chaos: checkpoints verified by hpctrain inspect: $VERIFIED ok, $DAMAGED damaged"
if [ ${#PROBLEMS[@]} -gt 0 ]; then
  echo "chaos: FAILED with ${#PROBLEMS[@]} problem(s) (logs kept in $WORK):" >&2
  printf 'chaos:   %s\n' "${PROBLEMS[@]}" >&2
  exit 1
fi
if ! all_kinds_survived; then echo "chaos: FAILED: not every kind of fault was survived (logs kept in $WORK)" >&2; exit 1; fi
echo "chaos: PASS"
[ "$KEEP" = 1 ] || rm -rf "$WORK"
