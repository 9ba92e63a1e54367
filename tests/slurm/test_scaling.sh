#!/bin/bash
# jobs/slurm/scaling.sbatch on a Slurm cluster of its own whose 2 nodes are emulated network nodes
# with 20 Mbit/s links (tests/slurm/slurm_cluster.sh, HT_SLURM_NETNS=1 HT_SLURM_LINK=20mbit), run in
# the sandbox of the cluster suite (tests/cluster/lib.sh: own network and mount namespace).
# `sbatch --nodes=2 jobs/slurm/scaling.sbatch`, small and short (a 2 x 64 model, target at step 16):
#   - the job completes and writes scaling.md, scaling.csv, scaling.png, link.json into RUN_DIR;
#   - the table has the PyTorch DDP row and the hpctrain rows (dp, lsgd8), each with tokens/s and
#     an eval loss; dp reaches the target;
#   - the link measured once by the probe is 0.6-1.1 of the 20 Mbit/s cap (see below);
#   - beside every hpctrain row's measured sync seconds stands the cost model's prediction (the
#     network part only); for dp it is within 0.67-1.5x of the measurement, for lsgd8 within 3x.
# The link rate on this 2-core machine: the probe's 4 MB all-reduce measured 19.0-19.8 Mbit/s
# (0.95-0.99 of the cap) with the job's MPI_TCP_TUNING=1 on a quiet machine, 0.85 in CI beside other
# tests (the probe's processes share the 2 cores); without the tuning OpenMPI's TCP defaults give 0.51.
# So the band is 0.6-1.1: it fails a probe that misses the cap (tbf not applied, loopback), a unit
# error of 2x or 8x, and the untuned TCP path, and it does not race the load of neighbouring tests.
source "$(dirname "$0")/../cluster/lib.sh"
need_prereqs mpicc srun sbatch munged slurmctld slurmd gnuplot python3
: "${HPCTRAIN:?}"
PY=$(python3 -c "import sys; sys.path.insert(0, '$HPCTRAIN_SOURCE_DIR/jobs/bench'); import scaling_emulate as se; print(se.venv_python(None) or '')")
[ -n "$PY" ] || skip "no Python with torch for the PyTorch reference (run ./scripts/setup-python.sh)"
new_work scaling
start_netns_slurm 20mbit 2

cd "$WORK" || exit 1
cat /usr/share/games/fortunes/{fortunes,literature,science,wisdom} 2>/dev/null | head -c 400000 >fortunes.txt
[ -s fortunes.txt ] || skip "no fortunes text (Debian package fortunes)"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$HPCTRAIN" prepare --input fortunes.txt \
  --output "$WORK/fortunes.h5" >prepare.log 2>&1 || { cat prepare.log; fail "hpctrain prepare failed"; }

# Submitted from the repository root, as docs/slurm.md says; everything it writes goes to RUN_DIR.
rd="$WORK/report"
jid=$(cd "$HPCTRAIN_SOURCE_DIR" && timeout 30 sbatch --parsable --nodes=2 --time=4 --output="$WORK/scaling-%j.out" \
  --export="ALL,HPCTRAIN=$HPCTRAIN,PYTHON=$PY,RUN_DIR=$rd,DATA=$WORK/fortunes.h5,LINK_CAP=20mbit,MPI_TCP_TUNING=1" \
  jobs/slurm/scaling.sbatch) || fail "sbatch refused scaling.sbatch"
