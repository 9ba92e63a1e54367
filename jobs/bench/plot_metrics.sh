#!/usr/bin/env bash
# Turns a run's metrics.jsonl into a PNG of the training and evaluation loss curves (gnuplot).
#   jobs/bench/plot_metrics.sh runs/demo/metrics.jsonl [out.png] [more.jsonl ...]
# Several files are drawn on one plot (e.g. local SGD N=1 vs N=8), labelled by their directory.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: plot_metrics.sh METRICS.jsonl [OUT.png] [MORE.jsonl ...]" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot_metrics: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
first="$1"; shift
out="${1:-${first%.jsonl}.png}"; [ $# -ge 1 ] && shift
files=("$first" "$@")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
plot=""
for i in "${!files[@]}"; do
  f="${files[$i]}"
  [ -s "$f" ] || { echo "plot_metrics: $f is missing or empty" >&2; exit 2; }
  label=$(basename "$(dirname "$(realpath "$f")")")
  python3 - "$f" "$tmp/train$i.dat" "$tmp/eval$i.dat" <<'PY'
import json, sys
src, train_out, eval_out = sys.argv[1:]
with open(src) as f, open(train_out, "w") as t, open(eval_out, "w") as e:
    for line in f:
        m = json.loads(line)
        if "loss" in m:
            t.write(f"{m['step']} {m['loss']}\n")
        if "eval_loss" in m:
            e.write(f"{m['step']} {m['eval_loss']}\n")
PY
  plot+="'$tmp/train$i.dat' using 1:2 with lines title '$label train', "
  [ -s "$tmp/eval$i.dat" ] && plot+="'$tmp/eval$i.dat' using 1:2 with linespoints title '$label eval', "
done
gnuplot <<GP
set terminal pngcairo size 900,540 noenhanced
set output '$out'
set xlabel 'optimizer step'
set ylabel 'loss (nats/token)'
set grid
set key top right
plot ${plot%, }
GP
echo "plot_metrics: wrote $out"
