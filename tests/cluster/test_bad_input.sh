#!/bin/bash
# Bad input to jobs/cluster/emulate.sh: each case ends with one clear line on stderr, the documented
# exit code, and nothing left behind (links, namespaces, qdiscs, mounts and routes as before).
#   test_bad_input.sh not_root|missing_tools|no_tbf|rollback|unknown_rate|bad_nodes|second_up|
#                     subcommand|nothing_up|stale
source "$(dirname "$0")/lib.sh"
case_name="${1:?case}"
need_prereqs setpriv
new_work "bad-$case_name"
BEFORE=$(net_snapshot)

# expect CODE REGEX CMD...: runs CMD; its exit code must be CODE and its stderr one line matching REGEX.
expect() {
  local code="$1" regex="$2" err rc=0; shift 2
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  local shown="${*//$WORK/\$WORK}"; shown="${shown//$HPCTRAIN_SOURCE_DIR\//}"
  echo "\$ $shown  -> exit $rc: $err"
  [ "$rc" -eq "$code" ] || fail "exit code $rc, expected $code"
  [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] || fail "expected exactly one line on stderr"
  grep -qE -- "$regex" <<<"$err" || fail "message does not match /$regex/"
}
# Nothing of the emulator is left: same links, namespaces, qdiscs, mounts, routes; no state dir.
unchanged() {
  local after; after=$(net_snapshot)
  if [ "$after" != "$BEFORE" ]; then diff <(echo "$BEFORE") <(echo "$after"); fail "something was left behind"; fi
  [ ! -e "$HT_EMULATE_STATE" ] || fail "state directory $HT_EMULATE_STATE left behind"
  say "nothing left behind"
}
# A bin dir that has the tools emulate.sh needs, less the ones named.
bin_without() {
  local dir="$WORK/bin-no-$1" t
  mkdir -p "$dir"
  for t in id ip tc unshare nsenter mount umount; do
    [[ " $* " == *" $t "* ]] || ln -sf "$(command -v "$t")" "$dir/$t"
  done
  echo "$dir"
}
# A fake tc that fails the Nth call that mentions tbf (like a kernel without it), else the real tc.
fake_tc() {
  local dir="$WORK/fake-tc-$1"
  mkdir -p "$dir"; echo 0 >"$dir/count"
  cat >"$dir/tc" <<EOF
#!/bin/bash
for a in "\$@"; do
  if [ "\$a" = tbf ]; then
    n=\$((\$(cat "$dir/count") + 1)); echo "\$n" >"$dir/count"
    if [ "\$n" -ge $1 ]; then echo "Error: Specified qdisc kind is unknown." >&2; exit 2; fi
  fi
done
exec $(command -v tc) "\$@"
EOF
  chmod +x "$dir/tc"
  echo "$dir"
}

case "$case_name" in
not_root)
  cp "$EMU" "$WORK/emulate.sh"; chmod 0755 "$WORK" "$WORK/emulate.sh"
  as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups env "HT_EMULATE_STATE=$HT_EMULATE_STATE")
  expect 1 "must run as root" "${as_nobody[@]}" bash "$WORK/emulate.sh" up --nodes 2 --link 100mbit
  expect 1 "must run as root" "${as_nobody[@]}" bash "$WORK/emulate.sh" down
  unchanged
  ;;
missing_tools)
  expect 1 "'ip' not found: install the Debian package iproute2" \
    env PATH="$(bin_without ip)" /bin/bash "$EMU" up --nodes 2 --link 100mbit
  expect 1 "'tc' not found: install the Debian package iproute2" \
    env PATH="$(bin_without tc)" /bin/bash "$EMU" up --nodes 2 --link 100mbit
  expect 1 "'nsenter' not found: install the Debian package util-linux" \
    env PATH="$(bin_without nsenter)" /bin/bash "$EMU" up --nodes 2
  unchanged
  ;;
no_tbf)
  expect 1 "the kernel refuses the tbf qdisc" env PATH="$(fake_tc 1):$PATH" "$EMU" up --nodes 2 --link 100mbit
  unchanged
  # An uncapped link needs no tbf.
  env PATH="$(fake_tc 1):$PATH" "$EMU" up --nodes 2 --link none || fail "up --link none failed without tbf"
  "$EMU" down || fail "down failed"
  unchanged
  ;;
rollback)
  # tbf calls: 1 = the probe, 2/3 = node1 egress/ingress, 4 = node2 egress: fails half-way through.
  expect 1 "tc qdisc tbf on node2 egress failed" env PATH="$(fake_tc 4):$PATH" "$EMU" up --nodes 3 --link 20mbit
  unchanged
  ;;
unknown_rate)
  for r in 100mbps fast 0mbit 500gbit 10 ""; do
    expect 1 "unknown rate '$r'" "$EMU" up --nodes 2 --link "$r"
  done
  unchanged
  ;;
bad_nodes)
  for n in 0 1 17 abc -2 2.5; do expect 1 "bad --nodes '$n'" "$EMU" up --nodes "$n"; done
  expect 1 "up needs --nodes" "$EMU" up --link 100mbit
  expect 1 "--nodes needs a value" "$EMU" up --nodes
  expect 1 "bad --ranks-per-node '0'" "$EMU" up --nodes 2 --ranks-per-node 0
  expect 1 "unknown option to up: '--fast'" "$EMU" up --nodes 2 --fast
  unchanged
  ;;
second_up)
  "$EMU" up --nodes 2 --link 100mbit || fail "first up failed"
  expect 0 "already up with nodes=2 link=100mbit ranks_per_node=1: nothing to do" "$EMU" up --nodes 2 --link 100mbit
  expect 1 "already up with different parameters \(nodes is '2', asked '3'\): run 'emulate.sh down' first" \
    "$EMU" up --nodes 3 --link 100mbit
  expect 1 "different parameters \(link is '100mbit', asked '20mbit'\)" "$EMU" up --nodes 2 --link 20mbit
  expect 1 "different parameters \(ranks_per_node is '1', asked '2'\)" "$EMU" up --nodes 2 --link 100mbit --ranks-per-node 2
  [ "$("$EMU" status --bytes | wc -l)" -eq 2 ] || fail "the refused up changed the running cluster"
  expect 0 "down: removed everything" "$EMU" down
  unchanged
  ;;
subcommand)
  expect 1 "unknown subcommand 'frobnicate' \(use up, status, mpirun, exec or down\)" "$EMU" frobnicate
  expect 1 "no subcommand" "$EMU"
  expect 1 "usage: status" "$EMU" status --verbose
  expect 1 "down takes no arguments" "$EMU" down --force
  unchanged
  ;;
nothing_up)
  expect 0 "nothing is up .*: nothing to do" "$EMU" down
  expect 3 "no emulated cluster is up" "$EMU" status
  expect 3 "no emulated cluster is up" "$EMU" mpirun -np 2 true
  expect 3 "no emulated cluster is up" "$EMU" exec node1 true
  unchanged
  ;;
stale)
  # The namespaces vanish under a recorded cluster (a reboot with /run on disk, a manual delete).
  "$EMU" up --nodes 2 || fail "up failed"
  ip netns delete node1
  expect 1 "stale state in .*; run 'emulate.sh down'" "$EMU" status
  expect 1 "stale state" "$EMU" up --nodes 2
  expect 0 "down: removed everything" "$EMU" down
  unchanged
  ;;
*) fail "unknown case $case_name" ;;
esac
say "PASS: $case_name"
