"""Sandbox launcher: the first code that runs in the child process, before any untrusted code.

Standard library only, and never imported by the host: ``sandbox.py`` starts it as
``python -I -S _launcher.py CFG_FD REPORT_FD``. It reads a marshalled config dict (program
source, stdin, limits, work dir, uid) from ``CFG_FD`` and writes length-prefixed marshalled
report dicts to ``REPORT_FD``. (marshal, not JSON: importing the json module pulls in ``re``,
which costs more start-up time than all the isolation steps together.)

Process tree (all in one session / process group, created by the host)::

    launcher (outside the new namespaces; waits)
      └─ init  (PID 1 of a new PID namespace, keeps root; reaps, reports wait4 status+rusage)
           └─ user process (limits applied, privileges dropped, runs the program in-process)

Why this shape:
- ``unshare(CLONE_NEWPID)`` only moves *children* into the new PID namespace, hence the fork.
  When init exits the kernel SIGKILLs every process left in the namespace, so background
  children, daemons and fork-bomb leftovers die with the episode.
- The program does not run *as* PID 1: PID 1 ignores signals it has no handler for, which
  would change the semantics of ``os.kill(os.getpid(), ...)``, ``abort()`` and friends.
- The program runs in this interpreter after a fork instead of a second ``execve`` of Python:
  that halves the start-up cost per program. The interpreter was started with ``-I -S``
  (isolated, no site-packages) so nothing from the host's environment is imported.
- Namespace set-up happens here, in a fresh single-threaded process, instead of in a
  ``preexec_fn`` of the (multi-threaded) host, where fork-then-Python is not safe.

Isolation steps, each best effort; the ones that worked are reported (``isolation``):
``userns`` (only when not root), ``mntns``, ``fsroot`` (a private root file system that holds
only the interpreter, its standard library, its shared libraries, /dev nodes, /proc and
size-capped tmpfs on /tmp and /dev/shm: see ``_fsroot.py``) entered by ``pivot`` (or
``chroot``), ``ro-root`` (the root file system is read-only; without ``fsroot`` that root is
the host's whole file system, with fresh tmpfs on /tmp, /var/tmp, /dev/shm), ``pidns`` (+ ``proc``: a
fresh /proc that shows only the sandbox), ``netns`` (only a downed loopback: no network at
all), ``uid`` (root only: the program runs under a fresh random uid, so RLIMIT_NPROC counts
only its own processes and it cannot touch the host's files or signal its processes),
``nocaps`` (userns: capabilities dropped), ``nnp`` (no_new_privs: setuid binaries gain nothing).

No host paths: with ``fsroot`` the interpreter's prefix sits at a neutral path inside
(``_fsroot.NEUTRAL_PREFIX``, the binary linked as ``/usr/bin/python3``). Init, after entering the
new root and before forking the program's process, rewrites what the interpreter says about
itself to match (``_relocate``: ``sys.executable``, ``sys.prefix`` and the other prefixes,
``sys.path``, ``sys.orig_argv``, the loaded modules' paths) and overwrites its own argv strings
(``_set_cmdline``), so ``/proc/1/cmdline`` and the program's ``/proc/self/cmdline`` read
``/usr/bin/python3 -I -S /tmp/work/main.py`` instead of the host's venv and this file's path in
the checkout. Not hidden (kernel-reported or build-time, beyond a forked interpreter's reach):
the host paths of the bound files in ``/proc/self/mountinfo``, ``/proc/self/maps`` and
``/proc/self/exe``; the build prefix inside the interpreter's own files (``sysconfig`` build
variables, strings in libpython); the file names in the code of this launcher's frames, which
sit below the program's frame on the stack.
"""

import ctypes
import marshal
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script dir out
import _fsroot  # noqa: E402  (stdlib only, like this file)

del sys.path[0]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SIGKILL = 9  # not `import signal`: it imports enum, a large part of the start-up time
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# Where the interpreter's own prefix is re-exposed when a fresh uid could not reach it (e.g.
# Python installed under /root, mode 700) in the fallback view without the private root: a
# read-only bind mount inside the private /tmp (``_relocate`` points sys.* there).
PY_ALIAS = "/tmp/.marft-python"

_libc = ctypes.CDLL(None, use_errno=True)
_mount = _fsroot.mount


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _ok(ret: int) -> bool:
    return ret == 0


