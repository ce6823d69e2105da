#!/bin/sh
# deps.sh [test] - installs the Debian packages retryd needs, only when one is
# missing. `make` (and so `make run`) needs the build set; `make test` runs
# `deps.sh test`, which adds what only the suites need: valgrind (test_faults_crash'
# leak check), python3-jsonschema (tests/openapi_check.sh validates responses
# against docs/openapi.json), jq (examples/worker.sh), awscli, python3-boto3 and
# Celery (python3-celery, -kombu, -pycurl) for the SQS client tests, chromium (the browser
# test), and what `deps.sh bench` adds, as the bench smoke runs the bench.
# `make bench` runs `deps.sh bench`: the peers of docs/benchmarks.md, Sidekiq
# 6.4.1 (ruby-sidekiq) and wrk (the enqueue figure's independent client), and
# Debian's nodejs and npm when there is no node (or no npm) on PATH, for
# BullMQ, the browser test and examples/worker.mjs (bookworm's nodejs is 18;
# tests/ui and bench pin npm packages that run on it).
# Runs apt-get as root (or through sudo when available).
# DEPS_DRY_RUN=1 prints the apt-get commands instead of running them.
set -eu
pkgs="pkg-config libhiredis-dev libuv1-dev libcjson-dev libcmocka-dev node-llhttp clang libclang-rt-14-dev
      redis-server redis-tools curl libcurl4-openssl-dev libssl-dev libxml2-dev"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
        || missing="$missing $p"
done
browser=""
if [ "${1:-}" = test ]; then
    # awscli, python3-boto3 and Celery on kombu's sqs:// (python3-pycurl) drive the
    # SQS endpoint in tests/sqs_clients_test.sh, as their users run them.
    # openssl makes tests/tls_test.sh's throwaway CA and certificates.
    for p in valgrind python3-jsonschema jq openssl awscli python3-boto3 python3-celery python3-kombu \
             python3-pycurl; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing="$missing $p"
    done
fi
if [ "${1:-}" = test ] || [ "${1:-}" = bench ]; then
    for p in ruby-sidekiq wrk; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing="$missing $p"
    done
    # node from anywhere will do (Debian's, NodeSource's, nvm's): only a
    # missing one is installed, from Debian.
    command -v node >/dev/null || missing="$missing nodejs"
    command -v npm >/dev/null || missing="$missing npm"
fi
if [ "${1:-}" = test ]; then
    # chromium with its recommends (fonts, mesa), as a desktop install has it.
    [ -x /usr/bin/chromium ] || browser=chromium
fi
[ -z "$missing$browser" ] && exit 0
echo "deps: installing$missing${browser:+ $browser}"
run=""
[ "$(id -u)" -eq 0 ] || run="sudo"
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt (unattended-upgrades on a fresh box) instead of failing.
apt="$run apt-get -o DPkg::Lock::Timeout=300"
[ "${DEPS_DRY_RUN:-0}" = 1 ] && apt="echo $apt"
$apt update -qq
[ -z "$missing" ] || $apt install -y -qq --no-install-recommends $missing
[ -z "$browser" ] || $apt install -y -qq $browser
