"""Isolation: the syscall filter, capabilities, file descriptors, what of the
host is visible (files, processes, sockets, /proc, /sys), and the uid
mapping.  Each check runs as the default user and, where it matters, as the
sandbox's root."""

import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time

import pytest

from sbxtest import UID_BASE, UID_COUNT, describe, parse_pairs, stop

USERS = ["user", "root"]

# try-syscall NAME -> expected result inside a sandbox.
EXPECTED = {name: "EPERM" for name in [
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "ptrace", "ptrace-child", "ptrace-init", "process_vm_readv", "process_vm_writev",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "mount", "umount2", "open_tree", "move_mount", "fsopen", "fspick", "fsmount", "mount_setattr",
    "pivot_root", "swapon", "swapoff", "reboot", "syslog", "open_by_handle_at", "name_to_handle_at",
    "io_uring_setup", "unshare-user", "unshare-net", "unshare-mount", "unshare-pid", "setns",
    "clone-newuser", "clone-newns", "clone-newnet",
    "socket-packet", "socket-raw", "socket-alg", "socket-vsock", "socket-key", "socketpair-alg",
    "ioctl-tiocsti", "chroot", "sethostname", "setuid0", "mknod-char",
    "kcmp", "pidfd_getfd", "acct", "settimeofday", "clock_settime", "iopl", "ioperm", "fanotify_init",
]}
EXPECTED.update({
    "getpid": "OK",
    "clone3": "ENOSYS",  # so that glibc falls back to clone(2), whose flags the filter can see
    "socket-inet-stream": "OK",
    "socket-unix": "OK",
    "x32": "KILLED-SIGSYS",
})
# As the sandbox's root, setuid(0) is a no-op that succeeds; everything else
# must fail exactly the same way.
EXPECTED_ROOT = dict(EXPECTED, setuid0="OK")


def try_syscalls(run, names, user):
    r = run.helper(["try-syscall", *names], ["--user", user], text=True)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    assert set(got) == set(names), describe(r)
    return got


@pytest.mark.parametrize("user", USERS)
def test_syscall_policy(run, user):
    want = EXPECTED if user == "user" else EXPECTED_ROOT
    got = try_syscalls(run, list(want), user)
    wrong = {n: f"got {got[n]}, want {w}" for n, w in want.items() if got[n] != w}
    assert not wrong, wrong


