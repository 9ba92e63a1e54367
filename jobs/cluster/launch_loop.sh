#!/usr/bin/env bash
# Launch reliability of `emulate.sh mpirun`: N consecutive launches of a trivial MPI program
# (MPI_Init, hostname, MPI_Barrier, MPI_Finalize) on every node of the emulated cluster that is up.
# Stops at the first failure: prints the count, the exit code and that launch's output, exits 1.
#
#   jobs/cluster/launch_loop.sh N [-np RANKS] [-- extra mpirun args]
#
# RANKS defaults to nodes x ranks-per-node. Each launch must print one line per rank and see as
# many distinct hostnames as there are nodes, else it counts as a failure too.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
n="${1:-}"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "usage: launch_loop.sh N [-np RANKS] [-- mpirun args]" >&2; exit 1; }
shift
np=""
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "launch_loop: unknown option '$1'" >&2; exit 1 ;;
  esac
done
nodes=$("$here/emulate.sh" status --bytes | wc -l)
[ -n "$np" ] || np=$((nodes * $("$here/emulate.sh" status | sed -n 's/.*, \([0-9]*\) rank(s) per node.*/\1/p')))
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
  char host[64] = {0};
  int rank;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gethostname(host, sizeof host - 1);
  MPI_Barrier(MPI_COMM_WORLD);
  printf("hello rank %d host %s\n", rank, host);
  MPI_Finalize();
  return 0;
}
C
mpicc -O2 -o "$tmp/hello" "$tmp/hello.c"
start=$SECONDS
for i in $(seq 1 "$n"); do
  rc=0
  timeout 120 "$here/emulate.sh" mpirun -np "$np" "$@" "$tmp/hello" >"$tmp/out" 2>&1 || rc=$?
  lines=$(grep -c '^hello rank' "$tmp/out" || true)
  hosts=$(sed -n 's/^hello rank [0-9]* host //p' "$tmp/out" | sort -u | wc -l)
  if [ "$rc" -ne 0 ] || [ "$lines" -ne "$np" ] || [ "$hosts" -ne "$nodes" ]; then
    echo "launch_loop: launch $i of $n FAILED (exit $rc, $lines of $np ranks, $hosts of $nodes hosts) after $((i - 1)) successes"
    sed 's/^/  | /' "$tmp/out" | tail -n 40
    exit 1
  fi
done
echo "launch_loop: $n of $n launches succeeded ($np ranks on $nodes nodes, $((SECONDS - start)) s)"
