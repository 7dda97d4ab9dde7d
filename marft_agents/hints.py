"""The commands the ``marft`` CLI prints for the user to run next, built so that each works when
pasted: with the options the run was started with, as ``make`` targets when the run was started
by ``make``, and as an editable install from a source checkout.

Torch-free: the CLI prints some of these before (or instead of) importing the ``agents`` extra.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

PROGRAM = "marft"
"""The console script (``[project.scripts]`` of pyproject.toml)."""
MAKE_DEMO_CONFIG = "baselines/configs/demo.yaml"
"""The Makefile's ``DEMO_CONFIG`` default: ``make demo`` trains it."""
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
"""The folder holding the ``marft_agents`` package: a source checkout when it holds marft's
``pyproject.toml``, else an install's ``site-packages``."""


def under_make(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started by ``make`` (which sets ``MAKELEVEL`` for its commands)."""
    return "MAKELEVEL" in (os.environ if environ is None else environ)


def program(argv0: str | None = None) -> list[str]:
    """How to call ``marft`` again as it was called: ``marft`` when that is on the PATH, the path of
    the console script when it was called by path (e.g. ``.venv/bin/marft`` with the environment
    not activated); ``marft`` when it was not called as a script (``main([...])`` from Python)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    script = Path(argv0)
    if script.name != PROGRAM or not script.is_file():
        return [PROGRAM]
    found = shutil.which(PROGRAM)
    if found and Path(found).resolve() == script.resolve():
        return [PROGRAM]
    try:
        return [f"./{script.resolve().relative_to(Path.cwd().resolve())}"]
    except ValueError:
        return [str(script.resolve())]


def train_command(config: str, sets: Sequence[str] = (), output_dir: str | None = None,
                  flags: Sequence[str] = (), argv0: str | None = None) -> str:
    """``marft train --config CONFIG [--set K=V ...] [--output-dir DIR] [FLAGS]``, quoted for a shell."""
    words = [*program(argv0), "train", "--config", str(config)]
    for pair in sets:
        words += ["--set", pair]
    if output_dir:
        words += ["--output-dir", str(output_dir)]
    return shlex.join([*words, *flags])


def make_demo_command(config: str, *extra: str) -> str:
    """``make demo [DEMO_CONFIG=...] EXTRA...`` (DEMO_CONFIG only when ``config`` is not its default)."""
    words = ["make", "demo"]
    if Path(config) != Path(MAKE_DEMO_CONFIG):
        words.append(f"DEMO_CONFIG={config}")
    return shlex.join([*words, *extra])


def resume_hint(config: str, sets: Sequence[str] = (), output_dir: str | None = None,
                flags: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> str:
    """How to continue a run that ``marft train`` started with these options: the same command
    with ``--resume`` (and ``make demo RESUME=1`` first when started by ``make``, unless the config
    path has characters the Makefile's unquoted ``DEMO_CONFIG`` would split)."""
    command = train_command(config, sets, output_dir, [*flags, "--resume"])
    if under_make(environ) and shlex.quote(str(config)) == str(config):  # make splits DEMO_CONFIG on spaces
        return f"`{make_demo_command(config, 'RESUME=1')}` (outside make: `{command}`)"
    return f"`{command}`"


def start_over_hint(output_dir: str, environ: Mapping[str, str] | None = None) -> str:
    """How to start a run afresh where a finished one is: delete its folder (``make clean-runs``
    under make, which deletes every run under ``runs/``) or train into another ``output_dir``."""
    remove = f"`{shlex.join(['rm', '-r', str(output_dir)])}`"
    if under_make(environ) and Path(output_dir).parts[:1] == ("runs",):
        remove = f"`make clean-runs` (deletes every run in runs/) or {remove}"
    return f"delete it with {remove}, or train into another folder with --output-dir DIR"


def install_agents_hint(root: Path | None = None, cwd: Path | None = None) -> str:
    """The pip command that installs the ``agents`` extra here: an editable install of the source
    checkout marft runs from (``pip install -e '.[agents]'`` from its folder), else from PyPI."""
    root = PACKAGE_ROOT if root is None else Path(root)
    if not _is_marft_checkout(root):
        return "pip install 'marft[agents]'"
    cwd = Path.cwd() if cwd is None else Path(cwd)
    where = "." if root.resolve() == cwd.resolve() else str(root)
    return f"pip install -e {shlex.quote(f'{where}[agents]')}"


def _is_marft_checkout(root: Path) -> bool:
    pyproject = root / "pyproject.toml"
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "marft"' in text and (root / "marft_agents").is_dir()
