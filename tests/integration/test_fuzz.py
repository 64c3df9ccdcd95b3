"""sbx fuzz: a seeded run against the real sbxd passes, is recorded in
SQLite and rendered as a self-contained HTML report; the same seed gives
the same tests; bad arguments are usage errors."""

import os
import sqlite3
import subprocess

import pytest

SBX = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx"))


def fuzz(*args, env=None):
    return subprocess.run([SBX, "fuzz", *args], capture_output=True, text=True, timeout=600, env=env)


def test_seeded_run_passes_and_reports(api, sbxd_daemon, tmp_path):
    db = str(tmp_path / "fz.db")
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "45", "--seed", "42", "--jobs", "3",
             "--domain", "fs,encoding,exec", "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "45 passed, 0 failed" in r.stdout, r.stdout
    c = sqlite3.connect(db)
    rows = c.execute("SELECT domain, name, seed, verdict FROM tests WHERE run = 1 ORDER BY id").fetchall()
    assert len(rows) == 45 and {r[0] for r in rows} == {"fs", "encoding", "exec"}, rows
    assert all(r[3] == "pass" for r in rows)
    assert c.execute("SELECT count(*) FROM steps").fetchone()[0] > 45 * 3
    assert c.execute("SELECT ended_at FROM runs WHERE id = 1").fetchone()[0]
    # the same seed: the same tests (names and seeds), in a second run of the same file
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "45", "--seed", "42", "--jobs", "2",
             "--domain", "fs,encoding,exec", "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    again = c.execute("SELECT domain, name, seed FROM tests WHERE run = 2").fetchall()
    assert sorted(again) == sorted((d, n, s) for d, n, s, _ in rows)
    # ... with the same parameters: what each test generated (names, sizes,
    # byte patterns, commands), as it recorded them
    def inputs(run):
        got = {}
        for n, s, text in c.execute("SELECT t.name, t.seed, e.text FROM evidence e JOIN tests t ON t.id = e.test "
                                    "WHERE t.run = ? AND e.what = 'input' ORDER BY e.rowid", (run,)):
            got.setdefault((n, s), []).append(text)
        return got
    first = inputs(1)
    assert inputs(2) == first
    bare = {n for _, n, s, _ in rows if (n, s) not in first}
    assert bare <= {"exec.timeout"}, bare  # its `sleep 30` with a 1 s timeout has nothing to draw
    # another seed: other parameters
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "6", "--seed", "43", "--domain", "fs",
             "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    seeds = {s for (s,) in c.execute("SELECT seed FROM tests WHERE run = 3")}
    assert seeds and not seeds & {s for _, _, s, _ in rows}
    other = inputs(3)
    assert len(other) == 6
    for (name, _), params in other.items():
        same = [p for (n, _), p in first.items() if n == name and p == params]
        assert not same, (name, params)  # no fs test of seed 42 drew these
    c.close()
    html = tmp_path / "report.html"
    r = fuzz("report", db, "-o", str(html), "--run", "1")
    assert r.returncode == 0, r.stderr
    text = html.read_text()
    assert "<svg" in text and "encoding" in text and "exec.exit_code" not in text  # no failures listed
    assert "None." in text
    assert "src=" not in text and "href=" not in text and "url(" not in text and "@import" not in text  # self-contained
    for op in ("create", "exec", "upload", "download"):
        assert f"<td>{op}</td>" in text, op
    # nothing of the runs is left behind
    live = api.get("/v1/sandboxes?state=live&metadata.sbx.fuzz=1").json()["sandboxes"]
    assert live == [], live


