#!/usr/bin/env bash
# bench/egress.sh - the egress proxy against a direct loopback connection, side by side in one
# run: the same curl downloads the same file from the same local server (busybox httpd on
# 127.0.0.5), once on the host straight to it, once in an allowlist sandbox through sbxd's
# proxy by plain HTTP proxying, and once through a CONNECT tunnel (curl --proxytunnel: what
# https takes, here with plain TCP inside).  Reports throughput (the median of TPUT_RUNS
# runs of each, interleaved, with their range) and the time of a new connection + small
# request, and their ratios.
# Targets (issue 6): proxied throughput >= 80% of direct; added latency per new connection
# under 1 ms p50.
# Usage: sudo bash bench/egress.sh   (after ninja -C build)   Environment: RUNS (requests for
# the latency, default 200), MIB (download size, default 512), TPUT_RUNS (downloads of each
# kind, default 7), BUILD.  Writes bench/results/egress.json and egress.md.
set -euo pipefail

bench_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname -- "$bench_dir")
BUILD=${BUILD:-$repo/build}
RUNS=${RUNS:-200}
MIB=${MIB:-512}
TPUT_RUNS=${TPUT_RUNS:-7}
results=$bench_dir/results
mkdir -p "$results"

die() { echo "egress.sh: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root"
for b in sbxd sbx; do [[ -x $BUILD/$b ]] || die "$BUILD/$b missing: ninja -C $BUILD"; done
command -v busybox >/dev/null && command -v curl >/dev/null || die "needs busybox and curl (scripts/bootstrap.sh)"

work=$(mktemp -d /tmp/sbx-egress-bench.XXXXXX)
# shellcheck source=bench/lib.sh
. "$bench_dir/lib.sh"
httpd_pid=
cleanup() {
  stop_all_sbxd
  [[ -n $httpd_pid ]] && kill "$httpd_pid" 2>/dev/null
  rm -rf -- "$work"
}
trap cleanup EXIT

# the server: a file of MIB MiB and a 1-byte one
mkdir -p "$work/www"
head -c "$((MIB << 20))" /dev/urandom >"$work/www/big"
printf x >"$work/www/small"
port=$((20000 + RANDOM % 20000))
busybox httpd -f -p "127.0.0.5:$port" -h "$work/www" &
httpd_pid=$!
sleep 0.3

url=$(SBX_TEST_EGRESS_HOSTS="bench.test=127.0.0.5" start_sbxd home --pool 0)
export SBX_URL=$url SBX_API_KEY=$key
sid=$("$BUILD/sbx" create --cpus 2 --memory 1G --allow bench.test)

# curl -w fields: speed in bytes/s, time_total in s
direct_speed() { curl -s -o /dev/null -w '%{speed_download}\n' "http://127.0.0.5:$port/big"; }
proxied_speed() { "$BUILD/sbx" exec "$sid" -- curl -s -o /dev/null -w '%{speed_download}\n' "http://bench.test:$port/big"; }
tunnel_speed() {
  "$BUILD/sbx" exec "$sid" -- curl -s -p -x http://127.0.0.1:3128 -o /dev/null -w '%{speed_download}\n' \
    "http://bench.test:$port/big"
}
# a new connection and a 1-byte answer, RUNS times in one curl each (--no-keepalive and Connection: close)
small_args=(-s --no-keepalive -H 'Connection: close' -w '%{time_total}\n')
urls() { for _ in $(seq "$RUNS"); do printf -- '-o /dev/null %s ' "$1"; done; }

echo "== throughput: $MIB MiB, $TPUT_RUNS runs of each, interleaved ==" >&2
: >"$work/direct.s"
: >"$work/proxied.s"
: >"$work/tunnel.s"
for _ in $(seq "$TPUT_RUNS"); do
  direct_speed >>"$work/direct.s"
  proxied_speed >>"$work/proxied.s"
  tunnel_speed >>"$work/tunnel.s"
done
echo "== new connection + 1-byte request: $RUNS each ==" >&2
# shellcheck disable=SC2046
curl "${small_args[@]}" $(urls "http://127.0.0.5:$port/small") >"$work/direct.t"
# shellcheck disable=SC2046
"$BUILD/sbx" exec "$sid" -- curl "${small_args[@]}" $(urls "http://bench.test:$port/small") >"$work/proxied.t"
# shellcheck disable=SC2046
"$BUILD/sbx" exec "$sid" -- curl -p -x http://127.0.0.1:3128 "${small_args[@]}" \
  $(urls "http://bench.test:$port/small") >"$work/tunnel.t"
"$BUILD/sbx" kill "$sid" >/dev/null

python3 - "$work" "$MIB" "$RUNS" "$TPUT_RUNS" "$results" <<'PY'
import json, statistics, sys
work, mib, runs, tput_runs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
speeds = {k: [float(x) / (1 << 20) for x in open(f"{work}/{k}.s").read().split()] for k in ("direct", "proxied", "tunnel")}
times = {k: sorted(float(x) * 1000 for x in open(f"{work}/{k}.t").read().split()) for k in ("direct", "proxied", "tunnel")}
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
med = {k: statistics.median(v) for k, v in speeds.items()}
res = {
    "download_mib": mib, "throughput_runs": tput_runs,
    "direct_mib_s": med["direct"], "proxied_mib_s": med["proxied"], "tunnel_mib_s": med["tunnel"],
    "direct_mib_s_all": speeds["direct"], "proxied_mib_s_all": speeds["proxied"], "tunnel_mib_s_all": speeds["tunnel"],
    "throughput_ratio": med["proxied"] / med["direct"], "tunnel_ratio": med["tunnel"] / med["direct"],
    "requests": runs,
    "direct_ms_p50": q(times["direct"], 0.5), "direct_ms_p99": q(times["direct"], 0.99),
    "proxied_ms_p50": q(times["proxied"], 0.5), "proxied_ms_p99": q(times["proxied"], 0.99),
    "tunnel_ms_p50": q(times["tunnel"], 0.5), "tunnel_ms_p99": q(times["tunnel"], 0.99),
    "added_ms_p50": q(times["proxied"], 0.5) - q(times["direct"], 0.5),
    "tunnel_added_ms_p50": q(times["tunnel"], 0.5) - q(times["direct"], 0.5),
}
json.dump(res, open(f"{out}/egress.json", "w"), indent=2)
rng = lambda k: f"{min(speeds[k]):.0f}-{max(speeds[k]):.0f}"
md = f"""# bench/egress.sh

Same curl, same local server (busybox httpd), direct from the host vs from an allowlist sandbox
through sbxd's egress proxy: plain HTTP proxying, and a CONNECT tunnel (`curl -p`).

| | direct | proxied (plain) | ratio / added | proxied (CONNECT) | ratio / added |
|---|---:|---:|---:|---:|---:|
| download {mib} MiB, MiB/s (median of {tput_runs}) | {med['direct']:.0f} | {med['proxied']:.0f} | {res['throughput_ratio']:.2f}x | {med['tunnel']:.0f} | {res['tunnel_ratio']:.2f}x |
| same, range of the {tput_runs} runs | {rng('direct')} | {rng('proxied')} | | {rng('tunnel')} | |
| new connection + 1-byte request, ms p50 | {res['direct_ms_p50']:.3f} | {res['proxied_ms_p50']:.3f} | +{res['added_ms_p50']:.3f} ms | {res['tunnel_ms_p50']:.3f} | +{res['tunnel_added_ms_p50']:.3f} ms |
| same, ms p99 | {res['direct_ms_p99']:.3f} | {res['proxied_ms_p99']:.3f} | | {res['tunnel_ms_p99']:.3f} | |

Targets (issue 6): ratio >= 0.80; added latency < 1 ms p50.
"""
open(f"{out}/egress.md", "w").write(md)
print(md)
PY
