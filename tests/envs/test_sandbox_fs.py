"""File-system isolation: a sandboxed program sees no file it was not given.

The attack (issue 17): a StdioCode problem file sits in a world-readable folder outside the
sandbox's work dir, as a user's data set beside their checkout would; the reply walks the file
system, finds the line with its task id and prints the expected output. With the private root
file system it finds nothing (reward 0); with the older read-only view of the host
(``fs_isolation=False``, the control) the same reply gets reward 1, which shows that the test
can fail.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from marft_envs.code._launcher import _others_can_read
from marft_envs.code.sandbox import SandboxLimits, isolation_available, run_program
from marft_envs.envs.stdio_code import StdioCodeEnv

REPO = Path(__file__).resolve().parents[2]
TASK_ID = "leak-probe-7f3a"

# The hostile reply: search the whole file system for JSON Lines files naming its task id.
ATTACK = f'''
import json, os, sys
data = sys.stdin.read()
skip = {{"/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/boot", "/etc"}}
found = []
for dirpath, dirnames, filenames in os.walk("/"):
    dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip
                   and d not in (".git", ".venv", "site-packages", "node_modules", "__pycache__")]
    for name in filenames:
        if not name.endswith(".jsonl"):
            continue
        path = os.path.join(dirpath, name)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            if {TASK_ID!r} in line:
                found.append(path)
                for case in json.loads(line)["tests"]:
                    if case["input"] == data:
                        sys.stderr.write("LEAKED from " + path + "\\n")
                        print(case["output"], end="")
                        sys.exit(0)
sys.stderr.write("searched, found %r\\n" % found)
print("no idea")
'''


@pytest.fixture()
def leaked_problem_file():
    """A world-readable problem file beside the tests, outside any sandbox work dir (not under
    /tmp, which the sandbox replaces anyway)."""
    folder = Path(tempfile.mkdtemp(prefix=".marft-leak-", dir=REPO / "tests" / "envs"))
    try:
        os.chmod(folder, 0o755)
        secret = secrets.token_hex(8)
        record = {"task_id": TASK_ID, "prompt": "Print the secret word for the input.",
                  "tests": [{"input": "a\n", "output": f"{secret}-a\n"},
                            {"input": "b\n", "output": f"{secret}-b\n"}]}
        path = folder / "problems.jsonl"
        path.write_text(json.dumps(record) + "\n", encoding="utf-8")
        os.chmod(path, 0o644)
        if not (_others_can_read(str(folder)) and path.stat().st_mode & stat.S_IROTH):
            pytest.skip(f"{folder} is not readable by other users here (the checkout sits in a "
                        "private folder), so the attack would be stopped by permissions alone")
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _under_tmp(path: Path) -> bool:
    return str(path.resolve()).startswith("/tmp/")


def _play_attack(path: Path, limits: SandboxLimits):
    env = StdioCodeEnv(path=path, horizon=1, limits=limits)
    env.reset(seed=0)
    reward, info = None, None
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        env.step(None if term or trunc else f"```python\n{ATTACK}\n```")
    return reward, info["last_outcome"]["info"]


def test_attack_reading_the_problem_file_gets_nothing(leaked_problem_file) -> None:
    if "fsroot" not in isolation_available():
        pytest.skip("the kernel refused the private root file system here (see docs: fallback)")
    limits = SandboxLimits(wall_s=30, cpu_s=10)
    reward, info = _play_attack(leaked_problem_file, limits)
    assert reward == 0.0 and info["status"] == "failed", info
    assert "fsroot" in info["isolation"]
    # From inside, the file is absent (not merely unreadable), and so is the checkout's code.
    # The checkout folder itself may exist as a bare skeleton when the interpreter is a venv
    # inside it (``.venv/lib`` is mounted); nothing else of it may show.
    probe = run_program(
        "import os\n"
        f"for p in [{str(leaked_problem_file)!r}, {str(leaked_problem_file.parent)!r}, "
        f"{str(REPO / 'tests')!r}, {str(REPO / 'marft_envs')!r}]:\n"
        "    print(p, os.path.exists(p))\n"
        f"print(sorted(os.listdir({str(REPO)!r})) if os.path.isdir({str(REPO)!r}) else [])\n",
        limits=limits)
    assert probe.status == "ok", probe
    lines = probe.stdout.splitlines()
    assert lines[:4] == [f"{p} False" for p in (
        leaked_problem_file, leaked_problem_file.parent, REPO / "tests", REPO / "marft_envs")]
    assert set(ast.literal_eval(lines[4])) <= {".venv"}, lines[4]
    attack = run_program(ATTACK, stdin="a\n", limits=limits)
    assert "LEAKED" not in attack.stderr and "searched, found []" in attack.stderr, attack


def test_control_without_fs_isolation_the_attack_succeeds(leaked_problem_file) -> None:
    """The same reply against the older read-only view of the host: it finds the file. (This is
    what the test above guards against; if this control stops leaking, the attack test proves
    nothing.)"""
    if _under_tmp(leaked_problem_file):
        pytest.skip("the checkout is under /tmp, which the older view hides too: no leak to show here")
    reward, info = _play_attack(leaked_problem_file,
                                SandboxLimits(wall_s=60, cpu_s=30, fs_isolation=False))
    assert reward == 1.0 and info["status"] == "passed", info


LIST_READABLE = r'''
import os, sys
mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    mounts.append((f[4], f[5].split(",")[0]))
print("MOUNTS", sorted(mounts))
readable = []
for dirpath, dirnames, filenames in os.walk("/"):
    if dirpath == "/proc":
        dirnames[:] = []
        continue
    for name in filenames:
        p = os.path.join(dirpath, name)
        if os.access(p, os.R_OK):
            readable.append(os.path.realpath(p))  # symlinks: where they lead
print("N", len(readable))
for p in readable:
    print("R", p)
print("TOP", sorted(os.listdir("/")))
'''


def _allowed_prefixes() -> list[str]:
    """What the program may see: its stdlib, the libraries' dirs, its dev/tmp and ld.so.cache."""
    import sysconfig

    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    return [os.path.dirname(stdlib), "/dev/", "/tmp/", "/etc/ld.so.cache",
            os.path.realpath(sys.executable), "/usr/lib/", "/lib/", "/usr/lib64/", "/lib64/"]


