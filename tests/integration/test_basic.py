"""What a user sees running commands: exit status, stdio, options, the
default environment, and the ephemeral, isolated file system."""

import errno
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from sbxtest import describe


def sh(run, script, *opts, **kw):
    return run([*opts, "--", "sh", "-c", script], **kw)


# ---------------------------------------------------------------- exit status


@pytest.mark.parametrize("code", [0, 1, 3, 255])
def test_exit_status_passthrough(run, code):
    r = sh(run, f"exit {code}")
    assert r.returncode == code, describe(r)
    assert r.stderr == b""


@pytest.mark.parametrize("sig,name", [(15, "TERM"), (9, "KILL"), (10, "USR1"), (1, "HUP")])
def test_killed_by_signal_is_128_plus_n(run, sig, name):
    r = sh(run, f"kill -{name} $$")
    assert r.returncode == 128 + sig, describe(r)


# ---------------------------------------------------------------- stdio


def test_stdin_to_stdout_byte_exact(run):
    data = bytes(range(256)) * 64 + os.urandom(1 << 20) + b"\0\0\0end\0"
    r = run(["--", "cat"], input=data)
    assert r.returncode == 0, describe(r)
    assert r.stdout == data
    assert r.stderr == b""


def test_stderr_byte_exact_and_separate(run):
    data = b"\0err\xff\xfe\n" + os.urandom(100000)
    r = run(["--", "sh", "-c", "cat >&2; printf out"], input=data)
    assert r.returncode == 0, describe(r)
    assert r.stderr == data
    assert r.stdout == b"out"


def test_empty_stdin_gives_eof(run):
    r = run(["--", "wc", "-c"], input=b"")
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == b"0"


