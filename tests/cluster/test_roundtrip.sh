#!/bin/bash
# up / status / exec / up again / down on 3 nodes x 2 ranks at 100mbit: each node is its own network
# and UTS namespace with its address, hostname and a tbf cap on both sides of its link; a second
# identical up changes nothing; down leaves the machine's links, namespaces, qdiscs, mounts and
# routes exactly as before.
source "$(dirname "$0")/lib.sh"
need_prereqs python3
new_work roundtrip
before=$(net_snapshot)

"$EMU" up --nodes 3 --link 100mbit --ranks-per-node 2 || fail "up failed"
"$EMU" status || fail "status failed"
mid=$(net_snapshot)
"$EMU" up --nodes 3 --link 100mbit --ranks-per-node 2 2>"$WORK/up2.err" || fail "second identical up failed"
grep -q "already up" "$WORK/up2.err" || fail "second up did not say it was already up"
[ "$(net_snapshot)" = "$mid" ] || fail "second identical up changed something"

for k in 1 2 3; do
  host=$("$EMU" exec "node$k" hostname) || fail "exec node$k failed"
  [ "$host" = "node$k" ] || fail "node$k has hostname '$host'"
  addr=$("$EMU" exec "node$k" ip -4 -o addr show dev eth0 | awk '{print $4}')
  [ "$addr" = "10.77.0.$k/24" ] || fail "node$k has address '$addr'"
  netns_id=$("$EMU" exec "node$k" readlink /proc/self/ns/net)
  echo "node$k: hostname $host, address $addr, $netns_id"
  ids+=("$netns_id")
  tc -n "node$k" qdisc show dev eth0 | grep -q "tbf .*rate 100Mbit" || fail "node$k egress has no 100Mbit tbf"
  tc qdisc show dev "htemu-n$k" | grep -q "tbf .*rate 100Mbit" || fail "node$k ingress has no 100Mbit tbf"
done
[ "$(printf '%s\n' "${ids[@]}" "$(readlink /proc/self/ns/net)" | sort -u | wc -l)" -eq 4 ] ||
  fail "the nodes and the host do not have 4 distinct network namespaces"
"$EMU" exec node1 sh -c 'ip -4 -o addr show' | grep -q "10.77.0.2" && fail "node1 sees node2's address"

# Byte counters: 3 "node tx rx" lines; node1 -> node2 traffic shows on node1's tx and node2's rx.
"$EMU" status --bytes | awk 'NF != 3 || $1 !~ /^node[123]$/ {bad = 1} END {exit bad || NR != 3}' ||
  fail "status --bytes is not 3 lines of 'node tx rx'"
read -r _ tx0 _ < <("$EMU" status --bytes | sed -n 1p)
read -r _ _ rx0 < <("$EMU" status --bytes | sed -n 2p)
# 1 MB from node1 to node2 over TCP (bash /dev/tcp on the sender; a python listener on the receiver).
timeout 30 "$EMU" exec node2 python3 -c '
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 5001)); s.listen(1); s.settimeout(20); c, _ = s.accept(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
print("received", n)' >"$WORK/recv.out" &
recv_pid=$!
sleep 1
timeout 30 "$EMU" exec node1 bash -c 'head -c 1000000 /dev/zero >/dev/tcp/10.77.0.2/5001' || fail "send from node1 failed"
wait "$recv_pid"; cat "$WORK/recv.out"
grep -q "received 1000000" "$WORK/recv.out" || fail "node2 did not receive 1 MB"
read -r _ tx1 _ < <("$EMU" status --bytes | sed -n 1p)
read -r _ _ rx1 < <("$EMU" status --bytes | sed -n 2p)
echo "node1 tx +$((tx1 - tx0)) B, node2 rx +$((rx1 - rx0)) B"
in_mb_range() { [ "$1" -ge 1000000 ] && [ "$1" -le 1100000 ]; }
in_mb_range $((tx1 - tx0)) || fail "node1 tx counter moved by $((tx1 - tx0)) B, expected 1.0-1.1 MB"
in_mb_range $((rx1 - rx0)) || fail "node2 rx counter moved by $((rx1 - rx0)) B, expected 1.0-1.1 MB"

"$EMU" down || fail "down failed"
after=$(net_snapshot)
if [ "$after" != "$before" ]; then diff <(echo "$before") <(echo "$after"); fail "down left something behind"; fi
[ ! -e "$HT_EMULATE_STATE" ] || fail "state directory left behind"
"$EMU" down 2>&1 | grep -q "nothing is up" || fail "second down did not say nothing is up"
say "PASS: up/status/down round trip leaves nothing behind"