def test_helper_probes_are_meaningful_on_the_host(helper_bin):
    """Without the sandbox, (nearly) every probe must get something other than
    EPERM as root on the host: otherwise 'EPERM' inside proves nothing."""
    names = [n for n in EXPECTED if n not in ("x32", "ptrace-init", "ioctl-tiocsti", "getpid")]
    r = subprocess.run([helper_bin, "try-syscall", *names], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    eperm = sorted(n for n, v in got.items() if v == "EPERM")
    assert not eperm, f"probes that fail with EPERM even unconfined on the host: {eperm}"


def test_foreign_abi_x32_kills(run):
    got = try_syscalls(run, ["x32"], "user")
    assert got["x32"] == "KILLED-SIGSYS"


def test_foreign_abi_i386_kills(run, helper_bin):
    host = subprocess.run([helper_bin, "try-syscall", "i386"], capture_output=True, text=True, timeout=30)
    if parse_pairs(host.stdout).get("i386", "").startswith("KILLED-SIGSEGV"):
        pytest.skip("this kernel/CPU has no usable int $0x80 (it faults with SIGSEGV even without a filter)")
    got = try_syscalls(run, ["i386"], "user")
    assert got["i386"] == "KILLED-SIGSYS"


def test_netlink_route_socket_allowed(run):
    r = run(["--", "python3", "-c", "import socket; print([n for _, n in socket.if_nameindex()])"], text=True)
    assert r.returncode == 0, describe(r)
    assert "'lo'" in r.stdout


# ------------------------------------------------------------ capabilities


@pytest.mark.parametrize("user", USERS)
def test_no_capabilities_no_new_privs_seccomp(run, user):
    r = run.helper(["caps"], ["--user", user], text=True)
    assert r.returncode == 0, describe(r)
    got = {k.rstrip(":"): v.strip() for k, _, v in (l.partition("\t") for l in r.stdout.splitlines())}
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(got[cap], 16) == 0, (cap, got)
    assert got["NoNewPrivs"] == "1"
    assert got["Seccomp"] == "2"


def test_setuid_binaries_give_nothing(run):
    # su/passwd are setuid root on the host's /usr: nosuid + no_new_privs.
    su = "/usr/bin/su" if os.path.exists("/usr/bin/su") else "/bin/su"
    if not os.path.exists(su):
        pytest.skip("no su on this host")
    r = run(["--", "sh", "-c", f"{su} -c id root </dev/null; id -u"], text=True)
    assert r.stdout.strip().splitlines()[-1] == "1000", describe(r)
    assert "uid=0" not in r.stdout


# ------------------------------------------------------------ file descriptors


def _open_extra_fd(path, num):
    fd = os.open(path, os.O_RDONLY)
    os.dup2(fd, num, inheritable=True)
    os.close(fd)
    return num


@pytest.mark.parametrize("user", USERS)
def test_only_stdio_fds_reach_the_command(run, user):
    extra = _open_extra_fd("/etc/hostname" if os.path.exists("/etc/hostname") else "/", 97)
    try:
        r = run.helper(["fds"], ["--user", user], text=True, pass_fds=(extra,))
    finally:
        os.close(extra)
    assert r.returncode == 0, describe(r)
    assert r.stdout.splitlines()[0] == "fds 0 1 2", describe(r)


def test_caller_fds_do_not_reach_sandbox_init(run):
    extra = _open_extra_fd("/", 97)
    try:
        r = run(["--user", "root", "--", "ls", "/proc/1/fd"], text=True, pass_fds=(extra,))
    finally:
        os.close(extra)
    assert r.returncode == 0, describe(r)
    assert "97" not in r.stdout.split(), r.stdout


# ------------------------------------------------------------ host files


def test_host_files_outside_template_invisible(run, hostdir):
    (hostdir / "secret.txt").write_text("host secret\n")
    os.chmod(hostdir / "secret.txt", 0o644)
    tmp_marker = f"/tmp/sbx-itest-visible-{os.getpid()}"
    with open(tmp_marker, "w") as f:
        f.write("x")
    try:
        for user in USERS:
            r = run(["--user", user, "--", "sh", "-c",
                     'for p in "$@"; do test -e "$p" && echo "VISIBLE $p"; done; ls -A /tmp; true',
                     "sh", str(hostdir / "secret.txt"), str(hostdir), tmp_marker, "/var/lib/sbx",
                     run.env["SBX_HOME"], "/etc/shadow", "/home/user/.bashrc"], text=True)
            assert r.returncode == 0, describe(r)
            assert "VISIBLE" not in r.stdout, r.stdout
            assert r.stdout.strip() == "", f"sandbox /tmp not empty: {r.stdout!r}"
    finally:
        os.unlink(tmp_marker)


def test_host_root_home_invisible(run):
    marker = f"/root/.sbx-itest-{os.getpid()}"
    with open(marker, "w") as f:
        f.write("x")
    try:
        r = run(["--user", "root", "--", "ls", "-A", "/root"], text=True)
        assert r.returncode == 0, describe(r)
        assert r.stdout == "", r.stdout
    finally:
        os.unlink(marker)


def test_root_fs_is_template_plus_host_usr(run):
    r = run(["--", "ls", "-A", "/"], text=True)
    assert r.returncode == 0, describe(r)
    top = set(r.stdout.split())
    assert top <= {"bin", "sbin", "lib", "lib64", "lib32", "libx32", "usr", "etc", "root", "home", "tmp",
                   "var", "run", "opt", "mnt", "proc", "dev", "sys", ".sbx", "srv", "media"}, top
    r = run(["--", "ls", "-A", "/run", "/mnt", "/opt", "/var/tmp", "/sys"], text=True)
    assert r.returncode == 0, describe(r)
    assert [l for l in r.stdout.splitlines() if l and not l.endswith(":")] == [], r.stdout


# ------------------------------------------------------------ processes


def test_host_processes_invisible(run, procs):
    host = subprocess.Popen(["sleep", "123.456"])
    procs.append(host)
    script = textwrap.dedent("""\
        import os
        pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
        cmd = {p: open(f'/proc/{p}/cmdline', 'rb').read() for p in pids}
        print('pids', *pids)
        marker = ('123' + '.456').encode()  # not literally in this script's own cmdline
        print('marker', any(marker in c for c in cmd.values()))
        print('pid1', cmd[1].split(b'\\0')[0].decode())
        print('comm1', open('/proc/1/comm').read().strip())
        try:
            os.kill(HOSTPID, 0); print('hostpid visible')
        except ProcessLookupError:
            print('hostpid ESRCH')
        """).replace("HOSTPID", str(host.pid))
    for user in USERS:
        r = run(["--user", user, "--", "python3", "-c", script], text=True)
        assert r.returncode == 0, describe(r)
        out = parse_pairs(r.stdout)
        pids = [int(p) for p in out["pids"].split()]
        assert pids[0] == 1 and len(pids) <= 5, out
        assert out["marker"] == "False"
        assert out["pid1"] == "sbx-init"
        assert out["comm1"] == "init"  # the file executed is /.sbx/init
        assert out["hostpid"] == "ESRCH"


def test_ps_shows_only_sandbox(run):
    r = run(["--", "ps", "-e", "-o", "pid=,comm="], text=True)
    assert r.returncode == 0, describe(r)
    rows = [l.split() for l in r.stdout.splitlines()]
    assert rows[0] == ["1", "init"], rows
    assert len(rows) <= 3, rows  # init, ps (and maybe nothing else)


def test_pid1_survives_kill_from_inside(run):
    r = run(["--user", "root", "--", "sh", "-c", "kill -KILL 1; kill -TERM 1; sleep 0.2; echo alive"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "alive"


# ------------------------------------------------------------ /proc and /sys

MASKED_FILES = ["/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/sched_debug",
                "/proc/latency_stats", "/proc/kallsyms", "/proc/kpagecount", "/proc/kpageflags",
                "/proc/kpagecgroup", "/proc/sysrq-trigger"]
MASKED_DIRS = ["/proc/acpi", "/proc/scsi", "/proc/asound", "/proc/driver"]

PROBE_PROC = textwrap.dedent("""\
    import os, sys, errno
    def rd(p):
        try:
            with open(p, 'rb') as f:
                return 'DATA' if f.read(4096) else 'EMPTY'
        except OSError as e:
            return errno.errorcode[e.errno]
    def wr(p, data=b'1'):
        try:
            with open(p, 'wb') as f:
                f.write(data)
            return 'OK'
        except OSError as e:
            return errno.errorcode[e.errno]
    mode, *paths = sys.argv[1:]
    for p in paths:
        if mode == 'read':
            print(p, rd(p))
        elif mode == 'write':
            print(p, wr(p))
        elif mode == 'list':
            try:
                print(p, 'ENTRIES' if os.listdir(p) else 'EMPTY')
            except OSError as e:
                print(p, errno.errorcode[e.errno])
    """)


@pytest.mark.parametrize("user", USERS)
def test_proc_sensitive_files_masked(run, user):
    r = run(["--user", user, "--", "python3", "-c", PROBE_PROC, "read", *MASKED_FILES], text=True)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    leaked = {p: v for p, v in got.items() if v == "DATA"}
    assert not leaked, leaked
    r = run(["--user", user, "--", "python3", "-c", PROBE_PROC, "list", *MASKED_DIRS], text=True)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    assert not {p: v for p, v in got.items() if v == "ENTRIES"}, got


def test_proc_masks_are_meaningful_on_host():
    # at least some of the masked files have content on the host
    readable = []
    for p in ["/proc/keys", "/proc/timer_list", "/proc/kallsyms", "/proc/key-users"]:
        try:
            with open(p, "rb") as f:
                if f.read(1):
                    readable.append(p)
        except OSError:
            pass
    assert readable, "none of the masked /proc files has content on this host"


PROC_WRITES = ["/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname", "/proc/sys/vm/drop_caches",
               "/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/net/ipv4/ip_forward"]


@pytest.mark.parametrize("user", USERS)
def test_proc_sys_read_only(run, user):
    r = run(["--user", user, "--", "python3", "-c", PROBE_PROC, "write", *PROC_WRITES], text=True)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    assert not {p: v for p, v in got.items() if v == "OK"}, got
    # the mount itself is read-only, whatever the permissions say
    for p in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname"):
        assert got[p] == "EROFS", got


def test_proc_sys_shell_redirect_fails_as_root(run):
    r = run(["--user", "root", "--", "sh", "-c", "echo x > /proc/sys/kernel/domainname"], text=True)
    assert r.returncode != 0
    assert "Read-only file system" in r.stderr, describe(r)


@pytest.mark.parametrize("user", USERS)
def test_sys_has_nothing_writable(run, user):
    script = textwrap.dedent("""\
        import os, errno
        bad = []
        for root, dirs, files in os.walk('/sys'):
            for n in dirs + files:
                p = os.path.join(root, n)
                if os.access(p, os.W_OK):
                    bad.append(p)
        try:
            open('/sys/sbx-itest', 'w'); bad.append('/sys/sbx-itest created')
        except OSError as e:
            print('create', errno.errorcode[e.errno])
        print('writable', len(bad), *bad[:10])
        """)
    r = run(["--user", user, "--", "python3", "-c", script], text=True)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    assert got["writable"] == "0", got
    assert got["create"] in ("EACCES", "EROFS", "EPERM"), got


def test_sbx_init_not_writable_even_as_root(run):
    script = textwrap.dedent("""\
        import os, errno
        def attempt(name, fn):
            try:
                fn(); print(name, 'OK')
            except OSError as e:
                print(name, errno.errorcode[e.errno])
        attempt('write', lambda: open('/.sbx/init', 'r+b').write(b'x'))
        attempt('append', lambda: open('/.sbx/init', 'ab'))
        attempt('truncate', lambda: os.truncate('/.sbx/init', 0))
        attempt('chmod', lambda: os.chmod('/.sbx/init', 0o777))
        attempt('unlink', lambda: os.unlink('/.sbx/init'))
        attempt('rename', lambda: os.rename('/.sbx/init', '/.sbx/old'))
        attempt('replace', lambda: os.rename('/tmp/x', '/.sbx/init') if open('/tmp/x', 'w') else None)
        """)
    r = run(["--user", "root", "--", "python3", "-c", script], text=True)
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    assert len(got) == 7, got
    assert not {k: v for k, v in got.items() if v == "OK"}, got


# ------------------------------------------------------------ uid mapping


def test_uid_map_default_base(run, sbx_env):
    env = {k: v for k, v in sbx_env.items() if k != "SBX_UID_BASE"}
    # default base: /etc/subuid's "sbx:" range, else 1000000000.  Its own
    # template tree (chowned to the base) lives in a separate SBX_HOME.
    home = tempfile.mkdtemp(prefix="sbx-itest-defbase-", dir=os.path.dirname(sbx_env["SBX_HOME"]))
    os.chmod(home, 0o755)
    try:
        env["SBX_HOME"] = home
        r = run(["--", "cat", "/proc/self/uid_map", "/proc/self/gid_map"], env=env, text=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert r.returncode == 0, describe(r)
    maps = [l.split() for l in r.stdout.splitlines()]
    assert len(maps) == 2 and maps[0] == maps[1], maps
    inside, base, count = (int(x) for x in maps[0])
    assert inside == 0 and count == 65536 and base != 0
    assert base >= 65536, "the sandbox range overlaps ordinary host uids"


def test_uid_map_session_base_and_host_view(run, procs):
    r = run(["--", "cat", "/proc/self/uid_map"], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.split() == ["0", str(UID_BASE), str(UID_COUNT)]
    # seen from the host, the sandbox's user 1000 is UID_BASE + 1000
    p = run.popen(["--", "sleep", "30"])
    procs.append(p)
    deadline = time.monotonic() + 10
    found = None
    while time.monotonic() < deadline and not found:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() != b"sleep\x0030\x00":
                        continue
                with open(f"/proc/{pid}/status") as f:
                    uids = next(l for l in f if l.startswith("Uid:")).split()[1:]
            except (OSError, StopIteration):
                continue
            if all(int(u) == UID_BASE + 1000 for u in uids):
                found = pid
        time.sleep(0.05)
    p.kill()
    stop(p)
    assert found, "no host process 'sleep 30' with uid UID_BASE+1000"


def test_cannot_reach_host_through_proc_1(run):
    script = textwrap.dedent("""\
        import os, errno
        def attempt(name, fn):
            try:
                r = fn(); print(name, 'OK', repr(r)[:60])
            except OSError as e:
                print(name, errno.errorcode[e.errno])
        attempt('root-read', lambda: open('/proc/1/root/etc/hostname').read())
        attempt('root-list', lambda: os.listdir('/proc/1/root/'))
        attempt('cwd-list', lambda: os.listdir('/proc/1/cwd/'))
        attempt('exe-link', lambda: os.readlink('/proc/1/exe'))
        attempt('environ', lambda: open('/proc/1/environ').read())
        attempt('mem', lambda: open('/proc/1/mem', 'rb').read(1))
        try:
            fds = os.listdir('/proc/1/fd')
        except OSError as e:
            fds = []
            print('fd-list', errno.errorcode[e.errno])
        for fd in fds:
            attempt(f'fd{fd}-link', lambda: os.readlink(f'/proc/1/fd/{fd}'))
            attempt(f'fd{fd}-read', lambda: open(f'/proc/1/fd/{fd}', 'rb').read(1))
            attempt(f'fd{fd}-write', lambda: open(f'/proc/1/fd/{fd}', 'wb'))
        """)
    for user in USERS:
        r = run(["--user", user, "--", "python3", "-c", script], text=True)
        assert r.returncode == 0, describe(r)
        ok = [l for l in r.stdout.splitlines() if " OK" in l]
        assert not ok, (user, ok)


# ------------------------------------------------------------ sockets


def test_no_host_unix_sockets(run, hostdir):
    path = str(hostdir / "host.sock")
    abstract = f"sbx-itest-{os.getpid()}"
    s1 = socket.socket(socket.AF_UNIX)
    s1.bind(path)
    os.chmod(path, 0o777)
    s1.listen()
    s2 = socket.socket(socket.AF_UNIX)
    s2.bind("\0" + abstract)
    s2.listen()
    s3 = socket.socket(socket.AF_INET)
    s3.bind(("127.0.0.1", 0))
    s3.listen()
    port = s3.getsockname()[1]
    script = textwrap.dedent("""\
        import socket, sys, errno, os
        def conn(fam, addr):
            s = socket.socket(fam)
            s.settimeout(2)
            try:
                s.connect(addr); return 'CONNECTED'
            except OSError as e:
                return errno.errorcode.get(e.errno, str(e))
        print('path', conn(socket.AF_UNIX, sys.argv[1]))
        print('abstract', conn(socket.AF_UNIX, '\\0' + sys.argv[2]))
        print('tcp', conn(socket.AF_INET, ('127.0.0.1', int(sys.argv[3]))))
        found = []
        for d in ('/run', '/var/run', '/tmp', '/var/tmp', '/dev', '/dev/shm'):
            for root, dirs, files in os.walk(d):
                for n in files:
                    import stat
                    p = os.path.join(root, n)
                    try:
                        if stat.S_ISSOCK(os.lstat(p).st_mode):
                            found.append(p)
                    except OSError:
                        pass
        print('sockets', len(found), *found)
        """)
    try:
        # control: the same probe on the host reaches all three
        host = subprocess.run(["/usr/bin/python3", "-c", script, path, abstract, str(port)],
                              capture_output=True, text=True, timeout=30)
        hgot = parse_pairs(host.stdout)
        assert (hgot["path"], hgot["abstract"], hgot["tcp"]) == ("CONNECTED",) * 3, describe(host)
        r = run(["--", "python3", "-c", script, path, abstract, str(port)], text=True)
    finally:
        s1.close()
        s2.close()
        s3.close()
    assert r.returncode == 0, describe(r)
    got = parse_pairs(r.stdout)
    assert got["path"] in ("ENOENT",), got
    assert got["abstract"] == "ECONNREFUSED", got
    assert got["tcp"] == "ECONNREFUSED", got
    assert got["sockets"] == "0", got


def test_network_is_loopback_only(run):
    r = run(["--", "cat", "/proc/net/dev"], text=True)
    assert r.returncode == 0, describe(r)
    ifaces = sorted(l.split(":")[0].strip() for l in r.stdout.splitlines()[2:])
    assert ifaces == ["lo"], ifaces
    # loopback works inside
    script = ("import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); "
              "c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.send(b'ping'); print(a.recv(4).decode())")
    r = run(["--", "python3", "-c", script], text=True)
    assert r.returncode == 0, describe(r)
    assert r.stdout.strip() == "ping"


def test_sandboxes_do_not_share_ipc_or_tmp(run, procs):
    # a long-running sandbox holding state...
    p = run.popen(["--", "sh", "-c", "echo x > /tmp/mine; mkdir /dev/shm/mine 2>/dev/null; sleep 30"])
    procs.append(p)
    time.sleep(0.5)
    r = run(["--", "sh", "-c", "ls -A /tmp /dev/shm; ipcs -m 2>/dev/null | grep -c 0x || true"], text=True)
    p.kill()
    stop(p)
    assert r.returncode == 0, describe(r)
    assert "mine" not in r.stdout, r.stdout
