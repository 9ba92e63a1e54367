#!/bin/bash
# jobs/bench/sweep.py + jobs/slurm/sweep.sbatch: a 4-task job array on the test cluster.
#   - submit refuses a grid with an unknown key, naming it, before any job is queued;
#   - three tasks from a grid (train.lr=0.001,0.003,0.01) and a fourth (--task) with a bad key,
#     submitted with --no-check so that the bad key reaches hpctrain: `sbatch --array=0-3%2`;
#   - `sweep.py collect DIR --wait` exits 1 (a task failed) and writes one table (sweep.md,
#     sweep.csv) with all 4 tasks: the 3 good ones "ok" with their final and best eval loss,
#     tokens/s and wall seconds, each in its own run directory; the bad one FAILED with hpctrain's
#     own error line (the same text as in its task-3.out); and one PNG (sweep.png).
source "$(dirname "$0")/lib.sh"
new_workdir sweep
SWEEP="$HPCTRAIN_SOURCE_DIR/jobs/bench/sweep.py"
command -v gnuplot >/dev/null 2>&1 || skip_suite "gnuplot not installed (sweep.py collect draws sweep.png with it)"
EVAL=(--set eval.strategy=steps eval.every_steps=5 eval.max_batches=2 train.max_steps=20)

# A bad key is refused at submit, before anything is queued.
if msg=$(python3 "$SWEEP" submit train.lr=0.001 --task "train.bogus_key=1" --config tiny.toml --hpctrain "$HPCTRAIN" \
    --dir "$WORK/refused" 2>&1); then
  fail "submit accepted the unknown key train.bogus_key: $msg"
fi
echo "$msg"
grep -q "key 'train.bogus_key' is not a config key" <<<"$msg" || fail "submit's refusal does not name train.bogus_key"
[ ! -e "$WORK/refused/sweep.json" ] || fail "a refused submit wrote sweep.json"

d="$WORK/sw"
python3 "$SWEEP" submit train.lr=0.001,0.003,0.01 --task "train.bogus_key=1" --no-check --array-parallel 2 \
  --config tiny.toml "${EVAL[@]}" --hpctrain "$HPCTRAIN" --dir "$d" -- --time=4 || fail "sweep.py submit failed"
grep -q '"job_id": "[0-9]' "$d/sweep.json" || fail "sweep.json records no array job id"
grep -q -- '--array=0-3%2' "$d/sweep.json" || fail "the array is not 0-3%2"

timeout "$JOB_TIMEOUT_S" python3 "$SWEEP" collect "$d" --wait "$JOB_TIMEOUT_S" >collect.out 2>&1
rc=$?
cat collect.out
[ $rc -eq 1 ] || fail "collect exit code $rc, expected 1 (one task failed)"
for i in 0 1 2 3; do show_output "$d/task-$i.out" | tail -n 6; done

for f in sweep.md sweep.csv; do [ -s "$d/$f" ] || fail "$d/$f missing or empty"; done
[ "$(head -c 4 "$d/sweep.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$d/sweep.png is not a PNG"
[ "$(stat -c %s "$d/sweep.png")" -gt 2000 ] || fail "$d/sweep.png is suspiciously small"

rows=$(grep -cE '^\| [0-9]+ \|' "$d/sweep.md")
[ "$rows" -eq 4 ] || fail "sweep.md has $rows task rows, expected 4"
[ "$(tail -n +2 "$d/sweep.csv" | wc -l)" -eq 4 ] || fail "sweep.csv should have 4 rows"
# | task | overrides | status | final eval loss | best eval loss (step) | tokens/s median | bytes sent MB | train s | wall s | error |
for i in 0 1 2; do
  grep -E "^\| $i \|" "$d/sweep.md" | awk -F'|' -v i="$i" '{
      for (k = 2; k <= NF; ++k) gsub(/^ +| +$/, "", $k)
      ok = ($4 == "ok" && $5 ~ /^[0-9]+\.[0-9]+$/ && $6 ~ /^[0-9]+\.[0-9]+ \(20\)$|^[0-9]+\.[0-9]+ \([0-9]+\)$/ &&
            $7 ~ /^[0-9]+$/ && $10 ~ /^[0-9]+$/ && $11 == "")
      if (!ok) print "task " i " row incomplete: " $0
      exit !ok }' || fail "task $i is not collected as ok with its metrics"
  [ -s "$d/task-$i/metrics.jsonl" ] || fail "task $i has no run directory of its own ($d/task-$i/metrics.jsonl)"
done
# Each good task trained with its own learning rate (its resolved config in its own run directory).
for i in 0 1 2; do
  want=$(awk -F'\t' -v i="$i" '$1 == i { sub(/^train.lr=/, "", $3); print $3 }' "$d/tasks.tsv")
  got=$(sed -n 's/^lr *= *//p' "$d/task-$i/config.toml" | head -n 1)
  python3 -c "import sys; sys.exit(abs(float('$got') - float('$want')) > 1e-12)" ||
    fail "task $i trained with lr '$got', expected $want"
done
# The failed task: named, with hpctrain's own error line from its output.
err=$(sed -n 's/.*\[error\] \(\[rank [0-9]*\] \)\{0,1\}\(config key .train\.bogus_key.*\)$/\2/p' "$d/task-3.out" | head -n 1)
[ -n "$err" ] || fail "task-3.out holds no hpctrain [error] line about train.bogus_key"
line=$(grep -E '^\| 3 \|' "$d/sweep.md")
grep -q "| 3 | train.bogus_key=1 | FAILED |" <<<"$line" || fail "task 3 is not named FAILED: $line"
grep -qF "$(sed 's/|/\\|/g' <<<"$err")" <<<"$line" || fail "task 3's row does not carry hpctrain's error '$err': $line"
grep -q "^Not finished: task 3 (train.bogus_key=1) FAILED: config key 'train.bogus_key'" "$d/sweep.md" ||
  fail "sweep.md does not name the failed task under the table"
sed -n '/^| task/,/^$/p' "$d/sweep.md"
say "PASS: 4-task array: 3 collected, the bad key's task named with hpctrain's error, one table and one PNG"
