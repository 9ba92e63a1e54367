#!/usr/bin/env bash
# GPU check: on a machine with one NVIDIA GPU, in at most ~10 minutes,
#   1. checks the tools and dev files it needs (says exactly what is missing),
#   2. builds hpctrain + the CUDA-labelled tests against THIS machine's libtorch
#      (python -c 'import torch; print(torch.utils.cmake_prefix_path)'; else ~/.cache/hpctrain),
#   3. runs `ctest -L cuda` (caching-allocator recompute memory, staged/direct all-reduce, bf16 autocast),
#   4. trains inputs/configs/gpt2-124m.toml briefly with recompute none / full / selective and
#      reports tokens/s, MFU and peak GPU memory of each.
# Results go to ONE file: $OUT/gpu-check.txt when OUT is set, else ./gpu-check.txt.
# Knobs (environment): STEPS (12), MICRO_BATCH (8), SEQ_LEN (1024), BUILD_DIR (build-gpu),
# PEAK_FLOPS (per GPU, for MFU; default: datasheet bf16 peak by name), JOBS (nproc), TORCH_DIR (a libtorch's share/cmake/Torch), BUDGET_S (570), PRECHECK_ONLY (0; 1 = stop
# after the GPU and prerequisite checks).
# Exit: 0 all ran, 1 a phase failed (see the file), 2 no GPU / missing prerequisites.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RESULT="${OUT:+$OUT/}gpu-check.txt"
[ -n "${OUT:-}" ] && mkdir -p "$OUT"
STEPS="${STEPS:-12}"; MICRO_BATCH="${MICRO_BATCH:-8}"; SEQ_LEN="${SEQ_LEN:-1024}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"; JOBS="${JOBS:-$(nproc)}"; BUDGET_S="${BUDGET_S:-570}"
WORK="$BUILD_DIR/gpu-check"
START=$(date +%s)
status=0

: >"$RESULT"
say() { echo "$*" | tee -a "$RESULT"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
# run_phase NAME MAX_SECONDS CMD...: bounded by both its own limit and what is left of the budget.
run_phase() {
  local name=$1 max=$2; shift 2
  local t=$(( $(left) < max ? $(left) : max ))
  if [ "$t" -le 5 ]; then say "[$name] SKIPPED: time budget of ${BUDGET_S}s used up"; status=1; return 1; fi
  local t0=$(date +%s) rc
  timeout --kill-after=10 "$t" "$@" >"$WORK/$name.log" 2>&1; rc=$?
  local dt=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then say "[$name] ok in ${dt}s"; else
    [ $rc -eq 124 ] && say "[$name] TIMED OUT after ${t}s" || say "[$name] FAILED (exit $rc) after ${dt}s"
    say "  last lines of $WORK/$name.log:"; tail -n 15 "$WORK/$name.log" | sed 's/^/    /' | tee -a "$RESULT" >/dev/null
    status=1
  fi
  return $rc
}

say "hpctrain GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# --- 0. a GPU at all (the CPU fallback: say so and stop; nothing here is meaningful on CPU)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "NO GPU: nvidia-smi is missing or sees no NVIDIA GPU on $(hostname); the GPU check needs one NVIDIA GPU."
  say "On a CPU-only machine use the normal suite instead: ctest --test-dir build (the cuda label has no tests to run here)."
  exit 2
fi
say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n1)"

# --- 1. prerequisites: tools, then headers/libraries; everything missing is listed at once
missing=()
for tool in cmake g++ mpirun mpicxx timeout; do command -v $tool >/dev/null 2>&1 || missing+=("tool '$tool'"); done
GEN=(); command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
hdr() { # hdr NAME HEADER DIRS...: the header exists in one of the dirs
  local name=$1 h=$2; shift 2
  for d in "$@"; do [ -f "$d/$h" ] && return 0; done
  missing+=("$name ($h)")
}
MPI_INC=$(mpicxx --showme:incdirs 2>/dev/null || true)
hdr "OpenMPI dev files" mpi.h $MPI_INC /usr/include/x86_64-linux-gnu/openmpi/include /usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/openmpi
hdr "HDF5 dev files" hdf5.h /usr/include/hdf5/openmpi /usr/include/hdf5/serial /usr/include ${HDF5_ROOT:+$HDF5_ROOT/include}
hdr "toml++" toml++/toml.h /usr/include /usr/local/include
hdr "CLI11" CLI/CLI.hpp /usr/include /usr/local/include
hdr "nlohmann-json" nlohmann/json.hpp /usr/include /usr/local/include
hdr "GoogleTest" gtest/gtest.h /usr/include /usr/local/include

