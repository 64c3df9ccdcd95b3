#!/usr/bin/env bash
# bench/api.sh - sbxd's API against the one-shot floor, side by side in one run:
#   1. create -> exec `true` -> delete over loopback HTTP (bench/loadgen.c, keep-alive)
#      vs `sbx run -- true` and `bwrap ... true` (hyperfine): what a sandbox costs; cold
#      (--pool 0), from a warm pool during a burst, and sporadic (one every 100 ms, pool 4)
#   2. exec `true` in an existing sandbox vs the same two
#   3. upload + download of a 1 GiB file vs piping it through `sbx run` and bwrap
# Usage: bash bench/api.sh   (as root, after ninja -C build; see bench/README.md)
# Environment: RUNS (default 200), SIZE_MB (default 1024), BUILD (default <repo>/build)
# Writes bench/results/api.json and bench/results/api.md.
set -euo pipefail

bench_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname -- "$bench_dir")
BUILD=${BUILD:-$repo/build}
RUNS=${RUNS:-200}
SIZE_MB=${SIZE_MB:-1024}
results=$bench_dir/results
mkdir -p "$results"

die() { echo "api.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root"
for b in sbxd sbx sbx-loadgen; do [[ -x $BUILD/$b ]] || die "$BUILD/$b missing: ninja -C $BUILD"; done
command -v hyperfine >/dev/null && command -v bwrap >/dev/null || die "needs hyperfine and bwrap (scripts/bootstrap.sh)"

work=$(mktemp -d /tmp/sbx-api-bench.XXXXXX)
# shellcheck source=bench/lib.sh
. "$bench_dir/lib.sh"
cleanup() {
  stop_all_sbxd
  rm -rf -- "$work"
}
trap cleanup EXIT

# cold: no pool, so that every create is a whole sandbox set-up
url=$(start_sbxd home --pool 0)
sbxd_pid=$(cat "$work/home.pid")  # for its RSS below
lg() { "$BUILD/sbx-loadgen" "$url" "$key" "$@"; }
# warm: a pool that holds the whole burst (refills wait for a lull); it is
# started after the cold measurements, whose cores its filling would take
pool_n=$((RUNS * 2 + 10))


echo "== 1+2. latency: sbxd round trip and exec, sbx run, bwrap ==" >&2
rt=$(lg roundtrip "$RUNS")
ex=$(lg exec "$((RUNS * 3))")
purl=$(start_sbxd pooled --pool "$pool_n")
pool_ready "$purl" "$pool_n"
rtp=$("$BUILD/sbx-loadgen" "$purl" "$key" roundtrip "$RUNS")
stop_sbxd pooled
purl=$(start_sbxd sporadic)  # the default pool (4)
pool_ready "$purl" 4
rts=$(LG_GAP_MS=100 "$BUILD/sbx-loadgen" "$purl" "$key" roundtrip "$((RUNS / 4))")
stop_sbxd sporadic
SBX_HOME=$work/run-home hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$work/hf.json" \
  -n "sbx run" "$BUILD/sbx run -- /bin/true" -n bwrap "${bwrap_cmd[*]} /bin/true" >&2

echo "== 3. transfer of ${SIZE_MB} MiB ==" >&2
head -c "$((SIZE_MB << 20))" /dev/urandom >"$work/blob"
tr=$(lg upload "$work/blob")
mbps() { # mbps SECONDS -> MB/s of the blob
  python3 -c "import sys; print(round($((SIZE_MB << 20)) / 1e6 / float(sys.argv[1]), 1))" "$1"
}
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); python3 -c "print($e - $s)"; }
bw_up=$(mbps "$(t sh -c "${bwrap_cmd[*]} sh -c 'cat > /tmp/x' < '$work/blob'")")
bw_down=$(mbps "$(t sh -c "${bwrap_cmd[*]} --ro-bind '$work/blob' /blob cat /blob")")
sr_up=$(mbps "$(t sh -c "SBX_HOME=$work/run-home $BUILD/sbx run --disk 2G --memory 4G -- sh -c 'cat > /tmp/x' < '$work/blob'")")

