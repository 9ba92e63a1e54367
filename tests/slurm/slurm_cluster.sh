#!/usr/bin/env bash
# A real, private Slurm cluster on this one machine, for tests: munged + slurmctld + N slurmd,
# started without systemd from a generated slurm.conf in a state directory, stopped by pid files.
#
#   tests/slurm/slurm_cluster.sh start|stop|status|env
#
# Knobs (environment):
#   HT_SLURM_DIR    state directory (default /tmp/ht-slurm-<uid>); holds slurm.conf, munge key and
#                   socket, spool, logs, pid files. Keep it short: munge's unix socket lives in it.
#   HT_SLURM_NODES  number of nodes (default 2). Node 1 is named after the short hostname; node k>1
#                   is "<short>-n<k>". Every node is its own slurmd (own port, spool, pid file).
#   HT_SLURM_CPUS   CPUs each node announces (default 4; config_overrides lets it exceed the hardware).
#   HT_SLURM_NETNS  1: each node is also an emulated network node (jobs/cluster/emulate.sh, state in
#                   $DIR/emulate): its slurmd runs in the node's network and UTS namespace, nodes are
#                   named node1..nodeK at 10.77.0.k, slurmctld listens on the bridge (10.77.0.254),
#                   so `srun --mpi=pmix` ranks on different nodes talk through the capped link.
#                   Opt-in; default 0 leaves everything below as it was. Needs root, ip and tc.
#   HT_SLURM_LINK   with HT_SLURM_NETNS=1: each node's link cap (emulate.sh --link; default none).
#
# Several nodes on one machine: every slurmd runs in its own mount namespace (a private
# node-local scratch at $DIR/local, backed by $DIR/nodes/<name>/local), and every slurmd beyond
# the first in its own UTS namespace whose hostname is its node name, so a rank on node 2 really
# sees hostname "<short>-n2". OpenMPI then talks TCP between nodes and shared memory only
# within one (checked: with OMPI_MCA_btl=self,vader a 2-node run finds its peers unreachable). Network and the rest of the
# filesystem are shared. Where unshare is refused, the nodes share everything ("ns" says which);
# then OpenMPI, seeing one hostname, takes ranks on both nodes for node-mates and crashes
# (segfault in MPI_Comm_split_type): multi-node MPI runs need the private mode.
#
# Everything is private: own munge socket and key, own ports (picked free at start), own
# state dir; the system's /etc/slurm and /etc/munge are never touched. Clients find the
# cluster through SLURM_CONF: eval "$(tests/slurm/slurm_cluster.sh env)".
set -euo pipefail

DIR="${HT_SLURM_DIR:-/tmp/ht-slurm-$(id -u)}"
NODES="${HT_SLURM_NODES:-2}"
CPUS="${HT_SLURM_CPUS:-4}"
CONF="$DIR/slurm.conf"
NETNS="${HT_SLURM_NETNS:-0}"
LINK="${HT_SLURM_LINK:-none}"
EMULATE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/jobs/cluster/emulate.sh"
EMU_STATE="$DIR/emulate"
SUBNET="${HT_EMULATE_SUBNET:-10.77.0}"
SHORT="$(hostname -s 2>/dev/null || hostname)"
SHORT="${SHORT%%.*}"
START_TIMEOUT_S=60

say() { echo "slurm_cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }

node_name() {
  if [ "$NETNS" = 1 ]; then echo "node$1"; elif [ "$1" -eq 1 ]; then echo "$SHORT"; else echo "$SHORT-n$1"; fi
}
# Where slurmctld and the slurmds are reached: loopback, or the emulated nodes' bridge subnet.
ctld_addr() { if [ "$NETNS" = 1 ]; then echo "$SUBNET.254"; else echo 127.0.0.1; fi; }
node_addr() { if [ "$NETNS" = 1 ]; then echo "$SUBNET.$1"; else echo 127.0.0.1; fi; }
emulate() { HT_EMULATE_STATE="$EMU_STATE" "$EMULATE" "$@"; }

need_tools() {
  local t
  for t in munged slurmctld slurmd sinfo scontrol; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] ||
      die "'$t' not found: install Debian packages slurm-wlm and munge (./scripts/setup.sh does)"
  done
  export PATH="$PATH:/usr/sbin:/sbin"
}

# A port is free when nothing listens on it (TCP, IPv4 or IPv6).
port_free() {
  local hex; hex=$(printf '%04X' "$1")
  ! grep -qiE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# First base port in a range derived from the state dir with NODES+1 consecutive free ports.
pick_ports() {
  local base=$((20000 + $(echo -n "$DIR" | cksum | cut -d' ' -f1) % 20000)) tries k ok
  for tries in $(seq 1 200); do
    ok=1
    for k in $(seq 0 "$NODES"); do port_free $((base + k)) || { ok=0; break; }; done
    [ "$ok" -eq 1 ] && { echo "$base"; return 0; }
    base=$((base + NODES + 1))
  done
  die "no $((NODES + 1)) consecutive free TCP ports found"
}

# Kills a daemon recorded in a pid file, but only if that pid still runs the expected program
# with our state dir on its command line (a reused pid is left alone).
kill_pidfile() {
  local file="$1" pid i
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null || true)
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$DIR"; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { say "pid $pid ignored SIGTERM, sending SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  fi
  rm -f "$file"
}