if [ -z "${TORCH_DIR:-}" ]; then
  for py in python3 python; do
    p=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) && [ -d "$p/Torch" ] && { TORCH_DIR="$p/Torch"; break; }
  done
fi
if [ -z "${TORCH_DIR:-}" ] && [ -d "${HPCTRAIN_CACHE:-$HOME/.cache/hpctrain}/libtorch-2.11.0-cu130/torch/share/cmake/Torch" ]; then
  TORCH_DIR="${HPCTRAIN_CACHE:-$HOME/.cache/hpctrain}/libtorch-2.11.0-cu130/torch/share/cmake/Torch"
fi
[ -n "${TORCH_DIR:-}" ] || missing+=("libtorch (no python torch here and no ~/.cache/hpctrain/libtorch-2.11.0-cu130; set TORCH_DIR)")
if [ ${#missing[@]} -gt 0 ]; then
  say "MISSING PREREQUISITES: ${missing[*]}"
  say "On Debian/Ubuntu: apt-get install cmake ninja-build g++ libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libgtest-dev"
  exit 2
fi
say "libtorch: $TORCH_DIR"
if [ "${PRECHECK_ONLY:-0}" = 1 ]; then say "RESULT: prerequisites present (PRECHECK_ONLY=1: stopping here)"; exit 0; fi
mkdir -p "$WORK"

# --- 2. build
run_phase configure 120 cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTorch_DIR="$TORCH_DIR" -DHPCTRAIN_BUILD_BENCH=OFF || { say "RESULT: configure failed"; exit 1; }
# The CUDA-labelled tests' executables: ctest names unit.X / mpi.X.npN -> target X.
# ctest names unit.<module> -> executable unit_<module>; mpi.mpi_<module>.npN -> mpi_<module>.
mapfile -t CUDA_TARGETS < <(ctest --test-dir "$BUILD_DIR" -N -L cuda 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p' |
  sed -E 's/^unit\.([a-z_]+)$/unit_\1/; s/^mpi\.(mpi_[a-z_]+)\.np[0-9]+$/\1/' | sort -u)
say "CUDA-labelled test executables: ${CUDA_TARGETS[*]:-(none registered)}"
run_phase build 300 cmake --build "$BUILD_DIR" -j "$JOBS" --target hpctrain "${CUDA_TARGETS[@]}" ||
  { say "RESULT: build failed"; exit 1; }
BIN="$BUILD_DIR/bin/hpctrain"

# --- 3. CUDA unit tests
if [ ${#CUDA_TARGETS[@]} -gt 0 ]; then
  run_phase ctest_cuda 150 ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure
  grep -E "tests passed|tests failed|Passed|Failed|Not Run" "$WORK/ctest_cuda.log" | tail -n 25 | sed 's/^/  /' >>"$RESULT"
else
  say "[ctest_cuda] FAILED: no test carries the cuda label in this build (tests/CMakeLists.txt labels them)"
  status=1
fi

# --- 4. GPT-2-124M-shaped training, recompute none / full / selective
DATA="$WORK/fortunes.h5"
if [ ! -f "$DATA" ]; then
  SRC="/usr/share/games/fortunes"
  if [ ! -d "$SRC" ]; then  # synthetic text when Debian's fortunes are not installed
    SRC="$WORK/text"; mkdir -p "$SRC"
    for i in $(seq 1 4000); do echo "document $i: the rank averages its parameters every N steps; loss $((i % 97))"; echo "%"; done >"$SRC/synthetic"
  fi
  run_phase prepare 60 "$BIN" prepare --input "$SRC" --output "$DATA" || { say "RESULT: prepare failed"; exit 1; }
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# MFU against the GPU's dense bf16 peak (datasheet); unknown GPUs: the trainer's measured fp32 matmul rate.
if [ -z "${PEAK_FLOPS:-}" ]; then
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)" in
    *H200*|*H100*SXM*|*H100\ 80GB\ HBM3*) PEAK_FLOPS=989e12 ;;
    *H100*) PEAK_FLOPS=756e12 ;;
    *A100*) PEAK_FLOPS=312e12 ;;
    *L40S*) PEAK_FLOPS=362e12 ;;
    *) PEAK_FLOPS=0 ;;
  esac