def test_arguments_passed_verbatim(run):
    args = ["a b", "", "$HOME", "*", "'\"", "ü\u00e9", "-x", "--"]
    r = run(["--", "python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *args], text=True)
    assert r.returncode == 0, describe(r)
    assert json.loads(r.stdout) == args


def test_command_without_double_dash(run):
    r = run(["echo", "-n", "hi"])
    assert r.returncode == 0, describe(r)
    assert r.stdout == b"hi"


# ---------------------------------------------------------------- env, workdir


def test_env_option(run):
    r = run(["-e", "FOO=bar baz", "--env", "EMPTY=", "--", "sh", "-c", 'printf "%s|%s|%s" "$FOO" "${EMPTY-unset}" "$X"'],
            text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "bar baz||"


def test_env_last_setting_wins(run):
    r = run(["-e", "A=1", "-e", "A=2", "--", "env"], text=True)
    assert r.returncode == 0, describe(r)
    assert [l for l in r.stdout.splitlines() if l.startswith("A=")] == ["A=2"]


def test_env_key_alone_takes_host_value(run):
    r = run(["-e", "SBX_TEST_FROM_HOST", "-e", "SBX_TEST_UNSET_ON_HOST", "--", "env"], text=True,
            extra_env={"SBX_TEST_FROM_HOST": "hostvalue"})
    assert r.returncode == 0, describe(r)
    assert "SBX_TEST_FROM_HOST=hostvalue" in r.stdout.splitlines()
    assert "SBX_TEST_UNSET_ON_HOST" not in r.stdout


def test_env_can_override_path(run):
    r = run(["-e", "PATH=/usr/bin", "--", "sh", "-c", 'echo "$PATH"'], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "/usr/bin"


def test_host_environment_does_not_leak(run):
    r = run(["--", "env"], text=True, extra_env={"SECRET_TOKEN": "hunter2", "LD_PRELOAD": "/nonexistent.so"})
    assert r.returncode == 0, describe(r)
    assert "hunter2" not in r.stdout
    keys = {l.split("=", 1)[0] for l in r.stdout.splitlines()}
    assert "SECRET_TOKEN" not in keys
    assert "LD_PRELOAD" not in keys
    assert keys <= {"PATH", "HOME", "USER", "LOGNAME", "HOSTNAME", "LANG", "TERM"}, keys


@pytest.mark.parametrize("flag", ["-w", "--workdir"])
def test_workdir(run, flag):
    r = run([flag, "/tmp", "--", "pwd"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "/tmp"


def test_workdir_root(run):
    r = run(["-w", "/", "--", "pwd"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "/"


# ---------------------------------------------------------------- users


def test_default_user(run):
    r = sh(run, 'id -u; id -g; id -un; echo "$HOME"; pwd; echo "$USER"; echo "$LOGNAME"', text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split("\n")[:7] == ["1000", "1000", "user", "/home/user", "/home/user", "user", "user"]


@pytest.mark.parametrize("who", ["root", "0"])
def test_user_root(run, who):
    r = sh(run, 'id -u; id -g; echo "$HOME"; pwd', "--user", who, text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split("\n")[:4] == ["0", "0", "/root", "/root"]


@pytest.mark.parametrize("flag", ["-u", "--user"])
def test_user_by_name(run, flag):
    r = sh(run, "id -u; echo $HOME", flag, "user", text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split("\n")[:2] == ["1000", "/home/user"]


def test_user_numeric_in_passwd(run):
    r = sh(run, "id -u; id -un; echo $HOME", "--user", "1000", text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split("\n")[:3] == ["1000", "user", "/home/user"]


def test_user_numeric_not_in_passwd(run):
    r = run(["--user", "4321", "--", "sh", "-c", "id -u; id -g; pwd; touch /tmp/x && stat -c %u /tmp/x"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split("\n")[:4] == ["4321", "4321", "/", "4321"]


def test_user_nobody(run):
    r = run(["--user", "nobody", "--", "id", "-u"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "65534"


def test_user_nobody_with_workdir(run):
    r = run(["--user", "nobody", "-w", "/", "--", "id", "-u"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "65534"


# ---------------------------------------------------------------- identity


def test_hostname_default(run):
    r = sh(run, 'hostname; echo "$HOSTNAME"; cat /etc/hostname; getent hosts "$(hostname)"', text=True)
    assert r.returncode == 0, describe(r)
    lines = r.stdout.splitlines()
    assert re.fullmatch(r"sbx-[0-9a-f]{12}", lines[0]), lines
    assert lines[1] == lines[0] and lines[2] == lines[0]
    assert lines[0] in lines[3]  # the hostname resolves


def test_hostname_differs_between_runs(run):
    a = run(["--", "hostname"], text=True).stdout
    b = run(["--", "hostname"], text=True).stdout
    assert a != b


def test_hostname_option(run):
    r = run(["--hostname", "my-box.example", "--", "hostname"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "my-box.example"


def test_passwd_has_user(run):
    r = run(["--", "cat", "/etc/passwd"], text=True)
    assert r.returncode == 0, describe(r)
    assert any(l.startswith("user:x:1000:1000:") and l.split(":")[5] == "/home/user" for l in r.stdout.splitlines())
    assert any(l.startswith("root:x:0:0:") for l in r.stdout.splitlines())


# ---------------------------------------------------------------- tools


def test_python3_works(run):
    r = run(["--", "python3", "-c", "import sys, os; print(6 * 7, os.getuid())"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "42 1000"


def test_cc_compiles_and_runs_in_tmp(run):
    src = b'#include <stdio.h>\nint main(void) { printf("compiled %d\\n", 6 * 7); return 7; }\n'
    r = sh(run, "cd /tmp && cat > t.c && cc -O0 -o t t.c && ./t", input=src, timeout=120)
    assert r.returncode == 7, describe(r)
    assert r.stdout == b"compiled 42\n"


# ---------------------------------------------------------------- file system


def test_root_writes_go_to_a_layer_that_vanishes(run, sbx_home):
    marker = f"sbx-itest-{os.getpid()}"
    r = sh(run, f"echo data > /{marker} && cat /{marker} && echo x > /etc/{marker} && rm /etc/passwd",
           "--user", "root", text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "data\n"
    # not on the host, not in the template
    assert not os.path.exists(f"/{marker}")
    assert not os.path.exists(os.path.join(sbx_home, "templates", "base", "rootfs", marker))
    assert os.path.exists(os.path.join(sbx_home, "templates", "base", "rootfs", "etc", "passwd"))
    # and gone in the next sandbox
    r = sh(run, f"test ! -e /{marker} && test ! -e /etc/{marker} && grep -q ^user: /etc/passwd", "--user", "root")
    assert r.returncode == 0, describe(r)


def test_user_writes_home_and_tmp_not_root(run):
    r = sh(run, "echo a > ~/f && echo b > /tmp/f && cat ~/f /tmp/f; echo c > /f", text=True)
    assert r.stdout == "a\nb\n"
    assert "Permission denied" in r.stderr
    assert r.returncode != 0


def test_usr_is_read_only_even_for_root(run):
    r = run(["--user", "root", "--", "python3", "-c",
             "import os, errno\n"
             "try:\n open('/usr/bin/sbx-itest', 'w')\n"
             "except OSError as e: print(errno.errorcode[e.errno])\n"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "EROFS"


WRITE_ERRNO = ("import sys, errno\n"
               "try:\n open(sys.argv[1], 'w').write('x'); print('OK')\n"
               "except OSError as e: print(errno.errorcode[e.errno])\n")


def test_ro_bind_dir_is_visible_and_read_only(run, hostdir):
    d = hostdir / "ro"
    d.mkdir()
    (d / "hello.txt").write_text("hello from host\n")
    os.chmod(d, 0o777)
    for who in ("user", "root"):
        r = run(["--user", who, "--ro-bind", f"{d}:/data", "--", "sh", "-c",
                 "cat /data/hello.txt; python3 -c \"$0\" /data/new; python3 -c \"$0\" /data/hello.txt",
                 WRITE_ERRNO], text=True)
        assert r.returncode == 0, describe(r)
        assert r.stdout.splitlines() == ["hello from host", "EROFS", "EROFS"], who
    assert sorted(os.listdir(d)) == ["hello.txt"]
    assert (d / "hello.txt").read_text() == "hello from host\n"


def test_ro_bind_file(run, hostdir):
    f = hostdir / "cfg"
    f.write_text("k=v\n")
    r = run(["--ro-bind", f"{f}:/etc/app.conf", "--", "sh", "-c", "cat /etc/app.conf; python3 -c \"$0\" /etc/app.conf",
             WRITE_ERRNO], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.splitlines() == ["k=v", "EROFS"]


def test_bind_is_writable_and_lands_on_host(run, hostdir, uid_base):
    d = hostdir / "rw"
    d.mkdir()
    os.chown(d, uid_base + 1000, uid_base + 1000)  # the sandbox's user owns it
    r = run(["--bind", f"{d}:/work", "-w", "/work", "--", "sh", "-c",
             "echo written > out.txt && mkdir sub && stat -c '%u %U' out.txt"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "1000 user"
    assert (d / "out.txt").read_text() == "written\n"
    st = os.stat(d / "out.txt")
    assert (st.st_uid, st.st_gid) == (uid_base + 1000, uid_base + 1000)
    assert (d / "sub").is_dir()


def test_bind_source_under_tmp(run):
    # The writable layer is a tmpfs mounted over /tmp of the sandbox's mount
    # namespace during setup: a bind source under the host's /tmp must still work.
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="sbx-itest-bind-") as d:
        os.chmod(d, 0o755)
        with open(os.path.join(d, "f"), "w") as f:
            f.write("under tmp\n")
        r = run(["--ro-bind", f"{d}:/src", "--", "cat", "/src/f"], text=True)
        assert r.returncode == 0, describe(r)
        assert r.stdout == "under tmp\n"
        r = run(["--ro-bind", f"{d}", "--", "cat", f"{d}/f"], text=True)  # HOST alone: same path inside
        assert r.returncode == 0, describe(r)
        assert r.stdout == "under tmp\n"


def test_bind_nests_into_new_directories(run, hostdir):
    (hostdir / "x").write_text("deep\n")
    r = run(["--ro-bind", f"{hostdir}:/a/b/c/d", "--", "cat", "/a/b/c/d/x"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "deep\n"


def test_bind_source_below_private_directory(run, hostdir):
    private = hostdir / "private"
    (private / "project").mkdir(parents=True)
    os.chmod(private / "project", 0o755)
    (private / "project" / "f").write_text("mine\n")
    os.chmod(private / "project" / "f", 0o644)
    os.chmod(private, 0o700)  # like /root: only the caller (host root) may enter
    r = run(["--ro-bind", f"{private / 'project'}:/src", "--", "cat", "/src/f"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "mine\n"


def test_sbx_home_below_private_directory(run, hostdir, sbx_env):
    private = hostdir / "private"
    private.mkdir(mode=0o700)
    env = dict(sbx_env, SBX_HOME=str(private / "sbx"))
    try:
        r = run(["--", "true"], env=env)
        assert r.returncode == 0, describe(r)
    finally:
        shutil.rmtree(private, ignore_errors=True)


CLOSED_STDIO = {
    "stdin": (0,),
    "stdout": (1,),
    "stderr": (2,),
    "stdin+stderr": (0, 2),
    "all": (0, 1, 2),
}


@pytest.mark.parametrize("closed", CLOSED_STDIO.values(), ids=CLOSED_STDIO.keys())
def test_closed_stdio_fds(run, hostdir, uid_base, closed):
    """`sbx run ... <&- >&- 2>&-` (or a daemon with closed stdio): the command
    still runs, its status comes back, and what was closed stays closed (or
    /dev/null): never one of sbx's own descriptors."""
    out = hostdir / "out"
    out.mkdir()
    os.chown(out, uid_base + 1000, uid_base + 1000)

    def close_fds():
        for fd in closed:
            os.close(fd)

    r = subprocess.run(
        run.argv([*run.helper_bind, "--bind", f"{out}:/out", "--", "sh", "-c",
                  'exec /opt/helper fds /out/fds']),
        env=run.env, preexec_fn=close_fds, timeout=30,
        stdin=None if 0 in closed else subprocess.DEVNULL,
        stdout=None if 1 in closed else subprocess.PIPE,
        stderr=None if 2 in closed else subprocess.PIPE)
    assert r.returncode == 0, describe(r)
    fds = {}
    for line in (out / "fds").read_text().splitlines():
        if line.startswith("fd "):
            _, num, target = line.split(" ", 2)
            fds[num] = target
    assert set(fds) <= {"0", "1", "2"}, fds
    for fd in closed:
        assert fds.get(str(fd), "/dev/null") == "/dev/null", fds


def test_disk_option_sets_writable_layer_size(run):
    r = run(["--disk", "40M", "--", "df", "-k", "/"], text=True)
    assert r.returncode == 0, describe(r)
    size_kb = int(r.stdout.splitlines()[1].split()[1])
    assert 38 * 1024 <= size_kb <= 40 * 1024, r.stdout


def test_shm_size_option(run):
    r = run(["--shm-size", "8M", "--", "df", "-k", "/dev/shm"], text=True)
    assert r.returncode == 0, describe(r)
    assert int(r.stdout.splitlines()[1].split()[1]) == 8 * 1024, r.stdout


def test_errno_names_are_what_we_think(run):
    # guards the EROFS assertions above against a python quirk
    assert errno.errorcode[errno.EROFS] == "EROFS"