def test_usage_errors(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
    assert fuzz("run", env=env).returncode == 2                      # no target, no key
    r = fuzz("run", "--target", "http://127.0.0.1:9", "--key", "k" * 20, "--interface", "grpc", env=env)
    assert r.returncode == 2 and "rest or mcp" in r.stderr
    assert fuzz("run", "--target", "x", "--key", "y", "--count", "0", env=env).returncode == 2
    r = fuzz("run", "--target", "x", "--key", "y", "--test-timeout", "0", env=env)
    assert r.returncode == 2 and "--test-timeout 1..86400" in r.stderr, r.stderr
    assert fuzz("run", "--target", "x", "--key", "y", "--domain", "nope", env=env).returncode == 2
    assert fuzz("bogus", env=env).returncode == 2
    assert fuzz("report", str(tmp_path / "missing.db"), "-o", str(tmp_path / "r.html"), env=env).returncode == 125


def test_every_domain_passes_against_sbxd(api, sbxd_daemon, tmp_path):
    """CI's short seeded run over REST: 100 tests, ten of every domain; what
    base lacks (matplotlib) is unsupported, never failed nor passed."""
    db = str(tmp_path / "all.db")
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "100", "--seed", "9", "--jobs", "4",
             "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    c = sqlite3.connect(db)
    domains = {d for (d,) in c.execute("SELECT DISTINCT domain FROM tests")}
    assert domains == {"fs", "encoding", "exec", "lang", "lifecycle", "limits", "security", "data", "sdlc",
                       "network"}, domains
    names = {n for (n,) in c.execute("SELECT DISTINCT name FROM tests WHERE domain = 'network'")}
    assert names == {"network.none", "network.allowlist_fetch", "network.allowlist_denied",
                     "network.policy_change"}, names
    bad = c.execute("SELECT name, verdict, why FROM tests WHERE verdict NOT IN ('pass', 'unsupported')").fetchall()
    assert not bad, bad
    unsupported = {n for (n,) in c.execute("SELECT name FROM tests WHERE verdict = 'unsupported'")}
    assert unsupported <= {"data.chart"}, unsupported
    c.close()



CACHE = os.environ.get("SBX_TEMPLATE_CACHE", "/var/cache/sbx-tests")
TARBALL = os.path.join(CACHE, "debian-bookworm-python.tar.zst")
REPO = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.fixture
def python_template(sbxd_daemon):
    """The python template, built in the shared sbxd from the cached root
    file system as test_python_template.py builds it (nothing is
    downloaded), and removed after the test (with its layers: that test
    wants to see a build that is not from the cache)."""
    if not os.path.exists(TARBALL):
        pytest.skip(f"{TARBALL} missing: scripts/test.sh makes it (templates/python/rootfs.sh)")
    name = f"fuzz-python-{os.getpid()}"
    client = sbxd_daemon.client()
    env = {**os.environ, "SBX_URL": sbxd_daemon.url, "SBX_API_KEY": client.key, "SBX_TEMPLATE_CACHE": CACHE,
           "SBX": SBX}
    r = subprocess.run([os.path.join(REPO, "templates", "python", "build.sh"), name], env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    yield name
    assert client.delete(f"/v1/templates/{name}").status_code in (204, 404)


def test_data_domain_on_the_python_template(api, sbxd_daemon, python_template, tmp_path):
    """data.chart needs matplotlib, which base lacks (there it is unsupported):
    on the python template the chart is drawn and checked, and so is the CSV
    pipeline.  That template has no curl: the network tests that need it are
    unsupported, not failed."""
    db = str(tmp_path / "python.db")
    r = fuzz("run", "--target", sbxd_daemon.url, "--key", api.key, "--count", "8", "--seed", "3", "--jobs", "3",
             "--domain", "data,network", "--template", python_template, "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    c = sqlite3.connect(db)
    rows = c.execute("SELECT name, verdict, why FROM tests ORDER BY id").fetchall()
    opts = c.execute("SELECT options FROM runs").fetchone()[0]
    c.close()
    data = [x for x in rows if x[0].startswith("data.")]
    assert len(data) == 4 and all(v == "pass" for _, v, _ in data), data
    assert {n for n, _, _ in data} == {"data.chart", "data.csv_pipeline"}
    net = [x for x in rows if x[0].startswith("network.")]
    assert all(v == "pass" or (v == "unsupported" and "curl is not in this template" in w) for _, v, w in net), net
    assert any(v == "unsupported" for _, v, _ in net), net
    assert f'"template":"{python_template}"' in opts, opts
