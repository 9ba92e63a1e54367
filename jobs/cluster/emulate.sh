#!/usr/bin/env bash
# An emulated cluster on one machine: K nodes, each its own network and UTS namespace (so each has
# its own interfaces, address and hostname), joined by one Linux bridge through veth pairs, every
# node's link capped with a token bucket (tc tbf) in both directions. OpenMPI runs across the nodes
# over TCP, so the training's collectives cross a link that costs something. Root only.
#
#   emulate.sh up --nodes K [--link RATE] [--ranks-per-node R]   create (idempotent)
#   emulate.sh status [--bytes]       nodes, addresses, caps, TX/RX byte counters ("node tx rx" with --bytes)
#   emulate.sh mpirun [mpirun args]   mpirun from node1 across the nodes (hostfile, rsh agent, TCP set up)
#   emulate.sh exec NODE CMD [ARGS]   run a command on one node (its network + UTS namespace)
#   emulate.sh down                   remove exactly what `up` created
#
# RATE: none, or a number followed by kbit|mbit|gbit (e.g. 20mbit, 100mbit, 1gbit, 10gbit).
# Exit codes: 0 ok (also `down` with nothing up, `up` when already up as asked), 1 bad input or a
# failed step (one line on stderr says which), 3 `status`/`mpirun`/`exec` with no cluster up.
#
# Knobs (environment): HT_EMULATE_STATE (state directory, default /run/hpctrain-emulate),
# HT_EMULATE_SUBNET (first three octets of the private /24, default 10.77.0). See docs/cluster.md.
set -euo pipefail

STATE="${HT_EMULATE_STATE:-/run/hpctrain-emulate}"
SUBNET="${HT_EMULATE_SUBNET:-10.77.0}"
BRIDGE=htemu0
HOST_ADDR="$SUBNET.254"   # the bridge's own address: lets host-side daemons (slurmctld) reach the nodes
MAX_NODES=16

say() { echo "emulate: $*" >&2; }
die() { say "error: $*"; exit 1; }

# tbf parameters for RATE, chosen so that TCP keeps the link busy (docs/cluster.md, "Link
# efficiency"): a bucket of at least 64 KiB + 1 ms at RATE lets a full TSO/GSO segment through
# without splitting it, and a queue of ~100 ms at RATE (at least 1.5 MiB) absorbs every burst a
# socket can have in flight, so the qdisc never drops: a tail drop at the end of a message costs
# TCP a 200 ms retransmission timeout, which alone takes a 20 Mbit/s link below 70 %.
tbf_args() {
  local bits_per_s="$1" bytes_per_ms burst limit
  bytes_per_ms=$((bits_per_s / 8000))
  burst=$((65536 + bytes_per_ms))
  limit=$((bytes_per_ms * 100))
  [ "$limit" -lt 1572864 ] && limit=1572864
  echo "rate ${bits_per_s}bit burst $burst limit $limit"
}

# "20mbit" -> 20000000; "none" -> 0; anything else -> failure.
rate_bits() {
  local r="$1" n unit
  [ "$r" = none ] && { echo 0; return 0; }
  [[ "$r" =~ ^([1-9][0-9]{0,5})(kbit|mbit|gbit)$ ]] || return 1
  n="${BASH_REMATCH[1]}"; unit="${BASH_REMATCH[2]}"
  case "$unit" in kbit) n=$((n * 1000)) ;; mbit) n=$((n * 1000000)) ;; gbit) n=$((n * 1000000000)) ;; esac
  [ "$n" -ge 1000000 ] && [ "$n" -le 100000000000 ] || return 1
  echo "$n"
}

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (creates network namespaces, a bridge and qdiscs)"; }

need_tools() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' not found: install Debian package $(pkg_of "$t")"
  done
}
pkg_of() { case "$1" in ip|tc) echo iproute2 ;; unshare|nsenter|mount|umount) echo util-linux ;; mpirun) echo openmpi-bin ;; *) echo "providing $1" ;; esac; }

