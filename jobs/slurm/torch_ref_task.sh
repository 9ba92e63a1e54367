#!/bin/bash
# One srun task of the PyTorch reference (tests/python/hpctrain_ref) inside an allocation, started by
# jobs/bench/slurm_scaling.py (jobs/slurm/scaling.sbatch). Two ways, REF_LAUNCHER:
#   torchrun  one task per node; each starts `python -m torch.distributed.run --nnodes $SLURM_NNODES
#             --node_rank $SLURM_NODEID --nproc_per_node $REF_NPROC_PER_NODE`, which starts the ranks;
#   srun      one task per rank; torch.distributed reads Slurm's view of it:
#             RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID.
# Both rendezvous at MASTER_ADDR:MASTER_PORT (the first node of SLURM_JOB_NODELIST; the driver sets
# both). Arguments: what follows `python` (e.g. -m hpctrain_ref.train_ref --config ... --variant ddp).
# REF_LOG_DIR (optional): torchrun's --log-dir (else torchrun makes a torchelastic_* directory in
# the node's TMPDIR and leaves it there).
# GLOO_SOCKET_IFNAME (gloo's interface), unless set: the interface this node reaches MASTER_ADDR by,
# so that gloo does not depend on the node's hostname resolving.
set -euo pipefail
die() { echo "[ref] error: $1 (node ${SLURMD_NODENAME:-$(hostname)})" >&2; exit 2; }
: "${MASTER_ADDR:?}" "${MASTER_PORT:?}" "${REF_PYTHON:?}" "${REF_LAUNCHER:?}"
[ -x "$REF_PYTHON" ] || command -v "$REF_PYTHON" >/dev/null 2>&1 || die "python '$REF_PYTHON' not found"

if [ -z "${GLOO_SOCKET_IFNAME:-}" ] && command -v ip >/dev/null 2>&1; then
  dev=$(ip -o route get "$MASTER_ADDR" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -n 1)
  if [ "$dev" = lo ] && [ "${MASTER_ADDR#127.}" = "$MASTER_ADDR" ]; then
    # MASTER_ADDR is this node's own address: gloo must listen on the interface that holds it.
    dev=$(ip -o -4 addr show | awk -v a="$MASTER_ADDR" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }')
  fi
  [ -n "$dev" ] && export GLOO_SOCKET_IFNAME="$dev"
fi

case "$REF_LAUNCHER" in
  torchrun)
    exec "$REF_PYTHON" -m torch.distributed.run --nnodes "${SLURM_NNODES:?}" --node_rank "${SLURM_NODEID:?}" \
      --nproc_per_node "${REF_NPROC_PER_NODE:-1}" --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \
      --max_restarts 0 ${REF_LOG_DIR:+--log-dir "$REF_LOG_DIR"} "$@" ;;
  srun)
    export RANK="${SLURM_PROCID:?}" WORLD_SIZE="${SLURM_NTASKS:?}" LOCAL_RANK="${SLURM_LOCALID:?}"
    export LOCAL_WORLD_SIZE="${REF_NPROC_PER_NODE:-1}"
    exec "$REF_PYTHON" "$@" ;;
  *) die "REF_LAUNCHER must be torchrun or srun, not '$REF_LAUNCHER'" ;;
esac
