#!/usr/bin/env bash
# Link efficiency of MPI_Allreduce on the emulated cluster that is up: compiles
# jobs/cluster/allreduce_probe.c into a temp dir, runs it with `emulate.sh mpirun`, and prints per
# message size the seconds per call, the bytes each node sent (its veth counters, over the timed
# calls only) and the efficiency = bytes on the wire / (seconds x cap).
#
#   jobs/cluster/measure_link.sh [-np N] [-n CALLS] [-s "BYTES BYTES..."] [-- extra mpirun args]
#   e.g. jobs/cluster/measure_link.sh -np 4 -s 3370000 -- --mca coll_tuned_use_dynamic_rules 1 \
#          --mca coll_tuned_allreduce_algorithm 4
#
# Output: one line per size, key=value ("link ... eff=0.93 ring_eff=0.90"), then the raw probe lines.
#   eff       bytes on the wire / (seconds x cap): every byte the node's veth sent (Ethernet, IP and
#             TCP headers and retransmissions included), the bytes the tbf cap counts; 1.0 is a
#             link that never idles.
#   ring_eff  ideal ring all-reduce time / measured time = 2 (W-1)/W x bytes / (seconds x cap):
#             payload only, so it is what training sees (headers cost a few % of it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
np=2 calls=5 sizes="3370000"
while [ $# -gt 0 ]; do
  case "$1" in
    -np) np="$2"; shift 2 ;;
    -n) calls="$2"; shift 2 ;;
    -s) sizes="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "measure_link: unknown option '$1'" >&2; exit 1 ;;
  esac
done
read -r link bits < <("$here/emulate.sh" status --link)
[ "$bits" -gt 0 ] || { echo "measure_link: the link is uncapped (none): efficiency needs a cap" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/allreduce_probe" "$here/allreduce_probe.c"
# shellcheck disable=SC2086  # sizes is a list of words
"$here/emulate.sh" mpirun -np "$np" "$@" "$tmp/allreduce_probe" -n "$calls" $sizes >"$tmp/out"
awk -v bits="$bits" -v link="$link" '
  /^probe bytes=/ {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
    eff = v["tx_bytes_per_call_per_node"] * 8 / (v["s_per_call"] * bits)
    ring_eff = v["ring_bytes_per_call"] * 8 / (v["s_per_call"] * bits)
    printf "link=%s np=%s nodes=%s bytes=%s s_per_call=%s s_min=%s s_max=%s tx_bytes_per_call_per_node=%s eff=%.3f ring_eff=%.3f\n",
      link, v["world"], v["nodes"], v["bytes"], v["s_per_call"], v["s_min"], v["s_max"],
      v["tx_bytes_per_call_per_node"], eff, ring_eff
  }' "$tmp/out"
sed 's/^/  /' "$tmp/out"