# The tbf qdisc, probed on the loopback of a throwaway network namespace: nothing outlives the probe.
need_tbf() {
  unshare --net tc qdisc add dev lo root tbf rate 1mbit burst 16k limit 64k >/dev/null 2>&1 ||
    die "the kernel refuses the tbf qdisc ('tc qdisc add ... tbf' failed; needs CONFIG_NET_SCH_TBF)"
}

is_up() { [ -f "$STATE/params" ]; }
param() { sed -n "s/^$1=//p" "$STATE/params"; }
nodes_up() { param nodes; }
uts_file() { echo "$STATE/uts/$1"; }

# Runs a command on node $1: its network namespace (ip netns exec also remounts /sys, so
# /sys/class/net lists the node's own interfaces) and its persistent UTS namespace (its hostname).
on_node() {
  local node="$1"; shift
  exec ip netns exec "$node" nsenter --uts="$(uts_file "$node")" -- "$@"
}

# Everything `up` creates is recorded here first, so `down` (and a failed `up`) removes exactly it.
record() { echo "$*" >>"$STATE/created"; }

undo_all() {
  local kind what
  [ -f "$STATE/created" ] || return 0
  # Reverse order: qdiscs and links before namespaces, the UTS bind mounts before their directory.
  tac "$STATE/created" | while read -r kind what; do
    case "$kind" in
      netns) ip netns delete "$what" 2>/dev/null || true ;;
      link) ip link delete "$what" 2>/dev/null || true ;;
      uts) umount "$what" 2>/dev/null || true; rm -f "$what" ;;
      mount) umount "$what" 2>/dev/null || true ;;
    esac
  done
}

node_addr() { echo "$SUBNET.$1"; }

check_subnet_free() {
  local other
  other=$(ip -4 -o addr show | awk -v s="$SUBNET." -v b="$BRIDGE" '$2 != b && index($4, s) == 1 {print $2}' | head -n 1)
  [ -z "$other" ] || die "subnet $SUBNET.0/24 is already on interface $other (set HT_EMULATE_SUBNET)"
  if ip -4 route show to match "$SUBNET.1" | grep -qv '^default'; then
    die "a route to $SUBNET.0/24 exists already: $(ip -4 route show to match "$SUBNET.1" | grep -v '^default' | head -n 1) (set HT_EMULATE_SUBNET)"
  fi
}

# The persistent UTS namespace of a node: `unshare --uts=FILE` pins it with a bind mount of the
# namespace file, so no holder process has to stay alive (a sleeping holder can be killed or
# reaped and take the node's identity with it), and every command entering the node (mpirun's
# orted, a slurmd, `emulate.sh exec`) shares one hostname, as on a real node. The directory is
# made a private mount first: a bind mount of a namespace file may not sit on a shared mount.
make_uts() {
  local node="$1" f; f="$(uts_file "$node")"
  : >"$f"
  record uts "$f"
  unshare --uts="$f" hostname "$node" || die "unshare --uts for $node failed"
}

create_node() {
  local k="$1" bits="$2" node="node$1" host_if="htemu-n$1"
  ip netns list | awk '{print $1}' | grep -qx "$node" && die "a network namespace '$node' exists already and was not made by emulate.sh"
  ip link show "$host_if" >/dev/null 2>&1 && die "interface $host_if exists already and was not made by emulate.sh"
  ip netns add "$node"; record netns "$node"
  ip link add "$host_if" type veth peer name eth0 netns "$node"; record link "$host_if"
  ip link set "$host_if" master "$BRIDGE" up
  ip -n "$node" link set lo up
  ip -n "$node" addr add "$(node_addr "$k")/24" dev eth0
  ip -n "$node" link set eth0 up
  if [ "$bits" -gt 0 ]; then
    # shellcheck disable=SC2046  # tbf_args prints separate words on purpose
    tc -n "$node" qdisc add dev eth0 root tbf $(tbf_args "$bits") ||
      die "tc qdisc tbf on $node egress failed"
    # shellcheck disable=SC2046
    tc qdisc add dev "$host_if" root tbf $(tbf_args "$bits") || die "tc qdisc tbf on $node ingress failed"
  fi
  make_uts "$node"
}

