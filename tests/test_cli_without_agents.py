"""The ``marft`` command on an install without the ``agents`` extra (no torch, transformers, peft).

Each command runs in a subprocess whose imports of those packages fail as if they were not
installed: what needs only ``marft_envs`` works, and what needs a model says in one line which
extra to install, with no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Installs an import hook that makes torch, transformers and peft (and their submodules) missing,
# then runs the command as the `marft` entry point does.
WITHOUT_AGENTS = textwrap.dedent("""
    import importlib.abc, sys

    BLOCKED = {"torch", "transformers", "peft"}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    for name in list(sys.modules):  # nothing may have slipped in before the hook
        assert name.partition(".")[0] not in BLOCKED, name
    from marft_agents.cli import main

    code = main(sys.argv[1:])
    leaked = sorted(n for n in sys.modules if n.partition(".")[0] in BLOCKED)
    assert not leaked, leaked
    sys.exit(code)
""")


def _marft(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    # keep an inherited PYTHONPATH: where the dependencies come from one (no venv), the command needs it
    paths = [str(REPO), str(tmp_path)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-c", WITHOUT_AGENTS, *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def test_envs_works_without_torch(tmp_path):
    done = _marft(tmp_path, "envs")
    assert done.returncode == 0, done.stderr
    assert "marft/Arithmetic-v0" in done.stdout.split()
    verbose = _marft(tmp_path, "envs", "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert "reasoner_0, actor_0 (default profile 'dual')" in verbose.stdout


def test_scripted_score_works_without_torch(tmp_path):
    (tmp_path / "always_42.py").write_text("def answer(agent, observation, info):\n    return '42'\n")
    done = _marft(tmp_path, "score", "--env", "marft/Arithmetic-v0", "--policy", "scripted:always_42:answer",
                  "--n", "2", "--env-kwargs", "{profile: solo, horizon: 1}")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "score_marft_arithmetic_v0_answer.json").read_text())
    assert record["eval_after"]["n"] == 2 and record["algorithm"] == "scripted"


def test_config_listing_works_without_torch(tmp_path):
    # the config dataclasses are plain data (marft_agents.config imports no torch)
    done = _marft(tmp_path, "config")
    assert done.returncode == 0, done.stderr
    assert "output_dir: str" in done.stdout and "schedule.num_updates" in done.stdout


@pytest.mark.parametrize("argv", [
    ["train", "--config", "run.yaml"],
    ["train", "--config", "run.yaml", "--resume"],
    ["eval", "--config", "run.yaml", "--checkpoint", "none"],
    ["score", "--policy", "run.yaml"],
])
def test_model_commands_name_the_extra_in_one_line(tmp_path, argv):
    (tmp_path / "run.yaml").write_text("env: {id: marft/Arithmetic-v0}\noutput_dir: out\n")
    done = _marft(tmp_path, *argv)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"marft {argv[0]} needs the agents extra"), lines[0]
    # run from this source checkout (not from the folder it is in): the editable install of it
    assert lines[0].endswith(f"pip install -e '{REPO}[agents]'"), lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, expected", [
    (["train", "--config", "nope.yaml"], "config file 'nope.yaml' does not exist"),
    (["train", "--config", "run.yaml", "--set", "schedule.actor_lrr=1e-4"], "did you mean 'schedule.actor_lr'?"),
    (["train", "--config", "run.yaml", "--set", "schedule.num_updates=many"], "schedule.num_updates must be int"),
    (["train", "--config", "run.yaml", "--set", "algorithm=mapo_action"], "unknown algorithm 'mapo_action'"),
    (["train", "--config", "run.yaml", "--set", "env.kwargs.profile=duel"], "did you mean 'dual'?"),
    (["eval", "--config", "run.yaml", "--set", "model.dtype=bf16"], "did you mean 'bfloat16'?"),
    (["score", "--policy", "run.yaml", "--set", "learner.group_size=4"], "declares no learner options"),
    (["config", "--config", "run.yaml", "--set", "sampling.engine=vlm"], "sampling.engine must be one of"),
    # the env checks train runs, in marft config too (the paper config's eval.env_kwargs mistake)
    (["config", "--config", "run.yaml", "--set", "eval.env_kwargs={level: 99}"], "eval.env_kwargs"),
    (["config", "--config", "run.yaml", "--set", "init_adapters=no/such/run"], "init_adapters 'no/such/run'"),
    (["eval", "--config", "run.yaml", "--checkpoint", "no/such/run"], "--checkpoint 'no/such/run' does not exist"),
])
def test_a_config_mistake_is_found_before_anything_heavy_is_imported(tmp_path, argv, expected):
    # Without torch installed the mistake is still the one line reported: the config is read and
    # validated first (plain data), so it answers at once whatever the extra would cost to import.
    (tmp_path / "run.yaml").write_text("env: {id: marft/Arithmetic-v0, kwargs: {profile: dual}}\noutput_dir: out\n")
    done = _marft(tmp_path, *argv)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"marft {argv[0]}: error:") and expected in lines[0], lines[0]


def test_a_shipped_config_is_listed_with_its_values_without_torch(tmp_path):
    done = _marft(tmp_path, "config", "--config", str(REPO / "baselines" / "configs" / "demo.yaml"))
    assert done.returncode == 0, done.stderr
    assert "algorithm: str (value: " in done.stdout and "model.dtype: str (value: " in done.stdout
