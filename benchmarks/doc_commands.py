"""List, and with ``--run`` run, every shell command the user-facing docs show.

The acceptance rule of the docs is that every command in ``README.md``,
``marft_agents/ADDING_A_LEARNER.md``, ``marft_envs/ADDING_AN_ENV.md`` and ``docs/*.md`` runs as
written. A command is a line of a fenced ```` ```bash ```` / ``sh`` / ``shell`` / ``console``
block (comment lines skipped, ``\\`` continuations joined; in ``console`` blocks only ``$ `` lines),
a ``$ `` line of any other fenced block (a transcript), or a line of a fenced block of any other
language (``text``, none, ...) that holds a ``marft`` or ``make`` command (``FENCE_COMMAND``: the
GPU recipes sit in ``text`` blocks). With ``--inline``, inline ```` `code` ````
in prose that starts like a command (``python ...``, ``marft ...``, ``.venv/bin/...``, ``make ...``,
...) is collected too; one with a placeholder (``<name>``, ``[--opt]``, ``...``, ``DIR``) or that
only names a subcommand (``marft train``) is listed as SKIP.

Usage::

    python benchmarks/doc_commands.py                  # list: file:line and the command
    python benchmarks/doc_commands.py --run            # run them; PASS/FAIL/SKIP(reason) + seconds each
    python benchmarks/doc_commands.py --run --only bench_rollout --timeout 300 --keep
    python benchmarks/doc_commands.py --run --include-long   # also what is skipped as taking too long
    python benchmarks/doc_commands.py --inline         # also the inline `commands` of the prose
    python benchmarks/doc_commands.py --run --inline only   # only those

``--run`` never touches the checkout or its ``.venv``. The commands run one at a time, in order,
each in a fresh copy of the repository (``.git`` included; ``runs/``, virtual envs (``.venv*``) and build outputs not; a link
to the checkout's ``../shared``, the default data root, beside it) under a temporary folder,
except one that continues a run (``--resume``, ``--checkpoint latest|best``): it runs in the copy
of the last command with the same config file. Each gets ``OMP_NUM_THREADS=1`` and the
environment of an activated virtual env: an overlay venv whose ``site-packages`` chains to this
checkout's ``.venv`` (so ``pip install -e ...`` installs into the overlay only) and whose
``.venv/bin`` scripts are the checkout's, and ``PYTHONPATH`` = the copy (its code, not the
checkout's, is imported). Config files a doc names as the user's own (``my.yaml``, ``run.yaml``)
are written into the copy as the demo config with their own ``output_dir``.

Long jobs are shortened by adding options to the documented command, never by editing it:
``marft train`` / ``marft eval`` / ``python -m baselines.run`` get ``--set`` overrides (one update
of 4 episodes, 8 new tokens, 4 evaluation problems, one thread), the throughput scripts get
``--batch 4 --new-tokens 8 --repeats 1 --threads 1`` (and ``bench_update.py`` ``--minibatch 4``;
their argparse keeps the last value), ``OMP_NUM_THREADS=N`` becomes 1, and ``make demo`` gets
``DEMO_CONFIG=`` a shortened copy of the demo config. ``SKIP_RULES`` lists what is never run here
(another machine's GPUs, the whole test suite) and what is skipped unless ``--include-long`` is
given. What cannot run here (``VALIDATE_RULES``: another machine's GPUs, the Qwen2.5 configs,
vLLM's CPU build, and every command of a non-shell block, which the docs show for another
machine) is validated instead, and so is a skipped command that has a validation: a ``marft train`` / ``eval`` / ``score`` becomes ``marft config
--config FILE`` with the same ``--set`` overrides (the checks train and eval run before loading a
model: the config, the env and ``eval.env_kwargs``, scripted seats, ``init_adapters``), a
``make`` command ``make -n`` (the target exists and expands). The printed ``as run:`` line shows
every change. Exit status 1 when a command fails (or times out), else 0.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "marft_agents/ADDING_A_LEARNER.md", "marft_envs/ADDING_AN_ENV.md", "docs/*.md"]
SHELL_FENCES = {"bash", "sh", "shell", "console", "zsh", "shell-session"}

# (regex on the command, reason, long): long ones run with --include-long, the others never.
SKIP_RULES: list[tuple[str, str, bool]] = [
    (r"--nnodes\s+[2-9]|--rdzv-endpoint\s+node", "needs several machines (multi-node torchrun)", False),
    (r"^make test(-all)?(\s|$)", "the whole test suite: not run on a shared 2-core machine (run pytest per file)", True),
    (r"^make test-vllm\b", "builds .venv-vllm (vLLM's CPU build, ~3 GB) and runs the vLLM engine's tests", True),
    (r"^make bench\b", "every benchmark at full size (tens of minutes)", True),
    (r"^make test-avx2\b", "the whole test suite again, on the AVX2 kernels (tens of minutes)", True),
    (r"MARFT_TEST_DEVICE=cuda", "needs an NVIDIA GPU", False),
    (r"^make demo TORCH=", "reinstalls torch into .venv (another build from PyPI)", False),
    (r"^pip install -e \.$", "run in your own env package's folder", False),
    (r"code/_launcher\.py", "internal: the sandbox host starts it with its config on a pipe", False),
    (r"benchmarks/bench_ddp\.py(?!.*--smoke)", "2 processes x SmolLM2 x several updates of 32 episodes (minutes)",
     True),
    (r"-m baselines\.grid (?!.*--(dry-run|report-only))", "a whole comparison grid (hours of machine time); "
     "--dry-run prints its plan", True),
    (r"(\bmarft benchmark|-m baselines\.benchmark) (?!.*--(dry-run|report-only))",
     "a whole benchmark suite (an hour or more); --dry-run writes and lists it", True),
]

# (regex on the command, reason): run as a validation (``validation``) instead of as written.
VALIDATE_RULES: list[tuple[str, str]] = [
    (r"(?i)qwen2\.5", "needs a GPU and the Qwen2.5 weights"),
    (r"--nproc_per_node\s+(?:[3-9]|\d{2,})\b", "needs several GPUs"),
    (r"(^|\s)\.venv-vllm/", "needs vLLM's CPU build (.venv-vllm, make test-vllm)"),
]
NOT_SHELL = "shown for another machine (a non-shell block)"
FENCE_COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:(?:\S*/)?(?:marft|torchrun)\s|(?:\S*/)?python3?\s+-m\s+"
                           r"marft_agents\.cli\s|make(?:\s|$))")
"""A line of a non-shell fenced block that is a marft or make command (``torchrun ... -m
marft_agents.cli``, ``.venv/bin/marft``, ``make demo``), not output or code."""
ERROR_LINE = re.compile(r"^\S*marft \w+: ")
"""``marft train: error: ...``: output shown in a block, not a command."""
MODEL_COMMAND = re.compile(r"(?:\bmarft|marft_agents\.cli)\s+(train|eval|score|bench)\b")

# Overrides of a training / evaluation run: one short update and a tiny evaluation.
SHORT_CONFIG = {
    "schedule.num_updates": 1, "schedule.episodes_per_update": 4, "schedule.minibatch_size": 4,
    "schedule.time_budget_s": None, "env.num_envs": 4, "eval.n_problems": 4, "eval.num_envs": 4,
    "eval.interval": 0, "sampling.max_new_tokens": 8, "model.threads": 1,
}
BENCH_SCRIPTS = ("bench_rollout.py", "bench_update.py", "profile_rollout.py", "team_speed.py")
BENCH_SHORT = ["--batch", "4", "--new-tokens", "8", "--repeats", "1", "--threads", "1"]
INLINE_START = re.compile(r"^(\.venv/bin/|python3? |marft |make |pytest |torchrun |pip |[A-Z_]+=\S+ )")
PLACEHOLDER = re.compile(r"<[^>]*>|\[[^\]]*\]|\.\.\.|\b(ID|DIR|PATH|CONFIG|ENV_ID|FOLDER|NAME|N|A\.jsonl)\b")
USER_CONFIGS = {"my.yaml": "runs/my", "run.yaml": "runs/run"}  # a user's config, written as the demo's


@dataclass
class Command:
    file: str
    line: int
    text: str
    run_as: str = ""
    skip: str = ""
    validate: str = ""
    """Why the command is validated instead of run (``VALIDATE_RULES``, a skip rule), or empty."""
    validate_as: str = ""
    """The validation run instead (:func:`validation`)."""
    fence: str = ""
    """The fenced block's language (empty outside one)."""
    long: bool = False
    inline: bool = False
    notes: list[str] = field(default_factory=list)


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` at the start or after a blank, unquoted)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
    return line.rstrip()


def _inline(rel: str, number: int, line: str) -> list[Command]:
    """The command-like inline code spans of a prose line."""
    found = []
    for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", line):
        span = span.strip()
        if not INLINE_START.match(span):
            continue
        command = Command(rel, number, span, inline=True)
        if PLACEHOLDER.search(span):
            command.skip = "inline, has a placeholder"
        elif re.fullmatch(r"(\.venv/bin/)?marft (train|eval|score|bench)\b.*", span) \
                and not re.search(r"--(config|policy)\b", span):
            command.skip = "inline, names a subcommand (no config)"
        elif (re.fullmatch(r"(\S+=\S+ ?)+", span) or re.search(r"\s-[cm]$", span)
              or re.fullmatch(r"python3? -I -S|pytest -s|pip install|python -m baselines\.(run|transcripts|grid)",
                              span)):
            command.skip = "inline, not a whole command (an option or program named in prose)"
        found.append(command)
    return found


def extract(files: list[Path], inline: bool = False) -> list[Command]:
    commands: list[Command] = []
    for path in files:
        rel = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        fence: str | None = None
        info = ""
        k = 0
        while k < len(lines):
            stripped = lines[k].strip()
            marker = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if fence is None and marker:
                fence, info = marker.group(1), marker.group(2).lower()
                k += 1
                continue
            if fence is not None and stripped.startswith(fence) and stripped.strip("`~") == "":
                fence = None
                k += 1
                continue
            if fence is None:
                if inline:
                    commands += _inline(rel, k + 1, lines[k])
                k += 1
                continue
            start = k
            prompt = stripped.startswith("$ ")
            shell = info in SHELL_FENCES and info != "console" and info != "shell-session"
            other = (info not in SHELL_FENCES and FENCE_COMMAND.match(stripped) is not None
                     and not ERROR_LINE.match(stripped))
            if not (prompt or shell or other) or not stripped or stripped.startswith("#"):
                k += 1
                continue
            text = stripped[2:] if prompt else stripped
            while text.endswith("\\") and k + 1 < len(lines):
                k += 1
                text = text[:-1].rstrip() + " " + lines[k].strip()
            k += 1
            text = _strip_comment(text)
            if text:
                commands.append(Command(rel, start + 1, text, fence=info))
    return commands