write_mpi_files() {
  local k rpn="$1" nodes="$2"
  for k in $(seq 1 "$nodes"); do echo "node$k slots=$rpn"; done >"$STATE/hostfile"
  # OpenMPI calls the agent as `agent HOST COMMAND...`, like ssh: the words form one shell line.
  cat >"$STATE/rsh-agent" <<AGENT
#!/bin/sh
# Generated by jobs/cluster/emulate.sh: OpenMPI's plm_rsh_agent, "ssh" into an emulated node.
node="\$1"; shift
exec ip netns exec "\$node" nsenter --uts="$STATE/uts/\$node" -- /bin/sh -c "\$*"
AGENT
  chmod 0755 "$STATE/rsh-agent"
}

do_up() {
  local nodes="" link=none rpn=1 bits k
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) [ $# -ge 2 ] || die "--nodes needs a value"; nodes="$2"; shift 2 ;;
      --link) [ $# -ge 2 ] || die "--link needs a value"; link="$2"; shift 2 ;;
      --ranks-per-node) [ $# -ge 2 ] || die "--ranks-per-node needs a value"; rpn="$2"; shift 2 ;;
      *) die "unknown option to up: '$1' (usage: up --nodes K [--link RATE] [--ranks-per-node R])" ;;
    esac
  done
  [ -n "$nodes" ] || die "up needs --nodes K (2..$MAX_NODES)"
  if ! [[ "$nodes" =~ ^[0-9]{1,3}$ ]] || [ "$nodes" -lt 2 ] || [ "$nodes" -gt "$MAX_NODES" ]; then
    die "bad --nodes '$nodes': a whole number from 2 to $MAX_NODES"
  fi
  if ! [[ "$rpn" =~ ^[0-9]{1,3}$ ]] || [ "$rpn" -lt 1 ] || [ "$rpn" -gt 64 ]; then
    die "bad --ranks-per-node '$rpn': a whole number from 1 to 64"
  fi
  bits=$(rate_bits "$link") || die "unknown rate '$link': use none or N followed by kbit|mbit|gbit, 1mbit..100gbit (e.g. 20mbit, 100mbit, 1gbit, 10gbit)"
  need_root
  need_tools ip tc unshare nsenter umount
  local want="nodes=$nodes link=$link ranks_per_node=$rpn subnet=$SUBNET.0/24"
  if is_up; then
    local have; have="nodes=$(param nodes) link=$(param link) ranks_per_node=$(param ranks_per_node) subnet=$(param subnet)"
    if [ "$have" = "$want" ]; then say "already up with $want: nothing to do"; return 0; fi
    local diff="" key
    for key in nodes link ranks_per_node subnet; do
      local a b
      a=$(echo "$have" | tr ' ' '\n' | sed -n "s/^$key=//p"); b=$(echo "$want" | tr ' ' '\n' | sed -n "s/^$key=//p")
      [ "$a" = "$b" ] || diff="${diff:+$diff, }$key is $a, asked $b"
    done
    die "already up with different parameters ($diff): run 'emulate.sh down' first"
  fi
  [ -e "$STATE" ] && die "$STATE exists but holds no cluster record: remove it or run 'emulate.sh down'"
  [ "$bits" -gt 0 ] && need_tbf
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "interface $BRIDGE exists already and was not made by emulate.sh"
  check_subnet_free
  mkdir -p "$STATE/uts"
  : >"$STATE/created"
  trap 'say "up failed: rolling back"; undo_all; rm -rf "$STATE"' EXIT
  mount --bind "$STATE/uts" "$STATE/uts"; record mount "$STATE/uts"
  mount --make-private "$STATE/uts"
  ip link add "$BRIDGE" type bridge; record link "$BRIDGE"
  ip addr add "$HOST_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for k in $(seq 1 "$nodes"); do create_node "$k" "$bits"; done
  write_mpi_files "$rpn" "$nodes"
  printf 'nodes=%s\nlink=%s\nlink_bits_per_s=%s\nranks_per_node=%s\nsubnet=%s\nbridge=%s\n' \
    "$nodes" "$link" "$bits" "$rpn" "$SUBNET.0/24" "$BRIDGE" >"$STATE/params"
  trap - EXIT
  say "up: $nodes nodes (node1..node$nodes, $SUBNET.1..$SUBNET.$nodes), link $link each way, $rpn rank(s) per node"
}