def _write_file(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


def _others_can_read(path: str) -> bool:
    """True when a uid that owns nothing and is in no group can list ``path``."""
    path = os.path.abspath(path)
    try:
        if not os.stat(path).st_mode & 0o005 == 0o005:
            return False
        while path != "/":
            path = os.path.dirname(path)
            if not os.stat(path).st_mode & 0o001:
                return False
    except OSError:
        return False
    return True


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _setup_namespaces(cfg: dict, iso: list) -> bool:
    """Unshare and prepare mounts; returns True when a new PID namespace was created."""
    root = os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWPID | (CLONE_NEWNET if not cfg["network"] else 0)
    if not root:
        flags |= CLONE_NEWUSER
    uid, gid = os.geteuid(), os.getegid()
    if not _ok(_libc.unshare(flags)):
        # e.g. a container without CAP_SYS_ADMIN and user namespaces disabled: try the network
        # namespace alone, then give up on namespaces (rlimits and process-group kill remain).
        if not cfg["network"] and _ok(_libc.unshare(CLONE_NEWNET | (0 if root else CLONE_NEWUSER))):
            iso.append("netns")
        return False
    if not root:
        iso.append("userns")
        # Map ourselves to root inside, so we may mount; outside we stay the invoking user.
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/uid_map", f"0 {uid} 1")
        _write_file("/proc/self/gid_map", f"0 {gid} 1")
    iso.append("pidns")
    if not cfg["network"]:
        iso.append("netns")
    iso.append("mntns")
    if _mount("none", "/", None, MS_REC | MS_PRIVATE, None):
        if cfg["fs_isolation"] and _fsroot.build_root(cfg, iso):
            return True
        # Fallback (the private root could not be built): the host's file system, read-only.
        if _fsroot.set_readonly_recursive("/"):
            iso.append("ro-root")
        size = f"size={int(cfg['limits']['disk_mb'])}m"
        private = [d for d in ("/tmp", "/var/tmp", "/dev/shm")
                   if os.path.isdir(d) and not os.path.islink(d)
                   and _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=1777")]
        if ("/tmp" in private and root and cfg["uid"] is not None
                and not _others_can_read(sys.base_prefix)):
            os.makedirs(PY_ALIAS, exist_ok=True)
            if _mount(sys.base_prefix, PY_ALIAS, None, MS_BIND | MS_REC, None):
                _mount("none", PY_ALIAS, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
                cfg["relocate"] = [[sys.base_prefix, PY_ALIAS]]
                iso.append("pyalias")
        if "/tmp" in private:
            # /tmp is ours alone now: a fixed path makes tracebacks (so feedback) reproducible.
            cfg["workdir"] = cfg["env"]["HOME"] = "/tmp/work"
        work = cfg["workdir"]
        os.makedirs(work, exist_ok=True)  # under a private tmpfs it lives there
        if not any(work.startswith(d + "/") for d in private):
            _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=0700")
    return True


def _apply_limits(lim: dict, fresh_nproc: bool) -> None:
    def setl(res, soft, hard=None):
        try:
            resource.setrlimit(res, (soft, soft if hard is None else hard))
        except (ValueError, OSError):
            pass

    cpu = max(1, int(lim["cpu_s"] + 0.999))
    setl(resource.RLIMIT_CPU, cpu, cpu + 1)  # soft: SIGXCPU; hard: SIGKILL one second later
    setl(resource.RLIMIT_AS, int(lim["memory_mb"]) << 20)
    setl(resource.RLIMIT_FSIZE, int(lim["file_mb"]) << 20)
    setl(resource.RLIMIT_NOFILE, int(lim["open_files"]))
    setl(resource.RLIMIT_CORE, 0)
    if fresh_nproc:  # only when the count is ours alone (fresh uid / user namespace)
        setl(resource.RLIMIT_NPROC, int(lim["processes"]))


def _drop_privileges(cfg: dict, iso: list) -> None:
    if _ok(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)):
        iso.append("nnp")
    if cfg["uid"] is not None and os.geteuid() == 0 and "userns" not in iso:
        os.setgroups([])
        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])  # 0 -> non-zero clears capabilities
        iso.append("uid")
    elif "userns" in iso:
        hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        if _ok(_libc.capset(ctypes.byref(hdr), ctypes.byref(data))):
            iso.append("nocaps")


def _prepare_user(cfg: dict, iso: list, report_fd: int, stdin_path: str) -> None:
    """In the user process: stdin, privileges, limits, clean environment."""
    fd = os.open(stdin_path, os.O_RDONLY)
    os.unlink(stdin_path)  # the program reads its input but cannot find the file by name
    os.dup2(fd, 0)
    os.close(fd)
    _drop_privileges(cfg, iso)
    _apply_limits(cfg["limits"], fresh_nproc="uid" in iso or "userns" in iso)
    _report(report_fd, {"isolation": iso})
    os.close(report_fd)  # the program must not be able to forge reports
    os.chdir(cfg["workdir"])
    os.environ.clear()
    os.environ.update(cfg["env"])


