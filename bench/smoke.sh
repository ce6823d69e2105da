#!/usr/bin/env bash
# smoke.sh - the `make test` smoke of `make bench`: runs
# scripts/bench.sh with QUICK=1 and checks only that it completes and prints
# every section and every row with a figure. Timings are not tests: no figure
# is compared with anything. Output ends with cmocka-style summary lines, so
# scripts/test.sh can run it as a shell suite.
#
#   BUILD=build bash bench/smoke.sh      (needs $BUILD/retryd, retryd.lua, loadgen)
set -u
cd "$(dirname "$0")/.." || exit 1
source scripts/lib.sh # suite_summary
BUILD=${BUILD:-build}
log=$(mktemp "${TMPDIR:-/tmp}/retryd-bench-smoke.XXXXXX") || exit 1
trap 'rm -f "$log"' EXIT

echo "[==========] Running 1 test(s)."
echo "[ RUN      ] bench_quick_smoke"
BUILD=$BUILD QUICK=1 BENCH_NPM_TIMEOUT=${BENCH_NPM_TIMEOUT:-60} timeout 540 scripts/bench.sh \
    >"$log" 2>&1
rc=$?

problems=()
[ "$rc" -eq 0 ] || problems+=("scripts/bench.sh exited with status $rc")
for section in "### 0. " "### 1. " "### 1b. " "### 1c. " "### 2. " "### 2b. " "### 2s. " "### 3. " "### 3a. " "### 3e. " \
               "### 3b. " "### 3k. " "### 4. " \
               "### 5. " "### 6. " "### 7. " "### 8. " "### 9. " "### 10. " "### Targets" \
               "### Targets of issue 25"; do
    grep -qF -- "$section" "$log" || problems+=("no section \"$section\"")
done
last=$(grep '^bench: [0-9]* rows, ' "$log" | tail -n 1)
case "$last" in
    *", 0 without a figure") ;;
    "") problems+=("no closing row count") ;;
    *) problems+=("${last#bench: }") ;;
esac

if [ "${#problems[@]}" -eq 0 ]; then
    echo "${last#bench: } ($(grep -c '^| ' "$log") table lines)"
    echo "[       OK ] bench_quick_smoke"
    suite_summary 1 1
    exit 0
fi
tail -n 40 "$log"
for p in "${problems[@]}"; do echo "bench_quick_smoke: $p"; done
echo "[  FAILED  ] bench_quick_smoke"
suite_summary 1 0 bench_quick_smoke
exit 1