do_down() {
  need_root
  if [ ! -e "$STATE" ]; then say "nothing is up (no $STATE): nothing to do"; return 0; fi
  need_tools ip umount
  undo_all
  rm -rf "$STATE"
  say "down: removed everything recorded in $STATE"
}

counter() { ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2" 2>/dev/null || echo -1; }

do_status() {
  local bytes=0 k node
  [ "${1:-}" = --bytes ] && bytes=1
  if [ $# -gt 1 ] || { [ $# -eq 1 ] && [ "$bytes" -eq 0 ]; }; then die "usage: status [--bytes]"; fi
  need_root
  is_up || { say "no emulated cluster is up"; exit 3; }
  local nodes; nodes=$(nodes_up)
  if [ "$bytes" -eq 0 ]; then
    echo "emulated cluster: $nodes nodes, link $(param link) each way, $(param ranks_per_node) rank(s) per node, subnet $(param subnet), bridge $(param bridge), state $STATE"
    printf '%-6s %-12s %-9s %-8s %14s %14s\n' node address hostname cap tx_bytes rx_bytes
  fi
  for k in $(seq 1 "$nodes"); do
    node="node$k"
    if [ "$bytes" -eq 1 ]; then
      echo "$node $(counter "$node" tx_bytes) $(counter "$node" rx_bytes)"
    else
      printf '%-6s %-12s %-9s %-8s %14s %14s\n' "$node" "$(node_addr "$k")" \
        "$(ip netns exec "$node" nsenter --uts="$(uts_file "$node")" hostname 2>/dev/null || echo '?')" \
        "$(param link)" "$(counter "$node" tx_bytes)" "$(counter "$node" rx_bytes)"
    fi
  done
}

do_exec() {
  [ $# -ge 2 ] || die "usage: exec NODE COMMAND [ARGS...]"
  need_root
  is_up || { say "no emulated cluster is up (run 'emulate.sh up --nodes K' first)"; exit 3; }
  [ -f "$(uts_file "$1")" ] || die "no node '$1' (nodes: node1..node$(nodes_up))"
  on_node "$@"
}

do_mpirun() {
  need_root
  is_up || { say "no emulated cluster is up (run 'emulate.sh up --nodes K' first)"; exit 3; }
  need_tools mpirun
  local subnet; subnet=$(param subnet)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  on_node node1 mpirun --hostfile "$STATE/hostfile" \
    --mca plm_rsh_agent "$STATE/rsh-agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    --oversubscribe --bind-to none "$@"
}

case "${1:-}" in
  up) shift; do_up "$@" ;;
  down) shift; [ $# -eq 0 ] || die "down takes no arguments"; do_down ;;
  status) shift; do_status "$@" ;;
  mpirun) shift; do_mpirun "$@" ;;
  exec) shift; do_exec "$@" ;;
  "") die "no subcommand (use up, status, mpirun, exec or down)" ;;
  *) die "unknown subcommand '$1' (use up, status, mpirun, exec or down)" ;;
esac
