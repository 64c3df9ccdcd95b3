#!/usr/bin/env bash
# bench/fuzz.sh - the full `sbx fuzz` run (1,000 tests, ten domains) against a local sbxd, over
# REST and over MCP, one after the other in one run: wall time, tests per second, verdicts.
# Target (issue 7): each finishes in under 5 minutes on a 2-core machine and passes every test
# (`unsupported` is not a failure: base has no matplotlib; TEMPLATE=python has).
# There is no peer to compare with here: E2B's and Daytona's fuzz suites are not published.
# Usage: sudo bash bench/fuzz.sh   (after ninja -C build)
# Environment: COUNT (default 1000), JOBS (default 4), SEED (default 1000), TEMPLATE, BUILD.
# Writes bench/results/fuzz.json, bench/results/fuzz.md, and the runs' results database
# bench/results/fuzz.db (the HTML report: sbx fuzz report bench/results/fuzz.db -o r.html).
set -euo pipefail

bench_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname -- "$bench_dir")
BUILD=${BUILD:-$repo/build}
COUNT=${COUNT:-1000}
JOBS=${JOBS:-4}
SEED=${SEED:-1000}
results=$bench_dir/results
mkdir -p "$results"

die() { echo "fuzz.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root"
for b in sbxd sbx; do [[ -x $BUILD/$b ]] || die "$BUILD/$b missing: ninja -C $BUILD"; done

work=$(mktemp -d /tmp/sbx-fuzz-bench.XXXXXX)
# shellcheck source=bench/lib.sh
. "$bench_dir/lib.sh"
cleanup() {
  stop_all_sbxd
  rm -rf -- "$work"
}
trap cleanup EXIT

url=$(start_sbxd home --pool 4)
db=$results/fuzz.db
rm -f "$db" "$db-wal" "$db-shm"
declare -A secs
for iface in rest mcp; do
  echo "== sbx fuzz run: $COUNT tests over $iface, $JOBS jobs, seed $SEED ==" >&2
  t0=$(date +%s%N)
  "$BUILD/sbx" fuzz run --target "$url" --key "$key" --interface "$iface" --count "$COUNT" --jobs "$JOBS" \
    --seed "$SEED" ${TEMPLATE:+--template "$TEMPLATE"} --db "$db" >&2 || true  # failures are in the results
  secs[$iface]=$((($(date +%s%N) - t0) / 1000000))  # ms
done

python3 - "$results" "$db" "${secs[rest]}" "${secs[mcp]}" "$COUNT" "$JOBS" "$(nproc)" <<'PY'
import json, sys, sqlite3, datetime
res, db, rest_s, mcp_s, count, jobs, cpus = sys.argv[1:]
c = sqlite3.connect(db)
out = {"date": datetime.datetime.utcnow().isoformat() + "Z", "count": int(count), "jobs": int(jobs), "cpus": int(cpus)}
rows = []
for run, iface, secs in ((1, "rest", int(rest_s) / 1000), (2, "mcp", int(mcp_s) / 1000)):
    v = dict(c.execute("SELECT verdict, count(*) FROM tests WHERE run = ? GROUP BY verdict", (run,)).fetchall())
    failed = sum(n for k, n in v.items() if k not in ("pass", "unsupported"))
    out[iface] = {"seconds": secs, "verdicts": v}
    ok = "PASS" if secs < 300 and failed == 0 else "MISS"
    rows.append(f"| {iface} | {secs:.0f} s | {int(count) / secs:.1f} | {v.get('pass', 0)} | {failed} | "
                f"{v.get('unsupported', 0)} | < 300 s, 0 failed: {ok} |")
json.dump(out, open(res + "/fuzz.json", "w"), indent=2)
md = [f"`sbx fuzz run --count {count} --jobs {jobs}` against a local sbxd, {cpus} CPUs",
      "", "| interface | wall time | tests/s | passed | failed | unsupported | target |", "|---|---|---|---|---|---|---|",
      *rows]
open(res + "/fuzz.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