fi
say "MFU reference: $([ "$PEAK_FLOPS" = 0 ] && echo 'measured fp32 matmul peak (train.peak_flops = 0)' || echo "$PEAK_FLOPS FLOP/s dense bf16 (datasheet; PEAK_FLOPS overrides)")"
say ""
say "GPT-2-124M shape (12 x 768, 12 heads, vocab 50257), seq_len $SEQ_LEN, micro-batch $MICRO_BATCH, bf16 autocast, 1 rank, $STEPS steps; tokens/s and MFU: median of steps 3..$STEPS"
printf '%-10s %12s %8s %18s %18s %10s\n' recompute tokens/s MFU peak_alloc_MiB nvidia-smi_MiB loss | tee -a "$RESULT"
for policy in none full selective; do
  run_dir="$WORK/run-$policy"; rm -rf "$run_dir"
  smi_log="$WORK/smi-$policy.csv"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$smi_log" 2>/dev/null & smi=$!
  run_phase "train_$policy" 100 mpirun -np 1 --bind-to none "$BIN" train --config inputs/configs/gpt2-124m.toml \
    --set "data.path=$DATA" --set "train.output_dir=$run_dir" --set "train.max_steps=$STEPS" \
    --set "train.micro_batch_size=$MICRO_BATCH" --set "train.grad_accum_steps=1" --set "model.seq_len=$SEQ_LEN" \
    --set "train.warmup_steps=2" --set "recompute.policy=$policy" --set "local_sgd.enabled=false" \
    --set "eval.strategy=no" --set "checkpoint.save_final=false" --set "checkpoint.every_steps=0" \
    --set "log.every_steps=1" --set "train.device=cuda" --set "train.peak_flops=$PEAK_FLOPS"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  python3 - "$run_dir/metrics.jsonl" "$smi_log" "$policy" <<'EOF' | tee -a "$RESULT"
import json, statistics, sys
path, smi, policy = sys.argv[1:4]
try:
    rows = [json.loads(l) for l in open(path) if '"loss"' in l]
except OSError:
    rows = []
smi_peak = max([int(x) for x in open(smi).read().split() if x.strip().isdigit()] or [0])
if not rows:
    print(f"{policy:<10} {'no metrics (run failed)':>30}"); sys.exit(0)
steady = rows[2:] or rows
tps = statistics.median(r["tokens_per_s"] for r in steady)
mfu = statistics.median(r.get("mfu", 0.0) for r in steady)
peak = max(r.get("peak_cuda_bytes", r.get("cuda_peak_bytes", r.get("peak_step_bytes", 0))) for r in rows) / 2**20
print(f"{policy:<10} {tps:12.0f} {100 * mfu:7.1f}% {peak:18.0f} {smi_peak:18d} {rows[-1]['loss']:10.4f}")
EOF
done
say ""
say "peak_alloc_MiB: the trainer's allocator peak from metrics.jsonl; nvidia-smi_MiB: device memory in use (context + caching allocator), max of 200 ms samples."
say "RESULT: $([ $status -eq 0 ] && echo 'all phases ran' || echo 'some phases failed, see above') in $(( $(date +%s) - START ))s"
exit $status
