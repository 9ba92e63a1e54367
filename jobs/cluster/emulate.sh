#!/usr/bin/env bash
# An emulated cluster on one machine: K nodes, each its own network and UTS namespace (its own
# interface, address and hostname), joined by one Linux bridge through veth pairs, each node's link
# capped with a token bucket (tc tbf) in both directions. OpenMPI runs across the nodes over TCP, so
# the training's collectives cross a link that costs something. Root only. docs/cluster.md.
#
#   emulate.sh up --nodes K [--link RATE] [--ranks-per-node R]   create (idempotent)
#   emulate.sh status [--bytes|--link]  nodes, addresses, hostnames, caps, TX/RX byte counters
#                                       (--bytes: "node tx_bytes rx_bytes" lines; --link: "RATE bits_per_s")
#   emulate.sh mpirun [mpirun args]     mpirun from node1 across the nodes (hostfile, rsh agent, TCP)
#   emulate.sh exec NODE CMD [ARGS]     run a command on one node (its network + UTS namespace)
#   emulate.sh down                     remove exactly what `up` created
#
# RATE: none, or a number followed by kbit|mbit|gbit between 1mbit and 100gbit (20mbit, 100mbit,
# 1gbit, 10gbit, ...). Nodes are node1..nodeK at SUBNET.1..SUBNET.K; the bridge (htemu0) has
# SUBNET.254, so daemons in the host's namespace (slurmctld) can reach the nodes.
# Exit codes: 0 ok (also `down` with nothing up, and `up` when already up as asked); 1 bad input or
# a failed step (one line on stderr says which; a failed `up` leaves nothing behind); 3 `status`,
# `mpirun` or `exec` with no cluster up. `mpirun` and `exec` return the command's own exit code.
#
# Environment: HT_EMULATE_STATE (state directory, default /run/hpctrain-emulate), HT_EMULATE_SUBNET
# (first three octets of the /24, default 10.77.0); for experiments only: HT_EMULATE_TBF (tbf
# words replacing burst/limit), HT_EMULATE_MPI_TUNING=0 (mpirun without the link-efficiency MCA
# settings below), HT_EMULATE_NO_UTS=1 (mpirun with every node keeping the machine's hostname: the
# configuration that crashes orted, docs/cluster.md "Launch reliability"), HT_EMULATE_NO_LINK_CHECK=1
# (mpirun without the reachability check), HT_EMULATE_KEEPALIVE_S (OOB keepalive idle seconds, 10).
set -Eeuo pipefail

STATE="${HT_EMULATE_STATE:-/run/hpctrain-emulate}"
SUBNET="${HT_EMULATE_SUBNET:-10.77.0}"
BRIDGE=htemu0
MAX_NODES=16
case "$STATE" in /?*) ;; *) echo "emulate: error: HT_EMULATE_STATE must be an absolute path other than /" >&2; exit 1 ;; esac

# OpenMPI settings that `mpirun` adds (docs/cluster.md, "Link efficiency", has the measurements):
# - btl_tcp_flags without "put": a large message goes as pipelined sends instead of rendezvous +
#   emulated put, which left the link idle about half the time (the directions took turns);
# - eager sends up to 4 MiB: no rendezvous handshake for such messages. The handshake's reply
#   shares the TCP connection with the replying rank's own bulk data and could wait behind all
#   of it, so the two directions of an exchange again took turns (2 ranks at 100 Mbit/s: 0.60
#   of the link in 2 of 3 runs without, 0.89-0.96 with);
# - 4 MiB socket buffers: the kernel keeps the link busy while a rank waits for a CPU;
# - all-reduce algorithm (coll-rules.conf, written by `up`): on 3 or more ranks a ring from
#   64 KiB (bandwidth-optimal: 2 (W-1)/W x bytes per rank; OpenMPI's own choice on 4 nodes took
#   twice the ring's time), recursive doubling below 64 KiB and on 2 ranks (one exchange);
# - mpi_yield_when_idle, only when the emulated cluster has more ranks than this machine has
#   cores: a rank that polls then yields its core to the one that has data to reduce (on real
#   nodes each rank has its own core; with 4 nodes on 2 cores the ring took 1.4x longer without).
mpi_tuning() {
  printf '%s\n' --mca btl_tcp_flags "send,inplace,need-ack,need-csum" \
    --mca btl_tcp_eager_limit 4194304 --mca btl_tcp_rndv_eager_limit 4194304 --mca btl_tcp_max_send_size 4194304 \
    --mca btl_tcp_sndbuf 4194304 --mca btl_tcp_rcvbuf 4194304 \
    --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename "$STATE/coll-rules.conf"
  if [ $(($(param nodes) * $(param ranks_per_node))) -gt "$(nproc)" ]; then
    printf '%s\n' --mca mpi_yield_when_idle 1
  fi
}

