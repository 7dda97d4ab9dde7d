"""Run records: one JSON file per finished run or benchmark, written by tools, never edited by hand.

A record (:class:`Record`) says what was run (env id and kwargs, profile, algorithm, model,
budget), on what (machine, commit, code digest), and what it scored (greedy eval accuracy with
its standard error, before and after training). The library owns the schema and its file format:
``marft score`` writes records with :func:`write_record`, and :func:`read_records` reads a folder
of them back, refusing a record that lacks a :data:`REQUIRED` field. The leaderboards
(``leaderboards/records.py``, ``python -m leaderboards.build``) build their tables and reports
on this module.

So that a result can be questioned from its record alone, a training run's record also carries
(``baselines/run.py`` fills them from the run folder): its per-update training diagnostics
(:data:`DIAGNOSTIC_PREFIXES`, column-wise), the episodes and sampled tokens at every evaluation,
the final evaluation's per-problem outcomes, and the first decisions of a few fixed problems at
every evaluation; :func:`fit_to_budget` keeps a record under :data:`RECORD_MAX_BYTES`. When the env
reports stages (Relay level 4: did the reducer pass A + B, was the answerer right given what it
heard), its evaluations carry the per-stage pass rates and the final one the per-problem stages
(:data:`marft_agents.evaluation.problem_set.STAGE_FIGURES`); records of envs without stages, and
records made before, have none of these keys and read as before.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from marft_agents.evaluation.problem_set import STAGES_KEY, score_stages
from marft_agents.files import make_ordinary

REQUIRED = ("name", "env_id", "algorithm", "model", "eval_after")

RECORD_MAX_BYTES = 200_000
"""Size budget of one record file: :func:`fit_to_budget` thins the per-update diagnostics, then
the transcript sample, until the record fits (a grid of 30 runs stays a few MB in git)."""
DIAGNOSTIC_PREFIXES = ("rollout/", "losses/", "critic/", "baseline/", "grpo/", "agent/")
"""Metric families kept per update in ``Record.diagnostics`` (every key of the run's metrics file
that starts with one; a learner logs only its own): reward and solve rate, rollout tokens and
rounds (``rollout/``), policy and value losses, entropy, approx-KL, KL to the reference, clip
fractions and explained variance (``losses/``), the critic's health against its ceiling
(``critic/``), every estimator's baseline gain per decision position (``baseline/``:
``learners/baseline_gain.py``), GRPO's groups (``grpo/``), per-agent reward and response length
(``agent/``)."""
DIAGNOSTIC_DIGITS = 4
"""Significant digits of a diagnostic value in a record."""
TRANSCRIPT_PROBLEMS = 3
"""Problems of the evaluation set (the first in its fixed order) whose first decisions a record keeps at every evaluation."""
TRANSCRIPT_CHARS = 240
"""Characters kept of each observation and utterance in the transcript sample (head and tail)."""


@dataclass
class Record:
    """One leaderboard row."""

    name: str
    """Baseline or run name (e.g. ``marft_a_arithmetic_l1``)."""
    env_id: str
    """Registered env id."""
    env_kwargs: dict[str, Any]
    """Keyword arguments the env was made with (profile, level, split, ...)."""
    algorithm: str
    """``marft_a``, ``marft_t``, ``ppo`` or ``none`` (evaluation only)."""
    model: str
    """Model name or path (of ``model:``, every agent's unless ``agent_models`` says otherwise)."""
    eval_after: dict[str, Any]
    """``{"accuracy", "stderr", "n", "greedy"}`` after training (:meth:`EvalResult.figures
    <marft_agents.evaluation.problem_set.EvalResult.figures>`): with several samples per problem
    also ``samples_per_problem``, ``avg_at_k``, ``pass_at_k`` and their errors; when the env reports
    stages also ``stage_pass``, ``stage_stderr`` and ``stage_n`` (each stage name -> pass rate,
    its clustered s.e., plays counted; the file sorts their keys, the env class's ``stages``
    declares the order they are played in)."""
    eval_before: dict[str, Any] | None = None
    """The same evaluation of the untrained model, when measured."""
    eval_best: dict[str, Any] | None = None
    """``{"update", "accuracy", "stderr"}``: the best evaluation during training (its adapters are
    the run's ``best/``). Chosen on the evaluation problems, so it is optimistic when those are
    the test split; ``eval_after`` is the result."""
    eval_curve: list[dict[str, Any]] = field(default_factory=list)
    """Every evaluation of the run, ``{"update", "episodes", "sampled_tokens", "accuracy", "stderr",
    "train_seconds"}``, update 0 = untrained; ``episodes`` and ``sampled_tokens`` are the training
    samples before it (the grids' budget axis), ``train_seconds`` the rollout + update time (a cost);
    when the env reports stages and the run kept that evaluation's outcomes, also ``stage_pass``,
    ``stage_stderr`` and ``stage_n`` as in ``eval_after`` (:func:`stage_figures`). Records made
    before the sample axis lack ``episodes`` and ``sampled_tokens``."""
    budget: dict[str, Any] = field(default_factory=dict)
    """Updates, episodes, wall-clock seconds, tokens (sampled in rollouts) the run used."""
    diagnostics: dict[str, list[Any]] = field(default_factory=dict)
    """Per-update training metrics, column-wise: ``update``, ``episodes``, ``sampled_tokens``,
    ``train_seconds`` and every metric of :data:`DIAGNOSTIC_PREFIXES` the run logged (None where an
    update did not log it). Thinned to every k-th update (the last kept) when the record would
    exceed :data:`RECORD_MAX_BYTES`: the ``update`` column says which."""
    eval_outcomes: dict[str, Any] | None = None
    """The final evaluation per problem, column-wise: ``update``, ``task_index`` (the env's task
    index, in evaluation order), ``solved`` (0/1), ``reward``, ``samples_solved`` with several
    samples per problem, and ``stages_passed`` when the env reports stages (stage name -> per
    problem, the plays that passed it: 0/1, or 0..k with k samples) (:func:`eval_outcomes`)."""
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    """At every evaluation (``update``, ``episodes``), the first-round decisions of the first
    :data:`TRANSCRIPT_PROBLEMS` problems of the evaluation set (the same problems each time):
    ``{"task_index", "solved", "rounds", "decisions": [{"agent", "observation", "text"}]}`` (``rounds``: the
    episode's, absent in records made before), each text cut to
    :data:`TRANSCRIPT_CHARS` (:func:`transcript_sample`)."""
    task_revision: int | None = None
    """The env's ``task_revision`` (which problems form its train/test split) when it declares
    revisions (``task_revisions``, e.g. Relay); None otherwise, or in records made before."""
    config: dict[str, Any] = field(default_factory=dict)
    """The full training config as run."""
    agent_models: dict[str, str] = field(default_factory=dict)
    """In a team of different models: each agent id -> the name or path of the model it ran on
    (frozen teammates marked ``(frozen)``); empty when every agent ran on ``model``
    (``TrainConfig.agent_models``)."""
    machine: dict[str, Any] = field(default_factory=dict)
    """Filled in automatically (:func:`machine_facts`): platform, CPU count, Python, and on Linux
    the CPU's model name and which of :data:`ISA_FLAGS` it has (records made before have neither):
    what decides the dtype "auto" stands for and how fast a run went."""
    commit: str = ""
    """Git commit of the code that trained it (``baselines/run.py`` takes it when training starts;
    ``-dirty``: with uncommitted changes)."""
    code: str = ""
    """Digest of marft's code that trained it (:func:`code_digest`, taken with ``commit``): equal for
    two commits that differ only in docs, records or grid declarations, and filled outside git too."""
    marft_version: str = ""
    """The installed marft version (``marft score`` fills it: outside a git checkout ``commit`` is empty)."""
    env_package: dict[str, Any] = field(default_factory=dict)
    """Who provides the env: ``{"distribution", "version", "entry_point", "origin"}`` (``marft score``
    fills it; for a plugin env this is the plugin's distribution, not marft)."""
    date: str = ""
    """UTC timestamp (filled in automatically)."""
    grid: dict[str, Any] | None = None
    """For a run of a declared grid (``baselines/grid.py``): ``{"grid", "cell", "seed", "kind"}``
    (kind ``train``, ``untrained`` or ``swapped``; a swapped run adds ``source``, the cell whose
    trained adapters it evaluated, and ``assignment``, agent -> the agent whose adapter it got),
    ``wall_s``, the run's whole machine time (training, evaluations, loading), and ``budget``,
    the grid's budget axis (:func:`leaderboards.records.grid_budget`)."""


ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The CPU flags a record names: the kernels torch picks and whether bf16 is native differ by them,
so two records' speeds and low-order bits compare only between equal sets."""


def machine_facts(cpuinfo: str | None = None) -> dict[str, Any]:
    """What a record says about the machine it was made on: ``platform``, ``cpus``, ``python``, and
    where ``/proc/cpuinfo`` (or ``cpuinfo``, its text, for tests) is readable, ``cpu`` (the model
    name) and ``isa`` (the flags of :data:`ISA_FLAGS` it has, in that order)."""
    facts: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count(),
                             "python": platform.python_version()}
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return facts
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    if fields.get("model name"):
        facts["cpu"] = fields["model name"]
    flags = set(fields.get("flags", "").split())
    if flags:
        facts["isa"] = [flag for flag in ISA_FLAGS if flag in flags]
    return facts


