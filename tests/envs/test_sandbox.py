"""Sandbox containment: normal programs work, hostile ones are contained and reported.

Every hostile program is made cheap by its limits (never actually consumes 50 GB, 10 GB of
disk or 1 GB of pipe traffic). After each one we check that the host is alive, that no
process of the sandbox is left, and that the next program runs normally.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from marft_envs.code.sandbox import (SandboxLimits, SandboxResult, isolation_available,
                                     run_many, run_program)
from marft_envs.code import sandbox as sb

FAST = SandboxLimits(wall_s=3.0, cpu_s=2.0)


def _launcher_pids() -> list[int]:
    """Sandbox launchers started by this process and still alive. (Only ours: other jobs on a
    shared machine may run sandboxes too. The program's own processes are checked by uid.)"""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"marft_envs/code/_launcher.py" not in f.read():
                    continue
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid():
                pids.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def _assert_clean_after(res: SandboxResult) -> None:
    """No stray process; the next episode is unaffected."""
    if res.uid is not None:
        assert sb._pids_of_uid(res.uid) == [], "processes of the sandbox uid survived"
    assert _launcher_pids() == [], "a sandbox process survived"
    nxt = run_program("print(sum(range(10)))", limits=FAST)
    assert nxt.status == "ok" and nxt.stdout == "45\n", nxt


def test_ok_program_with_stdin() -> None:
    res = run_program("import sys\nprint(sys.stdin.read().upper(), end='')", stdin="héllo\n")
    assert res.status == "ok" and res.returncode == 0
    assert res.stdout == "HÉLLO\n" and res.stderr == ""
    assert res.wall_s < 5 and res.cpu_s is not None


def test_exception_is_crash_with_clean_traceback() -> None:
    res = run_program("def f():\n    raise ValueError('boom')\nf()")
    assert res.status == "crash" and res.returncode == 1
    assert "ValueError: boom" in res.stderr and "_launcher" not in res.stderr
    assert 'main.py", line 2' in res.stderr


def test_exit_codes_and_builtin_exit() -> None:
    assert run_program("exit(3)").returncode == 3
    assert run_program("import sys; sys.exit(0)").status == "ok"
    assert run_program("quit()").status == "ok"


def test_stdlib_imports_work_under_fresh_uid() -> None:
    # Regression: with Python under /root (mode 700) a fresh uid could not import new modules.
    code = "import socket, collections.abc, json, re, decimal, typing, heapq, unittest\nprint('ok')"
    res = run_program(code)
    assert res.status == "ok" and res.stdout == "ok\n", res


def test_runs_in_fresh_private_workdir() -> None:
    code = ("import os\nprint(sorted(os.listdir('.')))\nopen('f.txt', 'w').write('x')\n"
            "print(os.getcwd() == os.environ['HOME'])")
    before = set(os.listdir(tempfile.gettempdir()))
    a, b = run_program(code), run_program(code)
    assert a.status == b.status == "ok"
    assert a.stdout == b.stdout == "['main.py']\nTrue\n"  # nothing left from earlier programs
    leftovers = [n for n in set(os.listdir(tempfile.gettempdir())) - before
                 if n.startswith("marft-sbx-")]
    assert leftovers == []  # the host-side temp dir is removed afterwards


def test_report_isolation() -> None:
    iso = isolation_available()
    assert "nnp" in iso
    if os.geteuid() == 0:
        assert "uid" in iso  # root: always a fresh uid, whatever the kernel allows


def test_infinite_loop_cpu_and_wall() -> None:
    # Generous wall limits: on a loaded machine 1 s of CPU can take several seconds of wall time.
    res = run_program("while True:\n    pass", limits=SandboxLimits(cpu_s=1, wall_s=30))
    assert res.status == "timeout" and "CPU" in res.detail
    _assert_clean_after(res)
    ignore = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    res = run_program(ignore, limits=SandboxLimits(cpu_s=1, wall_s=30))
    assert res.status == "timeout" and "CPU" in res.detail  # killed at the hard limit
    res = run_program("import time\ntime.sleep(60)", limits=SandboxLimits(wall_s=0.5))
    assert res.status == "timeout" and "wall" in res.detail and res.wall_s < 2
    _assert_clean_after(res)


def test_fork_bomb_contained() -> None:
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass\n")
    res = run_program(bomb, limits=SandboxLimits(wall_s=1.0, cpu_s=1, processes=16))
    assert res.status in ("timeout", "crash")
    _assert_clean_after(res)


def test_process_limit_counts_only_the_sandbox() -> None:
    # As root RLIMIT_NPROC would not apply; the fresh uid (or user namespace) makes it bite,
    # and it counts this run's processes only (this host has hundreds of root processes).
    code = ("import os, time\nn = 0\nfor i in range(100):\n    try:\n"
            "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
            "        n += 1\n    except OSError:\n        break\nprint(n)\n")
    t0 = time.monotonic()
    res = run_program(code, limits=SandboxLimits(processes=16, wall_s=10))
    assert res.status == "ok" and 8 <= int(res.stdout) < 16, res
    assert time.monotonic() - t0 < 5  # the sleeping children died with the sandbox
    _assert_clean_after(res)


def test_background_child_and_setsid_escape_are_killed() -> None:
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n"
            "print('parent done')\n")
    t0 = time.monotonic()
    res = run_program(code, limits=FAST)
    assert res.stdout == "parent done\n" and time.monotonic() - t0 < 2.5
    _assert_clean_after(res)