# Failure detection (docs/cluster.md, "Faults across the network"), always set, tuning or not:
# - OOB keepalive: mpirun and each node's orted talk over a TCP connection that is idle while the
#   job runs; with OpenMPI's defaults (300 s idle, then 9 probes 20 s apart) a node whose link is
#   cut is noticed after 8 minutes. 10 s idle + 5 probes 2 s apart: about 20 s. mpirun then names
#   the lost node ("ORTE has lost communication with a remote daemon ... on node nodeK") and ends
#   the job; the cut-off orted notices the lost mpirun the same way and kills its ranks.
# - orte_startup_timeout: daemons that never report back (a node unreachable at launch) fail the
#   launch after 30 s instead of never.
mpi_timeouts() {
  printf '%s\n' --mca oob_tcp_keepalive_time "${HT_EMULATE_KEEPALIVE_S:-10}" --mca oob_tcp_keepalive_intvl 2 \
    --mca oob_tcp_keepalive_probes 5 --mca orte_startup_timeout 30
}

say() { echo "emulate: $*" >&2; }
die() { say "error: $*"; exit 1; }

# tbf parameters for RATE (docs/cluster.md, "Link efficiency", has the measurements):
# - burst: 1 ms at RATE (at least two full frames). A bigger bucket (e.g. 64 KiB, one TSO/GSO
#   segment) lets bursts out above RATE, TCP's BBR then measures more bandwidth than the link has,
#   paces above the cap and fills the queue; with a 1 ms bucket it paces at the cap.
# - limit: 50 ms at RATE, at least 256 KiB: enough that a window in flight is not tail-dropped (a
#   lost last segment costs TCP a retransmission timeout), short enough that the ACKs of the
#   opposite direction, queued behind data on the same link, do not wait for hundreds of ms.
tbf_args() {
  local bits_per_s="$1" bytes_per_ms burst limit
  if [ -n "${HT_EMULATE_TBF:-}" ]; then echo "rate ${bits_per_s}bit $HT_EMULATE_TBF"; return 0; fi
  bytes_per_ms=$((bits_per_s / 8000))
  burst=$((bytes_per_ms > 3028 ? bytes_per_ms : 3028))
  limit=$((bytes_per_ms * 50 > 262144 ? bytes_per_ms * 50 : 262144))
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

pkg_of() { case "$1" in ip|tc) echo iproute2 ;; unshare|nsenter|mount|umount) echo util-linux ;; mpirun) echo openmpi-bin ;; *) echo "that provides $1" ;; esac; }
need_tools() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' not found: install the Debian package $(pkg_of "$t")"
  done
}

# The tbf qdisc, probed on the loopback of a throwaway network namespace: nothing outlives the probe.
need_tbf() {
  unshare --net tc qdisc add dev lo root tbf rate 1mbit burst 16k limit 64k >/dev/null 2>&1 ||
    die "the kernel refuses the tbf qdisc ('tc qdisc add ... tbf' failed: CONFIG_NET_SCH_TBF missing?)"
}

has_state() { [ -f "$STATE/params" ]; }
param() { sed -n "s/^$1=//p" "$STATE/params"; }
uts_file() { echo "$STATE/uts/$1"; }

# A state directory whose namespaces are gone (a reboot, someone's `ip netns delete`) is stale.
require_up() {
  has_state || { say "no emulated cluster is up (run 'emulate.sh up --nodes K' first)"; exit 3; }
  if [ ! -e /run/netns/node1 ] || ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "stale state in $STATE: its namespaces or bridge are gone; run 'emulate.sh down'"
  fi
}

# Runs a command on node $1: its network namespace (ip netns exec also remounts /sys, so
# /sys/class/net lists the node's own interfaces) and its persistent UTS namespace (its hostname).
on_node() {
  local node="$1"; shift
  exec ip netns exec "$node" nsenter --uts="$(uts_file "$node")" -- "$@"
}

