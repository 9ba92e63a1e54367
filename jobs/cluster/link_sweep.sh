#!/usr/bin/env bash
# The link-efficiency table of docs/cluster.md: for each repetition, link rate and node count, brings
# an emulated cluster up with each configuration below (tbf shape x OpenMPI settings), runs
# jobs/cluster/measure_link.sh once, and prints one line per measurement. Configurations are
# interleaved, so a change in the machine's load hits all of them alike. Root; takes the emulated
# cluster down at the end (it must not be up at the start).
#
#   jobs/cluster/link_sweep.sh [-r REPS] [-l "100mbit 20mbit"] [-k "2 4"] [-c "A B C D E F G"] [-s BYTES]
#
#   A  tbf "burst 32kbit latency 400ms" (a common recipe), OpenMPI defaults      (the "before")
#   B  emulate.sh's tbf (1 ms bucket, 50 ms queue), OpenMPI defaults
#   C  B + btl_tcp_flags without put
#   D  C + btl_tcp_sndbuf/rcvbuf 4 MiB
#   E  D + eager sends up to 4 MiB (btl_tcp_eager_limit, rndv_eager_limit, max_send_size)
#   F  emulate.sh as shipped: E + ring all-reduce from 64 KiB on 3+ ranks + mpi_yield_when_idle
#      when the emulated ranks outnumber the cores                             (the "after")
#   G  A's tbf with F's OpenMPI settings
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
E="$here/emulate.sh"; M="$here/measure_link.sh"
reps=2 rates="100mbit 20mbit" nodeset="2 4" cfgs="A B C D E F G" sizes=3370000
while [ $# -gt 0 ]; do
  case "$1" in
    -r) reps="$2"; shift 2 ;;
    -l) rates="$2"; shift 2 ;;
    -k) nodeset="$2"; shift 2 ;;
    -c) cfgs="$2"; shift 2 ;;
    -s) sizes="$2"; shift 2 ;;
    *) echo "link_sweep: unknown option '$1'" >&2; exit 1 ;;
  esac
done
if "$E" status --link >/dev/null 2>&1; then echo "link_sweep: an emulated cluster is up; run emulate.sh down first" >&2; exit 1; fi
trap '"$E" down >/dev/null 2>&1 || true' EXIT
noput=(--mca btl_tcp_flags "send,inplace,need-ack,need-csum")
buf=(--mca btl_tcp_sndbuf 4194304 --mca btl_tcp_rcvbuf 4194304)
eager=(--mca btl_tcp_eager_limit 4194304 --mca btl_tcp_rndv_eager_limit 4194304 --mca btl_tcp_max_send_size 4194304)
for rep in $(seq 1 "$reps"); do
  for rate in $rates; do
    calls=5; [ "$rate" = 20mbit ] && calls=3
    for nodes in $nodeset; do
      for cfg in $cfgs; do
        tbf="" tuning=0 args=()
        case "$cfg" in
          A) tbf="burst 32kbit latency 400ms" ;;
          B) ;;
          C) args=("${noput[@]}") ;;
          D) args=("${noput[@]}" "${buf[@]}") ;;
          E) args=("${noput[@]}" "${buf[@]}" "${eager[@]}") ;;
          F) tuning=1 ;;
          G) tbf="burst 32kbit latency 400ms"; tuning=1 ;;
          *) echo "link_sweep: unknown configuration '$cfg'" >&2; exit 1 ;;
        esac
        "$E" down >/dev/null 2>&1
        HT_EMULATE_TBF="$tbf" "$E" up --nodes "$nodes" --link "$rate" 2>/dev/null
        line=$(HT_EMULATE_MPI_TUNING=$tuning "$M" -np "$nodes" -n "$calls" -s "$sizes" -- "${args[@]}" 2>/dev/null | grep '^link=' || true)
        drops=0
        for k in $(seq 1 "$nodes"); do
          d=$(tc -n "node$k" -s qdisc show dev eth0 | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -n 1)
          drops=$((drops + ${d:-0}))
        done
        echo "$line" | while read -r l; do
          echo "cfg=$cfg rep=$rep $l tbf_drops=$drops load=$(cut -d' ' -f1 /proc/loadavg)"
        done
      done
    done
  done
done
