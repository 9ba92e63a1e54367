#!/usr/bin/env bash
# The layering that lib/CMakeLists.txt and lib/README.md state, checked in the sources of lib/ and app/:
#   - MPI only in lib/comm/: no <mpi.h>/<mpi-ext.h> include, no MPI_*( / MPIX_*( call and no other
#     MPI name (MPI_Comm, MPI_COMM_WORLD, ...) elsewhere;
#   - HDF5 only in lib/io/: no <hdf5.h>/<H5*.h> include, no H5*( call, no H5x_ name (H5P_DEFAULT,
#     H5T_NATIVE_INT64, ...) and no HDF5 type (hid_t, hsize_t, herr_t, ...) elsewhere; data/ and
#     checkpoint/ pass io:: handles (io::Id, io::Size) instead;
#   - the private check headers (comm/mpi_check.h, io/h5_check.h, io/h5_internal.h) only in their module;
#   - in lib/CMakeLists.txt, ht_ext_mpi linked by comm alone and ht_ext_hdf5 by io alone;
#   - each ht_module(...) of lib/CMakeLists.txt declares exactly the public and private deps that
#     lib/README.md's module table lists (torch = ht_ext_torch, HDF5 = ht_ext_hdf5, MPI = ht_ext_mpi,
#     toml++ and nlohmann_json their imported targets; a parenthesis in a cell is a remark).
# Comments and string literals are ignored, so a comment may name MPI_Allreduce(). tests/ is not
# checked, by choice: its fixtures build (and damage) HDF5 files with the C API directly
# (tests/unit/test_data_fixtures.h, tests/fuzz/, tests/data_cli/make_bad_files.cpp), and the MPI
# harness and a few MPI tests and benchmarks call MPI themselves (tests/support/mpi_main.cpp,
# tests/mpi/, tests/bench/); those targets link HDF5/MPI explicitly (tests/CMakeLists.txt).
# Prints file:line of each violation (one line each, the first rule it breaks) and exits 1 when
# there is one.
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
declare -A seen  # file:line already reported: a line breaks several rules at most once in the output
# report RULE DIR-ALLOWED REGEX: every line of the copies outside DIR-ALLOWED that matches REGEX.
report() {
  local rule=$1 allowed=$2 regex=$3 hit file line
  while IFS= read -r hit; do
    file=${hit%%:*}; hit=${hit#*:}; line=${hit%%:*}
    file=${file#"$tmp"/}
    case "$file" in "$allowed"*) continue ;; esac
    [ -z "${seen[$file:$line]:-}" ] || continue
    seen[$file:$line]=1
    echo "$file:$line: $rule: $(sed -n "${line}p" "$file" | sed -E 's/^[[:space:]]+//')"
    violations=$((violations + 1))
  done < <(grep -rnE "$regex" "$tmp" | sort -t: -k1,1 -k2,2n || true)
}

inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*'
report "MPI header outside lib/comm/" lib/comm/ "${inc}[<\"](mpi|mpi-ext)\.h[>\"]"
report "MPI call outside lib/comm/" lib/comm/ '\bMPIX?_[A-Za-z0-9_]+[[:space:]]*\('
report "MPI name outside lib/comm/" lib/comm/ '\bMPIX?_[A-Z][A-Za-z0-9_]*'
report "HDF5 header outside lib/io/" lib/io/ "${inc}[<\"](hdf5|H5[A-Za-z0-9_]*)\.h[>\"]"
report "HDF5 call outside lib/io/" lib/io/ '\bH5[A-Za-z0-9_]*[[:space:]]*\('
report "HDF5 name outside lib/io/" lib/io/ '\bH5[A-Z]?_[A-Za-z0-9_]+'
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

# lib/README.md's module table against the ht_module(...) calls: the same public and private deps.
while IFS= read -r hit; do
  echo "$hit"
  violations=$((violations + 1))
done < <(awk '
  function norm(cell,   out, parts, n, i, d) {
    gsub(/\([^)]*\)/, "", cell); gsub(/`/, "", cell)
    n = split(cell, parts, /[ \t]*,[ \t]*/); out = ""
    for (i = 1; i <= n; i++) {
      d = parts[i]; gsub(/^[ \t]+|[ \t]+$/, "", d)
      if (d == "") continue
      if (d == "torch") d = "ht_ext_torch"; else if (d == "HDF5") d = "ht_ext_hdf5"
      else if (d == "MPI") d = "ht_ext_mpi"; else if (d == "toml++") d = "tomlplusplus::tomlplusplus"
      else if (d == "nlohmann_json") d = "nlohmann_json::nlohmann_json"; else d = "ht_" d
      out = out " " d
    }
    return sorted(out)
  }
  function sorted(list,   a, n, i, j, t, out) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    out = ""; for (i = 1; i <= n; i++) out = out (out == "" ? "" : " ") a[i]
    return out
  }
  FNR == 1 { file++ }
  # lib/CMakeLists.txt: gather each ht_module( ... ) call, over several lines.
  file == 1 {
    line = $0; sub(/#.*/, "", line)
    if (line ~ /^[ \t]*ht_module\(/) { call = ""; start = FNR; open = 1 }
    if (open) { call = call " " line; if (line ~ /\)/) {
        open = 0; sub(/.*ht_module\(/, "", call); sub(/\).*/, "", call)
        n = split(call, w, /[ \t]+/); mod = ""; kind = ""; pub = ""; priv = ""
        for (i = 1; i <= n; i++) {
          if (w[i] == "") continue
          if (mod == "") { mod = w[i]; continue }
          if (w[i] == "DEPS" || w[i] == "PRIVATE_DEPS") { kind = w[i]; continue }
          if (kind == "DEPS") pub = pub " " w[i]; else if (kind == "PRIVATE_DEPS") priv = priv " " w[i]
        }
        cm_pub[mod] = sorted(pub); cm_priv[mod] = sorted(priv); cm_line[mod] = start; mods[mod] = 1
    } }
    next
  }
  # lib/README.md: | `mod/` | owns | public deps | private deps |  (the module table: four cells)
  file == 2 && /^\| `[a-z_]+\/` \|/ {
    n = split($0, c, "|")
    if (n != 6) next
    mod = c[2]; gsub(/[ `\/]/, "", mod)
    rd_pub[mod] = norm(c[4]); rd_priv[mod] = norm(c[5]); rd_line[mod] = FNR; listed[mod] = 1
  }
  END {
    for (m in mods) {
      where = "lib/CMakeLists.txt:" cm_line[m]
      if (!(m in listed)) { print where ": module " m " is not in lib/README.md'"'"'s module table"; continue }
      if (cm_pub[m] != rd_pub[m])
        print where ": module " m ": DEPS [" cm_pub[m] "] but lib/README.md:" rd_line[m] " lists public deps [" rd_pub[m] "]"
      if (cm_priv[m] != rd_priv[m])
        print where ": module " m ": PRIVATE_DEPS [" cm_priv[m] "] but lib/README.md:" rd_line[m] " lists private deps [" rd_priv[m] "]"
    }
    for (m in listed) if (!(m in mods)) print "lib/README.md:" rd_line[m] ": module " m " has no ht_module() in lib/CMakeLists.txt"
  }
' lib/CMakeLists.txt lib/README.md | sort)

if [ "$violations" -gt 0 ]; then
  echo "layering: $violations violation(s); MPI belongs in lib/comm/, HDF5 in lib/io/, deps as lib/README.md lists them" >&2
  exit 1
fi
echo "layering: ok (${#files[@]} files of lib/ and app/, lib/CMakeLists.txt against lib/README.md)"
