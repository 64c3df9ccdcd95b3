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
sbxd_pid=
cleanup() {
  # loadgen deletes the sandboxes it makes; sbxd is ours, stopped by its pid
  [[ -n $sbxd_pid ]] && kill "$sbxd_pid" 2>/dev/null && wait "$sbxd_pid" 2>/dev/null || true
  rm -rf -- "$work"
}
trap cleanup EXIT

key=bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
SBX_API_KEY=$key "$BUILD/sbxd" --listen 127.0.0.1:0 --home "$work/home" 2>"$work/sbxd.log" &
sbxd_pid=$!
for _ in $(seq 100); do grep -q 'event=listening' "$work/sbxd.log" 2>/dev/null && break; sleep 0.05; done
addr=$(sed -n 's/.*event=listening address=\([^ ]*\).*/\1/p' "$work/sbxd.log")
[[ -n $addr ]] || { cat "$work/sbxd.log" >&2; die "sbxd did not start"; }
lg() { "$BUILD/sbx-loadgen" "http://$addr" "$key" "$@"; }

bwrap_cmd=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/lib64 /lib64
  --symlink usr/lib /lib --symlink usr/bin /bin --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp)

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
