#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): build, unit tests (cmocka),
# integration tests (pytest driving the real binaries), the cgroup-v2-only
# checks in a qemu guest, then unit and integration tests again against an
# ASan+UBSan build.  Needs root.  Ends with one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C.UTF-8
start=$(date +%s)
failed_steps=()
total_pass=0 total_fail=0 total_skip=0

step() { echo; echo "=== $* ==="; }

count_meson() { # parse "Ok: N  ... Fail: N" from meson test output
  local log=$1
  local ok fail skip
  ok=$(grep -E '^Ok:' "$log" | awk '{print $2}' | tail -1)
  fail=$(grep -E '^Fail:' "$log" | awk '{print $2}' | tail -1)
  skip=$(grep -E '^Skipped:' "$log" | awk '{print $2}' | tail -1)
  total_pass=$((total_pass + ${ok:-0})); total_fail=$((total_fail + ${fail:-0})); total_skip=$((total_skip + ${skip:-0}))
}

count_pytest() { # parse "N passed, M failed, K skipped" from pytest's last line
  local log=$1 line
  line=$(grep -E '(passed|failed|error)' "$log" | tail -1)
  local p f e s x
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | awk '{print $1}')
  f=$(grep -oE '[0-9]+ failed' <<<"$line" | awk '{print $1}')
  e=$(grep -oE '[0-9]+ error' <<<"$line" | awk '{print $1}')
  s=$(grep -oE '[0-9]+ skipped' <<<"$line" | awk '{print $1}')
  x=$(grep -oE '[0-9]+ xfailed' <<<"$line" | awk '{print $1}')
  total_pass=$((total_pass + ${p:-0} + ${x:-0})); total_fail=$((total_fail + ${f:-0} + ${e:-0}))
  total_skip=$((total_skip + ${s:-0}))
}

run_suite() { # name builddir
  local name=$1 dir=$2 log
  step "$name: unit tests"
  log=$(mktemp)
  if ! meson test -C "$dir" --suite unit --print-errorlogs 2>&1 | tee "$log"; then failed_steps+=("$name unit"); fi
  count_meson "$log"; rm -f "$log"
  step "$name: integration tests"
  log=$(mktemp)
  # SBX_SANITIZED: memory-growth checks do not apply (ASan keeps freed memory in quarantine)
  if ! SBX_SANITIZED=$([[ $name == release ]] && echo 0 || echo 1) SBX_BIN="$PWD/$dir/sbx" SBX_TEST_HELPER="$PWD/$dir/tests/sbx-test-helper" \
       /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration 2>&1 | tee "$log"; then
    failed_steps+=("$name integration")
  fi
  count_pytest "$log"; rm -f "$log"
}

if [[ $(id -u) -ne 0 ]]; then echo "scripts/test.sh: needs root (sbx run creates namespaces and cgroups)"; exit 1; fi

step "bootstrap"
scripts/bootstrap.sh || { echo "bootstrap failed"; exit 1; }

step "MCP test clients (npm: the official SDK and conformance suite, into a cache)"
tests/mcp/install.sh >/dev/null || { echo "installing the MCP test clients failed"; failed_steps+=("mcp clients"); }

step "python template root file system (mmdebstrap from the Debian mirror, into a cache)"
# the download happens here, not in a test: tests talk to this machine only
SBX_TEMPLATE_CACHE=/var/cache/sbx-tests templates/python/rootfs.sh >/dev/null ||
  { echo "making the python template's root file system failed"; failed_steps+=("python rootfs"); }

step "build (gcc -Werror)"
scripts/build.sh build || { echo "0 passed, 1 failed"; exit 1; }
run_suite "release" build

step "cgroup v2 only: sbx run in a qemu guest (tests/cgroup-v2)"
log=$(mktemp)
tests/cgroup-v2/run.sh build 2>&1 | tee "$log"
v2=$(grep -E '^V2 SUMMARY' "$log" | tail -1)
if [[ $v2 =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
  total_pass=$((total_pass + BASH_REMATCH[1])); total_fail=$((total_fail + BASH_REMATCH[2]))
  ((BASH_REMATCH[2] == 0)) || failed_steps+=("cgroup-v2")
else
  failed_steps+=("cgroup-v2"); total_fail=$((total_fail + 1))
fi
rm -f "$log"

step "build (ASan + UBSan)"
if scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite "asan+ubsan" build-asan
else
  failed_steps+=("asan build"); total_fail=$((total_fail + 1))
fi

echo
echo "=== summary ($(( $(date +%s) - start ))s) ==="
if ((${#failed_steps[@]})); then echo "failed steps: ${failed_steps[*]}"; fi
echo "${total_pass} passed, ${total_fail} failed, ${total_skip} skipped"
((${#failed_steps[@]} == 0 && total_fail == 0))