write_munge_key() {
  local key="$DIR/munge/munge.key"
  [ -s "$key" ] && return 0
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile="$key" --force >/dev/null 2>&1 || true
  fi
  [ -s "$key" ] || dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
  chmod 0400 "$key"
}

write_conf() {
  local base="$1" k name cpus_total mem_mb
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2/1024/4}' /proc/meminfo)
  [ "$mem_mb" -lt 512 ] && mem_mb=512
  {
    echo "# Generated by tests/slurm/slurm_cluster.sh: a private test cluster; do not edit."
    echo "ClusterName=hpctrain"
    echo "SlurmctldHost=$SHORT($(ctld_addr))"
    echo "SlurmctldPort=$base"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$DIR/munge/munge.socket"
    echo "StateSaveLocation=$DIR/ctld"
    echo "SlurmdSpoolDir=$DIR/spool/%n"
    echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "TmpFS=$DIR/tmp/%n"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "SchedulerType=sched/backfill"
    echo "SlurmdParameters=config_overrides"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "JobCompType=jobcomp/none"
    echo "MailProg=/bin/true"
    echo "ReturnToService=2"
    echo "JobRequeue=1"
    echo "MinJobAge=600"
    echo "KillWait=5"
    echo "InactiveLimit=0"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=60"
    echo "MessageTimeout=20"
    echo "SchedulerParameters=defer_batch=0,sched_interval=1"
    for k in $(seq 1 "$NODES"); do
      name=$(node_name "$k")
      echo "NodeName=$name NodeHostname=$name NodeAddr=$(node_addr "$k") Port=$((base + k)) CPUs=$CPUS RealMemory=$mem_mb State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$CONF"
  cpus_total=$((CPUS * NODES))
  say "wrote $CONF ($NODES node(s) x $CPUS CPUs = $cpus_total, ports $base..$((base + NODES)))"
}

start_munge() {
  local sock="$DIR/munge/munge.socket"
  munged --force --socket="$sock" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed" >>"$DIR/log/munged.out" 2>&1 ||
    die "munged failed to start; see $DIR/log/munged.log"
  local i
  for i in $(seq 1 50); do [ -S "$sock" ] && return 0; sleep 0.1; done
  die "munged socket $sock did not appear; see $DIR/log/munged.log"
}

# Runs a slurmd for node k in its own mount namespace, where $DIR/local is that node's private
# scratch ($DIR/nodes/<name>/local): a file staged there is invisible to the other nodes, as on
# a real cluster's node-local disk. Nodes beyond the first also get their own UTS namespace and
# hostname. Without namespaces (HT_SLURM_NO_NS=1 or unshare refused) all nodes share everything.
start_slurmd() {
  local k="$1" name; name=$(node_name "$k")
  mkdir -p "$DIR/spool/$name" "$DIR/tmp/$name" "$DIR/nodes/$name/local"
  local run="exec slurmd -f '$CONF' -N '$name'"
  if [ "$NETNS" = 1 ]; then
    # The emulated node's network and UTS namespace (hostname node<k>), then the private scratch.
    # `ip netns exec` mounts a fresh /sys (so /sys/class/net is the node's), which hides the
    # cgroup mounts slurmd needs ("No filesystem mounted on /sys/fs/cgroup"): they are mounted
    # again, as on the host, inside slurmd's private mount namespace.
    emulate exec "$name" unshare --mount --propagation private bash -c \
      "set -e; $(cgroup_mount_cmds) mount --bind '$DIR/nodes/$name/local' '$DIR/local'; $run" \
      >>"$DIR/log/slurmd-$name.out" 2>&1 || die "slurmd for node $name failed; see $DIR/log/slurmd-$name.log"
  elif [ "$(ns_mode)" = private ]; then
    local uts=""; [ "$k" -gt 1 ] && uts="--uts"
    local host_cmd="true"; [ "$k" -gt 1 ] && host_cmd="hostname '$name'"
    unshare --mount --propagation private $uts bash -c \
      "mount --bind '$DIR/nodes/$name/local' '$DIR/local' && $host_cmd && $run" \
      >>"$DIR/log/slurmd-$name.out" 2>&1 || die "slurmd for node $name failed; see $DIR/log/slurmd-$name.log"
  else
    bash -c "$run" >>"$DIR/log/slurmd-$name.out" 2>&1 ||
      die "slurmd for node $name failed; see $DIR/log/slurmd-$name.log"
  fi
}

# Shell commands that mount the host's /sys/fs/cgroup hierarchies (cgroup v1 and/or v2) again.
cgroup_mount_cmds() {
  awk '{ split($0, p, " - "); split(p[1], a, " "); split(p[2], b, " ")
         mp = a[5]; fs = b[1]; opts = b[3]; sub(/^rw,?/, "", opts)
         if (mp == "/sys/fs/cgroup" && fs == "tmpfs") printf "mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup; "
         else if (mp == "/sys/fs/cgroup" || index(mp, "/sys/fs/cgroup/") == 1 && (fs == "cgroup" || fs == "cgroup2"))
           printf "mkdir -p %s; mount -t %s%s %s %s; ", mp, fs, (opts != "" ? " -o " opts : ""), fs, mp }' /proc/self/mountinfo
}

