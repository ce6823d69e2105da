#!/usr/bin/env bash
# bench_smoke.sh - `make bench QUICK=1` as a smoke test: it must complete and
# print every row; the figures themselves are not judged here (timings are not
# tests). See bench/smoke.sh.
cd "$(dirname "$0")/.." && exec bash bench/smoke.sh
