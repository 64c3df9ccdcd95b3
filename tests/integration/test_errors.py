"""Mistakes a user can make.  Every one must give a non-zero exit status,
exactly one line on stderr starting with 'sbx: ', nothing on stdout, and
leave nothing behind (no processes, cgroups, mounts or state files)."""

import os
import shutil
import subprocess

import pytest

from sbxtest import describe

FAILURE, CANNOT_EXEC, NOT_FOUND = 125, 126, 127


def check_error(r, code, *needles):
    assert r.returncode == code, describe(r)
    err = r.stderr.decode("utf-8", "replace")
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"want exactly one stderr line:\n{describe(r)}"
    assert lines[0].startswith("sbx: "), describe(r)
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    assert r.stdout == b"", describe(r)


USAGE_ERRORS = {
    "unknown-long-option": (["--bogus", "--", "true"], "--bogus"),
    "unknown-short-option": (["-Z", "--", "true"], "-Z"),
    "memory-garbage": (["--memory", "lots", "--", "true"], "--memory"),
    "memory-bad-unit": (["--memory", "12Q", "--", "true"], "--memory"),
    "memory-negative": (["--memory", "-5M", "--", "true"], "--memory"),
    "memory-zero": (["--memory", "0", "--", "true"], "--memory"),
    "memory-too-small": (["--memory", "1M", "--", "true"], "--memory"),
    "memory-overflow": (["--memory", "99999999999999999999T", "--", "true"], "--memory"),
    "cpus-garbage": (["--cpus", "abc", "--", "true"], "--cpus"),
    "cpus-zero": (["--cpus", "0", "--", "true"], "--cpus"),
    "cpus-negative": (["--cpus", "-1", "--", "true"], "--cpus"),
    "cpus-trailing": (["--cpus", "1.5x", "--", "true"], "--cpus"),
    "cpus-too-many": (["--cpus", "5000", "--", "true"], "--cpus"),
    "timeout-bad-unit": (["--timeout", "5x", "--", "true"], "--timeout"),
    "timeout-zero": (["--timeout", "0", "--", "true"], "--timeout"),
    "timeout-empty": (["--timeout", "", "--", "true"], "--timeout"),
    "timeout-negative": (["--timeout", "-3s", "--", "true"], "--timeout"),
    "pids-negative": (["--pids", "-3", "--", "true"], "--pids"),
    "pids-zero": (["--pids", "0", "--", "true"], "--pids"),
    "pids-garbage": (["--pids", "ten", "--", "true"], "--pids"),
    "pids-huge": (["--pids", "99999999999", "--", "true"], "--pids"),
    "disk-garbage": (["--disk", "big", "--", "true"], "--disk"),
    "shm-garbage": (["--shm-size", "x", "--", "true"], "--shm-size"),
    "missing-command": ([], "missing command"),
    "missing-command-after-dashes": (["--"], "missing command"),
    "empty-command": (["--", ""], "empty command"),
    "env-without-key": (["-e", "=v", "--", "true"], "-e"),
    "bad-template-name-slash": (["--template", "../etc", "--", "true"], "--template"),
    "bad-template-name-dot": (["--template", ".hidden", "--", "true"], "--template"),
    "net-open": (["--net", "open", "--", "true"], "--net"),
    "net-host": (["--net", "host", "--", "true"], "--net"),
    "hostname-bad": (["--hostname", "a b", "--", "true"], "--hostname"),
    "hostname-too-long": (["--hostname", "h" * 64, "--", "true"], "--hostname"),
    "workdir-relative": (["-w", "rel/dir", "--", "true"], "-w"),
    "workdir-dotdot": (["-w", "/tmp/../etc", "--", "true"], ".."),
    "bind-no-dest-colon-empty-host": (["--bind", ":/x", "--", "true"], "--bind"),
    "bind-relative-dest": (["--bind", "/usr/share:rel", "--", "true"], "absolute"),
    "bind-dotdot": (["--bind", "/usr/share:/a/../b", "--", "true"], ".."),
    "bind-dotdot-end": (["--ro-bind", "/usr/share:/a/..", "--", "true"], ".."),
    "bind-root": (["--bind", "/usr/share:/", "--", "true"], "root"),
    "bind-proc": (["--bind", "/usr/share:/proc", "--", "true"], "/proc"),
    "bind-under-proc": (["--ro-bind", "/usr/share:/proc/sys", "--", "true"], "/proc"),
    "bind-double-slash-proc": (["--ro-bind", "/usr/share://proc", "--", "true"], "/proc"),
    "bind-dev": (["--bind", "/usr/share:/dev/x", "--", "true"], "/dev"),
    "bind-sbx-init": (["--ro-bind", "/usr/bin/true:/.sbx/init", "--", "true"], "/.sbx"),
    "bind-missing-host": (["--bind", "/nonexistent-sbx-itest:/x", "--", "true"], "/nonexistent-sbx-itest"),
}