def validation(text: str) -> str | None:
    """The check that stands in for ``text`` where it cannot run: ``marft config --config FILE``
    with its ``--set`` overrides for a train / eval / score, ``make -n`` for a make command; None
    for a command that is cheap anywhere (``marft envs``, ``marft config``)."""
    words = text.split()
    if MODEL_COMMAND.search(text):
        config = re.search(r"--(?:config|policy)[ =](\S+\.ya?ml)\b", text)
        if config is None:
            return "false  # no --config FILE to validate"
        sets = " ".join(f"--set {value}" for value in re.findall(r"--set[ =](\S+)", text))
        return f"python -m marft_agents.cli config --config {config.group(1)} {sets}".rstrip()
    make = next((k for k, word in enumerate(words) if word == "make"), None)
    if make is not None:
        return " ".join([*words[:make], "make", "-n", *words[make + 1:]])
    return None


def plan(command: Command, short_dir: Path) -> None:
    """Fill ``run_as`` (the documented command plus the shortening options) or ``skip``."""
    text = command.text
    for pattern, reason, long in SKIP_RULES:
        if re.search(pattern, text):
            command.skip, command.long = reason, long
    reasons = [reason for pattern, reason in VALIDATE_RULES if re.search(pattern, text)]
    reasons += [NOT_SHELL] if command.fence and command.fence not in SHELL_FENCES else []
    reasons += [command.skip] if command.skip else []
    check = validation(text) if reasons else None
    if check is not None:  # what is not run here is checked: a skipped command too, unless --include-long runs it
        command.validate, command.validate_as = "; ".join(reasons), check
    run = re.sub(r"\bOMP_NUM_THREADS=\d+", "OMP_NUM_THREADS=1", text)
    sets = [f"--set {key}={'null' if value is None else value}" for key, value in SHORT_CONFIG.items()]
    if re.search(r"\bmarft(_agents\.cli)?\s+train\b", run) or re.search(r"-m baselines\.run\b", run):
        if "--resume" in run.split():
            sets[0] = "--set schedule.num_updates=2"  # one more update than the run it resumes
        run += " " + " ".join(sets)
        command.notes.append("shortened: " + ", ".join(f"{k}={v}" for k, v in SHORT_CONFIG.items()))
    elif re.search(r"\bmarft\s+(eval|score|bench)\b", run):
        if " --policy scripted:" not in run:
            run += " --n 4 --set sampling.max_new_tokens=8 --set eval.num_envs=4 --set model.threads=1"
    elif any(f"benchmarks/{script}" in run for script in BENCH_SCRIPTS):
        run += " " + " ".join(BENCH_SHORT) + (" --minibatch 4" if "bench_update.py" in run else "")
    elif re.match(r"make demo\b", run):
        with open(REPO / "baselines/configs/demo.yaml", encoding="utf-8") as f:
            config = yaml.safe_load(f)
        for key, value in SHORT_CONFIG.items():
            section, name = key.split(".")
            config.setdefault(section, {})[name] = value
        short = short_dir / "demo_short.yaml"
        short.write_text(yaml.safe_dump(config), encoding="utf-8")
        run += f" DEMO_CONFIG={short}"
    if re.search(r"(?<![\w/.-])(my|run)\.yaml\b", text):
        command.notes.append("my.yaml / run.yaml: the demo config, written into the copy (the user's own config)")
    command.run_as = run


