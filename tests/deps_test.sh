#!/usr/bin/env bash
# deps_test.sh - `make test` must set itself up on a bare Debian bookworm,
# whose nodejs is 18 (18.20.4 today). Checks that:
#   - scripts/deps.sh test asks apt for Debian's nodejs and npm when there is
#     no node on PATH, and leaves an existing node alone (DEPS_DRY_RUN=1: it
#     prints the apt-get commands instead of running them);
#   - it asks for python3-jsonschema (tests/openapi_check.sh) and jq
#     (examples/worker.sh) when dpkg does not have them;
#   - every npm package pinned for the tests and the bench (the lockfiles
#     tests/ui/package-lock.json, playwright-core, tests/sqs/package-lock.json
#     (@aws-sdk/client-sqs, sqs-consumer) and bench/package-lock.json,
#     BullMQ) declares an engines.node range that Node 18.20.4 satisfies.
# Needs node (scripts/deps.sh test installs it). Runs no server. Output is
# cmocka's plain-text format, which scripts/test.sh counts.
#
#   bash tests/deps_test.sh [TEST...]
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/.." && pwd)
BOOKWORM_NODE=18.20.4
source "$ROOT/scripts/lib.sh" # suite_run

TMP=$(mktemp -d "${TMPDIR:-/tmp}/retryd-deps-test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

fail() {
    printf '    FAIL: %s\n' "$*"
    exit 1
}

# bin_dir NAME TOOL...: a directory holding links to TOOL... only (a PATH
# without node unless a test adds one).
bin_dir() {
    local d="$TMP/$1" t
    shift
    mkdir -p "$d"
    for t in "$@"; do ln -sf "$(command -v "$t")" "$d/$t" || return 1; done
    printf '%s' "$d"
}

test_deps_installs_node_when_missing() {
    local bin out
    bin=$(bin_dir nonode dpkg-query grep id) || fail "cannot link the tools"
    out=$(PATH=$bin DEPS_DRY_RUN=1 /bin/sh "$ROOT/scripts/deps.sh" test 2>&1) \
        || fail "deps.sh test exited non-zero: $out"
    printf '%s\n' "$out" | sed 's/^/    /'
    [[ $out =~ (^|$'\n')deps:\ installing.*\ nodejs( |$|$'\n') ]] || fail "nodejs is not installed"
    [[ $out =~ (^|$'\n')deps:\ installing.*\ npm( |$|$'\n') ]] || fail "npm is not installed"
    [[ $out =~ apt-get[^$'\n']*\ install\ [^$'\n']*\ nodejs\ npm ]] || fail "no apt-get install of nodejs npm"
}

test_deps_keeps_an_existing_node() {
    local bin out
    bin=$(bin_dir withnode dpkg-query grep id) || fail "cannot link the tools"
    printf '#!/bin/sh\necho v99.0.0\n' >"$bin/node"
    printf '#!/bin/sh\necho 99.0.0\n' >"$bin/npm"
    chmod +x "$bin/node" "$bin/npm"
    out=$(PATH=$bin DEPS_DRY_RUN=1 /bin/sh "$ROOT/scripts/deps.sh" test 2>&1) \
        || fail "deps.sh test exited non-zero: $out"
    [[ $out =~ nodejs|\ npm ]] && fail "installs node although one is on PATH: $out"
    return 0
}

# The alert webhooks link libcurl (docs/dead-letters.md): the build set asks
# apt for its headers when they are missing (a dpkg-query that reports
# libcurl4-openssl-dev absent and asks the real one about the rest).
test_deps_installs_libcurl_when_missing() {
    local bin out real
    bin=$(bin_dir nocurl grep id) || fail "cannot link the tools"
    real=$(command -v dpkg-query) || fail "no dpkg-query"
    printf '#!/bin/sh\nfor a in "$@"; do [ "$a" = libcurl4-openssl-dev ] && exit 1; done\nexec %s "$@"\n' \
        "$real" >"$bin/dpkg-query"
    chmod +x "$bin/dpkg-query"
    out=$(PATH=$bin DEPS_DRY_RUN=1 /bin/sh "$ROOT/scripts/deps.sh" 2>&1) \
        || fail "deps.sh exited non-zero: $out"
    [[ $out =~ apt-get[^$'\n']*\ install\ [^$'\n']*libcurl4-openssl-dev ]] \
        || fail "no apt-get install of libcurl4-openssl-dev: $out"
}

test_deps_installs_jsonschema_and_jq_when_missing() {
    local bin out
    bin=$(bin_dir nojsonschema grep id) || fail "cannot link the tools"
    # a dpkg that has everything but python3-jsonschema and jq
    printf '#!/bin/sh\nfor a; do p=$a; done\ncase $p in python3-jsonschema|jq) exit 1 ;; esac\nprintf "install ok installed"\n' \
        >"$bin/dpkg-query"
    printf '#!/bin/sh\necho v18.20.4\n' >"$bin/node"
    printf '#!/bin/sh\necho 9.2.0\n' >"$bin/npm"
    chmod +x "$bin/dpkg-query" "$bin/node" "$bin/npm"
    out=$(PATH=$bin DEPS_DRY_RUN=1 /bin/sh "$ROOT/scripts/deps.sh" test 2>&1) \
        || fail "deps.sh test exited non-zero: $out"
    printf '%s\n' "$out" | sed 's/^/    /'
    [[ $out =~ apt-get[^$'\n']*\ install\ [^$'\n']*python3-jsonschema ]] || fail "python3-jsonschema is not installed"
    [[ $out =~ apt-get[^$'\n']*\ install\ [^$'\n']*\ jq( |$|$'\n') ]] || fail "jq is not installed"
}

# The bench's peers (docs/benchmarks.md, sections 3b, 3e and 3k): Sidekiq
# (Debian's ruby-sidekiq) and wrk, asked for by `deps.sh bench` (make bench)
# and by `deps.sh test` (the bench smoke runs the bench), not by the build set.
test_deps_installs_bench_peers_when_missing() {
    local bin out mode
    bin=$(bin_dir nopeers grep id) || fail "cannot link the tools"
    printf '#!/bin/sh\nfor a; do p=$a; done\ncase $p in ruby-sidekiq|wrk) exit 1 ;; esac\nprintf "install ok installed"\n' \
        >"$bin/dpkg-query"
    printf '#!/bin/sh\necho v18.20.4\n' >"$bin/node"
    printf '#!/bin/sh\necho 9.2.0\n' >"$bin/npm"
    chmod +x "$bin/dpkg-query" "$bin/node" "$bin/npm"
    for mode in bench test; do
        out=$(PATH=$bin DEPS_DRY_RUN=1 /bin/sh "$ROOT/scripts/deps.sh" "$mode" 2>&1) \
            || fail "deps.sh $mode exited non-zero: $out"
        printf '%s\n' "$out" | sed "s/^/    $mode: /"
        [[ $out =~ apt-get[^$'\n']*\ install\ [^$'\n']*\ ruby-sidekiq( |$|$'\n') ]] ||
            fail "deps.sh $mode does not install ruby-sidekiq"
        [[ $out =~ apt-get[^$'\n']*\ install\ [^$'\n']*\ wrk( |$|$'\n') ]] || fail "deps.sh $mode does not install wrk"
    done
    out=$(PATH=$bin DEPS_DRY_RUN=1 /bin/sh "$ROOT/scripts/deps.sh" 2>&1) || fail "deps.sh exited non-zero: $out"
    [[ $out =~ ruby-sidekiq|wrk ]] && fail "the build set installs the bench's peers: $out"
    return 0
}

test_npm_pins_run_on_bookworm_node() {
    command -v node >/dev/null || fail "node is not installed (scripts/deps.sh test installs it)"
    node - "$BOOKWORM_NODE" "$ROOT/tests/ui/package-lock.json" "$ROOT/bench/package-lock.json" \
        "$ROOT/tests/sqs/package-lock.json" <<'EOF' \
        || fail "a pinned package does not accept Node $BOOKWORM_NODE"
// Just enough of semver's ranges for engines fields: ||, comparator sets,
// >= > <= < = ^ ~, x-ranges, "a - b". Anything else counts as a failure.
const fs = require('fs');
const [want, ...locks] = process.argv.slice(2);
const parse = (v) => v.replace(/^v/, '').split('.').map((p) => (/^[x*]?$/i.test(p) ? null : Number(p)));
const cmp = (a, b) => { for (let i = 0; i < 3; i++) { const d = (a[i] || 0) - (b[i] || 0); if (d) return d; } return 0; };
const V = parse(want);
function comparator(c) {
  const m = /^(>=|<=|>|<|=|\^|~)?v?([0-9xX*]+(?:\.[0-9xX*]+){0,2})$/.exec(c);
  if (!m) throw new Error(`cannot read "${c}"`);
  const op = m[1] || '', p = parse(m[2]);
  while (p.length < 3) p.push(null);
  const fixed = p.findIndex((x) => x === null), n = fixed < 0 ? 3 : fixed;
  const lo = p.map((x) => x || 0);
  const bump = (i) => lo.map((x, j) => (j < i ? x : j === i ? x + 1 : 0));
  if (op === '>=') return cmp(V, lo) >= 0;
  if (op === '>') return n === 3 ? cmp(V, lo) > 0 : cmp(V, bump(n - 1)) >= 0;
  if (op === '<') return cmp(V, lo) < 0;
  if (op === '<=') return n === 3 ? cmp(V, lo) <= 0 : cmp(V, bump(n - 1)) < 0;
  if (n === 0) return true;                                   // *, x
  let hi;
  if (op === '^') { const i = lo.findIndex((x) => x !== 0); hi = bump(i < 0 || i >= n ? n - 1 : i); }
  else if (op === '~') hi = bump(n >= 2 ? 1 : 0);
  else hi = bump(n - 1);                                      // = or bare
  if (op === '' && n === 3) return cmp(V, lo) === 0;
  return cmp(V, lo) >= 0 && cmp(V, hi) < 0;
}
function satisfies(range) {
  return range.split('||').some((set) => {
    set = set.trim().replace(/(>=|<=|>|<|=|\^|~)\s+/g, '$1');
    const h = /^(\S+)\s+-\s+(\S+)$/.exec(set);
    if (h) return comparator('>=' + h[1]) && comparator('<=' + h[2]);
    return set === '' || set.split(/\s+/).every(comparator);
  });
}
let bad = 0, seen = 0;
for (const lock of locks) {
  const pkgs = JSON.parse(fs.readFileSync(lock, 'utf8')).packages;
  for (const [name, p] of Object.entries(pkgs)) {
    const range = p.engines && p.engines.node;
    if (!range || p.optional) continue;
    seen++;
    let ok;
    try { ok = satisfies(range); } catch (e) { ok = false; console.log(`    ${lock}: ${name}: ${e.message}`); }
    if (!ok) { bad++; console.log(`    ${lock.replace(/.*\/(\w+\/)/, '$1')}: ${name || '(root)'} ${p.version} wants node ${range}`); }
  }
}
console.log(`    ${seen} engines ranges checked against node ${want}, ${bad} refuse it`);
process.exit(bad ? 1 : 0);
EOF
}

all_tests=(
    test_deps_installs_node_when_missing
    test_deps_keeps_an_existing_node
    test_deps_installs_libcurl_when_missing
    test_deps_installs_jsonschema_and_jq_when_missing
    test_deps_installs_bench_peers_when_missing
    test_npm_pins_run_on_bookworm_node
)
if (($#)); then all_tests=("$@"); fi

suite_run "${all_tests[@]}"
