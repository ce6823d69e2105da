#!/usr/bin/env bash
# fuzz_smoke.sh - runs each libFuzzer harness over a copy of its committed seed
# corpus and reports like a cmocka suite, so the test runner counts it: any
# crash, leak, sanitizer report or hang fails it.
#   fuzz_request  the HTTP request path, tests/fuzz_corpus/*, FUZZ_SECONDS (default 60)
#   fuzz_sqs      the SQS codec, tests/fuzz_corpus/sqs/, FUZZ_SQS_SECONDS (default
#                 FUZZ_SECONDS when that is set, else 15)
set -u
cd "$(dirname "$0")/.."
source scripts/lib.sh # suite_setup_failed, suite_summary
seconds=${FUZZ_SECONDS:-60}
sqs_seconds=${FUZZ_SQS_SECONDS:-${FUZZ_SECONDS:-15}}
for bin in build/fuzz/fuzz_request build/fuzz/fuzz_sqs; do
    [ -x "$bin" ] || suite_setup_failed "${bin##*/}" "$bin is missing: make $bin"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run_target NAME SECONDS CORPUS_DIR: 0 when the run ends clean.
run_target() {
    local name=$1 secs=$2 corpus=$3 dir="$work/$1" rc f
    mkdir -p "$dir/corpus"
    find "$corpus" -maxdepth 1 -type f -exec cp {} "$dir/corpus/" \;
    echo "[ RUN      ] $name for ${secs}s"
    "build/fuzz/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus" 2>"$dir/log"
    rc=$?
    grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$dir/log"
    if [ "$rc" -eq 0 ]; then
        echo "[       OK ] $name"
        return 0
    fi
    tail -60 "$dir/log"
    for f in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-*; do
        [ -e "$f" ] && { echo "reproducer ($f), base64:"; base64 "$f" | head -20; }
    done
    echo "[  FAILED  ] $name"
    return 1
}

failed=()
run_target fuzz_request "$seconds" tests/fuzz_corpus || failed+=(fuzz_request)
run_target fuzz_sqs "$sqs_seconds" tests/fuzz_corpus/sqs || failed+=(fuzz_sqs)
suite_summary 2 $((2 - ${#failed[@]})) ${failed[@]+"${failed[@]}"}
