#!/usr/bin/env bash
# bench/startup.sh - start-up latency and peak RSS of `sbx run -- /bin/true`,
# side by side with bwrap, unshare (and runsc if installed) in one hyperfine run.
#
# Usage: bash bench/startup.sh          (as root; see bench/README.md)
# Environment:
#   RUNS      timed runs per command (default 300)
#   SBX       sbx binary (default <repo>/build/sbx)
#   SBX_HOME  sbx state directory (default /tmp/sbx-bench-home)
#   SBX_INIT  sbx-init binary (default: found next to $SBX, as sbx itself does)
# Writes bench/results/startup.json (hyperfine) and bench/results/startup.md,
# and refreshes the "Latest results" section of bench/README.md.
# Exits 0 whether or not the targets are met; non-zero if anything failed to run.
set -euo pipefail

bench_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname -- "$bench_dir")
results_dir=$bench_dir/results
json=$results_dir/startup.json
md=$results_dir/startup.md
readme=$bench_dir/README.md

RUNS=${RUNS:-300}
WARMUP=20
RSS_RUNS=20
SBX=${SBX:-$repo/build/sbx}
export SBX_HOME=${SBX_HOME:-/tmp/sbx-bench-home}

die() { echo "startup.sh: $*" >&2; exit 1; }
note() { echo "startup.sh: $*" >&2; }

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer (got '$RUNS')"

