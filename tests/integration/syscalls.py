"""Watching what sbxd asks of the kernel, for promises no API call can show
(durability: "on disk before it is on record").

`traced(pid, calls)` attaches strace to every thread of a running sbxd (and
the tools it spawns) for the duration of a `with` block and yields a list
that fills, once the block ends, with one entry per traced call in the
order the kernel saw them: (name, text of the line).  Paths of fds are
shown (-y) and written buffers in full up to 8 KiB (-s), so that a row's
bytes can be found in a write to the database's WAL.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest


def _tracers(pid):
    """TracerPid of every thread of pid."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("TracerPid:"):
                        out.append(int(line.split()[1]))
        except FileNotFoundError:
            pass
    return out


@contextlib.contextmanager
def traced(pid, calls):
    if shutil.which("strace") is None:
        pytest.fail("strace not found (scripts/bootstrap.sh installs it)")
    d = tempfile.mkdtemp(prefix="sbx-strace-")
    out = os.path.join(d, "trace")
    p = subprocess.Popen(["strace", "-f", "-qq", "-y", "-s", "8192", "-e", "trace=" + ",".join(calls), "-o", out,
                          "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = []
    try:
        deadline = time.monotonic() + 20
        while not all(_tracers(pid)) and time.monotonic() < deadline:
            assert p.poll() is None, p.stderr.read().decode()
            time.sleep(0.02)
        assert all(_tracers(pid)), "strace did not attach to every thread of sbxd"
        yield seen
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        try:
            with open(out, errors="replace") as f:
                for line in f:
                    parts = line.split(None, 1)  # "PID call(...)"
                    if len(parts) == 2 and "(" in parts[1]:
                        seen.append((parts[1].split("(", 1)[0], parts[1]))
        finally:
            shutil.rmtree(d, ignore_errors=True)


def first(seen, pred, after=-1):
    """Index of the first entry after index `after` for which pred(name, line)."""
    for i in range(after + 1, len(seen)):
        if pred(*seen[i]):
            return i
    return None
