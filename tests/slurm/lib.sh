# Shared helpers of the Slurm test scripts (sourced). Expects from ctest's environment:
#   HT_SLURM_DIR (the private cluster's state dir), HPCTRAIN (the executable), HPCTRAIN_SOURCE_DIR.
# Each test works in its own directory $WORK under the state dir; jobs are submitted from there.
set -uo pipefail

: "${HT_SLURM_DIR:?}" "${HPCTRAIN:?}" "${HPCTRAIN_SOURCE_DIR:?}"
# shellcheck source=../support/skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/../support/skip.sh"
if [ -f "$HT_SLURM_DIR.unavailable" ]; then skip_suite "Slurm cluster unavailable: $(cat "$HT_SLURM_DIR.unavailable")"; fi
export SLURM_CONF="$HT_SLURM_DIR/slurm.conf"
export PATH="$PATH:/usr/sbin:/sbin"
JOBS="$HPCTRAIN_SOURCE_DIR/jobs/slurm"
DATA="$HT_SLURM_DIR/data/fortunes.h5"   # written by the slurm.prepare_data fixture
JOB_TIMEOUT_S="${JOB_TIMEOUT_S:-180}"

say() { echo "[test $(date +%H:%M:%S)] $*"; }
fail() { echo "[test $(date +%H:%M:%S)] FAIL: $*" >&2; exit 1; }

# A fresh work dir for the test with tiny.toml: a tiny model, seconds per run on 2 cores.
new_workdir() {
  WORK="$HT_SLURM_DIR/work/$1"
  rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK" || exit 1
  cat >tiny.toml <<TOML
[model]
n_layer = 2
n_head = 2
d_model = 64
seq_len = 32
[data]
path = "$DATA"
[train]
micro_batch_size = 4
lr_schedule = "constant"
device = "cpu"
[eval]
strategy = "no"
[log]
every_steps = 1
[checkpoint]
keep = 3
TOML
}

# Prints a job's field (e.g. JobState, Restarts, ExitCode) from scontrol.
job_field() { timeout 10 scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# Waits until the job reaches a final state (never more than JOB_TIMEOUT_S) and prints it.
wait_job() {
  local jid="$1" deadline=$((SECONDS + ${2:-$JOB_TIMEOUT_S})) st=""
  while [ $SECONDS -lt $deadline ]; do
    st=$(job_field "$jid" JobState)
    case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) echo "$st"; return 0 ;; esac
    sleep 0.5
  done
  timeout 10 scancel "$jid" 2>/dev/null
  echo "TIMEOUT_IN_TEST(last state ${st:-unknown})"
  return 1
}

# Waits until a file contains a line matching a regex (or the job ends / the time is up).
wait_for_line() {
  local file="$1" regex="$2" jid="$3" deadline=$((SECONDS + ${4:-$JOB_TIMEOUT_S}))
  while [ $SECONDS -lt $deadline ]; do
    grep -qE "$regex" "$file" 2>/dev/null && return 0
    case "$(job_field "$jid" JobState)" in COMPLETED|FAILED|CANCELLED|TIMEOUT) return 1 ;; esac
    sleep 0.2
  done
  return 1
}

# Slurm keeps a requeued job from starting for ~2 min (its BeginTime) so that the old job's
# launch credential, revoked at the requeue, cannot be confused with the new one. Tests need
# not wait that long; they may not start it within the same second either ("Job credential
# revoked"), so they release it a few seconds after the requeue.
release_requeued() { timeout 10 scontrol update JobId="$1" StartTime=now+3; }

show_output() { echo "----- job output: $1 -----"; cat "$1" 2>/dev/null; echo "----- end of $1 -----"; }

# Submits a job script with extra sbatch options; prints the job id.
submit() { timeout 30 sbatch --parsable "$@" | cut -d';' -f1; }

# Final checkpoint file of a run directory (the one `latest` names, else the newest ckpt-*.h5).
final_ckpt() {
  local dir="$1" l
  if [ -f "$dir/latest" ]; then l=$(cat "$dir/latest"); [ -f "$l" ] || l="$dir/$(basename "$l")"; echo "$l"; return; fi
  ls -1 "$dir"/ckpt-*.h5 2>/dev/null | sort -V | tail -n 1
}

# Compares the /model groups of two checkpoint files bit for bit (h5diff without tolerance).
same_model() {
  local a="$1" b="$2"
  [ -f "$a" ] || fail "checkpoint $a missing"
  [ -f "$b" ] || fail "checkpoint $b missing"
  if h5diff -q "$a" "$b" /model /model; then
    say "final parameters identical: h5diff $a $b /model /model"
  else
    h5diff -r "$a" "$b" /model /model | head -n 20
    fail "final parameters differ between $a and $b"
  fi
}