@pytest.mark.parametrize("args,needle", USAGE_ERRORS.values(), ids=USAGE_ERRORS.keys())
def test_usage_error(run, leaks, args, needle):
    r = run(args)
    check_error(r, FAILURE, needle)
    leaks.assert_clean()


# An option given without its value must say so, and name the option.
MISSING_VALUE = ["--memory", "--timeout", "--bind", "--user", "-e", "-w", "-u"]


@pytest.mark.parametrize("opt", MISSING_VALUE)
def test_option_missing_value(run, leaks, opt):
    r = run([opt])
    check_error(r, FAILURE, opt)
    assert "unknown" not in r.stderr.decode(errors="replace")
    assert all(c >= 0x20 for c in r.stderr.rstrip(b"\n")), r.stderr
    leaks.assert_clean()


# Paths that name /, /proc, /dev or /.sbx without saying so literally.  A
# purely lexical prefix check lets "." components through, and the bind then
# lands on the reserved path.  The worst: a bind over /.sbx/init (or over /
# or /.sbx with an init inside) would make sbx exec the *user's* file as the
# sandbox's PID 1, with every capability of the user namespace and no seccomp
# filter.  The fake init used here is the static test helper, which announces
# itself with its usage text.  (Found at 95de27c.)
DOT_BYPASS = {
    "dot-proc": "/./proc",
    "dot-dev": "/./dev",
    "dot-sbx-init": "/./.sbx/init",
    "dot-sbx": "/.//.sbx",
    "dot-root": "/.",
}


@pytest.mark.parametrize("dest", DOT_BYPASS.values(), ids=DOT_BYPASS.keys())
def test_bind_reserved_path_in_disguise(run, leaks, hostdir, helper_bin, dest):
    if dest.endswith("/init"):
        src = hostdir / "fake-init"
        shutil.copy(helper_bin, src)
    elif dest.endswith(".sbx"):
        src = hostdir / "dotsbx"
        src.mkdir(mode=0o755)
        shutil.copy(helper_bin, src / "init")
    elif dest == "/.":
        src = hostdir / "root"
        (src / ".sbx").mkdir(mode=0o755, parents=True)
        os.chmod(src, 0o755)
        shutil.copy(helper_bin, src / ".sbx" / "init")
    else:
        src = hostdir
    r = run(["--ro-bind", f"{src}:{dest}", "--", "true"])
    assert b"usage: sbx-test-helper" not in r.stderr, "the user's file ran as the sandbox's init"
    check_error(r, FAILURE)
    leaks.assert_clean()


def test_bind_through_template_symlink_into_proc(run, hostdir):
    # Bind destinations are checked lexically but resolved following the
    # template's symlinks: /etc/mtab -> ../proc/self/mounts must not put a
    # user mount over a file in /proc.  (Found at 95de27c.)
    f = hostdir / "mounts"
    f.write_text("not really mounts\n")
    r = run(["--ro-bind", f"{f}:/etc/mtab", "--", "cat", "/proc/1/mounts"])
    # Either refused, or placed somewhere harmless: /proc must stay proc.
    if r.returncode == 0:
        assert b"not really mounts" not in r.stdout
    else:
        check_error(r, FAILURE)


