# shellcheck shell=bash
# Shared helpers of the emulated-cluster tests (sourced). Expects HPCTRAIN_SOURCE_DIR from ctest.
# Each test gets its own temp dir ($WORK) and its own emulator state dir inside it, and removes
# whatever it brought up on exit. Node namespaces are named node1..nodeK machine-wide, so these
# tests hold one ctest RESOURCE_LOCK and skip when another emulated cluster is up.
set -uo pipefail
: "${HPCTRAIN_SOURCE_DIR:?}"
EMU="$HPCTRAIN_SOURCE_DIR/jobs/cluster/emulate.sh"
export PATH="$PATH:/usr/sbin:/sbin"

say() { echo "[test $(date +%H:%M:%S)] $*"; }
fail() { echo "[test $(date +%H:%M:%S)] FAIL: $*" >&2; exit 1; }

# A missing prerequisite skips (exit 77, ctest's SKIP_RETURN_CODE) with one line naming it. Under
# scripts/test.sh (HPCTRAIN_REQUIRE_ALL_SUITES=1) it fails instead, as the other script suites do.
skip() {
  if [ "${HPCTRAIN_REQUIRE_ALL_SUITES:-0}" = 1 ]; then echo "FAIL: cluster suite cannot run: $*" >&2; exit 1; fi
  echo "SKIP: $*"; exit 77
}

# Root, ip, tc with the tbf qdisc, no emulated cluster already up; plus any tools named.
need_prereqs() {
  local t
  [ "$(id -u)" -eq 0 ] || skip "not root (network namespaces, bridges and qdiscs need root)"
  for t in ip tc unshare nsenter "$@"; do command -v "$t" >/dev/null 2>&1 || skip "'$t' not installed"; done
  unshare --net tc qdisc add dev lo root tbf rate 1mbit burst 16k limit 64k >/dev/null 2>&1 ||
    skip "the kernel has no tbf qdisc"
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qE '^node[0-9]+$' &&
    skip "node namespaces exist already (an emulated cluster is up: jobs/cluster/emulate.sh down)"
  ip link show htemu0 >/dev/null 2>&1 && skip "bridge htemu0 exists already (an emulated cluster is up)"
  return 0
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