# --- prerequisites ------------------------------------------------------------
missing=()
for tool in hyperfine:hyperfine bwrap:bubblewrap unshare:util-linux setsid:util-linux python3:python3; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool%%:*} (Debian package ${tool#*:})")
done
if ((${#missing[@]})); then
  printf 'startup.sh: missing: %s\n' "${missing[@]}" >&2
  die "install them with: sudo bash scripts/bootstrap.sh"
fi
[[ -x $SBX ]] || die "sbx binary not found at $SBX (build it: ninja -C $repo/build, or set SBX=)"
[[ $(id -u) -eq 0 ]] || die "sbx run needs root; run this script as root"

have_runsc=0
if command -v runsc >/dev/null 2>&1; then
  have_runsc=1
else
  note "runsc (gVisor) not installed: skipping it (optional)"
fi

# --- snapshot sbx ---------------------------------------------------------------
# sbx may be rebuilt while the benchmark runs; time one fixed copy of sbx and
# sbx-init so every run (and the RSS measurement) uses the same binaries.
sbx_init=${SBX_INIT:-}
if [[ -z $sbx_init ]]; then
  sbx_real=$(readlink -f -- "$SBX")
  for cand in "${sbx_real%/*}/sbx-init" "${sbx_real%/*}/../libexec/sbx/sbx-init" "${sbx_real%/*}/src/init/sbx-init"; do
    if [[ -x $cand ]]; then sbx_init=$cand; break; fi
  done
fi
[[ -n $sbx_init && -x $sbx_init ]] || die "sbx-init not found next to $SBX (set SBX_INIT=)"
snap=$(mktemp -d /tmp/sbx-bench.XXXXXX)
trap 'rm -rf -- "$snap"' EXIT
chmod 755 "$snap" # sbx bind-mounts sbx-init from inside its user namespace
cp -- "$SBX" "$snap/sbx"
cp -- "$sbx_init" "$snap/sbx-init"
export SBX_INIT=$snap/sbx-init
sbx=$snap/sbx

sbx_version=$("$sbx" version 2>/dev/null || echo unknown)
sbx_git=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $sbx_git != unknown && -n $(git -C "$repo" status --porcelain -- src 2>/dev/null) ]]; then
  sbx_git+=" + uncommitted changes in src/"
fi

# --- the commands ---------------------------------------------------------------
names=() cmds=() shown=()
add() { # add NAME ARGV...   (quoted for hyperfine -N, which splits shell-style)
  local name=$1 q; shift
  printf -v q '%q ' "$@"
  q=${q% }
  names+=("$name") cmds+=("$q") shown+=("$name"$'\t'"${q/#"$sbx"/sbx}")
}
add "sbx run" "$sbx" run -- /bin/true
add "bwrap" bwrap --unshare-all --die-with-parent \
  --ro-bind /usr /usr --symlink usr/lib64 /lib64 --symlink usr/lib /lib \
  --symlink usr/bin /bin --symlink usr/sbin /sbin \
  --proc /proc --dev /dev --tmpfs /tmp /bin/true
add "unshare" unshare --user --map-root-user --pid --fork --mount --net --ipc --uts --cgroup --mount-proc /bin/true
if ((have_runsc)); then add "runsc do" runsc --network=none "do" /bin/true; fi
add "/bin/true" /bin/true

# Run each once first, so a broken command fails with its own message rather
# than somewhere inside hyperfine's output.
for i in "${!cmds[@]}"; do
  if ! out=$(eval "${cmds[i]}" </dev/null 2>&1); then
    printf '%s\n' "$out" >&2
    die "'${names[i]}' failed: ${cmds[i]}"
  fi
done

mkdir -p -- "$results_dir"

# --- start-up latency: one hyperfine run, all commands side by side ---------------
hf_args=(-N --warmup "$WARMUP" --runs "$RUNS" --export-json "$json")
for i in "${!cmds[@]}"; do hf_args+=(-n "${names[i]}" "${cmds[i]}"); done
hyperfine "${hf_args[@]}"

# --- peak RSS of sbx run ------------------------------------------------------------
# ru_maxrss of a process includes the RSS its parent had when it exec'd (the
# kernel carries the old mm's high-water mark over exec, and vfork shares it),
# so a python3 that spawns sbx directly reports python's ~10+ MiB, not sbx's.
# Instead python becomes a child subreaper and starts `setsid -f CMD`: setsid
# (tiny) forks CMD and exits, CMD is re-parented to python, and python reaps
# it with wait4(), whose rusage covers CMD and every descendant it waited for.
# Anything else re-parented (sbx's cleanup watcher) is reaped and counted too.
# Result: the largest per-process peak RSS in the process tree, in KiB.
peak_rss() { # peak_rss RUNS ARGV...  -> prints max ru_maxrss (KiB) over RUNS runs
  python3 - "$@" <<'PY'
import ctypes, os, subprocess, sys, tempfile

PR_SET_CHILD_SUBREAPER = 36
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER): " + os.strerror(ctypes.get_errno()))

runs, argv = int(sys.argv[1]), sys.argv[2:]
peak = 0
errlog = tempfile.TemporaryFile()  # CMD's stderr: shown only if something fails
def fail(msg):
    errlog.seek(0)
    sys.stderr.write(errlog.read().decode(errors="replace"))
    sys.exit(msg)
for _ in range(runs):
    errlog.seek(0)
    errlog.truncate()
    starter = subprocess.Popen(["setsid", "-f", *argv], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=errlog)
    if starter.wait() != 0:
        fail(f"setsid -f {argv!r} failed")
    reaped = 0
    while True:
        try:
            pid, status, ru = os.wait4(-1, 0)
        except ChildProcessError:
            break
        code = os.waitstatus_to_exitcode(status)
        if code != 0:  # CMD, or something it left behind, failed
            fail(f"{argv!r}: a process exited with status {code}")
        reaped += 1
        peak = max(peak, ru.ru_maxrss)
    if reaped == 0:
        fail(f"{argv!r}: nothing to reap")
print(peak)
PY
}
rss_sbx=$(peak_rss "$RSS_RUNS" "$sbx" run -- /bin/true)
rss_floor=$(peak_rss "$RSS_RUNS" /bin/true)

# --- report ---------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n1)
[[ -n $cpu ]] || cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n1)
[[ -n $cpu ]] || cpu=unknown

BENCH_DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
BENCH_KERNEL=$(uname -r)
BENCH_CPU="$cpu ($(nproc) CPUs online)"
BENCH_HYPERFINE=$(hyperfine --version)
export BENCH_DATE BENCH_KERNEL BENCH_CPU BENCH_HYPERFINE
export BENCH_SBX="$sbx_version, git $sbx_git"
export BENCH_RUNS=$RUNS BENCH_WARMUP=$WARMUP BENCH_RSS_RUNS=$RSS_RUNS
export BENCH_RSS_SBX=$rss_sbx BENCH_RSS_FLOOR=$rss_floor
export BENCH_NO_RUNSC=$((1 - have_runsc))
BENCH_COMMANDS=$(printf '%s\n' "${shown[@]}")
export BENCH_COMMANDS

python3 - "$json" "$md" "$readme" <<'PY'
import json, os, re, statistics, sys

json_path, md_path, readme_path = sys.argv[1:4]
env = os.environ
with open(json_path) as f:
    results = json.load(f)["results"]

rows, median = [], {}
for r in results:
    t = [x * 1000 for x in r["times"]]
    name = r["command"]
    median[name] = statistics.median(t)
    rows.append((name, median[name], statistics.mean(t),
                 statistics.stdev(t) if len(t) > 1 else 0.0, min(t), len(t)))

lines = []
lines.append(f"Measured {env['BENCH_DATE']} — kernel {env['BENCH_KERNEL']}, "
             f"CPU {env['BENCH_CPU']}, {env['BENCH_HYPERFINE']}, "
             f"{env['BENCH_RUNS']} runs per command after {env['BENCH_WARMUP']} warm-up runs, "
             f"{env['BENCH_SBX']}.")
lines.append("")
lines.append("| command | median (ms) | mean (ms) | stddev (ms) | min (ms) |")
lines.append("|---|---:|---:|---:|---:|")
for name, med, mean, sd, mn, n in rows:
    lines.append(f"| `{name}` | {med:.2f} | {mean:.2f} | {sd:.2f} | {mn:.2f} |")
lines.append("")
lines.append("<details><summary>Commands</summary>")
lines.append("")
for entry in env["BENCH_COMMANDS"].splitlines():
    name, _, cmd = entry.partition("\t")
    lines.append(f"- `{name}`: `{cmd}`")
lines.append("")
lines.append("</details>")
lines.append("")

verdict = {}
r_bwrap = median["sbx run"] / median["bwrap"]
r_unshare = median["sbx run"] / median["unshare"]
verdict["ratio"] = "PASS" if r_bwrap <= 1.0 else "MISS"
rss, floor = int(env["BENCH_RSS_SBX"]), int(env["BENCH_RSS_FLOOR"])
verdict["rss"] = "PASS" if rss < 8 * 1024 else "MISS"
lines.append(f"- median sbx run / bwrap: **{r_bwrap:.2f}×** — target ≤ 1.00×: **{verdict['ratio']}**")
lines.append(f"- median sbx run / unshare: **{r_unshare:.2f}×**")
lines.append(f"- peak RSS of `sbx run -- /bin/true` (max over {env['BENCH_RSS_RUNS']} runs, "
             f"largest process in its tree): **{rss} KiB** — target < 8192 KiB: **{verdict['rss']}** "
             f"(`/bin/true` measured the same way: {floor} KiB)")
lines.append("")
lines.append("sbx additionally sets up cgroups (memory, cpu, pids), a seccomp filter and an "
             "overlay root, which bwrap does not.")
if env.get("BENCH_NO_RUNSC") == "1":
    lines.append("")
    lines.append("runsc (gVisor) was not installed, so it was skipped.")
body = "\n".join(lines) + "\n"

with open(md_path, "w") as f:
    f.write("# sbx start-up benchmark\n\n" + body)

start, end = "<!-- results:start -->", "<!-- results:end -->"
try:
    with open(readme_path) as f:
        readme = f.read()
except FileNotFoundError:
    readme = None
# The markers count only on lines of their own (the README also mentions them in prose).
section = re.compile("^" + re.escape(start) + "$.*?^" + re.escape(end) + "$", re.S | re.M)
if readme is not None and section.search(readme):
    readme = section.sub(lambda _: f"{start}\n{body}{end}", readme, count=1)
    with open(readme_path, "w") as f:
        f.write(readme)
else:
    print(f"startup.sh: no {start} … {end} lines in {readme_path}; not updated", file=sys.stderr)

print()
print(body, end="")
print()
print(f"sbx/bwrap median ratio {r_bwrap:.2f} (target <= 1.00): {verdict['ratio']}")
print(f"sbx run peak RSS {rss} KiB (target < 8192 KiB): {verdict['rss']}")
print(f"written: {md_path}, {json_path}; refreshed: {readme_path}")
PY
