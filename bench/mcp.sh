#!/usr/bin/env bash
# bench/mcp.sh - MCP's command_run of `echo hi` over Streamable HTTP (/mcp on sbxd), side by side
# in one run with what it is built on and the one-shot peers:
#   - the same command through the REST API (POST .../commands): MCP's own overhead
#   - `sbx run -- sh -c 'echo hi'` and `bwrap ... sh -c 'echo hi'` (hyperfine): a sandbox per call
# Target (issue 4): command_run p50 under 5 ms on loopback.
# Usage: sudo bash bench/mcp.sh   (after ninja -C build)   Environment: RUNS (default 300), BUILD.
# Writes bench/results/mcp.json and bench/results/mcp.md.
set -euo pipefail

bench_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname -- "$bench_dir")
BUILD=${BUILD:-$repo/build}
RUNS=${RUNS:-300}
results=$bench_dir/results
mkdir -p "$results"

die() { echo "mcp.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root"
for b in sbxd sbx sbx-loadgen; do [[ -x $BUILD/$b ]] || die "$BUILD/$b missing: ninja -C $BUILD"; done
command -v hyperfine >/dev/null && command -v bwrap >/dev/null || die "needs hyperfine and bwrap (scripts/bootstrap.sh)"

work=$(mktemp -d /tmp/sbx-mcp-bench.XXXXXX)
# shellcheck source=bench/lib.sh
. "$bench_dir/lib.sh"
cleanup() {
  stop_all_sbxd
  rm -rf -- "$work"
}
trap cleanup EXIT

url=$(start_sbxd home)
lg() { "$BUILD/sbx-loadgen" "$url" "$key" "$@"; }

echo "== command_run echo hi: MCP, REST, sbx run, bwrap ==" >&2
mcp=$(lg mcp "$RUNS")
rest=$(lg echo "$RUNS")
SBX_HOME=$work/run-home hyperfine -N --warmup 10 --runs "$((RUNS / 3))" --export-json "$work/hf.json" \
  -n "sbx run" "$BUILD/sbx run -- sh -c 'echo hi'" -n bwrap "${bwrap_cmd[*]} sh -c 'echo hi'" >&2

python3 - "$results" "$mcp" "$rest" "$work/hf.json" <<'PY'
import json, sys, datetime
res, mcp, rest, hf = sys.argv[1:]
mcp, rest = json.loads(mcp), json.loads(rest)
h = {r["command"]: r for r in json.load(open(hf))["results"]}
p50 = lambda r: sorted(r["times"])[len(r["times"]) // 2] * 1000
run, bw = p50(h["sbx run"]), p50(h["bwrap"])
out = {"date": datetime.datetime.utcnow().isoformat() + "Z", "mcp": mcp, "rest": rest,
       "sbx_run_p50_ms": run, "bwrap_p50_ms": bw}
json.dump(out, open(res + "/mcp.json", "w"), indent=2)
m = mcp["p50_ms"]
md = ["| `echo hi`, p50 | MCP command_run | REST commands | sbx run | bwrap | MCP vs REST / sbx run / bwrap | target |",
      "|---|---|---|---|---|---|---|",
      f'| latency | {m:.2f} ms | {rest["p50_ms"]:.2f} ms | {run:.1f} ms | {bw:.1f} ms | '
      f'{m / rest["p50_ms"]:.2f}x / {m / run:.2f}x / {m / bw:.2f}x | < 5 ms |']
open(res + "/mcp.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