# Everything `up` creates is recorded before it is created, so `down` (and a failed `up`) removes
# exactly that, in reverse order, and nothing else.
record() { echo "$*" >>"$STATE/created"; }
undo_all() {
  local kind what
  [ -f "$STATE/created" ] || return 0
  tac "$STATE/created" | while read -r kind what; do
    case "$kind" in
      netns) ip netns delete "$what" 2>/dev/null || true ;;
      link) ip link delete "$what" 2>/dev/null || true ;;
      uts|mount) umount "$what" 2>/dev/null || true ;;
    esac
  done
}

node_addr() { echo "$SUBNET.$1"; }

# Refuses before creating anything: a name or the subnet already in use.
check_free() {
  local nodes="$1" k other
  [[ "$SUBNET" =~ ^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){2}$ ]] ||
    die "bad HT_EMULATE_SUBNET '$SUBNET': three octets, e.g. 10.77.0"
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "interface $BRIDGE exists already and was not made by this state ($STATE)"
  for k in $(seq 1 "$nodes"); do
    [ -e "/run/netns/node$k" ] && die "network namespace node$k exists already and was not made by this state ($STATE)"
    ip link show "htemu-n$k" >/dev/null 2>&1 && die "interface htemu-n$k exists already"
  done
  other=$(ip -4 -o addr show | awk -v s="$SUBNET." 'index($4, s) == 1 {print $2; exit}')
  [ -z "$other" ] || die "subnet $SUBNET.0/24 is in use on interface $other (set HT_EMULATE_SUBNET)"
  other=$(ip -4 route show to match "$SUBNET.1" | grep -v '^default' | head -n 1 || true)
  [ -z "$other" ] || die "a route covers $SUBNET.0/24 already ($other): set HT_EMULATE_SUBNET"
}

# IPv6 off on our interfaces: no router solicitations or DAD packets in the byte counters.
no_ipv6() { if [ -w "/proc/sys/net/ipv6/conf/$1/disable_ipv6" ]; then echo 1 >"/proc/sys/net/ipv6/conf/$1/disable_ipv6"; fi; }

# The persistent UTS namespace of a node: `unshare --uts=FILE` pins it with a bind mount of the
# namespace file, so no holder process has to stay alive (a sleeping holder can be killed or exit
# and take the node's identity with it), and every command entering the node (mpirun's orted, a
# slurmd, `emulate.sh exec`) shares one hostname, as on a real node. Unsharing a fresh UTS
# namespace per command would also give distinct hostnames, but not one namespace per node.
# $STATE/uts is a private bind mount of itself: a namespace file may not be bound on a shared mount.
make_uts() {
  local node="$1" f; f="$(uts_file "$node")"
  : >"$f"
  record uts "$f"
  unshare --uts="$f" hostname "$node"
}

add_tbf() {
  local where="$1" out; shift
  # shellcheck disable=SC2068  # the tc words on purpose
  out=$("$@" 2>&1) || die "tc qdisc tbf on $where failed: ${out//$'\n'/ }"
}

create_node() {
  local k="$1" bits="$2" node="node$1" host_if="htemu-n$1"
  record netns "$node"; ip netns add "$node"
  record link "$host_if"; ip link add "$host_if" type veth peer name eth0 netns "$node"
  no_ipv6 "$host_if"
  # shellcheck disable=SC2016  # expanded by the inner shell, inside the node
  ip netns exec "$node" sh -c 'for f in /proc/sys/net/ipv6/conf/*/disable_ipv6; do echo 1 >"$f"; done' 2>/dev/null || true
  ip link set "$host_if" master "$BRIDGE" up
  ip -n "$node" link set lo up
  ip -n "$node" addr add "$(node_addr "$k")/24" dev eth0
  ip -n "$node" link set eth0 up
  if [ "$bits" -gt 0 ]; then
    # shellcheck disable=SC2046  # tbf_args prints separate words on purpose
    add_tbf "$node egress" tc -n "$node" qdisc add dev eth0 root tbf $(tbf_args "$bits")
    # shellcheck disable=SC2046
    add_tbf "$node ingress" tc qdisc add dev "$host_if" root tbf $(tbf_args "$bits")
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
if [ "\${HT_EMULATE_NO_UTS:-0}" = 1 ]; then exec ip netns exec "\$node" /bin/sh -c "\$*"; fi
exec ip netns exec "\$node" nsenter --uts="$STATE/uts/\$node" -- /bin/sh -c "\$*"
AGENT
  chmod 0755 "$STATE/rsh-agent"
  # OpenMPI's coll/tuned rules file: 1 collective (id 2 = allreduce) with 2 communicator-size
  # classes: from 2 ranks, 1 message-size class; from 3 ranks, 2 classes. A message-size class is
  # "from_bytes algorithm fanout segment_bytes"; algorithm 3 = recursive doubling, 4 = ring.
  printf '%s\n' 1 2 2 2 1 "0 3 0 0" 3 2 "0 3 0 0" "65536 4 0 0" >"$STATE/coll-rules.conf"
}