GENERATED_PATHS = tuple(f":(exclude,top,glob){pattern}" for pattern in (
    "leaderboards/records/**", "leaderboards/grids/**", "leaderboards/README.md", "leaderboards/*.png"))
"""Git pathspecs of what the leaderboards write (records, tables, plots): not code, so not "dirty"."""


def git_commit(root: Path | None = None) -> str:
    """Short HEAD commit of the checkout holding ``root`` (default: this package), with ``-dirty``
    when tracked code has uncommitted changes ("" outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=root or Path(__file__).parent,
                              timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        # Generated outputs (records, tables, plots under leaderboards/) do not make the code
        # dirty: a grid rewrites its report after every run, and the next run's code is unchanged.
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ":/", *GENERATED_PATHS)
        return commit + ("-dirty" if commit and changed else "")
    except (OSError, subprocess.SubprocessError):
        return ""


CODE_PACKAGES = ("marft_agents", "marft_envs", "baselines")
"""Where the code that makes a run lives (:func:`code_digest`); ``baselines/grids`` is left out: a
grid file declares cells, and each record carries its cell's resolved config."""
CODE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".toml")


def code_digest(root: Path | None = None) -> str:
    """The first 12 hex digits of a SHA-256 over every file of :data:`CODE_PACKAGES` (and
    ``pyproject.toml``) with a :data:`CODE_SUFFIXES` suffix under ``root`` (default: this
    checkout), path and bytes, in path order. Read from the files, not from git, so a copy of the
    checkout without ``.git`` (a device machine's) gets it too, and uncommitted edits change it.
    Records made at several commits answer a grid's questions as one code state when their
    digests agree (``leaderboards.grid_report``). "" when none of the packages is there."""
    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    files = [path.relative_to(root) for package in CODE_PACKAGES for path in (root / package).rglob("*")
             if path.suffix in CODE_SUFFIXES and path.is_file()]
    files = [path for path in files if "__pycache__" not in path.parts and path.parts[:2] != ("baselines", "grids")]
    if not files:
        return ""
    if (root / "pyproject.toml").is_file():
        files.append(Path("pyproject.toml"))
    digest = hashlib.sha256()
    for path in sorted(files, key=Path.as_posix):
        digest.update(path.as_posix().encode() + b"\0")
        digest.update((root / path).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


# -- what a training run's record carries -----------------------------------------------------------
def _round(value: Any) -> Any:
    """A metric value with :data:`DIAGNOSTIC_DIGITS` significant digits (non-numbers as they are)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int) or value == 0 or not math.isfinite(value):
        return value if math.isfinite(value) else None
    return float(f"{value:.{DIAGNOSTIC_DIGITS}g}")


def training_diagnostics(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Column-wise diagnostics of the update rows of a metrics file (``step`` >= 1, one per update,
    in order): the position columns, then every :data:`DIAGNOSTIC_PREFIXES` key any row has."""
    rows = [r for r in rows if r.get("step", 0) >= 1]
    if not rows:
        return {}
    keys = sorted({k for r in rows for k in r if k.startswith(DIAGNOSTIC_PREFIXES)})
    columns: dict[str, list[Any]] = {
        "update": [int(r["step"]) for r in rows],
        "episodes": [_count(r.get("counters/episodes")) for r in rows],
        "sampled_tokens": [_count(r.get("counters/tokens")) for r in rows],
        "train_seconds": [_round(r.get("time/train_seconds")) for r in rows],
    }
    columns.update({key: [_round(r.get(key)) for r in rows] for key in keys})
    return columns


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def _plays(task: dict[str, Any]) -> list[dict[str, Any]]:
    """A ``per_task`` entry's plays: its samples, or the entry itself with one play."""
    return task.get("samples") or [task]


def eval_outcomes(per_task: list[dict[str, Any]], update: int) -> dict[str, Any]:
    """The per-problem outcomes of one evaluation (``EvalResult.per_task``), column-wise; with
    stages (``per_task[i]["stages"]``), ``stages_passed``: stage name -> per problem the plays
    that passed it (None for a problem none of whose plays reported that stage)."""
    out: dict[str, Any] = {"update": update, "task_index": [t["task_index"] for t in per_task],
                           "solved": [int(bool(t["solved"])) for t in per_task],
                           "reward": [_round(t.get("reward")) for t in per_task]}
    if any("samples" in t for t in per_task):
        out["samples_solved"] = [sum(bool(s["solved"]) for s in t.get("samples", [])) for t in per_task]
    staged = [[s.get(STAGES_KEY) or {} for s in _plays(t)] for t in per_task]
    names = list(dict.fromkeys(name for plays in staged for stages in plays for name in stages))
    if names:
        out["stages_passed"] = {
            name: [sum(bool(stages[name]) for stages in plays if name in stages)
                   if any(name in stages for stages in plays) else None for plays in staged]
            for name in names}
    return out


def stage_figures(per_task: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-stage figures (:data:`~marft_agents.evaluation.problem_set.STAGE_FIGURES`) of one
    evaluation from its ``per_task`` entries (as the trainer keeps them at every evaluation),
    clustered by problem statement as :meth:`EvalResult.figures` has them; {} when no play
    reports stages (an eval-curve point then has no stage keys, as before)."""
    plays = [(t.get("problem", t.get("task_index")), s.get(STAGES_KEY)) for t in per_task for s in _plays(t)]
    figures = score_stages(plays)
    return figures if figures["stage_pass"] else {}


def _clip(text: Any, chars: int = TRANSCRIPT_CHARS) -> str:
    """``text`` cut to ``chars`` characters, keeping its head and tail (a question often comes last)."""
    text = "" if text is None else str(text)
    if len(text) <= chars:
        return text
    half = (chars - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def transcript_sample(per_task: list[dict[str, Any]], problems: int = TRANSCRIPT_PROBLEMS) -> list[dict[str, Any]]:
    """The first-round decisions of the first ``problems`` problems of an evaluation, cut short,
    with the episode's outcome and its number of rounds (``solved`` with ``rounds`` > 1 may come
    from a later round than the one shown)."""
    sample = []
    for task in per_task[:problems]:
        transcript = task.get("transcript") or []
        first_round = min((d.get("round", 0) for d in transcript), default=0)
        sample.append({"task_index": task["task_index"], "solved": int(bool(task["solved"])), "rounds": task.get("rounds"),
                       "decisions": [{"agent": d["agent"], "observation": _clip(d.get("observation")),
                                      "text": _clip(d.get("text"))}
                                     for d in transcript if d.get("round", 0) == first_round]})
    return sample


def dumps(data: Any) -> str:
    """A record as JSON text: indented, keys sorted, but a list of plain values on one line, so the
    column-wise diagnostics cost a few bytes per value rather than a line each."""

    def scalar_list(value: Any) -> bool:
        return isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)

    def dump(value: Any, indent: str) -> str:
        if isinstance(value, dict) and value:
            inner = indent + "  "
            items = [f"{inner}{json.dumps(str(k))}: {dump(value[k], inner)}" for k in sorted(value, key=str)]
            return "{\n" + ",\n".join(items) + "\n" + indent + "}"
        if isinstance(value, list) and value and not scalar_list(value):
            inner = indent + "  "
            return "[\n" + ",\n".join(inner + dump(v, inner) for v in value) + "\n" + indent + "]"
        return json.dumps(value, separators=(", ", ": "))

    return dump(data, "") + "\n"


def _size(record: Record) -> int:
    return len(dumps(asdict(record)).encode("utf-8"))


def fit_to_budget(record: Record, max_bytes: int = RECORD_MAX_BYTES) -> Record:
    """Thin ``record`` until its file is at most ``max_bytes``, taking from the larger of the two
    parts each time: the diagnostics to every 2nd, 4th, ... update (the last one always kept), the
    transcript sample to every other evaluation (the first and last kept). Raises if the rest alone
    is over (then the budget is wrong, not the run)."""
    full = dict(record.diagnostics)
    stride = 1
    while _size(record) > max_bytes:
        n = len(full.get("update", []))
        can_thin_diagnostics = stride < n
        can_thin_transcripts = len(record.transcripts) > 2
        if not (can_thin_diagnostics or can_thin_transcripts):
            raise ValueError(f"record {record.name} is {_size(record)} bytes with its diagnostics and transcripts "
                             f"thinned, over the budget of {max_bytes}; what else is in it?")
        larger = len(json.dumps(record.diagnostics)) >= len(json.dumps(record.transcripts))
        if can_thin_diagnostics and (larger or not can_thin_transcripts):
            stride *= 2
            keep = [i for i in range(n) if (n - 1 - i) % stride == 0]
            record.diagnostics = {key: [column[i] for i in keep] for key, column in full.items()}
        else:
            kept = record.transcripts  # the first and last evaluation stay, every other one between
            record.transcripts = kept[:1] + kept[1:-1][1::2] + kept[-1:]
    return record


def write_record(record: Record, records_dir: str | os.PathLike) -> Path:
    """Write ``<records_dir>/<name>.json`` atomically (temp file + rename), filling
    machine/commit/code/date, within the size budget (:func:`fit_to_budget`); the file gets the
    mode a plain ``open`` would give it (0644 under the usual umask), not the temp file's 0600."""
    fit_to_budget(record)
    record.machine = record.machine or machine_facts()
    record.commit = record.commit or git_commit()
    record.code = record.code or code_digest()
    record.date = record.date or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    records_dir = Path(records_dir)
    records_dir.mkdir(parents=True, exist_ok=True)
    path = records_dir / f"{record.name}.json"
    fd, tmp = tempfile.mkstemp(dir=records_dir, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(dumps(asdict(record)))
    make_ordinary(tmp)  # mkstemp's file is private (0600); a record is shared like any other file
    os.replace(tmp, path)
    return path


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """One record file as plain data; a record missing a :data:`REQUIRED` field raises
    ``ValueError`` naming the file and the fields."""
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"record {path} lacks {missing}; regenerate it with the tool that wrote it "
                         "(baselines/run.py, marft score)")
    return data


def read_records(records_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every ``*.json`` record of ``records_dir``, in file-name order, checked by :func:`read_record`."""
    return [read_record(path) for path in sorted(Path(records_dir).glob("*.json"))]


def env_task_revision(env_id: str, env_kwargs: dict[str, Any]) -> int | None:
    """The ``task_revision`` of the env made with ``env_kwargs`` (which problems form its
    splits), for ``Record.task_revision``; None when the env declares no revisions."""
    import marft_envs

    env = marft_envs.make(env_id, **env_kwargs)
    return getattr(getattr(env, "unwrapped", env), "task_revision", None)