# "private" when each node can get its own mount and UTS namespace, else "shared".
ns_mode() {
  if [ -f "$DIR/run/ns_mode" ]; then cat "$DIR/run/ns_mode"; return; fi
  local m=shared
  if [ "$NETNS" = 1 ]; then
    m=private   # every node has its own network, UTS and mount namespace
  elif [ "${HT_SLURM_NO_NS:-0}" != 1 ] &&
     unshare --mount --uts --propagation private bash -c "mount --bind '$DIR/tmp' '$DIR/local' && hostname ht-probe" 2>/dev/null; then
    m=private
  fi
  echo "$m" >"$DIR/run/ns_mode"; echo "$m"
}

wait_idle() {
  local deadline=$((SECONDS + START_TIMEOUT_S)) states
  while [ $SECONDS -lt $deadline ]; do
    states=$(SLURM_CONF="$CONF" timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null || true)
    if [ -n "$states" ] && [ "$(echo "$states" | grep -cw idle)" -eq "$NODES" ]; then
      echo "$states" | sed 's/^/slurm_cluster:   /' >&2
      return 0
    fi
    # A node that came back 'down' from an earlier run is resumed (ReturnToService=2 usually does it).
    echo "$states" | awk '$2 ~ /down|drain/ {print $1}' | while read -r n; do
      SLURM_CONF="$CONF" timeout 10 scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
    done
    sleep 1
  done
  say "nodes not idle after ${START_TIMEOUT_S}s: ${states:-no answer from slurmctld}"
  tail -n 20 "$DIR/log/slurmctld.log" "$DIR"/log/slurmd-*.log >&2 2>/dev/null || true
  return 1
}

do_stop() {
  local k name i
  if [ -f "$CONF" ] && [ -f "$DIR/run/slurmctld.pid" ]; then
    # Jobs first, so no slurmstepd outlives its slurmd.
    SLURM_CONF="$CONF" timeout 10 scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for i in $(seq 1 30); do
      [ -z "$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for k in $(seq 1 "$NODES"); do
    name=$(node_name "$k")
    kill_pidfile "$DIR/run/slurmd-$name.pid"
  done
  # Nodes from a run with more nodes than now.
  for f in "$DIR"/run/slurmd-*.pid; do [ -e "$f" ] && kill_pidfile "$f"; done
  kill_pidfile "$DIR/run/slurmctld.pid"
  kill_pidfile "$DIR/run/munged.pid"
  # The emulated network nodes this cluster brought up (HT_SLURM_NETNS=1), and nothing else.
  if [ -e "$EMU_STATE" ]; then emulate down 2>&1 | sed 's/^/slurm_cluster: /' >&2 || true; fi
  say "stopped (state in $DIR)"
}

do_start() {
  need_tools
  [ "$(id -u)" -eq 0 ] || die "must run as root (slurmd launches jobs as their users; SlurmUser=root here)"
  case "$NETNS" in 0|1) ;; *) die "HT_SLURM_NETNS must be 0 or 1, not '$NETNS'" ;; esac
  [ "$NETNS" = 1 ] && [ "${HT_SLURM_NO_NS:-0}" = 1 ] && die "HT_SLURM_NETNS=1 and HT_SLURM_NO_NS=1 contradict each other"
  do_stop 2>/dev/null || true
  # Fresh controller state each start: no jobs or node states from an earlier run leak in.
  rm -rf "$DIR/ctld" "$DIR/spool" "$DIR/tmp" "$DIR/log" "$DIR/nodes" "$DIR/run/ns_mode"
  mkdir -p "$DIR"/{munge,run,log,ctld,spool,tmp,nodes,local}
  chmod 0700 "$DIR/munge"; chmod 0755 "$DIR"
  write_munge_key
  if [ "$NETNS" = 1 ]; then
    emulate up --nodes "$NODES" --link "$LINK" || die "emulated network nodes did not come up (jobs/cluster/emulate.sh)"
  fi
  write_conf "$(pick_ports)"
  start_munge
  slurmctld -f "$CONF" -i >>"$DIR/log/slurmctld.out" 2>&1 || die "slurmctld failed; see $DIR/log/slurmctld.log"
  local k
  for k in $(seq 1 "$NODES"); do start_slurmd "$k"; done
  wait_idle || { do_stop; die "cluster did not come up"; }
  local net=""; [ "$NETNS" = 1 ] && net=", network namespaces on a $LINK link"
  say "up ($(ns_mode) node namespaces$net): export SLURM_CONF=$CONF"
}

do_status() {
  [ -f "$CONF" ] || { say "no cluster in $DIR"; return 1; }
  SLURM_CONF="$CONF" timeout 10 sinfo -N -o '%N %T %c %O' || return 1
  SLURM_CONF="$CONF" timeout 10 squeue || true
}

case "${1:-}" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  ns) ns_mode ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 1 ;;
esac
