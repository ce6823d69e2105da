#!/usr/bin/env bash
# fuzz_smoke.sh - runs the libFuzzer harness over a copy of the committed seed
# corpus for FUZZ_SECONDS (default 60) and reports like a cmocka suite, so the
# test runner counts it: any crash, leak, sanitizer report or hang fails it.
set -u
cd "$(dirname "$0")/.."
bin=build/fuzz/fuzz_request
seconds=${FUZZ_SECONDS:-60}
if [ ! -x "$bin" ]; then
    echo "[  FAILED  ] 1 test(s), listed below:"
    echo "[  FAILED  ] fuzz_request ($bin is missing: make $bin)"
    exit 1
fi
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
    echo "[  PASSED  ] 1 test(s)."
    exit 0
fi
tail -60 "$work/log"
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
    [ -e "$f" ] && { echo "reproducer ($f), base64:"; base64 "$f" | head -20; }
done
echo "[  FAILED  ] 1 test(s), listed below:"
echo "[  FAILED  ] fuzz_request"
exit 1
