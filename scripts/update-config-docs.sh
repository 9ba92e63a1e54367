#!/usr/bin/env bash
# Regenerates the key tables of docs/config.md from the binary's key table
# (`hpctrain train --help-config-markdown`); unit.config fails while they differ.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${HPCTRAIN:-build/bin/hpctrain}"
tables=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$bin" train --help-config-markdown)
python3 - "$tables" <<'PY'
import sys
doc = open("docs/config.md").read()
a = doc.index("## [model]")
b = doc.index("Global batch (samples per optimizer step)")
open("docs/config.md", "w").write(doc[:a] + sys.argv[1] + "\n\n" + doc[b:])
PY
echo "docs/config.md: tables regenerated"