def test_list_of_readable_paths_from_inside() -> None:
    if "fsroot" not in isolation_available():
        pytest.skip("the kernel refused the private root file system here")
    res = run_program(LIST_READABLE, limits=SandboxLimits(wall_s=60, cpu_s=30,
                                                          stdout_bytes=16 << 20))
    assert res.status == "ok", res
    lines = res.stdout.splitlines()
    readable = [ln[2:] for ln in lines if ln.startswith("R ")]
    mounts = eval(next(ln for ln in lines if ln.startswith("MOUNTS "))[len("MOUNTS "):])  # noqa: S307
    top = eval(next(ln for ln in lines if ln.startswith("TOP "))[len("TOP "):])  # noqa: S307
    print("\n".join(f"mount {m} ({mode})" for m, mode in mounts))
    print(f"{len(readable)} readable files; top level: {top}")
    allowed = _allowed_prefixes()
    stray = [p for p in readable if not any(p == a or p.startswith(a.rstrip("/") + "/")
                                            or p.startswith(a) for a in allowed)]
    assert stray == [], stray[:20]
    assert readable and any(p.endswith("/os.py") for p in readable)  # the stdlib is there
    for absent in ("/home", "/srv", "/mnt", "/opt", "/var", str(REPO)):
        assert not any(p == absent or p.startswith(absent + "/") for p in readable), absent
    assert not any("site-packages" in p for p in readable)
    assert "/" in dict(mounts) and dict(mounts)["/"] == "ro"