def test_allocating_50_gb() -> None:
    res = run_program("x = bytearray(50 * 2**30)\nprint(len(x))", limits=FAST)
    assert res.status == "memory", res
    assert (res.max_rss_kb or 0) < 200_000
    _assert_clean_after(res)


def test_writing_10_gb_file() -> None:
    code = ("chunk = b'0' * (1 << 20)\nwith open('big.bin', 'wb') as f:\n"
            "    for _ in range(10 * 1024):\n        f.write(chunk)\n")
    res = run_program(code, limits=SandboxLimits(file_mb=4, wall_s=5))
    assert res.status == "file_limit", res
    sparse = "with open('s.bin', 'wb') as f:\n    f.seek(10 * 2**30)\n    f.write(b'x')\n"
    res = run_program(sparse, limits=SandboxLimits(file_mb=4, wall_s=5))
    assert res.status == "file_limit", res
    _assert_clean_after(res)


@pytest.fixture()
def listener():
    """A real server socket of the host on 127.0.0.1 that the program must not reach."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.setblocking(False)
    yield srv
    srv.close()


def test_socket_to_loopback_and_outside(listener) -> None:
    if "netns" not in isolation_available():
        pytest.skip("kernel refused a network namespace here; the documented fallback has "
                    "network access, so this must not try an outside address")
    port = listener.getsockname()[1]
    code = f"""
import socket
for addr in [("127.0.0.1", {port}), ("192.0.2.1", 80)]:   # 192.0.2.1: TEST-NET-1, unrouted
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect(addr)
        print("CONNECTED", addr)
    except OSError as e:
        print("blocked", addr, e.errno)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("192.0.2.1", 53))
    print("SENT udp")
except OSError as e:
    print("blocked udp", e.errno)
"""
    res = run_program(code, limits=FAST)
    assert res.status == "ok", res
    assert "CONNECTED" not in res.stdout and "SENT" not in res.stdout
    assert res.stdout.count("blocked") == 3
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever arrived at the host's socket
    _assert_clean_after(res)


def test_cannot_read_parent_environment(monkeypatch) -> None:
    monkeypatch.setenv("MARFT_SECRET_TOKEN", "hunter2-secret")
    code = f"""
import os
print(dict(os.environ))
for p in ["/proc/{os.getpid()}/environ", "/proc/1/environ", "/proc/self/environ",
          "/proc/%d/environ" % os.getppid()]:
    try:
        print(p, open(p, "rb").read())
    except OSError as e:
        print(p, "denied", e.errno)
"""
    res = run_program(code, limits=FAST)
    assert res.status == "ok", res
    assert "hunter2" not in res.stdout
    assert "MARFT_SECRET_TOKEN" not in res.stdout
    _assert_clean_after(res)


def test_cannot_delete_files_outside_workdir() -> None:
    root = Path(__file__).resolve().parent / f".sandbox_sentinel_{os.getpid()}"
    root.mkdir(exist_ok=True)
    sentinel = root / "sentinel.txt"
    sentinel.write_text("keep me")
    try:
        code = f"""
import os, shutil
for action in (lambda: os.remove({str(sentinel)!r}), lambda: shutil.rmtree({str(root)!r}),
               lambda: open({str(sentinel)!r}, "w").write("pwned"),
               lambda: os.rename({str(sentinel)!r}, "stolen")):
    try:
        action()
        print("DONE")
    except OSError as e:
        print("denied", e.errno)
"""
        res = run_program(code, limits=FAST)
        assert res.status == "ok", res
        assert "DONE" not in res.stdout
        assert sentinel.read_text() == "keep me"
    finally:
        sentinel.unlink(missing_ok=True)
        root.rmdir()
    _assert_clean_after(res)


def test_cannot_kill_the_parent() -> None:
    code = f"""
import os, signal
for target in (os.getppid(), {os.getpid()}, 1):
    try:
        os.kill(target, signal.SIGKILL)
        print("sent", target)
    except OSError as e:
        print("denied", target, e.errno)
try:
    os.killpg({os.getpgid(0)}, signal.SIGKILL)
except OSError as e:
    print("denied pg", e.errno)