def _argv_area():
    """``(start, end)`` of this process's argv strings in its memory (``/proc/self/stat`` fields
    48 and 49): what ``/proc/<pid>/cmdline`` shows. None when unknown."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, ValueError, IndexError):
        return None
    return (start, end) if 0 < start < end else None


def _set_cmdline(area, args: list) -> None:
    """Overwrite this process's argv strings in place (``/proc/<pid>/cmdline``; children forked
    later inherit them) with ``args``: the launcher's own command line names the host's
    interpreter and the checkout. The rest of the old area is zeroed (``cmdline`` then ends in
    NULs: shortening the area, ``PR_SET_MM``, needs CAP_SYS_RESOURCE); ``args`` longer than the
    area are cut."""
    if not area:
        return
    start, end = area
    size = end - start
    data = b"\0".join(a.encode("utf-8", "replace") for a in args) + b"\0"
    data = data[:size - 1] + b"\0" if len(data) > size else data
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)


def _relocate(cfg: dict) -> None:
    """Make the interpreter describe itself by the paths the program sees (in init, before the
    program's process is forked; nothing is imported here).

    ``cfg["relocate"]``: ``[host prefix, path inside]`` pairs (``_fsroot.relocations``, or the
    ``pyalias`` fallback); ``cfg["executable"]``: ``sys.executable`` inside. Rewrites
    ``sys.executable``, the prefixes, ``sys.path``, ``sys.orig_argv`` and every loaded module's
    ``__file__``/``__path__``/spec/loader path, and drops the modules loaded from source files
    under a relocated prefix (their code still names the host path: the program imports them
    afresh from the new path) and the launcher's own ``_fsroot`` (it lives in the checkout)."""
    pairs = cfg.get("relocate") or []

    def alias(path):
        return _fsroot.alias(path, pairs) if isinstance(path, str) else path

    exe = cfg.get("executable")
    if not exe:
        moved = alias(os.path.realpath(sys.executable))
        exe = moved if moved != os.path.realpath(sys.executable) else sys.executable
    sys.executable = sys._base_executable = exe
    sys.orig_argv = [exe, "-I", "-S", os.path.join(cfg["workdir"], "main.py")]
    for name in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix", "_stdlib_dir"):
        if isinstance(getattr(sys, name, None), str):
            setattr(sys, name, alias(getattr(sys, name)))
    sys.path[:] = [alias(p) for p in sys.path]
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        loader = getattr(mod, "__loader__", None)
        if name == "_fsroot" or (pairs and alias(file) != file and not name.startswith("encodings")
                                 and type(loader).__name__ in ("SourceFileLoader", "SourcelessFileLoader")):
            del sys.modules[name]  # the launcher keeps its own references
            continue
        for attr in ("__file__", "__cached__"):
            if isinstance(getattr(mod, attr, None), str):
                setattr(mod, attr, alias(getattr(mod, attr)))
        if isinstance(getattr(mod, "__path__", None), list):  # packages already imported
            mod.__path__[:] = [alias(p) for p in mod.__path__]
        spec = getattr(mod, "__spec__", None)
        if spec is not None:
            spec.origin = alias(spec.origin)
            if isinstance(getattr(spec, "_cached", None), str):
                spec._cached = alias(spec._cached)
            if isinstance(spec.submodule_search_locations, list):
                spec.submodule_search_locations[:] = [alias(p) for p in spec.submodule_search_locations]
        if isinstance(getattr(loader, "path", None), str):
            loader.path = alias(loader.path)
    sys.path_importer_cache.clear()


def _exec_program(cfg: dict) -> None:
    """Run the program as ``__main__``; SystemExit propagates to the interpreter (normal exit)."""
    import builtins

    path = os.path.join(cfg["workdir"], "main.py")
    sys.argv = [path]
    sys.path[0:0] = [cfg["workdir"]]
    sys.path.extend(cfg.get("site_dirs") or ())  # exposed only when the caller asked for them
    # -S skips site.py, which is where exit()/quit() come from; model code often calls them.
    builtins.exit = builtins.quit = sys.exit
    mod = type(sys)("__main__")  # types.ModuleType, without importing types (relocated: re-read)
    mod.__file__ = path
    mod.__builtins__ = builtins
    sys.modules["__main__"] = mod
    try:
        exec(compile(cfg["source"], path, "exec"), mod.__dict__)
    except SystemExit:
        raise
    except BaseException:
        etype, value, tb = sys.exc_info()
        if tb is not None and value is not None:  # hide the launcher's frame from the program
            value = value.with_traceback(tb.tb_next)
        sys.excepthook(etype, value, value.__traceback__ if value is not None else None)
        sys.exit(1)
    sys.exit(0)


def _report(fd: int, obj: dict) -> None:
    data = marshal.dumps(obj)
    try:
        os.write(fd, len(data).to_bytes(4, "little") + data)
    except OSError:
        pass


def _init(cfg: dict, iso: list, report_fd: int, in_pidns: bool, stdin_path: str) -> None:
    """PID 1 of the sandbox: fork the user process, wait, report, exit (killing the rest).

    Returns only in the forked user process, ready to run the program."""
    is_user = False
    try:
        _libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)  # launcher killed -> we die too
        prefix = cfg.get("root_prefix", "")
        if in_pidns and _mount("proc", prefix + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                               None):
            iso.append("proc")  # mounted before pivot_root: a user namespace needs the old /proc
        if prefix and not _fsroot.enter_root(prefix, iso):
            _report(report_fd, {"sandbox_error": "cannot enter the sandbox's root file system"})
            os._exit(125)
        # The paths the interpreter reports (sys.executable, sys.prefix, sys.path, modules) and
        # the command line of PID 1 and of the program (/proc/<pid>/cmdline): the ones inside,
        # nothing of the host's (its interpreter prefix, the venv, the checkout).
        try:
            _relocate(cfg)
            _set_cmdline(cfg.get("argv_area"), sys.orig_argv)
        except Exception as e:
            _report(report_fd, {"sandbox_error": f"relocate: {type(e).__name__}: {e}"})
            os._exit(125)
        user = os.fork()
        if user == 0:
            try:
                _prepare_user(cfg, iso, report_fd, stdin_path)
            except BaseException as e:
                _report(report_fd, {"sandbox_error": f"user setup: {type(e).__name__}: {e}"})
                os._exit(125)
            is_user = True
            return
        while True:
            try:
                pid, status, ru = os.wait4(-1, 0)
            except ChildProcessError:
                os._exit(0)
            except InterruptedError:
                continue
            if pid == user:
                break  # orphans re-parented to us die with the namespace when we exit
        _report(report_fd, {
            "returncode": os.waitstatus_to_exitcode(status),
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "max_rss_kb": ru.ru_maxrss,
        })
    finally:
        if not is_user:
            os._exit(0)  # init never returns into the program, whatever happened


