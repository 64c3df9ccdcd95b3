"""sbx fuzz: a seeded run against the real sbxd passes, is recorded in
SQLite and rendered as a self-contained HTML report (latencies from the
steps, failures grouped by mode, unsupported apart and out of the pass
rate); the same seed gives the same tests, and `sbx fuzz diff` tells what
changed between two runs; the progress is a bar on a terminal with the
failures above it, plain lines otherwise; bad arguments are usage errors."""

import html.parser
import json
import math
import os
import pty
import re
import select
import time
import shutil
import sqlite3
import subprocess

import pytest

SBX = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx"))


def fuzz(*args, env=None):
    return subprocess.run([SBX, "fuzz", *args], capture_output=True, text=True, timeout=600, env=env)


BAD_KEY = "not-a-key-of-this-sbxd-0123456789"  # every create is refused: a deterministic failure
DOMAINS = ["fs", "encoding", "exec", "lang", "lifecycle", "limits", "security", "data", "sdlc", "network"]


class Page(html.parser.HTMLParser):
    """What a report shows: its tables by id (rows of cell texts), its
    <details> groups (attributes, reason, members with their evidence),
    the elements and attributes it has, and its text."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tables, self.groups, self.tags, self.attrs, self.text = {}, [], [], [], []
        self.table = self.row = self.cell = self.group = self.member = None
        self.in_reason = self.in_pre = self.in_why = False
        self.svgs, self.svg_text = {}, {}
        self.svg = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag == "table":
            self.table = self.tables.setdefault(a.get("id", ""), [])
        elif tag == "tr" and self.table is not None:
            self.row = []
            self.table.append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = ""
        elif tag == "details":
            self.group = {**a, "reason": "", "members": []}
            self.groups.append(self.group)
        elif tag == "code" and a.get("class") == "reason":
            self.in_reason = True
        elif tag == "div" and a.get("class") == "test" and self.group is not None:
            self.member = {"name": a["data-name"], "seed": int(a["data-seed"]), "why": "", "evidence": ""}
            self.group["members"].append(self.member)
        elif tag == "span" and a.get("class") == "why":
            self.in_why = True
        elif tag == "pre":
            self.in_pre = True
        elif tag == "svg":
            self.svg = self.svgs.setdefault(a.get("id", ""), [])
            self.svg_words = self.svg_text.setdefault(a.get("id", ""), [])
        elif self.svg is not None:
            self.svg.append((tag, a))

    def handle_endtag(self, tag):
        if tag == "table":
            self.table = None
        elif tag in ("td", "th") and self.cell is not None:
            self.row.append(self.cell)
            self.cell = None
        elif tag == "details":
            self.group = None
        elif tag == "code":
            self.in_reason = False
        elif tag == "span":
            self.in_why = False
        elif tag == "pre":
            self.in_pre = False
        elif tag == "svg":
            self.svg = None

    def handle_data(self, data):
        self.text.append(data)
        if self.svg is not None:
            self.svg_words.append(data)
        if self.cell is not None:
            self.cell += data
        if self.in_reason:
            self.group["reason"] += data
        if self.member is not None and self.in_why:
            self.member["why"] += data
        if self.member is not None and self.in_pre:
            self.member["evidence"] += data

    def rows(self, table):
        """The rows of table `table` as dicts by its header."""
        head, *body = self.tables[table]
        return [dict(zip(head, r)) for r in body]


def assert_self_contained(text):
    page = Page(text)
    fetching = {"script", "link", "img", "iframe", "object", "embed", "base", "image", "use", "foreignobject"}
    assert not fetching & set(page.tags), fetching & set(page.tags)
    for name, value in page.attrs:
        assert name not in ("src", "href", "xmlns", "srcset") and not name.startswith("on"), (name, value)
        assert "http:" not in (value or "") and "https:" not in (value or ""), (name, value)
    assert "url(" not in text and "@import" not in text
    return page


def nearest_rank(values, q):
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


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
    page = assert_self_contained(text)
    assert "encoding" in text and "exec.exit_code" not in text  # no failures listed
    assert "None." in text and not page.groups
    # the latencies are those of the run's steps: real counts, the same
    # nearest-rank percentiles (the query once failed unnoticed: all zeros)
    c = sqlite3.connect(db)
    steps = {}
    for op, ms in c.execute("SELECT s.op, s.ms FROM steps s JOIN tests t ON t.id = s.test WHERE t.run = 1"):
        steps.setdefault(op, []).append(ms)
    c.close()
    latency = {r["operation"]: r for r in page.rows("latency")}
    assert set(latency) == set(steps) and {"create", "exec", "upload", "download", "delete"} <= set(latency)
    for op, ms in steps.items():
        row = latency[op]
        assert int(row["steps"]) == len(ms), (op, row)
        for col, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            assert abs(float(row[col]) - nearest_rank(ms, q)) < 0.006, (op, col, row)
        assert abs(float(row["max"]) - max(ms)) < 0.006
        assert 0 < float(row["p50"]) <= float(row["p90"]) <= float(row["p99"]) <= float(row["max"]), row
    assert float(latency["create"]["p50"]) >= 1  # a sandbox is not made in under a millisecond
    # both charts, inline: a bar per domain, a bar pair per operation
    assert {"fs", "encoding", "exec"} <= set(page.svg_text["domain-chart"])
    assert set(steps) <= set(page.svg_text["latency-chart"])
    assert len([e for e in page.svgs["latency-chart"] if e[0] == "rect"]) == 2 * len(steps)
    assert page.rows("domains")[-1]["pass rate"] == "100.0%"
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


# --------------------------------------------------------------------------
# the report's content, the diff, the progress, the usage text


def run_into(db, url, key, *args):
    return fuzz("run", "--target", url, "--key", key, "--db", db, *args)


def rows_of(db, run):
    """{id: (domain, name, seed)} of a run, and the ids by domain."""
    c = sqlite3.connect(db)
    rows = c.execute("SELECT id, domain, name, seed FROM tests WHERE run = ? ORDER BY id", (run,)).fetchall()
    c.close()
    by_domain = {}
    for i, d, _, _ in rows:
        by_domain.setdefault(d, []).append(i)
    return {i: (d, n, s) for i, d, n, s in rows}, by_domain


def unsigned(seed):
    return seed % (1 << 64)  # SQLite keeps the 64-bit seeds signed


def test_report_groups_failures_by_mode_and_keeps_unsupported_apart(api, sbxd_daemon, tmp_path):
    """A real run, then in a copy of its file (sqlite3) failures of three
    modes, unsupported tests and an unfinished one: the report groups the
    failures by verdict and normalised reason, largest first, with each
    member's evidence; lists the unsupported apart with their reasons; and
    counts the pass rate as passed / (ran - unsupported)."""
    db = str(tmp_path / "run.db")
    r = run_into(db, sbxd_daemon.url, api.key, "--count", "12", "--seed", "7", "--jobs", "3", "--domain", "fs,exec")
    assert r.returncode == 0, r.stdout + r.stderr
    edited = str(tmp_path / "edited.db")
    shutil.copy(db, edited)
    tests, by = rows_of(edited, 1)
    fs, ex = by["fs"], by["exec"]
    assert len(fs) == 6 and len(ex) == 6
    upload = "upload <path>: N bytes missing inside, sha256 <id>"
    made = {  # test id: (verdict, reason, the mode it belongs to)
        fs[0]: ("sandbox", "upload /home/user/x1/f.bin: 17 bytes missing inside, sha256 e3b0c44298fc1c14",
                upload),
        fs[1]: ("sandbox", "upload /tmp/fz/deep/a/b/c.txt: 4096 bytes missing inside, sha256 5d41402abc4b2a76",
                upload),
        fs[2]: ("sandbox", "upload /w: 1 bytes missing inside, sha256 9e107d9d372bb6826bd81d35", upload),
        ex[0]: ("interface", "exit 3 came back as 4", "exit N came back as N"),
        ex[1]: ("interface", "exit 255 came back as 0", "exit N came back as N"),
        ex[2]: ("interface", "create: the answer has no sandbox id", "create: the answer has no sandbox id"),
        fs[3]: ("unsupported", "a tool is missing from this template: perl", None),
        ex[3]: ("unsupported", "no matplotlib in this template", None),
    }
    big = "x" * 20000
    c = sqlite3.connect(edited)
    with c:
        for i, (verdict, why, _) in made.items():
            c.execute("UPDATE tests SET verdict = ?, why = ? WHERE id = ?", (verdict, why, i))
            c.execute("INSERT INTO evidence(test, what, text) VALUES(?, ?, ?)", (i, verdict, why))
        c.execute("INSERT INTO evidence(test, what, text) VALUES(?, 'inside', '<b>not html</b> & more')", (fs[0],))
        c.execute("INSERT INTO evidence(test, what, text) VALUES(?, 'output', ?)", (ex[0], big))
        c.execute("UPDATE tests SET verdict = NULL, why = NULL WHERE id = ?", (ex[4],))  # cut off
    c.close()
    html = tmp_path / "r.html"
    r = fuzz("report", edited, "-o", str(html))
    assert r.returncode == 0, r.stderr
    text = html.read_text()
    page = assert_self_contained(text)
    assert "<b>not html</b>" not in text  # evidence is escaped
    failures = [g for g in page.groups if g["data-verdict"] != "unsupported"]
    assert [(g["data-verdict"], int(g["data-count"]), g["reason"]) for g in failures] == [
        ("sandbox", 3, upload), ("interface", 2, "exit N came back as N"),
        ("interface", 1, "create: the answer has no sandbox id")], failures
    for g in failures:
        members = {(m["name"], m["seed"]): m for m in g["members"]}
        want = {i for i, (v, _, mode) in made.items() if v == g["data-verdict"] and mode == g["reason"]}
        assert set(members) == {(tests[i][1], unsigned(tests[i][2])) for i in want}, g
        for i in want:
            m = members[(tests[i][1], unsigned(tests[i][2]))]
            assert m["why"] == made[i][1] and made[i][1] in m["evidence"], m
    upload_group = {m["seed"]: m for m in failures[0]["members"]}
    assert "inside: <b>not html</b> & more" in upload_group[unsigned(tests[fs[0]][2])]["evidence"]
    exit_group = {m["seed"]: m for m in failures[1]["members"]}
    cut = exit_group[unsigned(tests[ex[0]][2])]["evidence"]
    assert "[... " in cut and "bytes more]" in cut and len(cut) < 6000, len(cut)  # 20,000 bytes cut
    # the unsupported apart, with their reasons, not among the failures
    unsupported = [m for g in page.groups if g["data-verdict"] == "unsupported" for m in g["members"]]
    assert {(m["name"], m["seed"], m["why"]) for m in unsupported} == {
        (tests[i][1], unsigned(tests[i][2]), made[i][1]) for i in (fs[3], ex[3])}
    # the rates: fs 2 passed of 6, 3 failed, 1 unsupported: 2 / (6 - 1 - 0 unfinished) = 40%;
    # exec 1 passed, 3 failed, 1 unsupported, 1 unfinished: 1 / 4 = 25%
    rows = {r["domain"]: r for r in page.rows("domains")}
    want = {"fs": ["6", "2", "3", "1", "0", "40.0%"], "exec": ["6", "1", "3", "1", "1", "25.0%"],
            "all": ["12", "3", "6", "2", "1", "33.3%"]}
    cols = ["tests", "passed", "failed", "unsupported", "unfinished", "pass rate"]
    assert {d: [rows[d][k] for k in cols] for d in rows} == want, rows
    assert re.search(r'id="pass-rate"[^>]*>33\.3%<', text)
    assert re.search(r'id="failures">6 failed tests', text) and re.search(r'id="unsupported">2 tests', text)
    verdicts = {r["verdict"]: r["tests"] for r in page.rows("verdicts")}
    assert verdicts == {"pass": "3", "sandbox": "3", "interface": "3", "unsupported": "2", "unfinished": "1"}


def test_report_refuses_what_it_cannot_read(sbxd_daemon, tmp_path):
    """An unknown run, a file that is no results file, and a query that fails
    while it runs are errors: a message, exit 125, and no page (an old one
    is left as it was), never a page with empty tables."""
    db = str(tmp_path / "bad.db")
    r = run_into(db, sbxd_daemon.url, BAD_KEY, "--count", "2", "--seed", "1", "--domain", "fs")
    assert r.returncode == 1, r.stdout + r.stderr
    out = tmp_path / "r.html"
    out.write_text("old")

    def report(path, *args):
        r = fuzz("report", path, "-o", str(out), *args)
        assert r.returncode == 125 and out.read_text() == "old", (r.returncode, r.stderr)
        return r.stderr

    assert "run 9 is not in" in report(db, "--run", "9") and "it holds run 1" in report(db, "--run", "9")
    text = tmp_path / "text.db"
    text.write_text("not a database\n" * 100)
    assert "not an SQLite database" in report(str(text))
    no_steps = str(tmp_path / "no-steps.db")
    shutil.copy(db, no_steps)
    c = sqlite3.connect(no_steps)
    c.execute("DROP TABLE steps")
    c.commit()
    c.close()
    err = report(no_steps)
    assert "not an sbx fuzz results file" in err and "steps" in err, err
    # steps as a view that fails while it is read (abs() of the smallest
    # integer overflows): the query runs, and its failure is reported
    poisoned = str(tmp_path / "poisoned.db")
    shutil.copy(db, poisoned)
    c = sqlite3.connect(poisoned)
    with c:
        c.execute("ALTER TABLE steps RENAME TO steps_kept")
        c.execute("INSERT INTO steps_kept(test, op, ms, ok) SELECT min(id), 'create', -9223372036854775808, 1 FROM tests")
        c.execute("CREATE VIEW steps AS SELECT test, op, abs(CAST(ms AS INTEGER)) AS ms, ok FROM steps_kept")
    c.close()
    assert "integer overflow" in report(poisoned)
    assert fuzz("report", db, "--run", "x", "-o", str(out)).returncode == 2
    r = fuzz("report", db, "-o", str(out))
    assert r.returncode == 0 and "interface" in out.read_text(), r.stderr  # the file itself is fine


def diff(*args, cwd=None):
    return subprocess.run([SBX, "fuzz", "diff", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def percentiles(db, run, op):
    c = sqlite3.connect(db)
    ms = [m for (m,) in c.execute("SELECT s.ms FROM steps s JOIN tests t ON t.id = s.test WHERE t.run = ? AND s.op = ?",
                                  (run, op))]
    c.close()
    return nearest_rank(ms, 0.5), nearest_rank(ms, 0.9)


def test_diff_of_two_seeded_runs_and_a_regression(api, sbxd_daemon, tmp_path):
    db = str(tmp_path / "runs.db")
    for jobs in ("3", "2"):  # the same seed and count: the same tests, whatever the order they ran in
        r = run_into(db, sbxd_daemon.url, api.key, "--count", "12", "--seed", "11", "--jobs", jobs, "--domain",
                     "fs,exec")
        assert r.returncode == 0, r.stdout + r.stderr
    r = diff("--db", db, "1", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "12 matched by (name, seed), 0 new in B, 0 missing from B" in r.stdout, r.stdout
    assert "regressed 0, fixed 0, changed 0, unchanged 12" in r.stdout and "nothing regressed" in r.stdout
    assert re.search(r"^seed +11 +11$", r.stdout, re.M) and re.search(r"^jobs +3 +2 +\(differs\)$", r.stdout, re.M)
    r = diff("--db", db, "--json", "1", "2")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["summary"] == {"matched": 12, "unchanged": 12, "fixed": 0, "regressed": 0, "changed": 0, "new": 0,
                            "missing": 0} and j["tests"] == [] and j["regressed"] is False
    assert j["a"]["options"]["seed"] == 11 and j["b"]["run"] == 2 and j["a"]["totals"]["passed"] == 12
    assert [d["domain"] for d in j["domains"]] == ["exec", "fs", "all"]
    assert all(d["a"]["pass_rate"] == d["b"]["pass_rate"] == 1.0 and d["pass_rate_change"] == 0 for d in j["domains"])
    ops = {o["op"]: o for o in j["operations"]}
    for run, side in ((1, "a"), (2, "b")):
        p50, p90 = percentiles(db, run, "create")
        assert abs(ops["create"][side]["p50"] - p50) < 1e-6 and abs(ops["create"][side]["p90"] - p90) < 1e-6

    # a copy with every kind of change, made with sqlite3
    edited = str(tmp_path / "edited.db")
    shutil.copy(db, edited)
    t1, by1 = rows_of(edited, 1)
    t2, _ = rows_of(edited, 2)
    in2 = {(n, s): i for i, (_, n, s) in t2.items()}
    fs, ex = by1["fs"], by1["exec"]
    fixed, regressed, timed_out, changed, missing = fs[0], fs[1], ex[0], ex[1], ex[2]

    def twin(i):
        return in2[t1[i][1:]]

    c = sqlite3.connect(edited)
    with c:
        c.execute("UPDATE tests SET verdict = 'interface', why = 'exit 3 came back as 4' WHERE id IN (?, ?)",
                  (fixed, changed))
        c.execute("UPDATE tests SET verdict = 'sandbox', why = 'a directory listing disagrees' WHERE id IN (?, ?)",
                  (twin(regressed), twin(changed)))
        c.execute("UPDATE tests SET verdict = 'timeout', why = 'no answer in 600 s' WHERE id = ?", (twin(timed_out),))
        c.execute("DELETE FROM tests WHERE id = ?", (twin(missing),))
        c.execute("INSERT INTO tests(run, domain, name, seed, verdict, why, ms) "
                  "VALUES(2, 'fs', 'fs.brand_new', 5, 'pass', '', 1.0)")
        # run 2's sandboxes took ten times as long
        c.execute("UPDATE steps SET ms = ms * 10 WHERE op = 'create' AND test IN (SELECT id FROM tests WHERE run = 2)")
    c.close()
    r = diff(f"{edited}:1", f"{edited}:2")
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout

    def listed(title, i, verdicts, why=None):
        name, seed = t1[i][1], unsigned(t1[i][2])
        section = out.split(f"\n{title}")[1].split("\n\n")[0]
        line = f"  {name} seed {seed}: {verdicts}" + (f": {why}" if why else "")
        assert line in section.splitlines(), (line, section)

    listed("regressed, pass -> failure (2):", regressed, "pass -> sandbox", "a directory listing disagrees")
    listed("regressed, pass -> failure (2):", timed_out, "pass -> timeout", "no answer in 600 s")
    listed("fixed, failure -> pass (1):", fixed, "interface -> pass", "in A: exit 3 came back as 4")
    listed("changed (1):", changed, "interface -> sandbox", "a directory listing disagrees")
    listed("missing from B (1):", missing, "pass -> (none)")
    assert "  fs.brand_new seed 5: (none) -> pass" in out
    assert "11 matched by (name, seed), 1 new in B, 1 missing from B" in out
    assert "regressed 2, fixed 1, changed 1, unchanged 7" in out
    r = diff("--json", f"{edited}:1", f"{edited}:2")
    assert r.returncode == 1
    j = json.loads(r.stdout)
    assert j["summary"] == {"matched": 11, "unchanged": 7, "fixed": 1, "regressed": 2, "changed": 1, "new": 1,
                            "missing": 1} and j["regressed"] is True
    kinds = {(t["name"], int(t["seed"])): (t["change"], t["a"] and t["a"]["verdict"], t["b"] and t["b"]["verdict"])
             for t in j["tests"]}
    key = lambda i: (t1[i][1], unsigned(t1[i][2]))  # noqa: E731
    assert kinds == {key(fixed): ("fixed", "interface", "pass"), key(regressed): ("regressed", "pass", "sandbox"),
                     key(timed_out): ("regressed", "pass", "timeout"), key(changed): ("changed", "interface", "sandbox"),
                     key(missing): ("missing", "pass", None), ("fs.brand_new", 5): ("new", None, "pass")}, kinds
    dom = {d["domain"]: d for d in j["domains"]}
    # fs: A 5 of 6 pass (fixed was failing); B 6 of 7 (regressed fails, brand_new passes)
    # exec: A 5 of 6 (changed was failing); B 2 of 5 (timed_out and changed fail, missing is gone)
    assert (dom["fs"]["a"]["passed"], dom["fs"]["a"]["failed"], dom["fs"]["b"]["passed"], dom["fs"]["b"]["failed"]) \
        == (5, 1, 6, 1)
    assert abs(dom["fs"]["pass_rate_change"] - (6 / 7 - 5 / 6)) < 1e-9
    assert abs(dom["exec"]["pass_rate_change"] - (3 / 5 - 5 / 6)) < 1e-9, dom["exec"]
    create = {o["op"]: o for o in j["operations"]}["create"]
    (a50, a90), (b50, b90) = percentiles(edited, 1, "create"), percentiles(edited, 2, "create")
    assert abs(create["a"]["p50"] - a50) < 1e-6 and abs(create["b"]["p90"] - b90) < 1e-6
    assert abs(create["p50_change_ms"] - (b50 - a50)) < 1e-6 and abs(create["p90_change_ms"] - (b90 - a90)) < 1e-6
    # across files: run 2 as it was against run 2 edited: three passes fail
    # now (changed's twin passed), and creates take about ten times as long
    r = diff(f"{db}:2", f"{edited}:2")
    assert r.returncode == 1
    assert "regressed 3, fixed 0, changed 0, unchanged 8" in r.stdout, r.stdout
    (a50, a90), (b50, b90) = percentiles(db, 2, "create"), percentiles(edited, 2, "create")
    c50, c90 = f"{100 * (b50 - a50) / a50:+.0f}%", f"{100 * (b90 - a90) / a90:+.0f}%"
    line = f"  {'create':<16} {a50:9.2f} {b50:9.2f} {c50:>8} {a90:9.2f} {b90:9.2f} {c90:>8}"
    assert line in r.stdout.splitlines(), (line, r.stdout)
    assert b50 > 5 * a50  # (not ten times: the missing test's steps are gone, the new one has none)
    # backwards, what was fixed regressed and what regressed is fixed
    r = diff("--json", f"{edited}:2", f"{edited}:1")
    assert r.returncode == 1
    assert json.loads(r.stdout)["summary"] == {"matched": 11, "unchanged": 7, "fixed": 2, "regressed": 1,
                                               "changed": 1, "new": 1, "missing": 1}




def test_diff_bad_arguments(sbxd_daemon, tmp_path):
    db = str(tmp_path / "one.db")
    assert run_into(db, sbxd_daemon.url, BAD_KEY, "--count", "2", "--seed", "3", "--domain", "exec").returncode == 1
    other = str(tmp_path / "other.db")
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE runs(id INTEGER PRIMARY KEY, name TEXT)")
    c.close()
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 200)

    def refused(*args, says, cwd=None):
        r = diff(*args, cwd=cwd)
        assert r.returncode == 2 and says in r.stderr and not r.stdout, (args, r.returncode, r.stdout, r.stderr)

    refused(says="give two runs")
    refused("--db", db, "1", says="give two runs")
    refused("--db", db, "1", "2", "3", says="give two runs")
    refused("--db", db, "1", "x", says="RUN_B 'x'")
    refused("--db", db, "0", "1", says="RUN_A '0'")
    refused(f"{db}:", "1", says="RUN_A")
    refused("--db", db, "--frobnicate", "1", "1", says="usage")
    refused("--db", db, "1", "9", says="RUN_B: run 9 is not in")
    refused(f"{text}:1", f"{db}:1", says="not an sbx fuzz results file (not an SQLite database)")
    refused(f"{db}:1", f"{other}:1", says="not an sbx fuzz results file (no such column: started_at)")
    refused(f"{tmp_path}/missing.db:1", f"{db}:1", says="No such file or directory")
    refused("1", "1", says="cannot open fuzz-results.db", cwd=str(tmp_path))  # the default --db
    r = diff("--db", db, "1", "1")
    assert r.returncode == 0 and "nothing regressed" in r.stdout, r.stdout + r.stderr
    r = diff("--help")
    assert r.returncode == 0 and "FILE:RUN" in r.stdout


def run_on_a_terminal(args, within=60):
    """sbx fuzz ARGS with stderr on a pseudo-terminal: (exit, what the
    terminal showed, stdout)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([SBX, "fuzz", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    shown = b""
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not chunk:
                break
            shown += chunk
        out = p.communicate(timeout=within)[0]
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, shown.decode(), out.decode()


def test_progress_bar_on_a_terminal_with_failures_above_it(sbxd_daemon, tmp_path):
    db = str(tmp_path / "tty.db")
    rc, shown, out = run_on_a_terminal(["run", "--target", sbxd_daemon.url, "--key", BAD_KEY, "--count", "3",
                                        "--seed", "4", "--jobs", "1", "--domain", "fs", "--db", db])
    assert rc == 1 and "run 1: 0 passed, 3 failed" in out, (rc, shown, out)
    # each failure on a line of its own above the bar: the bar's line
    # cleared, the failure, a new line, the bar again
    tests, _ = rows_of(db, 1)
    for _, name, seed in tests.values():
        line = f"\r\x1b[Ksbx fuzz: {name} (seed {unsigned(seed)}): interface: create: "
        at = shown.find(line)
        assert at > 0, (line, shown)
        rest = shown[at + len(line):]
        assert re.match(r"[^\r\n]*\r?\n\r\[", rest), rest[:300]
    # the bar is drawn at the start and redrawn in place after each test
    bars = re.findall(r"\r\[(#*) *\] (\d+)/3 pass 0 fail (\d+) unsupported 0", shown)
    assert [(done, fail) for _, done, fail in bars] == [("0", "0"), ("1", "1"), ("2", "2"), ("3", "3")], shown
    assert len(bars[-1][0]) == 24 and bars[0][0] == ""
    assert "done," not in shown  # the plain lines are for logs


def test_progress_plain_lines_when_not_a_terminal(sbxd_daemon, tmp_path):
    db = str(tmp_path / "log.db")
    r = run_into(db, sbxd_daemon.url, BAD_KEY, "--count", "3", "--seed", "4", "--jobs", "1", "--domain", "fs")
    assert r.returncode == 1
    assert "\r" not in r.stderr and "\x1b" not in r.stderr, repr(r.stderr)
    lines = r.stderr.splitlines()
    assert "sbx fuzz: 3/3 done, 0 passed, 3 failed" in lines, lines
    tests, _ = rows_of(db, 1)
    for _, name, seed in tests.values():
        assert any(x.startswith(f"sbx fuzz: {name} (seed {unsigned(seed)}): interface: create: ") for x in lines), lines


def test_help_lists_every_option_and_domain():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
    r = fuzz("--help", env=env)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    # every option each verb takes (its own --help), and the domains the run knows
    for verb in ("run", "report", "diff"):
        h = fuzz(verb, "--help", env=env)
        assert h.returncode == 0, (verb, h.stderr)
        for opt in set(re.findall(r"--[a-z]+", h.stdout)):
            assert opt in text, (verb, opt)
    for opt in ("--interface", "--resume", "--template", "--json", "--output", "--run", "--db", "--jobs"):
        assert opt in text, opt
    r = fuzz("run", "--target", "x", "--key", "y", "--domain", "nope", env=env)
    known = r.stderr.split("none of ")[1].split("\n")[0].split(", ")
    assert known == DOMAINS, known
    assert [d.strip() for d in re.split(r"[,\s]+", text.split("only these domains (default all):")[1].split("--")[0])
            if d.strip()] == DOMAINS, text
    assert "(fs, encoding, exec)" not in text and "sbx fuzz diff" in text
    r = fuzz(env=env)
    assert r.returncode == 2 and "sbx fuzz run" in r.stderr and not r.stdout
    r = fuzz("frob", env=env)
    assert r.returncode == 2 and "unknown verb 'frob'" in r.stderr


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