def _overlay_venv(scratch: Path, base: Path) -> Path:
    """A venv whose site-packages chains to ``base`` (the checkout's .venv), with the same console scripts."""
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(base.glob("lib/python*/site-packages"))
    own_site = next(venv.glob("lib/python*/site-packages"))
    (own_site / "_marft_doc_commands.pth").write_text(f"import site; site.addsitedir({str(site)!r})\n")
    for script in (base / "bin").iterdir():
        if script.name.startswith(("python", "activate")) or (venv / "bin" / script.name).exists():
            continue
        try:
            text = script.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a compiled tool (ruff): it imports nothing of the venv, link it
            (venv / "bin" / script.name).symlink_to(script)
            continue
        except IsADirectoryError:
            continue
        if text.startswith(f"#!{base}/bin/python"):
            target = venv / "bin" / script.name
            target.write_text(text.replace(f"#!{base}/bin/python", f"#!{venv}/bin/python", 1), encoding="utf-8")
            target.chmod(0o755)
    return venv


def _config_of(text: str) -> str | None:
    """The config file a command names (``--config X.yaml``, ``--policy X.yaml``, a positional one)."""
    found = re.search(r"(\S+\.ya?ml)\b", text)
    return found.group(1) if found else None


def _continues(text: str) -> bool:
    return "--resume" in text.split() or re.search(r"--checkpoint\s+(latest|best)\b", text) is not None