python3 - "$results" "$rt" "$ex" "$tr" "$work/hf.json" "$bw_up" "$bw_down" "$sr_up" "$SIZE_MB" "$rtp" "$rts" <<'PY'
import json, sys, datetime, subprocess
res, rt, ex, tr, hf, bw_up, bw_down, sr_up, size, rtp, rts = sys.argv[1:]
rt, ex, tr, rtp, rts = json.loads(rt), json.loads(ex), json.loads(tr), json.loads(rtp), json.loads(rts)
h = {r["command"]: r for r in json.load(open(hf))["results"]}
p50 = lambda r: sorted(r["times"])[len(r["times"]) // 2] * 1000
run, bw = p50(h["sbx run"]), p50(h["bwrap"])
out = {"date": datetime.datetime.utcnow().isoformat() + "Z", "roundtrip": rt, "roundtrip_pool_burst": rtp,
       "roundtrip_pool_sporadic": rts, "exec": ex, "transfer": tr,
       "sbx_run_p50_ms": run, "bwrap_p50_ms": bw, "bwrap_upload_MBps": float(bw_up),
       "bwrap_download_MBps": float(bw_down), "sbx_run_upload_MBps": float(sr_up), "size_MiB": int(size)}
json.dump(out, open(res + "/api.json", "w"), indent=2)
rows = [
 ("create + exec true + delete (HTTP), cold", f'{rt["p50_ms"]:.1f} ms', f"{run:.1f} ms", f"{bw:.1f} ms",
  f'{rt["p50_ms"] / run:.2f}x / {rt["p50_ms"] / bw:.2f}x', "< 10 ms"),
 ("the same, warm pool, back to back", f'{rtp["p50_ms"]:.1f} ms', f"{run:.1f} ms", f"{bw:.1f} ms",
  f'{rtp["p50_ms"] / run:.2f}x / {rtp["p50_ms"] / bw:.2f}x', "< 10 ms"),
 ("the same, warm pool, one every 100 ms", f'{rts["p50_ms"]:.1f} ms', f"{run:.1f} ms", f"{bw:.1f} ms",
  f'{rts["p50_ms"] / run:.2f}x / {rts["p50_ms"] / bw:.2f}x', "< 10 ms"),
 ("exec true in a live sandbox (HTTP)", f'{ex["p50_ms"]:.2f} ms', f"{run:.1f} ms", f"{bw:.1f} ms",
  f'{ex["p50_ms"] / run:.2f}x / {ex["p50_ms"] / bw:.2f}x', "< 2 ms"),
 (f"upload {size} MiB", f'{tr["upload_MBps"]:.0f} MB/s', f"{float(sr_up):.0f} MB/s", f"{float(bw_up):.0f} MB/s",
  f'{tr["upload_MBps"] / float(sr_up):.2f}x / {tr["upload_MBps"] / float(bw_up):.2f}x', ">= 500 MB/s"),
 (f"download {size} MiB", f'{tr["download_MBps"]:.0f} MB/s', "-", f"{float(bw_down):.0f} MB/s",
  f'- / {tr["download_MBps"] / float(bw_down):.2f}x', ">= 500 MB/s"),
]
md = ["| measurement (p50) | sbxd | sbx run | bwrap | sbxd vs sbx run / bwrap | target |", "|---|---|---|---|---|---|"]
md += ["| " + " | ".join(r) + " |" for r in rows]
open(res + "/api.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
echo "== 4. sbxd RSS with 100 live sandboxes ==" >&2
ids=()
for _ in $(seq 100); do
  ids+=("$(curl -sf -H "Authorization: Bearer $key" -H 'Content-Type: application/json' -d '{}' "$url/v1/sandboxes" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
done
rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$sbxd_pid/status")
for id in "${ids[@]}"; do curl -sf -X DELETE -H "Authorization: Bearer $key" "$url/v1/sandboxes/$id" >/dev/null; done
line="| sbxd RSS, 100 live sandboxes | $((rss_kib / 1024)) MiB | - | - | - | < 64 MiB |"
echo "$line" >>"$results/api.md"
python3 -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['sbxd_rss_100_MiB']=int(sys.argv[2])/1024; json.dump(d, open(p,'w'), indent=2)" "$results/api.json" "$rss_kib"
echo "$line"
