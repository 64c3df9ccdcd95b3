"""sbxd REST API: per-sandbox metrics, usage, Prometheus metrics, the OpenAPI
document and health counts."""

import re
import time

from sbxd_fixture import Client, assert_error

MiB = 1 << 20
METRIC_FIELDS = {"cpu_seconds": (int, float), "memory_bytes": int, "memory_peak_bytes": int,
                 "memory_limit_bytes": int, "disk_used_bytes": int, "disk_limit_bytes": int,
                 "processes": int}


def metrics(api, sid):
    r = api.get(f"/v1/sandboxes/{sid}/metrics")
    assert r.status_code == 200, r.text
    m = r.json()
    assert set(m) == set(METRIC_FIELDS), set(m) ^ set(METRIC_FIELDS)
    for k, t in METRIC_FIELDS.items():
        assert isinstance(m[k], t) and not isinstance(m[k], bool) and m[k] >= 0, (k, m[k])
    return m


def test_metrics_fields_and_plausible_values(api):
    sid = api.create(memory_mb=512, disk_mb=256)["id"]
    m0 = metrics(api, sid)
    assert m0["memory_limit_bytes"] == 512 * MiB
    assert m0["disk_limit_bytes"] == 256 * MiB
    assert m0["memory_peak_bytes"] >= m0["memory_bytes"]
    # a process holding 100 MiB of touched memory
    pid = api.background(sid, ["/usr/bin/python3", "-c",
                               "import time; b = bytearray(100 << 20)\n"
                               "for i in range(0, len(b), 4096): b[i] = 1\n"
                               "print('ready', flush=True); time.sleep(60)"])
    deadline = time.monotonic() + 10
    while True:
        m1 = metrics(api, sid)
        if m1["memory_bytes"] >= 90 * MiB or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert 90 * MiB <= m1["memory_bytes"] <= 512 * MiB, m1
    assert m1["memory_peak_bytes"] >= m1["memory_bytes"]
    assert m1["processes"] >= 1, m1
    assert api.delete(f"/v1/sandboxes/{sid}/commands/{pid}").status_code == 204
    # CPU: a second of busy loop shows
    api.run(sid, "timeout 1 sh -c 'while :; do :; done'; true", timeout_s=10)
    m2 = metrics(api, sid)
    assert m2["cpu_seconds"] - m1["cpu_seconds"] >= 0.5, (m1, m2)
    assert m2["memory_peak_bytes"] >= 90 * MiB
    # disk: a 20 MB file shows in disk_used_bytes
    api.sh(sid, "head -c 20000000 /dev/urandom > big.bin")
    m3 = metrics(api, sid)
    assert m3["disk_used_bytes"] - m2["disk_used_bytes"] >= 19_000_000, (m2, m3)
    assert m3["disk_used_bytes"] <= m3["disk_limit_bytes"]
    api.sh(sid, "rm big.bin")
    m4 = metrics(api, sid)
    assert m4["disk_used_bytes"] < m3["disk_used_bytes"] - 15_000_000, (m3, m4)


def test_metrics_of_an_ended_sandbox(api, sandbox):
    sid = sandbox["id"]
    api.delete(f"/v1/sandboxes/{sid}")
    r = api.get(f"/v1/sandboxes/{sid}/metrics")
    assert r.status_code in (200, 409), r.text
    if r.status_code == 409:
        assert_error(r, 409, "conflict")


def test_usage(api, other):
    fields = {"key": str, "sandbox_seconds": (int, float), "vcpu_seconds": (int, float),
              "gib_seconds": (int, float), "sandboxes_created": int}
    u0 = other.get("/v1/usage").json()
    assert set(u0) == set(fields), u0
    for k, t in fields.items():
        assert isinstance(u0[k], t), (k, u0[k])
    assert u0["key"] == "other"
    assert isinstance(api.get("/v1/usage").json()["key"], str)
    sid = other.create(cpus=1.0)["id"]
    other.run(sid, "timeout 1 sh -c 'while :; do :; done'; true", timeout_s=10)
    time.sleep(1)
    other.delete(f"/v1/sandboxes/{sid}")
    u1 = other.get("/v1/usage").json()
    assert u1["sandboxes_created"] == u0["sandboxes_created"] + 1
    assert u1["sandbox_seconds"] - u0["sandbox_seconds"] >= 1.5, (u0, u1)
    assert u1["vcpu_seconds"] - u0["vcpu_seconds"] >= 0.5, (u0, u1)
    assert u1["gib_seconds"] >= u0["gib_seconds"]


def test_prometheus_metrics(api):
    sid = api.create()["id"]
    r = api.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers["Content-Type"]
    text = r.text
    m = re.search(r"^sbx_sandboxes_running(?:\{[^}]*\})? (\d+(?:\.\d+)?)$", text, re.M)
    assert m, text[:2000]
    health = Client(api.daemon, None).get("/v1/health").json()
    assert float(m.group(1)) == health["sandboxes_running"] >= 1
    assert "# TYPE sbx_sandboxes_running gauge" in text
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$", line), line
    api.delete(f"/v1/sandboxes/{sid}")
    m2 = re.search(r"^sbx_sandboxes_running(?:\{[^}]*\})? (\d+)", api.get("/metrics").text, re.M)
    assert int(m2.group(1)) == int(float(m.group(1))) - 1


def test_openapi_document(api):
    r = api.get("/v1/openapi.json")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json")
    doc = r.json()
    assert isinstance(doc["openapi"], str) and doc["openapi"].startswith("3.1"), doc.get("openapi")
    assert "/v1/sandboxes" in doc["paths"] and "/v1/sandboxes/{id}/commands" in doc["paths"], list(doc["paths"])


def test_health_counts_running_sandboxes(api):
    c = Client(api.daemon, None)
    n0 = c.get("/v1/health").json()["sandboxes_running"]
    sid = api.create()["id"]
    assert c.get("/v1/health").json()["sandboxes_running"] == n0 + 1
    api.delete(f"/v1/sandboxes/{sid}")
    assert c.get("/v1/health").json()["sandboxes_running"] == n0
