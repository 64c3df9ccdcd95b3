"""sbx fuzz against a deliberately broken service: broken_target.py, a
fault-injecting proxy in front of the real sbxd, one fault per run.  Each
test a fault reached must be classified as the layer the fault is in (the
definitions are docs/fuzz.md's, "Telling the layers apart"), in the SQLite
results and in the HTML report; every test it did not reach must pass.

  fault             layer       why
  nul_download      interface   the bytes changed on the way out
  change_upload     interface   the bytes changed on the way in
  truncate_upload   interface   the file is there, with other (fewer) bytes
  drop_upload       sandbox     the API said 200 and the size, the file is not inside
  strip_limits      sandbox     a limit asked for does not hold inside
  hang_download     timeout     no answer within the test's deadline

Over REST and over MCP: in front of /mcp the proxy changes MCP's JSON-RPC
(tool arguments and results), which is as much "in transit" as REST's
bodies.  The runs are small and seeded (the seeds below were chosen so that
each run has tests the fault reaches and tests it does not, and no 50 MB
CSV)."""

import html as htmllib
import os
import re
import sqlite3
import subprocess
import time

import pytest

from broken_target import BrokenTarget

SBX = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx"))
UPLOADS = "fs,data,sdlc,lang"

# fault -> (layer, domains, count, seed, jobs, extra options)
CASES = {
    "nul_download": ("interface", "fs,encoding", 12, 3, 3, []),
    "change_upload": ("interface", UPLOADS, 24, 4, 3, []),
    "truncate_upload": ("interface", UPLOADS, 16, 4, 3, []),
    "drop_upload": ("sandbox", UPLOADS, 24, 4, 3, []),
    # one at a time: limits.cpu_spin (first) must not share the CPUs with
    # the others' memory hog and fork bomb, or even without its limit it
    # could get less than its limit allows
    "strip_limits": ("sandbox", "limits", 6, 2, 1, []),
    # all at once: the hung ones end together at their deadline
    "hang_download": ("timeout", "fs", 6, 3, 6, ["--test-timeout", "4"]),
}
# over MCP: fewer tests (each costs more), the same faults
MCP_COUNT = {"nul_download": 8, "change_upload": 12, "truncate_upload": 8, "drop_upload": 12, "strip_limits": 6,
             "hang_download": 6}
# what may be unsupported whatever the fault: base has no matplotlib
MAY_BE_UNSUPPORTED = {"data.chart"}


def unsigned(seed):
    return seed & (2 ** 64 - 1)


def report_failures(text):
    """{(name, seed): verdict} of the failures an HTML report lists.

    Written against report.c's "Failures by mode": a <details class="mode
    failure" data-verdict=V> per mode, a <div class="test" data-name=N
    data-seed=S> per member; if the report's layout changes, this is the one
    place to follow it."""
    found = {}
    for m in re.finditer(r'<details class="mode failure" data-verdict="(\w+)"(.*?)</details>', text, re.S):
        for t in re.finditer(r'<div class="test" data-name="([^"]+)" data-seed="(\d+)">', m.group(2)):
            found[(htmllib.unescape(t.group(1)), int(t.group(2)))] = m.group(1)
    return found


def report_counts(text):
    """{verdict: count} of the report's verdict table."""
    table = text.split('<table id="verdicts">', 1)[1].split("</table>", 1)[0]
    return {v: int(n) for v, n in re.findall(r'<tr><td>(\w+)</td><td class="n">(\d+)</td></tr>', table)}


def run_against(target, key, iface, fault, tmp_path):
    layer, domains, count, seed, jobs, extra = CASES[fault]
    if iface == "mcp":
        count = MCP_COUNT[fault]
    db = str(tmp_path / f"{fault}-{iface}.db")
    with BrokenTarget(target, fault) as proxy:
        r = subprocess.run([SBX, "fuzz", "run", "--target", proxy.url, "--key", key, "--interface", iface,
                            "--count", str(count), "--seed", str(seed), "--jobs", str(jobs), "--domain", domains,
                            "--db", db, *extra], capture_output=True, text=True, timeout=600)
        affected = proxy.affected()
        unowned = proxy.unowned_faults()
    assert not unowned, unowned  # every fault reached a sandbox some test made
    c = sqlite3.connect(db)
    rows = [(n, unsigned(s), v, w) for n, s, v, w in
            c.execute("SELECT name, seed, verdict, why FROM tests WHERE run = 1 ORDER BY id")]
    evidence = c.execute("SELECT count(*) FROM evidence e JOIN tests t ON t.id = e.test "
                         "WHERE t.verdict = ? AND e.what = ?", (layer, layer)).fetchone()[0]
    c.close()
    return layer, r, rows, affected, evidence, db


@pytest.mark.parametrize("iface", ["rest", "mcp"])
@pytest.mark.parametrize("fault", list(CASES))
def test_each_fault_is_classified_by_layer(api, sbxd_daemon, tmp_path, fault, iface):
    t0 = time.monotonic()
    layer, r, rows, affected, evidence, db = run_against(sbxd_daemon.url, api.key, iface, fault, tmp_path)
    took = time.monotonic() - t0
    assert len(rows) == (CASES[fault][2] if iface == "rest" else MCP_COUNT[fault]), r.stderr[-2000:]
    hit = [x for x in rows if (x[0], x[1]) in affected]
    missed = [x for x in rows if (x[0], x[1]) not in affected]
    # the run means something: the fault reached some tests and not others
    # (but a stripped limit reaches every limits test that asks for one)
    assert len(hit) >= 2, (affected, rows)
    assert missed or fault == "strip_limits", rows
    wrong = [(n, s, v, w, affected[(n, s)]) for n, s, v, w in hit if v != layer]
    assert not wrong, f"{fault} over {iface}: tests the fault reached, not classified {layer}:\n" + \
        "\n".join(map(repr, wrong))
    bad = [x for x in missed if x[2] != "pass" and not (x[2] == "unsupported" and x[0] in MAY_BE_UNSUPPORTED)]
    assert not bad, f"{fault} over {iface}: tests the fault did not reach, not passing: {bad}"
    assert evidence >= len(hit)  # each failure's evidence is stored under its class
    assert r.returncode == 1 and f"{layer} {len(hit)}" in r.stdout, r.stdout
    if fault == "hang_download":
        # each ended at its deadline, named as such, and the run went on:
        # six tests on six workers, the hung ones cut at 4 s
        assert all("deadline (4 s)" in w for _, _, _, w in hit), hit
        assert took < 20, took
    # the HTML report says the same, test by test
    out = tmp_path / f"{fault}-{iface}.html"
    rep = subprocess.run([SBX, "fuzz", "report", db, "-o", str(out), "--run", "1"], capture_output=True, text=True,
                         timeout=60)
    assert rep.returncode == 0, rep.stderr
    text = out.read_text()
    assert report_failures(text) == {(n, s): v for n, s, v, _ in hit}, (report_failures(text), hit)
    assert report_counts(text).get(layer) == len(hit), report_counts(text)
    # nothing of the runs is left behind, hung or not
    live = api.get("/v1/sandboxes?state=live&metadata.sbx.fuzz=1").json()["sandboxes"]
    assert live == [], live