jid=${jid%%;*}
say "submitted job $jid"
st=""
for _ in $(seq 1 480); do
  st=$(timeout 10 scontrol show job "$jid" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
  case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
  sleep 0.5
done
out="$WORK/scaling-$jid.out"
echo "----- job output -----"; cat "$out"; echo "----- end -----"
[ "$st" = COMPLETED ] || { tail -n 20 "$rd"/runs/*.log 2>/dev/null; fail "scaling job $jid ended '$st'"; }

for f in scaling.md scaling.csv link.json; do [ -s "$rd/$f" ] || fail "$rd/$f missing or empty"; done
[ "$(head -c 4 "$rd/scaling.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$rd/scaling.png is not a PNG"
[ "$(stat -c %s "$rd/scaling.png")" -gt 2000 ] || fail "$rd/scaling.png is suspiciously small"

# The table: | mode | kind | tokens/s | time to target | vs DDP | steps | MB | final eval loss | sync measured | sync model |
row() { grep -E "^\| $1 \| $2 \|" "$rd/scaling.md"; }
num='[0-9]+(\.[0-9]+)?'
row ddp "PyTorch ddp" | grep -qE "^\| ddp \| PyTorch ddp \| $num \| $num \| 1\.00x \| 16 \|" || fail "no PyTorch DDP row reaching the target at step 16"
for m in dp lsgd8; do
  r=$(row "$m" hpctrain) || fail "no hpctrain row for $m in scaling.md"
  echo "$r" | awk -F'|' -v m="$m" '{
      for (i = 2; i <= NF; ++i) gsub(/^ +| +$/, "", $i)
      tps = $4; loss = $9; meas = $10; model = $11
      if (tps !~ /^[0-9]+$/ || loss !~ /^[0-9.]+$/) { print m ": tokens/s or eval loss missing"; exit 1 }
      if (meas !~ /^[0-9.]+$/ || model !~ /^[0-9.]+$/) { print m ": measured sync or cost model missing"; exit 1 }
      r = model / meas; printf "%s: sync measured %s s, cost model %s s (model/measured %.2f)\n", m, meas, model, r
      # dp: 14 gradient all-reduces after the warmup, model/measured 0.91-0.99 in 3 runs. lsgd8 has 2-3
      # averages, the first of which also opens the TCP connections (OpenMPI connects lazily): 0.58-0.81.
      lo = (m == "dp") ? 0.67 : 0.33; hi = (m == "dp") ? 1.5 : 3.0
      if (r < lo || r > hi) { printf "%s: cost model / measured %.2f outside [%.2f, %.2f]\n", m, r, lo, hi; exit 1 } }' ||
    fail "$m row: $r"
done
row dp hpctrain | grep -qE "^\| dp \| hpctrain \| $num \| $num \| ${num}x \|" || fail "dp did not reach DDP's target"

# The link: the probe's rate 0.6-1.1 of the cap (the report's line and link.json agree).
read -r B cap < <(python3 -c "import json; l = json.load(open('$rd/link.json')); print(l.get('B', 0), l.get('cap') or 0)")
grep -q "^Link: .* Mbit/s per node and direction .*nominal cap 20mbit" "$rd/scaling.md" || fail "scaling.md has no link line with the cap"
awk -v b="$B" -v c="$cap" 'BEGIN { r = b / c; printf "link: measured %.2f Mbit/s, cap %.0f Mbit/s: %.3f of it\n", b / 1e6, c / 1e6, r
  exit !(c == 20000000 && r >= 0.6 && r <= 1.1) }' || fail "measured link rate $B bit/s is not 0.6-1.1 of the 20 Mbit/s cap"
[ "$(tail -n +2 "$rd/scaling.csv" | wc -l)" -eq 3 ] || fail "scaling.csv should have 3 rows (ddp, dp, lsgd8)"
sed -n '/^| mode/,/^$/p' "$rd/scaling.md"
# HT_SCALING_KEEP=DIR keeps a copy of the report (the work dir is removed on exit).
if [ -n "${HT_SCALING_KEEP:-}" ]; then
  mkdir -p "$HT_SCALING_KEEP" && cp "$rd"/scaling.{md,csv,png} "$rd/link.json" "$out" "$HT_SCALING_KEEP/" && say "report kept in $HT_SCALING_KEEP"
fi
say "PASS: scaling.sbatch on 2 nodes at 20 Mbit/s: PyTorch and hpctrain rows, link 0.6-1.1 of the cap, cost model beside each sync"
