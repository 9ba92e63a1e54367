#!/bin/bash
# Hierarchical local SGD on 2 emulated nodes x 2 ranks at 100mbit, the groups found by the node split
# (local_sgd.group_size = 0: MPI_Comm_split_type over the emulated hostnames), ZeRO-1 inside each
# group (train.shard_optimizer = true), N = 4:
#   - the start-up line names groups of 2 ranks with ZeRO-1 over 2 ranks (the node split worked);
#   - the links carry the cross-group exchanges and nothing per step: between a run of 8 and one of
#     24 steps (the start-up broadcast and the final checkpoint's gather cancel out) the nodes' links
#     sent what the 4 extra exchanges handed to MPI (4 ranks x the growth of bytes_sent -
#     inner_bytes_sent) plus at most 15 % (Ethernet/IP/TCP headers and ACKs, ~6 % measured, the small
#     all-reduces, retransmits under load);
#   - inner_bytes_sent > 0 (the per-step averages ran, inside the nodes), and the 24-step run's links
#     carried less than half of what the flat per-step run's did.
# No timing is asserted; the figures are printed.
source "$(dirname "$0")/lib.sh"
need_prereqs mpirun
HT="${HPCTRAIN_BINARY_DIR:-$HPCTRAIN_SOURCE_DIR/build}/bin/hpctrain"
[ -x "$HT" ] || skip "hpctrain is not built ($HT)"
[ -d /usr/share/games/fortunes ] || skip "Debian's fortunes are not installed (/usr/share/games/fortunes)"
new_work hierarchical
"$HT" prepare --input /usr/share/games/fortunes --output "$WORK/data.h5" >"$WORK/prepare.log" 2>&1 ||
  fail "hpctrain prepare failed: $(tail -n 2 "$WORK/prepare.log")"
"$EMU" up --nodes 2 --ranks-per-node 2 --link 100mbit || fail "up failed"

link_bytes() { "$EMU" status --bytes | awk '{s += $2} END {print s}'; }

# run NAME STEPS [--set args...]: a run on 4 ranks; prints the bytes both nodes' links sent meanwhile.
run() {
  local name=$1 steps=$2; shift 2
  local before after
  before=$(link_bytes)
  timeout 170 "$EMU" mpirun -np 4 -x OMP_NUM_THREADS=1 "$HT" train --set model.n_layer=2 model.d_model=64 \
    model.n_head=2 model.seq_len=64 train.micro_batch_size=4 train.max_steps=$steps train.threads=1 \
    eval.strategy=no checkpoint.every_steps=0 log.every_steps=1 train.output_dir="$WORK/$name" \
    data.path="$WORK/data.h5" "$@" >"$WORK/$name.log" 2>&1 || { tail -n 20 "$WORK/$name.log" >&2; fail "$name: training failed"; }
  after=$(link_bytes)
  echo $((after - before))
}
metric() {  # metric NAME FIELD: FIELD of rank 0's last training line
  python3 -c "import json,sys;r=[json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l];print(r[-1][sys.argv[2]])" \
    "$WORK/$1/metrics.jsonl" "$2"
}

HIER=(--set local_sgd.enabled=true local_sgd.steps=4 local_sgd.group_size=0 train.shard_optimizer=true)
flat=$(run flat 24 --set local_sgd.enabled=false) || exit 1
short=$(run short 8 "${HIER[@]}") || exit 1
long=$(run long 24 "${HIER[@]}") || exit 1
grep -q "inside each group of 2 ranks: ZeRO-1 over 2 ranks" "$WORK/long.log" ||
  { grep "data parallel" "$WORK/long.log"; fail "the node split did not give 2 groups of 2 ranks with ZeRO-1 inside"; }
say "$(grep -m1 -o 'data parallel: .*' "$WORK/long.log")"
inner=$(metric long inner_bytes_sent)
[ "$inner" -gt 0 ] || fail "inner_bytes_sent = $inner: no gradient was averaged inside a group"
cross() { echo $(($(metric "$1" bytes_sent) - $(metric "$1" inner_bytes_sent))); }
payload=$((4 * ($(cross long) - $(cross short))))
say "links: flat 24 steps $flat bytes; hierarchical 8 steps $short, 24 steps $long; the 4 extra exchanges handed $payload bytes to MPI"
python3 - "$short" "$long" "$payload" "$flat" <<'PY' || fail "link bytes"
import sys
short, long, payload, flat = map(float, sys.argv[1:])
extra = long - short
print(f"  extra link bytes / extra exchange payload = {extra / payload:.3f} (allowed 1.00-1.15); "
      f"hierarchical / flat over 24 steps = {long / flat:.3f}")
assert payload > 0, "no cross-group exchange between step 8 and step 24"
assert payload <= extra <= 1.15 * payload, "the links carried other bytes than the cross-group exchanges"
assert long < flat / 2, "the hierarchical run did not keep the per-step traffic inside the nodes"
PY
"$EMU" down || fail "down failed"
say "PASS: per-step traffic stayed inside the emulated nodes; the links carried the cross-group exchanges"
