# shellcheck shell=bash
# Shared helpers of the emulated-cluster tests (sourced). Expects HPCTRAIN_SOURCE_DIR from ctest.
# Each test gets its own temp dir ($WORK) and its own emulator state dir inside it, and removes
# whatever it brought up on exit. Each test runs in a sandbox of its own (a network namespace and a
# mount namespace with a private /run/netns): the emulated nodes, bridge and veths it creates are
# invisible to the machine and to a cluster a user has up, and the kernel removes them when the
# test's processes end, also when a test is killed before its clean-up ran. The tests still hold
# one ctest RESOURCE_LOCK: two clusters at once on 2 cores would measure each other.
set -uo pipefail
: "${HPCTRAIN_SOURCE_DIR:?}"
EMU="$HPCTRAIN_SOURCE_DIR/jobs/cluster/emulate.sh"
HT_TEST_SCRIPT="$(readlink -f "$0")"
HT_TEST_ARGS=("$@")
export PATH="$PATH:/usr/sbin:/sbin"

say() { echo "[test $(date +%H:%M:%S)] $*"; }
fail() { echo "[test $(date +%H:%M:%S)] FAIL: $*" >&2; exit 1; }

# A missing prerequisite skips (exit 77, ctest's SKIP_RETURN_CODE) with one line naming it. Under
# scripts/test.sh (HPCTRAIN_REQUIRE_ALL_SUITES=1) it fails instead, as the other script suites do.
skip() {
  if [ "${HPCTRAIN_REQUIRE_ALL_SUITES:-0}" = 1 ]; then echo "FAIL: cluster suite cannot run: $*" >&2; exit 1; fi
  echo "SKIP: $*"; exit 77
}

# Root, ip, tc with the tbf qdisc; plus any tools named. Then re-runs the test in its sandbox.
need_prereqs() {
  local t
  [ "$(id -u)" -eq 0 ] || skip "not root (network namespaces, bridges and qdiscs need root)"
  for t in ip tc unshare nsenter mount "$@"; do command -v "$t" >/dev/null 2>&1 || skip "'$t' not installed"; done
  unshare --net tc qdisc add dev lo root tbf rate 1mbit burst 16k limit 64k >/dev/null 2>&1 ||
    skip "the kernel has no tbf qdisc"
  enter_sandbox
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qE '^node[0-9]+$' &&
    fail "node namespaces exist inside the test's own sandbox"
  return 0
}

# Re-executes the test script inside a new network and mount namespace whose /run/netns is an
# empty tmpfs (named namespaces are bind mounts there, so they die with the sandbox), with lo up.
# The tmpfs is made shared up front, as `ip netns add` would, so mounts look the same before and
# after a test.
enter_sandbox() {
  [ "${HT_CLUSTER_IN_SANDBOX:-0}" = 1 ] && return 0
  export HT_CLUSTER_IN_SANDBOX=1
  mkdir -p /run/netns
  # shellcheck disable=SC2016  # expanded by the inner shell, inside the sandbox
  exec unshare --net --mount --propagation private -- bash -c \
    'mount -t tmpfs -o size=1m,mode=755 hpctrain-test-netns /run/netns && mount --make-shared /run/netns && ip link set lo up && exec bash "$@"' \
    sandbox "$HT_TEST_SCRIPT" "${HT_TEST_ARGS[@]}"
}

# $WORK: a fresh temp dir; HT_EMULATE_STATE inside it; on exit the cluster is taken down.
new_work() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/ht-cluster-$1.XXXXXX")
  export HT_EMULATE_STATE="$WORK/state"
  trap cleanup EXIT
}
cleanup() {
  [ -n "${WORK:-}" ] || return 0
  [ -e "$HT_EMULATE_STATE" ] && "$EMU" down >/dev/null 2>&1
  rm -rf "$WORK"
}

# What the emulator may touch, to compare before and after: links, namespaces, qdiscs, mounts.
net_snapshot() {
  {
    echo "## links"; ip -o link show | sed 's/^[0-9]*: //; s/ link\/.*//' | sort
    echo "## netns"; ip netns list | sort
    echo "## qdiscs"; tc qdisc show | sed 's/ [0-9a-f]*: / H: /' | sort
    echo "## mounts"; awk '{print $5, $9}' /proc/self/mountinfo | grep -v '^/proc' | sort
    echo "## routes"; ip -4 route show | sort
  }
}

# Compiles an MPI C source into $WORK; prints the binary's path.
mpicc_into_work() {
  local src="$1" out; out="$WORK/$(basename "${src%.c}")"
  mpicc -O2 -o "$out" "$src" || fail "mpicc $src failed"
  echo "$out"
}

# Starts the Slurm test cluster (tests/slurm/slurm_cluster.sh) in network mode: NODES slurmd
# (default 2), each in its own emulated network node behind a LINK-capped link (e.g. 20mbit).
# Its state lives in $WORK/s (short: munge's unix socket is there); on exit the cluster is stopped
# before $WORK goes. Sets SLURM_CLUSTER and exports SLURM_CONF for sinfo/srun/sbatch.
start_netns_slurm() {
  local link="$1" nodes="${2:-2}"
  export HT_SLURM_DIR="$WORK/s" HT_SLURM_NETNS=1 HT_SLURM_LINK="$link" HT_SLURM_NODES="$nodes"
  SLURM_CLUSTER="$HPCTRAIN_SOURCE_DIR/tests/slurm/slurm_cluster.sh"
  trap stop_netns_slurm EXIT
  timeout 120 "$SLURM_CLUSTER" start || fail "slurm_cluster.sh start (HT_SLURM_NETNS=1, $link, $nodes nodes) failed"
  export SLURM_CONF="$HT_SLURM_DIR/slurm.conf"
}
stop_netns_slurm() { "$SLURM_CLUSTER" stop >/dev/null 2>&1; cleanup; }