want_params() {
  printf 'nodes=%s\nlink=%s\nranks_per_node=%s\nsubnet=%s\ntbf=%s\n' "$1" "$2" "$3" "$SUBNET.0/24" "$4"
}

do_up() {
  local nodes="" link=none rpn=1 bits k
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes|--link|--ranks-per-node)
        [ $# -ge 2 ] || die "$1 needs a value"
        case "$1" in --nodes) nodes="$2" ;; --link) link="$2" ;; *) rpn="$2" ;; esac
        shift 2 ;;
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
  bits=$(rate_bits "$link") ||
    die "unknown rate '$link': use none or a number with kbit|mbit|gbit from 1mbit to 100gbit (20mbit, 100mbit, 1gbit, 10gbit)"
  need_root
  need_tools ip tc unshare nsenter mount umount
  local tbf=none; [ "$bits" -gt 0 ] && tbf="$(tbf_args "$bits")"
  if has_state; then
    local want have key a b diff=""
    want=$(want_params "$nodes" "$link" "$rpn" "$tbf"); have=$(cat "$STATE/params")
    for key in nodes link ranks_per_node subnet tbf; do
      a=$(echo "$have" | sed -n "s/^$key=//p"); b=$(echo "$want" | sed -n "s/^$key=//p")
      [ "$key" = tbf ] && [ -n "$diff" ] && continue   # a different link implies a different tbf
      [ "$a" = "$b" ] || diff="${diff:+$diff; }$key is '$a', asked '$b'"
    done
    [ -n "$diff" ] && die "already up with different parameters ($diff): run 'emulate.sh down' first"
    require_up
    say "already up with nodes=$nodes link=$link ranks_per_node=$rpn: nothing to do"
    return 0
  fi
  [ -e "$STATE" ] && die "$STATE exists but records no cluster: run 'emulate.sh down' to clear it"
  [ "$bits" -gt 0 ] && need_tbf
  check_free "$nodes"
  mkdir -p "$STATE/uts"
  : >"$STATE/created"
  # From here on, any failure removes what was made: the failing step's line, then a silent undo.
  # shellcheck disable=SC2154  # up_rc is assigned inside the trap
  trap 'up_rc=$?; if [ "$up_rc" -ne 0 ]; then undo_all; rm -rf "$STATE"; fi' EXIT
  trap 'say "error: step failed (exit $?): $BASH_COMMAND"' ERR
  record mount "$STATE/uts"; mount --bind "$STATE/uts" "$STATE/uts"
  mount --make-private "$STATE/uts"
  record link "$BRIDGE"; ip link add "$BRIDGE" type bridge
  no_ipv6 "$BRIDGE"
  ip addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for k in $(seq 1 "$nodes"); do create_node "$k" "$bits"; done
  write_mpi_files "$rpn" "$nodes"
  want_params "$nodes" "$link" "$rpn" "$tbf" >"$STATE/params"
  echo "link_bits_per_s=$bits" >>"$STATE/params"
  trap - ERR EXIT
  say "up: $nodes nodes (node1..node$nodes = $SUBNET.1..$SUBNET.$nodes), link $link each way, $rpn rank(s) per node, state $STATE"
}

do_down() {
  need_root
  if [ ! -e "$STATE" ]; then say "nothing is up ($STATE does not exist): nothing to do"; return 0; fi
  need_tools ip umount
  undo_all
  rm -rf "$STATE"
  say "down: removed everything recorded in $STATE"
}

