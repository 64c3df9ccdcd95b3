"""Fixtures for the sbx integration tests.

These tests drive the real `sbx run` binary as a user would.  They need root
(sbx maps the sandbox to an unprivileged uid range and creates cgroups).
Run them with `/usr/bin/python3 -m pytest tests/integration`.

Environment:
  SBX_BIN          the sbx binary (default <repo>/build/sbx)
  SBX_TEST_HELPER  the static in-sandbox helper (default
                   <repo>/build/tests/sbx-test-helper; if that does not exist
                   it is compiled from tests/helpers/sbx-test-helper.c into the
                   session's temporary directory)

The session uses a private SBX_HOME (a temporary directory, removed at the
end) and its own uid range (SBX_UID_BASE, see sbxtest.UID_BASE), so that the
leak checks can tell this session's sandbox processes from anybody else's.
"""

import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

from sbxtest import UID_BASE, LeakChecker, Runner, describe

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER_SRC = os.path.join(REPO, "tests", "helpers", "sbx-test-helper.c")


def _build_helper(outdir):
    out = os.path.join(outdir, "sbx-test-helper")
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-std=gnu17", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow",
           "-Wmissing-prototypes", "-Wstrict-prototypes", "-static", "-o", out, HELPER_SRC]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.fail("building the test helper failed:\n" + r.stderr)
    return out


@pytest.fixture(scope="session")
def tmp_root():
    if os.geteuid() != 0:
        pytest.skip("the sbx integration tests need root (sbx run needs root)")
    d = tempfile.mkdtemp(prefix="sbx-itest-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def sbx_bin():
    path = os.environ.get("SBX_BIN") or os.path.join(REPO, "build", "sbx")
    if not os.access(path, os.X_OK):
        pytest.fail(f"sbx binary not found at {path} (build with `ninja -C build` or set SBX_BIN)")
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def helper_bin(tmp_root):
    path = os.environ.get("SBX_TEST_HELPER") or os.path.join(REPO, "build", "tests", "sbx-test-helper")
    if os.access(path, os.X_OK):
        return os.path.abspath(path)
    if os.environ.get("SBX_TEST_HELPER"):
        pytest.fail(f"SBX_TEST_HELPER={path} is not executable")
    # tests/ is not (yet) part of the meson build: compile the helper here.
    d = os.path.join(tmp_root, "helper")
    os.mkdir(d)
    return _build_helper(d)


@pytest.fixture(scope="session")
def sbx_home(tmp_root):
    home = os.path.join(tmp_root, "home")
    os.mkdir(home)
    return home


@pytest.fixture(scope="session")
def uid_base():
    return UID_BASE


@pytest.fixture(scope="session")
def sbx_env(sbx_home):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SBX_HOME", "SBX_UID_BASE", "SBX_CGROUP_PARENT")}
    env["SBX_HOME"] = sbx_home
    env["SBX_UID_BASE"] = str(UID_BASE)
    return env


@pytest.fixture(scope="session")
def run(sbx_bin, helper_bin, sbx_env):
    """run(args, timeout=..., **subprocess_kw) -> CompletedProcess of `sbx run ARGS`.
    run.helper(helper_args, opts) runs the test helper at /opt/helper."""
    r = Runner(sbx_bin, helper_bin, sbx_env)
    # Warm up: the first run generates the base template in SBX_HOME.
    first = r(["--", "true"], timeout=120)
    assert first.returncode == 0, "sbx run -- true failed:\n" + describe(first)
    return r


@pytest.fixture
def procs():
    """Popen objects appended here are killed (by their pid) when the test ends."""
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def leaks(run, sbx_home):
    """A LeakChecker whose snapshot is taken when the test starts; whatever
    the test leaves behind is cleaned up afterwards (pass or fail)."""
    checker = LeakChecker(sbx_home)
    yield checker
    checker.cleanup()


@pytest.fixture
def hostdir(tmp_root, request):
    """A fresh host directory for bind sources, on a path every uid can
    traverse (pytest's own tmp_path lives under a 0700 directory, which the
    sandbox's uid range cannot enter)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    d = tempfile.mkdtemp(prefix=name + "-", dir=tmp_root)
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# sbxd REST API tests (test_api_*.py): fixtures live in sbxd_fixture.py

from sbxd_fixture import api, make_sbxd, other, sandbox, sbxd_daemon, scope  # noqa: E402,F401


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long-running API test (with its own time budget)")