print("still here")
"""
    res = run_program(code, limits=FAST)
    # In a PID namespace the host pid may name some in-sandbox process or none; either way
    # the host (this test process) must survive.
    assert os.getpid() > 0  # we are still running
    assert res.status in ("ok", "crash"), res
    _assert_clean_after(res)


def test_printing_1_gb_is_capped() -> None:
    code = "import sys\nline = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(line)\n"
    t0 = time.monotonic()
    res = run_program(code, limits=SandboxLimits(stdout_bytes=256 << 10, wall_s=10))
    assert res.status == "output_limit", res
    assert len(res.stdout) == 256 << 10
    assert time.monotonic() - t0 < 3  # killed at the cap, not after writing 1 GB
    res = run_program("import sys\nsys.stderr.write('e' * (1 << 22))",
                      limits=SandboxLimits(stderr_bytes=1024))
    assert res.status == "output_limit" and len(res.stderr) == 1024
    _assert_clean_after(res)


def test_concurrent_programs_do_not_interfere() -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    jobs = [(bomb, ""), ("print(input())", "a"), ("print(input())", "b"),
            ("import time; time.sleep(0.2); print(input())", "c")]
    with ThreadPoolExecutor(max_workers=4) as pool:
        bomb_f = pool.submit(run_program, bomb, "", SandboxLimits(wall_s=1.5, cpu_s=1, processes=16))
        normal = run_many(jobs[1:], limits=SandboxLimits(wall_s=30), max_workers=3)
        res = [bomb_f.result(), *normal]
    assert [r.stdout for r in res[1:]] == ["a\n", "b\n", "c\n"]
    assert all(r.status == "ok" for r in res[1:])
    assert len({r.uid for r in res}) == len(res) or res[0].uid is None
    _assert_clean_after(res[0])


def test_require_isolation_refuses_without_namespaces() -> None:
    res = run_program("print(1)", limits=SandboxLimits(isolate=False, require_isolation=True))
    assert res.status == "sandbox_error" and "isolation required" in res.detail
    res = run_program("print(1)", limits=SandboxLimits(isolate=False))
    assert res.status == "ok" and "netns" not in res.isolation


def test_bad_limits_are_rejected() -> None:
    with pytest.raises(ValueError, match="wall_s"):
        SandboxLimits(wall_s=0)


_UNPRIV_SCRIPT = r'''
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("sbx", sys.argv[1])
sbx = importlib.util.module_from_spec(spec)
sys.modules["sbx"] = sbx
spec.loader.exec_module(sbx)
code = """
import os, socket
s = socket.socket()
s.settimeout(1)
try:
    s.connect(("127.0.0.1", 9))
    print("CONNECTED")
except OSError as e:
    print("blocked", e.errno)
try:
    open(%r, "w").write("x")
    print("WROTE")
except OSError as e:
    print("denied", e.errno)
""" % (sys.argv[2],)
r = sbx.run_program(code, python=sys.executable, limits=sbx.SandboxLimits(wall_s=5))
bomb = sbx.run_program("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                       python=sys.executable, limits=sbx.SandboxLimits(wall_s=1, cpu_s=1, processes=16))
print(json.dumps({"status": r.status, "stdout": r.stdout, "stderr": r.stderr,
                  "iso": list(r.isolation), "bomb": bomb.status}))
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to start the sandbox as an unprivileged user")
def test_unprivileged_user_namespace_mode() -> None:
    """The non-root path: an unprivileged user runs the sandbox (user namespace)."""
    import json
    import subprocess
    import sys

    from marft_envs.code._launcher import _others_can_read

    python = sys.executable if _others_can_read(sys.base_prefix) else "/usr/bin/python3"
    if not os.access(python, os.X_OK) or not _others_can_read(os.path.dirname(os.path.realpath(python))):
        pytest.skip("no Python interpreter that an unprivileged user may run")
    # Not under /tmp: inside the sandbox /tmp is a private tmpfs, the write must hit the real disk.
    here = tempfile.mkdtemp(prefix=".marft-unpriv-", dir=Path(__file__).resolve().parent)
    try:
        os.chmod(here, 0o755)
        script = Path(here) / "probe.py"
        script.write_text(_UNPRIV_SCRIPT)
        target = Path(here) / "owned_by_nobody" / "x"  # writable by the user outside
        target.parent.mkdir()
        os.chown(target.parent, 65534, 65534)
        sandbox_py = Path(sb.__file__).resolve()
        if not _others_can_read(str(sandbox_py.parent)):
            pytest.skip("the repository is not readable by an unprivileged user")
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              python, str(script), str(sandbox_py), str(target)],
                             capture_output=True, text=True, timeout=30, cwd=here)
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["status"] == "ok", res
        if "ro-root" in res["iso"]:  # only the read-only mount stops this write
            # 30 (EROFS): the read-only root stopped it; 2 (ENOENT): the checkout lives under
            # /tmp, which the sandbox replaces by a private tmpfs, so the path does not exist.
            assert ("denied 30" in res["stdout"] or "denied 2" in res["stdout"]) and not target.exists()
        if "userns" in res["iso"]:
            assert "netns" in res["iso"] and "CONNECTED" not in res["stdout"]
            assert res["bomb"] in ("timeout", "crash")
    finally:
        shutil.rmtree(here, ignore_errors=True)
    assert _launcher_pids() == []