def _fresh_copy(scratch: Path, index: int, venv: Path) -> Path:
    copy = scratch / f"cmd{index:02d}" / REPO.name
    shutil.copytree(REPO, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv*", "runs", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", ".cache", "build", "dist"))
    (copy / ".venv").symlink_to(venv)
    if (REPO.parent / "shared").is_dir():  # the data root beside the checkout (marft_envs.tasks.paths)
        (copy.parent / "shared").symlink_to(REPO.parent / "shared")
    (venv / ".marft-installed").touch()  # the Makefile's setup stamp: make must not reinstall
    demo = yaml.safe_load((REPO / "baselines/configs/demo.yaml").read_text(encoding="utf-8"))
    for name, output_dir in USER_CONFIGS.items():
        (copy / name).write_text(yaml.safe_dump({**demo, "output_dir": output_dir}), encoding="utf-8")
    return copy


def _run_one(command: Command, cwd: Path, venv: Path, timeout: float) -> tuple[str, float, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VIRTUAL_ENV": str(venv), "PYTHONPATH": str(cwd),
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", command.run_as], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        status = "PASS" if proc.returncode == 0 else f"FAIL(exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        status = f"FAIL(timeout {timeout:.0f} s)"
    return status, time.monotonic() - start, out or ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="See the module docstring for what --run changes in a command.")
    parser.add_argument("--run", action="store_true", help="run the commands (default: only list them)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per command (default 240)")
    parser.add_argument("--only", help="regex: run only commands (or file:line) matching it")
    parser.add_argument("--include-long", action="store_true", help="also run what is skipped as too long")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies (path printed)")
    parser.add_argument("--tail", type=int, default=15, help="output lines shown for a failure")
    parser.add_argument("--inline", nargs="?", const="also", choices=["also", "only"],
                        help="also (or only) the inline `command` spans of the prose")
    parser.add_argument("--show-output", action="store_true", help="show the output tail of passing commands too")
    parser.add_argument("--venv", type=Path, default=REPO / ".venv",
                        help="the virtual env the commands' .venv stands for (default: the checkout's .venv)")
    parser.add_argument("files", nargs="*", type=Path, help=f"markdown files (default: {' '.join(DOCS)})")
    args = parser.parse_args(argv)

    files = [f.resolve() for f in args.files] or sorted({p for pattern in DOCS for p in REPO.glob(pattern)},
                                                        key=lambda p: (p.parent != REPO, str(p)))
    commands = extract(files, args.inline)
    seen: set[str] = set()  # an inline span repeating a command already listed is left out
    commands = [c for c in commands if not (c.text in seen or seen.add(c.text))]
    if args.inline == "only":
        commands = [c for c in commands if c.inline]
    if args.only:
        commands = [c for c in commands if re.search(args.only, c.text) or re.search(args.only, f"{c.file}:{c.line}")]
    if not args.run:
        with tempfile.TemporaryDirectory() as short_dir:
            for c in commands:
                plan(c, Path(short_dir))
                tag = f"   [VALIDATE: {c.validate_as}]" if c.validate else f"   [SKIP: {c.skip}]" if c.skip else ""
                print(f"{c.file}:{c.line}: {c.text}{tag}")
        print(f"{len(commands)} commands in {len(files)} files")
        return 0

    scratch = Path(tempfile.mkdtemp(prefix="marft-doc-commands-"))
    failed = 0
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    try:
        venv = _overlay_venv(scratch, args.venv.resolve())
        last_copy: dict[str, Path] = {}  # config file -> the copy of the last command that used it
        for index, c in enumerate(commands):
            plan(c, scratch)
            where = f"{c.file}:{c.line}"
            run_it = not c.skip or (c.long and args.include_long)
            if c.validate and not (c.skip and run_it):  # not run here: its validation instead
                c.run_as = c.validate_as
                c.notes = [f"validated, not run: {c.validate}"]  # the shortening notes are of the command not run
            elif not run_it:
                print(f"SKIP({c.skip})     0.0s  {where}: {c.text}", flush=True)
                counts["SKIP"] += 1
                continue
            config = _config_of(c.text)
            if config in last_copy and _continues(c.text):
                copy = last_copy[config]
                c.notes.append(f"continues the run of the last command with {config}, in its copy")
            else:
                copy = _fresh_copy(scratch, index, venv)
            if config:
                last_copy[config] = copy
            status, seconds, out = _run_one(c, copy, venv, args.timeout)
            print(f"{status:<6} {seconds:7.1f}s  {where}: {c.text}", flush=True)
            if c.run_as != c.text:
                print(f"{'':16}as run: {c.run_as}")
            for note in c.notes:
                print(f"{'':16}({note})")
            lines = [line for line in out.strip().splitlines() if line.strip()]
            if status != "PASS" or args.show_output:
                failed += status != "PASS"
                tail = lines[-args.tail:]
                # the first error lines too: torchrun's summary hides the rank's own message
                errors = [line for line in lines[:-args.tail] if re.search(r"error|Error|Traceback", line)][:5]
                for line in errors + (["..."] if errors else []) + tail:
                    print(f"{'':16}| {line[-300:]}")
            counts["FAIL" if status != "PASS" else "PASS"] += 1
    finally:
        if args.keep:
            print(f"copies kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped of {len(commands)} commands")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
