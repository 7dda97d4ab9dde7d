"""Configs are plain data: importing ``marft_agents.config`` (and every ``marft_agents.settings``
module) loads no deep-learning library, and parsing a YAML config into its dataclasses needs none.

Each check runs in a fresh interpreter, since this test session has long imported torch.
``TrainConfig.validate`` (what ``load_config`` ends with) does import torch: it looks the learner
class up in the registry (the shipped learners' modules import torch) and resolves
``model.dtype: auto`` by probing the device; the last test pins that it still works there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "baselines" / "configs").rglob("*.yaml"))
HEAVY = ("torch", "transformers", "peft")
SETTINGS = sorted(p.stem for p in (REPO / "marft_agents" / "settings").glob("*.py") if p.stem != "__init__")


def _run(code: str) -> dict:
    """Run ``code`` in a fresh interpreter from the repository root; it prints one JSON line."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_config_loads_no_torch_transformers_or_peft():
    modules = ", ".join(["marft_agents.config", *(f"marft_agents.settings.{name}" for name in SETTINGS)])
    out = _run(f"import importlib, json, sys\n"
               f"for m in {modules.split(', ')!r}: importlib.import_module(m)\n"
               f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    assert out == []
    assert {"model", "lora", "critic", "sampling", "grpo"} <= set(SETTINGS)


def test_shipped_configs_parse_and_describe_without_torch():
    # build_dataclass is every check but the cross-field ones: strict keys, types, __post_init__
    out = _run(
        "import json, sys, yaml\n"
        "from marft_agents.config import TrainConfig, build_dataclass, config_to_dict, describe_config\n"
        f"paths = {[str(p) for p in CONFIGS]!r}\n"
        "algorithms = []\n"
        "for path in paths:\n"
        "    data = yaml.safe_load(open(path, encoding='utf-8'))\n"
        "    cfg = build_dataclass(TrainConfig, data, '')\n"
        "    config_to_dict(cfg)\n"
        "    algorithms.append(cfg.algorithm)\n"
        "rows = describe_config()\n"
        f"print(json.dumps({{'heavy': sorted(m for m in {HEAVY!r} if m in sys.modules), "
        "'n': len(algorithms), 'rows': len(rows)}))")
    assert out["heavy"] == [] and out["n"] == len(CONFIGS) and out["rows"] > 50


def test_load_config_still_validates_every_shipped_config_in_a_fresh_interpreter():
    out = _run("import json, sys\n"
               "from marft_agents.config import load_config\n"
               f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
               f"cfgs = [load_config(path) for path in {[str(p) for p in CONFIGS]!r}]\n"
               "print(json.dumps({'before': before, 'dtypes': sorted({c.model.dtype for c in cfgs})}))")
    assert out["before"] == []
    assert "auto" not in out["dtypes"]  # resolved at validation (which loads torch to probe the device)
