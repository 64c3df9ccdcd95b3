"""sbx fuzz over MCP (the same tests through the tools an agent uses, large
files in parts as an agent would), and runs that are interrupted and
resumed: a SIGINT lets running tests end; a SIGKILL loses the tests in
flight, which a resume runs again."""

import json
import os
import signal
import sqlite3
import subprocess
import time

SBX = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx"))


def fuzz(*args):
    return subprocess.run([SBX, "fuzz", *args], capture_output=True, text=True, timeout=600)


def verdicts(db, run=1):
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT domain, name, seed, verdict, why FROM tests WHERE run = ? ORDER BY id", (run,)).fetchall()
    finally:
        c.close()


def test_every_domain_over_mcp(api, sbxd_daemon, tmp_path):
    db = str(tmp_path / "mcp.db")
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--interface", "mcp", "--count", "100", "--seed",
             "21", "--jobs", "4", "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = verdicts(db)
    assert len(rows) == 100
    bad = [x for x in rows if x[3] not in ("pass", "unsupported")]
    assert not bad, bad
    # what base lacks (matplotlib); nothing else may be unsupported
    unsupported = {(n, w) for _, n, _, v, w in rows if v == "unsupported"}
    assert {n for n, _ in unsupported} <= {"data.chart"}, unsupported
    c = sqlite3.connect(db)
    assert json.loads(c.execute("SELECT options FROM runs").fetchone()[0])["interface"] == "mcp"
    ops = {op for (op,) in c.execute("SELECT DISTINCT op FROM steps")}
    assert {"create", "exec", "upload", "download", "delete"} <= ops, ops  # the names REST runs use
    c.close()
    live = api.get("/v1/sandboxes?state=live&metadata.sbx.fuzz=1").json()["sandboxes"]
    assert live == [], live


def test_large_files_over_mcp_in_parts(api, sbxd_daemon, tmp_path):
    """Over 8 MiB a file comes back in parts (files_read's limit), over
    24 MiB it goes up in parts: byte-exact either way."""
    db = str(tmp_path / "big.db")
    # seed 11, 12 tests (6 workflows): the two large_file tests draw 24 and 48 MiB
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--interface", "mcp", "--count", "12", "--seed",
             "11", "--jobs", "2", "--domain", "encoding", "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    c = sqlite3.connect(db)
    sizes = [int(t.split()[0]) for (t,) in c.execute(
        "SELECT e.text FROM evidence e JOIN tests t ON t.id = e.test WHERE t.name = 'encoding.large_file'")]
    parts = c.execute("SELECT count(*) FROM steps s JOIN tests t ON t.id = s.test "
                      "WHERE t.name = 'encoding.large_file' AND s.op = 'upload'").fetchone()[0]
    c.close()
    assert len(sizes) == 2 and max(sizes) > 24 << 20, sizes
    assert parts > len(sizes), parts  # more than one files_write each for the big one


def wait_for_verdicts(db, n, proc, within=120):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(db):
            try:
                c = sqlite3.connect(db)
                done = c.execute("SELECT count(verdict) FROM tests").fetchone()[0]
                c.close()
                if done >= n:
                    return
            except sqlite3.OperationalError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} tests ended in {within} s")


def test_interrupt_and_resume(api, sbxd_daemon, tmp_path):
    db = str(tmp_path / "r.db")
    args = ["run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "120", "--seed", "5", "--jobs", "2",
            "--domain", "fs,exec,lang", "--db", db]
    p = subprocess.Popen([SBX, "fuzz", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_verdicts(db, 5, p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, out + err
    assert "--resume 1" in err, err
    first = verdicts(db)
    assert 5 <= len(first) < 120 and all(v for *_, v, _ in first[:len(first)]), first
    # the tests that were running ended and deleted their sandboxes
    assert api.get("/v1/sandboxes?state=live&metadata.sbx.fuzz=1").json()["sandboxes"] == []
    c = sqlite3.connect(db)
    assert c.execute("SELECT ended_at FROM runs WHERE id = 1").fetchone()[0] is None
    c.close()
    r = fuzz("run", "--resume", "1", "--key", api.key, "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed" in r.stderr and "120 passed, 0 failed" in r.stdout, r.stdout + r.stderr
    rows = verdicts(db)
    assert len(rows) == 120 and len({s for _, _, s, _, _ in rows}) == 120
    assert rows[:len(first)] == first  # what ended before is kept as it was
    # the same tests as an uninterrupted run of that seed
    fresh = str(tmp_path / "fresh.db")
    args[args.index(db)] = fresh
    r = fuzz(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted((d, n, s) for d, n, s, _, _ in verdicts(fresh)) == sorted((d, n, s) for d, n, s, _, _ in rows)


def test_killed_run_resumes_what_was_in_flight(api, sbxd_daemon, tmp_path):
    db = str(tmp_path / "k.db")
    p = subprocess.Popen([SBX, "fuzz", "run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "60",
                          "--seed", "6", "--jobs", "2", "--domain", "exec,lang", "--db", db],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_verdicts(db, 3, p)
        p.kill()
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # what was in flight is lost: its sandboxes are left running (they expire
    # at their timeout); end them here, the fixture checks for leftovers
    for sb in api.get("/v1/sandboxes?state=live&metadata.sbx.fuzz=1").json()["sandboxes"]:
        api.delete(f"/v1/sandboxes/{sb['id']}")
    c = sqlite3.connect(db)
    unfinished = c.execute("SELECT count(*) FROM tests WHERE verdict IS NULL").fetchone()[0]
    c.close()
    r = fuzz("run", "--resume", "1", "--key", api.key, "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = verdicts(db)
    assert len(rows) == 60 and all(v == "pass" for *_, v, _ in rows), (unfinished, rows)
    assert fuzz("run", "--resume", "7", "--key", api.key, "--db", db).returncode == 2  # no such run