def main() -> None:
    cfg_fd, report_fd = int(sys.argv[1]), int(sys.argv[2])
    cfg = marshal.loads(_read_all(cfg_fd))
    os.close(cfg_fd)
    iso: list = []
    try:
        in_pidns = _setup_namespaces(cfg, iso) if cfg["isolate"] else False
        prefix = cfg.get("root_prefix", "")
        stdlib = (prefix + _fsroot.alias(os.path.dirname(os.__file__), cfg.get("relocate"))
                  if prefix else sys.base_prefix)
        if (cfg["uid"] is not None and "pyalias" not in iso
                and not _others_can_read(stdlib)):
            cfg["uid"] = None  # the program could not import the stdlib under a fresh uid
            iso.append("no-uid:stdlib-unreadable")
        if cfg["require_isolation"] and not (in_pidns and ("netns" in iso or cfg["network"])
                                             and ("fsroot" in iso or not cfg["fs_isolation"])):
            why = f" ({cfg['fsroot_error']})" if cfg.get("fsroot_error") else ""
            raise RuntimeError(f"isolation required but the kernel granted only {iso}{why}")
        work = prefix + cfg["workdir"]  # written now, before init enters the new root
        os.makedirs(work, exist_ok=True)
        with open(os.path.join(work, "main.py"), "w", encoding="utf-8") as f:
            f.write(cfg["source"])
        for name, content in (cfg.get("files") or {}).items():
            path = os.path.join(work, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb" if isinstance(content, bytes) else "w") as f:
                f.write(content)
        stdin_path = os.path.join(cfg["workdir"], ".stdin")  # as the program's process sees it
        with open(prefix + stdin_path, "w", encoding="utf-8") as f:
            f.write(cfg["stdin"])
        if cfg["uid"] is not None and os.geteuid() == 0 and "userns" not in iso:
            os.chmod(work, 0o700)
            for dirpath, dirnames, filenames in os.walk(work):
                for name in [*dirnames, *filenames]:
                    if name != ".stdin":
                        os.chown(os.path.join(dirpath, name), cfg["uid"], cfg["uid"])
            os.chown(work, cfg["uid"], cfg["uid"])
    except Exception as e:
        _report(report_fd, {"sandbox_error": f"setup: {type(e).__name__}: {e}"})
        os._exit(125)
    if cfg.get("fsroot_error"):
        _report(report_fd, {"fsroot_error": cfg["fsroot_error"]})
    cfg["argv_area"] = _argv_area()  # read here, with the host's /proc; the same in the fork
    pid = os.fork()
    if pid == 0:
        _init(cfg, iso, report_fd, in_pidns, stdin_path)
        _exec_program(cfg)  # only the user process gets here
        return
    os.close(report_fd)
    while True:
        try:
            os.waitpid(pid, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    os._exit(0)


if __name__ == "__main__":
    main()