def test_command_not_found(run, leaks):
    r = run(["--", "nonexistent-cmd-sbx-itest"])
    check_error(r, NOT_FOUND, "command not found", "nonexistent-cmd-sbx-itest")
    leaks.assert_clean()


def test_command_not_found_absolute(run, leaks):
    r = run(["--", "/usr/bin/nonexistent-cmd-sbx-itest"])
    check_error(r, NOT_FOUND, "command not found")
    leaks.assert_clean()


@pytest.mark.parametrize("path", ["/etc/passwd", "/tmp", "/dev/null"])
def test_not_executable(run, leaks, path):
    r = run(["--", path])
    check_error(r, CANNOT_EXEC, path)
    leaks.assert_clean()


def test_noexec_script_in_bind(run, leaks, hostdir):
    f = hostdir / "script.sh"
    f.write_text("#!/bin/sh\necho should not run\n")
    f.chmod(0o644)
    r = run(["--ro-bind", f"{hostdir}:/w", "--", "/w/script.sh"])
    check_error(r, CANNOT_EXEC, "/w/script.sh")
    leaks.assert_clean()


def test_nonexistent_template(run, leaks):
    r = run(["--template", "no-such-template", "--", "true"])
    check_error(r, FAILURE, "no-such-template")
    leaks.assert_clean()


def test_bad_user_name(run, leaks):
    r = run(["--user", "no-such-user", "--", "true"])
    check_error(r, FAILURE, "no-such-user")
    leaks.assert_clean()


def test_uid_out_of_range(run, leaks):
    r = run(["--user", "70000", "--", "true"])
    check_error(r, FAILURE, "70000")
    leaks.assert_clean()


def test_workdir_missing(run, leaks):
    r = run(["-w", "/no/such/dir", "--", "true"])
    check_error(r, CANNOT_EXEC, "/no/such/dir")
    leaks.assert_clean()


def test_bind_into_read_only_usr(run, leaks, hostdir):
    r = run(["--bind", f"{hostdir}:/usr/sbx-itest", "--", "true"])
    check_error(r, FAILURE, "/usr/sbx-itest")
    leaks.assert_clean()


def test_bad_uid_base(run, leaks, sbx_env):
    r = run(["--", "true"], env=dict(sbx_env, SBX_UID_BASE="0"))
    check_error(r, FAILURE, "uid base 0")
    leaks.assert_clean()


def test_bad_sbx_init(run, leaks, sbx_env):
    r = run(["--", "true"], env=dict(sbx_env, SBX_INIT="/nonexistent/sbx-init"))
    check_error(r, FAILURE, "SBX_INIT")
    leaks.assert_clean()


def test_unknown_verb(run, sbx_bin, sbx_env):
    r = subprocess.run([sbx_bin, "frobnicate"], capture_output=True, env=sbx_env, timeout=30)
    check_error(r, FAILURE, "frobnicate")


def test_help_goes_to_stdout_and_succeeds(run):
    r = run(["--help"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.startswith("usage: sbx run")
    assert r.stderr == ""


def test_not_root(sbx_bin, sbx_env):
    # An ordinary user gets one line saying why, before anything is created.
    def drop():
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    r = subprocess.run([sbx_bin, "run", "--", "true"], capture_output=True, env=sbx_env, timeout=30,
                       preexec_fn=drop)
    check_error(r, FAILURE, "needs root")


def test_user_namespaces_unavailable(sbx_bin, sbx_env):
    # Inside a user namespace that maps only its own root, sbx is "root" but
    # cannot map the sandbox's uid range: a clear one-line error, exit 125.
    r = subprocess.run(["unshare", "--user", "--map-root-user", sbx_bin, "run", "--", "true"],
                       capture_output=True, env=sbx_env, timeout=30)
    assert r.returncode == FAILURE, describe(r)
    err = r.stderr.decode("utf-8", "replace")
    assert err.startswith("sbx: ") and len(err.splitlines()) == 1, describe(r)
    assert "host's root" in err, describe(r)
