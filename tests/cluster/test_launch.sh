#!/bin/bash
# Launch reliability: N consecutive `emulate.sh mpirun` launches of a trivial MPI program on 2 nodes
# x 2 ranks (jobs/cluster/launch_loop.sh) all succeed; the first failure fails the test.
# (docs/cluster.md: with every node on the machine's hostname, orted crashed in hwloc.)
source "$(dirname "$0")/lib.sh"
need_prereqs mpicc mpirun
new_work launch
n="${1:-20}"
"$EMU" up --nodes 2 --ranks-per-node 2 || fail "up failed"
"$HPCTRAIN_SOURCE_DIR/jobs/cluster/launch_loop.sh" "$n" || fail "a launch failed"
"$EMU" down || fail "down failed"
say "PASS: $n of $n launches"
