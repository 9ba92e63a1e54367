#!/bin/bash
# Stands in for an hpctrain whose MPI library does not understand the launcher's PMI: every task
# starts as rank 0 of its own one-rank world, the silent failure the job script's pre-flight must
# catch (with Debian's OpenMPI a wrong --mpi= fails loudly in MPI_Init instead, tested separately).
for a in "$@"; do
  if [ "$a" = --dump-config ]; then printf '[train]\noutput_dir = "fake"\n'; exit 0; fi
done
echo "hpctrain (fake): rank 0 of a 1-rank world on $(hostname)"
