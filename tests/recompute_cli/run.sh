#!/usr/bin/env bash
# hpctrain train under a CPU memory cap (HPCTRAIN_CPU_MEM_LIMIT_BYTES, enforced by the counting
# allocator of lib/core/memory): the same batch fails with policy none (exit 3, message names the
# cap) and trains with policy full. One process, no mpirun needed.
# Environment: HPCTRAIN (the binary). Usage: run.sh [CAP_BYTES]
set -uo pipefail
WORK=$(mktemp -d /tmp/ht-recompute-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CAP=${1:-419430400}  # 400 MiB
fail() { echo "FAIL(memory_cap): $*" >&2; exit 1; }

"$HPCTRAIN" prepare --input /usr/share/games/fortunes/fortunes --output "$WORK/lm.h5" --val-fraction 0.1 \
  >/dev/null 2>&1 || fail "prepare failed"
# 8 blocks, d_model 128, seq_len 128, micro-batch 48, dropout 0.1: 748 MiB of activations per step
# without recompute, 133 MiB with full (measured 2026-12-02; see docs/benchmarks.md), plus ~30 MiB of
# weights, gradients and AdamW state: none exceeds the 400 MiB cap, full fits.
ARGS=(--set data.path="$WORK/lm.h5" --set model.n_layer=8 --set model.d_model=128 --set model.n_head=4
      --set model.seq_len=128 --set model.dropout=0.1 --set train.micro_batch_size=48 --set train.max_steps=2
      --set train.threads=1 --set eval.strategy=no --set checkpoint.every_steps=0 --set log.every_steps=1)

run() {  # run POLICY EXPECTED_RC
  local policy=$1 want=$2
  HPCTRAIN_CPU_MEM_LIMIT_BYTES=$CAP timeout 300 "$HPCTRAIN" train "${ARGS[@]}" \
    --set train.output_dir="$WORK/run-$policy" --set recompute.policy="$policy" >"$WORK/$policy.txt" 2>&1
  local rc=$?
  tail -n 4 "$WORK/$policy.txt"
  [ "$rc" -eq "$want" ] || fail "policy $policy: exit code $rc, expected $want"
}
echo "cap: $CAP bytes"
run none 3
grep -q "HPCTRAIN_CPU_MEM_LIMIT_BYTES" "$WORK/none.txt" || fail "policy none: the error does not name the cap"
run full 0
grep -q "act peak" "$WORK/full.txt" || fail "policy full: no step line"
echo "PASS: none exceeds the cap, full trains under it"
