#!/bin/bash
# ctest fixtures of the Slurm suite: start | prepare_data | stop.
# Where a private cluster cannot run (not root, no slurm-wlm/munge), start records why in
# $HT_SLURM_DIR.unavailable; every test then skips (exit 77) naming the reason, or fails when
# scripts/test.sh requires every suite (tests/support/skip.sh).
set -uo pipefail
: "${HT_SLURM_DIR:?}" "${HPCTRAIN:?}"
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../support/skip.sh
source "$here/../support/skip.sh"
marker="$HT_SLURM_DIR.unavailable"
export PATH="$PATH:/usr/sbin:/sbin"

case "${1:?start|prepare_data|stop}" in
start)
  rm -f "$marker"
  why=""
  [ "$(id -u)" -eq 0 ] || why="not root (slurmd must run as root)"
  for t in munged slurmctld slurmd sbatch h5diff; do
    command -v "$t" >/dev/null 2>&1 || why="${why:+$why; }'$t' not installed (run ./scripts/setup.sh)"
  done
  if [ -n "$why" ]; then echo "$why" >"$marker"; skip_suite "Slurm tests cannot run: $why"; fi
  exec "$here/slurm_cluster.sh" start
  ;;
prepare_data)
  [ -f "$marker" ] && skip_suite "Slurm cluster unavailable: $(cat "$marker")"
  mkdir -p "$HT_SLURM_DIR/data"
  src="$HT_SLURM_DIR/data/fortunes.txt"
  # Fixture text from Debian's fortunes (a few hundred KiB is plenty for a tiny model).
  cat /usr/share/games/fortunes/{fortunes,literature,science,wisdom} 2>/dev/null | head -c 400000 >"$src"
  [ -s "$src" ] || { echo "no fortunes text found (package fortunes)"; exit 1; }
  rm -f "$HT_SLURM_DIR/data/fortunes.h5"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$HPCTRAIN" prepare --input "$src" --output "$HT_SLURM_DIR/data/fortunes.h5" || exit 1
  ls -l "$HT_SLURM_DIR/data/fortunes.h5"
  ;;
stop)
  [ -f "$marker" ] && { rm -f "$marker"; exit 0; }
  "$here/slurm_cluster.sh" stop || exit 1
  # The state directory (20+ MB of job outputs, under /tmp for munge's short socket path) goes with
  # the cluster, so that a suite run leaves nothing in /tmp; the daemons' logs stay beside the build
  # (slurm-logs/ in this test's directory) for a post-mortem. HT_KEEP_TEST_DIRS=1 keeps it all.
  if [ "${HT_KEEP_TEST_DIRS:-0}" = 0 ]; then
    rm -rf slurm-logs && { [ ! -d "$HT_SLURM_DIR/log" ] || cp -r "$HT_SLURM_DIR/log" slurm-logs; }
    rm -rf "$HT_SLURM_DIR"
  fi
  ;;
esac
