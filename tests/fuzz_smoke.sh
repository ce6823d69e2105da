#!/usr/bin/env bash
# fuzz_smoke.sh - runs the libFuzzer harness over a copy of the committed seed
# corpus for FUZZ_SECONDS (default 60) and reports like a cmocka suite, so the
# test runner counts it: any crash, leak, sanitizer report or hang fails it.
set -u
cd "$(dirname "$0")/.."
source scripts/lib.sh # suite_setup_failed, suite_summary
bin=build/fuzz/fuzz_request
seconds=${FUZZ_SECONDS:-60}
[ -x "$bin" ] || suite_setup_failed fuzz_request "$bin is missing: make $bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp tests/fuzz_corpus/* "$work/"
echo "[ RUN      ] fuzz_request for ${seconds}s"
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$work/" "$work" 2>"$work/log"
rc=$?
grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log"
if [ "$rc" -eq 0 ]; then
    echo "[       OK ] fuzz_request"
    suite_summary 1 1
    exit 0
fi
tail -60 "$work/log"
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
    [ -e "$f" ] && { echo "reproducer ($f), base64:"; base64 "$f" | head -20; }
done
echo "[  FAILED  ] fuzz_request"
suite_summary 1 0 fuzz_request
exit 1
