"""Resource limits: processes, memory, disk, inodes, time, CPU, and output
volume.  Every test pushes past a limit with the in-sandbox helper and checks
both that the limit held and that sbx reported it properly."""

import os
import subprocess
import time

import pytest

from sbxtest import describe

MIB = 1 << 20


def test_fork_bomb_is_contained(run):
    t0 = time.monotonic()
    r = run.helper(["forkbomb", "4096"], ["--pids", "64"], text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, describe(r)  # init survived and reported the helper's own status
    words = r.stdout.split()
    assert words[0] == "forks" and words[2] == "errno", r.stdout
    n = int(words[1])
    assert words[3] == "EAGAIN", r.stdout
    assert 32 <= n < 64, r.stdout  # the helper itself counts against the 64
    assert elapsed < 30
    assert r.stderr == "", describe(r)


def test_pids_one_allows_the_command_itself(run):
    r = run.helper(["forkbomb", "10"], ["--pids", "1"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split() == ["forks", "0", "errno", "EAGAIN"], r.stdout


def test_pids_limit_is_exact(run):
    # --pids N: the command and N-1 more processes (sbx-init does not count
    # once it has left <sbx>/work; the short sleep lets the outside tighten
    # the limit, which it does when sbx-init reports the command started).
    r = run(["--pids", "8", *run.helper_bind, "--", "sh", "-c", "sleep 0.2; exec /opt/helper forkbomb 100"],
            text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split() == ["forks", "7", "errno", "EAGAIN"], r.stdout


def test_pids_limit_not_too_small(run):
    # control: without --pids the default (512) lets 200 through
    r = run.helper(["forkbomb", "200"], text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split()[:4] == ["forks", "200", "errno", "NONE"], r.stdout


def test_sandbox_still_works_after_fork_bomb(run):
    r = run(["--pids", "32", *run.helper_bind, "--", "sh", "-c",
             "/opt/helper forkbomb 1000; echo after; /opt/helper sleep 0.1 && echo ok"], text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("forks ") and lines[0].endswith("EAGAIN"), lines
    assert lines[1:] == ["after", "ok"], lines


def test_memory_hog_is_killed_with_exit_123(run):
    r = run.helper(["memhog", "400"], ["--memory", "64M"], timeout=60)
    assert r.returncode == 123, describe(r)
    assert r.stderr == b"sbx: killed: out of memory (limit 64 MiB)\n", describe(r)
    assert b"memhog done" not in r.stdout


def test_memory_below_limit_is_fine(run):
    r = run.helper(["memhog", "32"], ["--memory", "64M"], text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    assert "memhog done 32 MiB" in r.stdout
    assert r.stderr == ""


def test_oom_of_a_child_is_noted_not_fatal(run):
    r = run(["--memory", "64M", *run.helper_bind, "--", "sh", "-c", "/opt/helper memhog 400 >/dev/null; echo rc=$?"],
            text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "rc=137"
    lines = r.stderr.splitlines()  # sh says "Killed", then sbx its note
    assert lines[-1].startswith("sbx: note: the out-of-memory killer ended 1 process"), describe(r)
    assert "64 MiB" in lines[-1]
    assert sum(l.startswith("sbx:") for l in lines) == 1, describe(r)


def _free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_disk_fill_gets_enospc_and_spares_host(run, sbx_home):
    before = {p: _free_bytes(p) for p in (sbx_home, "/", "/tmp")}
    r = run.helper(["fill-disk", "/tmp/big"], ["--disk", "32M"], text=True, timeout=60)
    after = {p: _free_bytes(p) for p in before}
    assert r.returncode == 0, describe(r)
    words = r.stdout.split()
    assert words[0] == "wrote" and words[2] == "errno", r.stdout
    assert words[3] == "ENOSPC", r.stdout
    wrote = int(words[1])
    assert 24 * MIB <= wrote <= 32 * MIB, wrote
    for p in before:  # the layer is memory: host disks did not fill up
        assert before[p] - after[p] < 16 * MIB, (p, before[p], after[p])


def test_disk_fill_in_home_and_root_share_the_layer(run):
    r = run(["--disk", "16M", "--user", "root", *run.helper_bind, "--", "sh", "-c",
             "/opt/helper fill-disk /root/a; /opt/helper fill-disk /var/b; df -k / | tail -1"],
            text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    lines = r.stdout.splitlines()
    a, b = (int(l.split()[1]) for l in lines[:2])
    assert lines[0].endswith("ENOSPC") and lines[1].endswith("ENOSPC"), lines
    assert a + b <= 16 * MIB, lines


def test_shm_is_limited(run):
    r = run.helper(["fill-disk", "/dev/shm/big"], ["--shm-size", "8M"], text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    words = r.stdout.split()
    assert words[3] == "ENOSPC", r.stdout
    assert 6 * MIB <= int(words[1]) <= 8 * MIB, r.stdout


def test_inode_exhaustion(run):
    r = run.helper(["inodes", "/tmp", "1000000"], ["--disk", "32M"], text=True, timeout=120)
    assert r.returncode == 0, describe(r)
    words = r.stdout.split()
    assert words[0] == "created" and words[3] == "ENOSPC", r.stdout
    n = int(words[1])
    assert 1000 <= n <= 32 * MIB // 8192, r.stdout  # one inode per 8 KiB of --disk


def test_timeout_kills_a_spinner(run):
    t0 = time.monotonic()
    r = run.helper(["spin"], ["--timeout", "2s"], timeout=30)
    elapsed = time.monotonic() - t0
    assert r.returncode == 124, describe(r)
    assert r.stderr == b"sbx: killed: timeout after 2s\n", describe(r)
    assert 1.9 <= elapsed < 10, elapsed


def test_timeout_kills_the_whole_tree(run, leaks):
    # a command that forks off a spinner and ignores SIGTERM
    t0 = time.monotonic()
    r = run(["--timeout", "1500ms", *run.helper_bind, "--", "sh", "-c",
             "trap '' TERM; /opt/helper spin & /opt/helper spin & wait"], timeout=30)
    assert r.returncode == 124, describe(r)
    assert r.stderr == b"sbx: killed: timeout after 1500ms\n", describe(r)
    assert time.monotonic() - t0 < 10
    leaks.assert_clean()


def test_timeout_not_reached(run):
    t0 = time.monotonic()
    r = run(["--timeout", "30s", "--", "sh", "-c", "exit 5"], timeout=30)
    assert r.returncode == 5, describe(r)
    assert r.stderr == b""
    assert time.monotonic() - t0 < 5


def _cpu_share(run, cpus, seconds=2):
    opts = ["--cpus", str(cpus)] if cpus is not None else []
    r = run.helper(["spin", str(seconds)], opts, text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    words = r.stdout.split()  # cpu_ms N wall_ms M
    assert words[0] == "cpu_ms" and words[2] == "wall_ms", r.stdout
    return int(words[1]) / int(words[3])


@pytest.mark.parametrize("cpus,low,high", [(0.2, 0.08, 0.35), (0.5, 0.3, 0.7)])
def test_cpu_quota(run, cpus, low, high):
    share = _cpu_share(run, cpus)
    assert low <= share <= high, f"--cpus {cpus}: a spinner got {share:.2f} of a CPU"


def test_cpu_quota_control(run):
    # without a tight quota the same spinner gets (nearly) a whole CPU, so the
    # assertions above measure the quota and not a slow machine
    share = _cpu_share(run, 1)
    assert share >= 0.45, share


def _flood(run, total, argv_prefix=()):
    """Run `helper flood TOTAL` and read it to EOF, checking every byte.
    Returns (returncode, stderr, bytes received, first bad offset, seconds)."""
    pattern = bytes(range(256)) * ((1 << 20) // 256 + 2)
    argv = [*argv_prefix, *run.argv([*run.helper_bind, "--", "/opt/helper", "flood", str(total)])]
    p = subprocess.Popen(argv, env=run.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    got = 0
    bad_at = None
    t0 = time.monotonic()
    try:
        while True:
            chunk = p.stdout.read1(1 << 20)
            if not chunk:
                break
            off = got % 256
            if bad_at is None and chunk != pattern[off:off + len(chunk)]:
                bad_at = got
            got += len(chunk)
            if time.monotonic() - t0 > 60:
                break
        elapsed = time.monotonic() - t0
        p.wait(timeout=30)
    finally:
        if p.returncode is None:
            p.kill()
            p.wait()
    err = p.stderr.read()
    p.stdout.close()
    p.stderr.close()
    return p.returncode, err, got, bad_at, elapsed


def test_output_flood_arrives_complete_and_fast(run):
    """200 MB through a pipe: complete, byte-exact and fast (sbx passes its
    stdio through to the command instead of copying it)."""
    total = 200_000_000
    rc, err, got, bad_at, elapsed = _flood(run, total)
    assert rc == 0, err
    assert err == b""
    assert got == total
    assert bad_at is None, f"corrupted output at byte {bad_at}"
    assert elapsed < 20, f"{total} bytes took {elapsed:.1f}s"


def _sanitized(path):
    with open(path, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__ubsan_handle" in data or b"__tsan_init" in data


def test_sbx_run_stays_small_during_flood(run, tmp_path):
    """`sbx run` itself stays small (< 8 MiB peak RSS) while 200 MB flow."""
    if _sanitized(run.sbx):
        pytest.skip("sbx is built with sanitizers: their shadow memory dominates its RSS")
    if not os.access("/usr/bin/time", os.X_OK):
        pytest.skip("needs /usr/bin/time (Debian package 'time')")
    # /usr/bin/time measures sbx's peak RSS over its whole life; Python's own
    # rusage would also count the pre-exec copy of this interpreter.
    out = tmp_path / "maxrss"
    rc, err, got, bad_at, _ = _flood(run, 200_000_000, ["/usr/bin/time", "-f", "%M", "-o", str(out)])
    assert (rc, err, got, bad_at) == (0, b"", 200_000_000, None)
    peak_kib = int(out.read_text().split()[-1])
    assert 0 < peak_kib < 8 * 1024, f"sbx run peak RSS {peak_kib} KiB"
