"""The shipped `python` template (templates/python/): built from its spec
on a Debian root file system (scripts/test.sh makes it with mmdebstrap
before the tests: no test downloads anything), then used the way an agent
uses it: numpy, pandas and matplotlib from Debian, as the unprivileged
`user`, a plot written and read back."""

import os
import subprocess

import pytest

REPO = os.path.join(os.path.dirname(__file__), "..", "..")
CACHE = os.environ.get("SBX_TEMPLATE_CACHE", "/var/cache/sbx-tests")
TARBALL = os.path.join(CACHE, "debian-bookworm-python.tar.zst")


def test_python_template_builds_and_runs(api, sbxd_daemon):
    if not os.path.exists(TARBALL):
        pytest.skip(f"{TARBALL} missing: scripts/test.sh makes it (templates/python/rootfs.sh)")
    name = f"python-{os.getpid()}"
    env = {**os.environ, "SBX_URL": sbxd_daemon.url, "SBX_API_KEY": api.key, "SBX_TEMPLATE_CACHE": CACHE,
           "SBX": os.environ.get("SBX_BIN", os.path.join(REPO, "build", "sbx"))}
    r = subprocess.run([os.path.join(REPO, "templates", "python", "build.sh"), name], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "numpy 1." in r.stderr and "pandas" in r.stderr and "matplotlib" in r.stderr, r.stderr[-2000:]
    try:
        t = api.get(f"/v1/templates/{name}").json()
        assert t["user"] == "user" and t["workdir"] == "/home/user" and t["envs"]["MPLBACKEND"] == "Agg", t
        sid = api.create(template=name)["id"]
        out = api.sh(sid, "python3 -c '\n"
                          "import numpy as np, pandas as pd, matplotlib.pyplot as plt, os\n"
                          "df = pd.DataFrame({\"x\": np.arange(10), \"y\": np.arange(10) ** 2})\n"
                          "plt.plot(df.x, df.y); plt.savefig(\"plot.png\")\n"
                          "print(int(df.y.sum()), os.getcwd(), os.getuid(), os.path.getsize(\"plot.png\") > 1000)'\n"
                          "grep CapEff /proc/self/status; cat /etc/debian_version | cut -d. -f1")
        assert out == "285 /home/user 1000 True\nCapEff:\t0000000000000000\n12\n", out
        png = api.get_file(sid, "/home/user/plot.png")
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        api.delete(f"/v1/sandboxes/{sid}")
    finally:
        assert api.delete(f"/v1/templates/{name}").status_code in (204, 404)
