#!/usr/bin/env bash
# The layering that lib/CMakeLists.txt states, checked in the sources of lib/ and app/:
#   - MPI only in lib/comm/: no <mpi.h>/<mpi-ext.h> include and no MPI_*( / MPIX_*( call elsewhere;
#   - HDF5 only in lib/io/: no <hdf5.h>/<H5*.h> include, no H5*( call and no HDF5 type (hid_t,
#     hsize_t, herr_t, ...) elsewhere; data/ and checkpoint/ pass io:: handles instead;
#   - the private check headers (comm/mpi_check.h, io/h5_check.h, io/h5_internal.h) only in their module;
#   - in lib/CMakeLists.txt, ht_ext_mpi linked by comm alone and ht_ext_hdf5 by io alone.
# Comments and string literals are ignored, so a comment may name MPI_Allreduce(). tests/ is not
# checked: its fixtures build damaged HDF5 files and its harness drives MPI directly.
# Prints file:line of each violation and exits 1 when there is one.
# Usage: layering.sh [SOURCE_DIR]   (default: the checkout this script is in)
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$src"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mapfile -t files < <(find lib app -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cc' \) | sort)
for d in $(printf '%s\n' "${files[@]}" | xargs -n1 dirname | sort -u); do mkdir -p "$tmp/$d"; done

# A copy of each file with comments and string/char literals blanked (include lines kept as they
# are); line numbers stay the same, so a hit in the copy is a hit at that line of the source.
awk -v tmp="$tmp" '
FNR == 1 { blk = 0; out = tmp "/" FILENAME }
{
  s = $0
  if (!blk && s ~ /^[ \t]*#[ \t]*include/) { print s > out; next }
  r = ""; n = length(s); i = 1
  while (i <= n) {
    c = substr(s, i, 1); c2 = substr(s, i, 2)
    if (blk) { if (c2 == "*/") { blk = 0; i += 2 } else i++; continue }
    if (c2 == "//") break
    if (c2 == "/*") { blk = 1; i += 2; continue }
    if (c == "\"" || (c == "\047" && (i == 1 || substr(s, i - 1, 1) !~ /[A-Za-z0-9_]/))) {
      i++
      while (i <= n && substr(s, i, 1) != c) { if (substr(s, i, 1) == "\\") i++; i++ }
      r = r c c; i++; continue
    }
    r = r c; i++
  }
  print r > out
}' "${files[@]}"

violations=0
# report RULE DIR-ALLOWED REGEX: every line of the copies outside DIR-ALLOWED that matches REGEX.
report() {
  local rule=$1 allowed=$2 regex=$3 hit file line
  while IFS= read -r hit; do
    file=${hit%%:*}; hit=${hit#*:}; line=${hit%%:*}
    file=${file#"$tmp"/}
    case "$file" in "$allowed"*) continue ;; esac
    echo "$file:$line: $rule: $(sed -n "${line}p" "$file" | sed -E 's/^[[:space:]]+//')"
    violations=$((violations + 1))
  done < <(grep -rnE "$regex" "$tmp" || true)
}

inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*'
report "MPI header outside lib/comm/" lib/comm/ "${inc}[<\"](mpi|mpi-ext)\.h[>\"]"
report "MPI call outside lib/comm/" lib/comm/ '\bMPIX?_[A-Za-z0-9_]+[[:space:]]*\('
report "HDF5 header outside lib/io/" lib/io/ "${inc}[<\"](hdf5|H5[A-Za-z0-9_]*)\.h[>\"]"
report "HDF5 call outside lib/io/" lib/io/ '\bH5[A-Za-z0-9_]*[[:space:]]*\('
report "HDF5 type outside lib/io/ (pass io:: handles)" lib/io/ '\b(hid_t|hsize_t|hssize_t|herr_t|htri_t|haddr_t)\b'
report "private header of comm/ outside lib/comm/" lib/comm/ "${inc}\"comm/mpi_check\.h\""
report "private header of io/ outside lib/io/" lib/io/ "${inc}\"io/(h5_check|h5_internal)\.h\""

# lib/CMakeLists.txt: which ht_module(...) call links MPI or HDF5 (any other mention is a link too).
while IFS= read -r hit; do
  echo "$hit"
  violations=$((violations + 1))
done < <(awk '
  { line = $0; sub(/#.*/, "", line) }
  line ~ /^[ \t]*ht_module\(/ { mod = line; sub(/^[ \t]*ht_module\([ \t]*/, "", mod); sub(/[ \t].*/, "", mod) }
  line ~ /ht_ext_mpi/ && mod != "comm" { print FILENAME ":" FNR ": MPI linked outside comm (" (mod == "" ? "not a module" : "module " mod) "): " $0 }
  line ~ /ht_ext_hdf5/ && mod != "io" { print FILENAME ":" FNR ": HDF5 linked outside io (" (mod == "" ? "not a module" : "module " mod) "): " $0 }
  line ~ /\)/ { mod = "" }
' lib/CMakeLists.txt)

if [ "$violations" -gt 0 ]; then
  echo "layering: $violations violation(s); MPI belongs in lib/comm/, HDF5 in lib/io/ (lib/README.md)" >&2
  exit 1
fi
echo "layering: ok (${#files[@]} files of lib/ and app/, lib/CMakeLists.txt)"