def test_declared_paths_site_packages_and_files(tmp_path_factory) -> None:
    if "fsroot" not in isolation_available():
        pytest.skip("the kernel refused the private root file system here")
    shared = Path(tempfile.mkdtemp(prefix=".marft-leak-", dir=REPO / "tests" / "envs"))
    try:
        os.chmod(shared, 0o755)
        (shared / "table.csv").write_text("x,1\n")
        os.chmod(shared / "table.csv", 0o644)
        code = (f"print(open({str(shared / 'table.csv')!r}).read().strip())\n"
                "print(open('data/in.txt').read())\n"
                "try:\n"
                f"    open({str(shared / 'new.txt')!r}, 'w')\n"
                "except OSError as e:\n    print('denied', e.errno)\n"
                "import importlib.util\nprint(importlib.util.find_spec('numpy') is not None)\n")
        res = run_program(code, limits=SandboxLimits(read_only_paths=(str(shared),)),
                          files={"data/in.txt": "hello"})
        assert res.status == "ok", res
        assert res.stdout.splitlines() == ["x,1", "hello", "denied 30", "False"]
        res = run_program("import numpy\nprint(numpy.arange(3).sum())",
                          limits=SandboxLimits(site_packages=True, wall_s=30))
        assert res.status == "ok" and res.stdout == "3\n", res
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    res = run_program("print(1)", limits=SandboxLimits(read_only_paths=("/no/such/dir",)))
    assert res.status == "sandbox_error" and "/no/such/dir" in res.detail
    with pytest.raises(ValueError, match="relative path"):
        run_program("", files={"../escape.txt": "x"})
    with pytest.raises(ValueError, match="absolute paths"):
        SandboxLimits(read_only_paths=("relative/dir",))


HOST_VIEW = r'''
import json, os, subprocess, sys
import ctypes, json.decoder  # modules the program imports itself, besides those already loaded
child = subprocess.run([sys.executable, "-c", "import sys; print(sys.prefix)"],
                       capture_output=True, text=True, timeout=20)
print(json.dumps({
    "pid1_cmdline": open("/proc/1/cmdline").read(),
    "own_cmdline": open("/proc/self/cmdline").read(),
    "executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
    "exec_prefix": sys.exec_prefix, "path": sys.path, "orig_argv": sys.orig_argv,
    "module_files": sorted({m.__file__ for m in list(sys.modules.values())
                            if isinstance(getattr(m, "__file__", None), str)}),
    "child": [child.returncode, child.stdout.strip(), child.stderr[-500:]],
}))
'''


def _host_paths() -> list[str]:
    """Where this test's interpreter and checkout live on the host: the repository, the venv
    (``sys.prefix``) and the real interpreter prefix (``sys.base_prefix``), as spelled and
    resolved. A distribution's prefix (``/usr``) says nothing about the host and is left out."""
    paths = {str(REPO), sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {os.path.realpath(p) for p in paths}
    return sorted(p for p in paths if p not in ("/", "/usr", "/usr/bin"))


def _names_path(text: str, path: str) -> bool:
    """``path`` (absolute) or a path below it occurs in ``text`` as a path of its own (not as the
    tail of another one: the repository ``/work/main`` is not named by ``/tmp/work/main.py``)."""
    return re.search(r"(?<![\w./-])" + re.escape(path) + r"(?![\w.-])", text) is not None


def test_program_sees_no_host_path_of_interpreter_or_checkout() -> None:
    """Issue 35/8: /proc/1/cmdline named the host's interpreter (the venv in the checkout) and
    the checkout's launcher path; sys.executable / sys.prefix / sys.path named /root/.pyenv."""
    if "fsroot" not in isolation_available():
        pytest.skip("the kernel refused the private root file system here")
    res = run_program(HOST_VIEW, limits=SandboxLimits(wall_s=30, cpu_s=10))
    assert res.status == "ok", res
    seen = json.loads(res.stdout)
    host = _host_paths()
    assert str(REPO) in host and sys.base_prefix in host or sys.base_prefix in ("/", "/usr")
    for key, value in seen.items():
        for text in (value if isinstance(value, list) else [value]):
            leaked = [h for h in host if _names_path(str(text), h)]
            assert leaked == [], f"{key} shows host path(s) {leaked}: {text!r}"
    # PID 1 and the program's own command line name the interpreter by its path inside.
    assert seen["pid1_cmdline"].rstrip("\0").split("\0")[0] == seen["executable"]
    assert seen["own_cmdline"].rstrip("\0").split("\0") == seen["orig_argv"]
    assert seen["orig_argv"][-1] == "/tmp/work/main.py"
    # That path is a working interpreter: a child of it runs, from the same (neutral) prefix.
    assert seen["child"][:2] == [0, seen["prefix"]], seen["child"]
    assert any(f.endswith("/os.py") and f.startswith(seen["prefix"]) for f in seen["module_files"])