counter() { ip netns exec "$1" cat "/sys/class/net/eth0/statistics/$2" 2>/dev/null || echo -1; }

do_status() {
  local mode="${1:-table}" k node nodes
  case "$mode" in table|--bytes|--link) ;; *) die "usage: status [--bytes|--link]" ;; esac
  [ $# -le 1 ] || die "usage: status [--bytes|--link]"
  need_root
  require_up
  nodes=$(param nodes)
  case "$mode" in
    --link) echo "$(param link) $(param link_bits_per_s)" ;;
    --bytes) for k in $(seq 1 "$nodes"); do echo "node$k $(counter "node$k" tx_bytes) $(counter "node$k" rx_bytes)"; done ;;
    table)
      echo "emulated cluster: $nodes nodes, link $(param link) each way ($(param tbf)), $(param ranks_per_node) rank(s) per node, subnet $(param subnet), bridge $BRIDGE, state $STATE"
      printf '%-6s %-12s %-9s %-8s %14s %14s\n' node address hostname cap tx_bytes rx_bytes
      for k in $(seq 1 "$nodes"); do
        node="node$k"
        printf '%-6s %-12s %-9s %-8s %14s %14s\n' "$node" "$(node_addr "$k")" \
          "$(ip netns exec "$node" nsenter --uts="$(uts_file "$node")" hostname 2>/dev/null || echo '?')" \
          "$(param link)" "$(counter "$node" tx_bytes)" "$(counter "$node" rx_bytes)"
      done ;;
  esac
}

do_exec() {
  [ $# -ge 2 ] || die "usage: exec NODE COMMAND [ARGS...]"
  need_root
  require_up
  [ -f "$(uts_file "$1")" ] || die "no node '$1' (nodes: node1..node$(param nodes))"
  on_node "$@"
}

# Before a launch: every node's link is up at both ends and node1 reaches every node's address
# over eth0 (a TCP connect to a closed port: "refused" is an answer, silence or "no route" is not).
# A cut link fails the launch within seconds, naming the node, its address and the interface,
# instead of orted or the first collective waiting for minutes.
check_links() {
  local k node state host_state nodes; nodes=$(param nodes)
  for k in $(seq 1 "$nodes"); do
    node="node$k"
    state=$(ip -n "$node" -o link show eth0 2>/dev/null | grep -o 'state [A-Z]*' | cut -d' ' -f2)
    host_state=$(ip -o link show "htemu-n$k" 2>/dev/null | grep -o 'state [A-Z]*' | cut -d' ' -f2)
    if [ "$state" != UP ] || [ "$host_state" != UP ]; then
      die "$node ($(node_addr "$k")) is unreachable: its link is down (eth0 in $node: ${state:-missing}, htemu-n$k on the bridge: ${host_state:-missing}); MPI would use eth0 ($(param subnet))"
    fi
  done
  for k in $(seq 2 "$nodes"); do
    local addr out; addr=$(node_addr "$k")
    # shellcheck disable=SC2016  # expanded by the inner bash
    out=$(ip netns exec node1 timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/9"' "$addr" 2>&1) && continue
    case "$out" in *"Connection refused"*) continue ;; esac
    die "node$k ($addr) does not answer node1 over eth0 ($(param subnet)) within 3 s: ${out:-no reply}"
  done
}

do_mpirun() {
  need_root
  require_up
  need_tools mpirun
  [ "${HT_EMULATE_NO_LINK_CHECK:-0}" = 1 ] || check_links
  local subnet; subnet=$(param subnet)
  local tuning=() timeouts=()
  mapfile -t timeouts < <(mpi_timeouts)
  [ "${HT_EMULATE_MPI_TUNING:-1}" = 0 ] || mapfile -t tuning < <(mpi_tuning)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local run=(mpirun --hostfile "$STATE/hostfile" --mca plm_rsh_agent "$STATE/rsh-agent"
    --mca btl "tcp,self" --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet"
    "${timeouts[@]}" "${tuning[@]}" --oversubscribe --bind-to none "$@")
  if [ "${HT_EMULATE_NO_UTS:-0}" = 1 ]; then exec ip netns exec node1 "${run[@]}"; fi
  on_node node1 "${run[@]}"
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
