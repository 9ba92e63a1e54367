#!/bin/bash
# MPI_Allreduce between 2 emulated nodes at 100mbit (jobs/cluster/allreduce_probe.c, compiled here
# with mpicc): the ranks run on different nodes (hostnames, network namespaces) and the bytes each
# node's veth sent during the timed calls match the ring model, 2 (W-1)/W x message bytes per call,
# within 10 % (the rest is Ethernet/IP/TCP headers and ACKs). No timing is asserted.
source "$(dirname "$0")/lib.sh"
need_prereqs mpicc mpirun
new_work allreduce
probe=$(mpicc_into_work "$HPCTRAIN_SOURCE_DIR/jobs/cluster/allreduce_probe.c")
"$EMU" up --nodes 2 --link 100mbit || fail "up failed"

check_ring() {
  local np="$1" out; shift
  out=$(timeout 120 "$EMU" mpirun -np "$np" "$@" "$probe" -n 3 1048576 3370000 2>&1) || { echo "$out"; fail "probe on $np ranks failed"; }
  echo "$out" | grep '^probe'
  grep -q "^probe hosts: .*(2 nodes)" <<<"$out" || fail "the $np ranks did not run on 2 nodes"
  echo "$out" | awk '/^probe bytes=/ {
      for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
      r = v["tx_bytes_per_call_per_node"] / v["ring_bytes_per_call"]
      printf "  %s bytes: wire/ring model = %.3f\n", v["bytes"], r
      if (r < 1.0 || r > 1.10) bad = 1; n++ }
    END { exit bad || n != 2 }' || fail "wire bytes differ from the ring model by more than 10 %"
}
check_ring 2
# The hostnames and network namespaces of the two ranks differ.
# shellcheck disable=SC2016  # expanded on each rank
ids=$(timeout 60 "$EMU" mpirun -np 2 sh -c 'echo "$(hostname) $(readlink /proc/self/ns/net)"' 2>/dev/null | sort -u)
echo "$ids"
[ "$(echo "$ids" | awk '{print $1}' | sort -u | wc -l)" -eq 2 ] || fail "ranks share a hostname"
[ "$(echo "$ids" | awk '{print $2}' | sort -u | wc -l)" -eq 2 ] || fail "ranks share a network namespace"
"$EMU" down || fail "down failed"
say "PASS: all-reduce across 2 nodes sends the ring model's bytes over the link"
