#!/usr/bin/env bash
# ctest's chaos.soak_*: scripts/chaos.sh MINUTES, after the prerequisites it needs are checked through
# the suites' skip helper (a skip by hand, a failure under scripts/test.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../support/skip.sh"
[ -x "${H5DIFF:-}" ] || skip_suite "h5diff not found (apt-get install hdf5-tools)"
[ -f /usr/share/games/fortunes/fortunes ] || skip_suite "/usr/share/games/fortunes/fortunes missing (apt-get install fortunes)"
exec "$here/../../scripts/chaos.sh" "$1"
