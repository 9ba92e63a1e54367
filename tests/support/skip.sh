# Sourced by the script suites: skip_suite REASON ends a test whose prerequisite is missing.
# Under ./scripts/test.sh (README command 2, and so .ci/run) HPCTRAIN_REQUIRE_ALL_SUITES=1 and a
# missing prerequisite fails the test, naming it: a green run means every suite really ran.
# Run by hand (plain ctest) it is a skip (exit 77, ctest's SKIP_RETURN_CODE).
skip_suite() {
  if [ "${HPCTRAIN_REQUIRE_ALL_SUITES:-0}" = 1 ]; then
    echo "FAIL: this suite must run under scripts/test.sh but cannot: $*" >&2
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}
