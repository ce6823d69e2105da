#!/bin/sh
# deps.sh - installs the Debian packages retryd needs, only when one is missing.
# Runs apt-get as root (or through sudo when available).
set -eu
pkgs="pkg-config libhiredis-dev libuv1-dev libcjson-dev libcmocka-dev node-llhttp clang libclang-rt-14-dev
      redis-server redis-tools curl"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
        || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
run=""
[ "$(id -u)" -eq 0 ] || run="sudo"
export DEBIAN_FRONTEND=noninteractive
$run apt-get update -qq
$run apt-get install -y -qq --no-install-recommends $missing
