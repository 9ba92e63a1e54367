#!/usr/bin/env bash
# libFuzzer campaign over the project's own parsers: builds tests/fuzz/fuzz_*.cpp with clang-14
# (-fsanitize=fuzzer,address,undefined; our libraries instrumented too) into build-fuzz/ (its own
# build directory: the normal build is untouched) and runs each target for SECONDS from its seed
# corpus in tests/fuzz/corpus/<target>/ and the regression inputs in tests/fuzz/regressions/<target>/
# (the normal build replays both in ctest, label "fuzz"). Prints the executions per target; exits non-zero on any
# crash, sanitizer report, timeout or out-of-memory, keeping the input that caused it under
# build-fuzz/crashes/<target>/ (reproduce: build-fuzz/fuzz/fuzz_<target> <that file>).
#
#   ./scripts/fuzz.sh 60                          # every target, 60 s each
#   ./scripts/fuzz.sh 300 checkpoint config       # some targets
#
# Inputs found on the way go to build-fuzz/corpus/<target>/ (reused by the next run), never into
# the repository. Not part of .ci/run (minutes per target); durations are in docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-}"
[[ "$SECONDS_PER_TARGET" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/fuzz.sh SECONDS [target...]" >&2; exit 1; }
shift
TORCH_PREFIX=$(./scripts/setup.sh | tail -n 1)
export CCACHE_DIR="${CCACHE_DIR:-${HPCTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}/ccache}"
CC_BIN="${HPCTRAIN_FUZZ_CC:-clang-14}"
CXX_BIN="${HPCTRAIN_FUZZ_CXX:-clang++-14}"
command -v "$CXX_BIN" >/dev/null ||
  { echo "fuzz: $CXX_BIN not found (apt-get install clang-14 libclang-rt-14-dev, or ./scripts/setup.sh)" >&2; exit 1; }
probe=$(mktemp -d /tmp/ht-fuzz-probe-XXXXXX)
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
"$CXX_BIN" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2>"$probe/log" ||
  { cat "$probe/log" >&2; rm -rf "$probe"
    echo "fuzz: $CXX_BIN cannot link -fsanitize=fuzzer (apt-get install libclang-rt-14-dev)" >&2; exit 1; }
rm -rf "$probe"

BUILD=build-fuzz
FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# Configured on every run (a no-op when nothing changed), so that changed flags reach an existing
# build directory. -O1 replaces RelWithDebInfo's -O2 (which would come after, and win).
CC="$CC_BIN" CXX="$CXX_BIN" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHPCTRAIN_FUZZ=ON -DHPCTRAIN_BUILD_BENCH=OFF -DTorch_DIR="$TORCH_PREFIX/share/cmake/Torch" \
  -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >"$BUILD.configure.log" 2>&1 ||
  { tail -20 "$BUILD.configure.log"; echo "fuzz: configure failed (log: $BUILD.configure.log)" >&2; exit 1; }
start=$(date +%s)
cmake --build "$BUILD" --target fuzz_targets -j "${HPCTRAIN_BUILD_JOBS:-$(nproc)}"
built=$(date +%s)

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do t=$(basename "$f" .cpp); targets+=("${t#fuzz_}"); done
fi

# Leaks are findings too (libFuzzer checks after an input that allocated more than it freed);
# container-overflow annotations are off because std containers cross into uninstrumented libtorch.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_container_overflow=0:abort_on_error=0:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1
failed=()
summary=()
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  # The inputs that reproduce earlier findings start the search too (ctest -L fuzz replays them).
  regressions=()
  [ -d "tests/fuzz/regressions/$t" ] && regressions=("tests/fuzz/regressions/$t")
  [ -x "$bin" ] || { echo "fuzz: no target '$t' (tests/fuzz/fuzz_$t.cpp)" >&2; exit 1; }
  [ -d "$seeds" ] || { echo "fuzz: no seed corpus $seeds" >&2; exit 1; }
  corpus="$BUILD/corpus/$t"
  crashes="$BUILD/crashes/$t"
  log="$BUILD/logs/$t.log"
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  echo "fuzz: $t for ${SECONDS_PER_TARGET} s (log: $log)"
  set +e
  # -timeout: one input running this long is a finding (a hang); -malloc_limit_mb: so is asking
  # for a GiB at once (our readers check sizes against the file before allocating).
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=1024 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "$seeds" "${regressions[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(find "$corpus" -type f | wc -l)
  verdict=ok
  if [ "$rc" -ne 0 ]; then
    verdict="FAILED (exit $rc)"
    failed+=("$t")
    grep -E "FUZZ FINDING|ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY" "$log" | head -8 >&2 || true
    ls -1 "$crashes" >&2 || true
  fi
  summary+=("$(printf '%-16s %12s executions %8s exec/s %6s corpus files  %s' "$t" "${execs:-?}" "${rate:-?}" "$units" "$verdict")")
done
end=$(date +%s)
echo "fuzz: build $((built - start)) s, fuzzing $((end - built)) s (${SECONDS_PER_TARGET} s per target)"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs kept in $BUILD/crashes/<target>/)" >&2
  exit 1
fi
