"""``marft benchmark ENV_ID`` (``baselines/benchmark.py``): the standard suite generated as a grid
for one env, planned and gated first, its records in a folder of their own; on tiny random models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import marft_agents.model.loading as models
import marft_envs
from agent_helpers import LETTERS_ID, LettersEnv, load_tiny_model, small_config
from baselines import benchmark, grid as grid_mod
from marft_agents.config import config_to_dict

REPO = Path(__file__).resolve().parents[2]
PAIRS_ID = "test/Pairs-v0"
SUITE_CELLS = ["untrained", "untrained_solo", "solo_ppo", "marft_a", "marft_t", "ippo", "grpo_team", "grpo_agent",
               "grpo_agent_turn", "grpo_step", "marft_a_base_reasoner_0", "marft_a_base_actor_0"]


class PairsEnv(LettersEnv):
    """The letters env for teams of exactly two: no one-role profile builds it (as Relay refuses
    a team of three)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if len(self.possible_agents) != 2:
            raise ValueError(f"{PAIRS_ID} needs a team of two, got {list(self.possible_agents)}")


if PAIRS_ID not in marft_envs.list_envs():
    marft_envs.register(PAIRS_ID, PairsEnv)


@pytest.fixture
def base(tmp_path):
    """A tiny training config (4 episodes per update, so GRPO's groups of 4 fit) for ``--base``."""
    cfg = small_config(tmp_path, **{"schedule.num_updates": 100, "schedule.episodes_per_update": 4,
                                    "eval.at_end": True})
    path = tmp_path / "tiny_base.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return path


def _spec(out: Path) -> dict:
    return yaml.safe_load((out / benchmark.BENCHMARK_FILE).read_text())


def test_the_suite_on_an_env_with_a_one_role_profile(tmp_path, base, capsys):
    out = tmp_path / "bench"
    assert benchmark.main([LETTERS_ID, "--base", str(base), "--out", str(out), "--episodes", "8", "--dry-run"]) == 0
    spec = _spec(out)
    cells = {c["name"]: c for c in spec["cells"]}
    assert list(cells) == SUITE_CELLS
    assert cells["solo_ppo"]["overrides"] == {"algorithm": "ppo", "env.kwargs.profile": "solo"}
    assert cells["untrained_solo"]["overrides"] == {"env.kwargs.profile": "solo"}
    assert cells["ippo"]["overrides"] == {"algorithm": "mappo_action", "critic.mode": "local"}
    assert cells["marft_a_base_actor_0"] == {**cells["marft_a_base_actor_0"], "evaluate": "base_seat",
                                             "source": "marft_a", "ablation": {"seat": "actor_0"}}
    assert cells["untrained"]["seeds"] == [0] and spec["seeds"] == [0, 1]
    # a grid the runner loads: every training row on 8 episodes, evaluated at 0, 4 and 8
    loaded = grid_mod.load_grid(out / benchmark.BENCHMARK_FILE)
    runs = grid_mod.plan(loaded)
    training = [r for r in runs if r.kind == "train"]
    assert len(training) == len(benchmark.SUITE) * 2 and loaded.leaderboard
    assert {grid_mod.run_config(loaded, r).schedule.max_episodes for r in training} == {8}
    assert {grid_mod.run_config(loaded, r).eval.interval for r in training} == {1}
    # at 2 seeds no exact test of the rows' gains can pass after Holm: every comparison descriptive
    declared = {(c["a"], c["b"]): c for c in spec["comparisons"]}
    assert declared[("solo_ppo", "untrained_solo")]["descriptive"] and declared[("marft_a", "untrained")]["descriptive"]
    assert ("grpo_team", "solo_ppo") in declared and ("marft_a_base_actor_0", "marft_a") in declared
    assert all(c["descriptive"] for c in spec["comparisons"])
    assert "todo     marft_a_seed1" in capsys.readouterr().out
    # 9 seeds: 2 / 2^9 x 7 rows = 0.027 < 0.05, so the family of the rows' gains is tested; 8 seeds: 0.055, not
    for seeds, tested in (("0,1,2,3,4,5,6,7,8", True), ("0,1,2,3,4,5,6,7", False)):
        other = tmp_path / f"bench{seeds.count(',') + 1}"
        assert benchmark.main([LETTERS_ID, "--base", str(base), "--out", str(other), "--seeds", seeds,
                               "--learners", "untrained,solo_ppo,marft_a,marft_t,ippo,grpo_team,grpo_agent,"
                               "grpo_agent_turn", "--dry-run"]) == 0
        family = [c for c in _spec(other)["comparisons"] if c["b"].startswith("untrained")]
        assert len(family) == 7 and {c["descriptive"] for c in family} == {not tested}


def test_an_env_without_a_one_role_profile_skips_the_solo_row_saying_why(tmp_path, base, capsys):
    out = tmp_path / "bench"
    assert benchmark.main([PAIRS_ID, "--base", str(base), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"skipped solo_ppo: {PAIRS_ID} builds with no one-role profile (tried solo: {PAIRS_ID} needs a team of two" \
        in printed
    spec = _spec(out)
    names = [c["name"] for c in spec["cells"]]
    assert "solo_ppo" not in names and "untrained_solo" not in names and "marft_a" in names
    assert not [c for c in spec["comparisons"] if "solo" in c["a"] + c["b"]]
    assert "# skipped: solo_ppo:" in (out / benchmark.BENCHMARK_FILE).read_text()
    # asked for explicitly, a profile that does not make the env one agent is refused in one line
    assert benchmark.main([LETTERS_ID, "--base", str(base), "--out", str(tmp_path / "b2"), "--solo-profile", "trio",
                           "--dry-run"]) == 2
    assert "--solo-profile 'trio' does not make test/Letters-v0 a one-agent env (trio: 3 agents)" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["marft/Arithmetc-v0"], "'marft/Arithmetc-v0' is not a registered env; did you mean 'marft/Arithmetic-v0'?"),
    (["marft/Arithmetic-v0", "--learners", "marft_a,grpo"], "unknown learner 'grpo'; did you mean 'grpo_team'?"),
    (["marft/Arithmetic-v0", "--seeds", "0,x"], "--seeds expects comma-separated integers"),
    (["marft/Arithmetic-v0", "--episodes", "0"], "--episodes must be >= 1, got 0"),
    (["marft/Arithmetic-v0", "--set", "env.kwargs.levle=1"], "did you mean 'level'?"),
])
def test_bad_requests_are_answered_in_one_line_before_anything_loads(tmp_path, args, message):
    code = ("import sys\nfrom baselines.benchmark import main\n"
            f"rc = main({args!r})\nprint(rc, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.split() == ["2", "False"], done.stderr  # exit 2, torch never imported
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("marft benchmark: error: ") and message in lines[0]
    assert not (tmp_path / "runs").exists()  # nothing written


def _fake_pilot(share):
    """A gate pilot whose starting policy earns the reward in ``share`` of its episodes."""
    def pilot(spec, run, episodes):
        return {"source": "pilot", "episodes": episodes, "rewarded": round(share * episodes), "mean_reward": 0.0,
                "seconds": 1.0}
    return pilot


@pytest.fixture
def tiny_models(monkeypatch):
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)


def test_two_invocations_never_overwrite_each_others_records(tmp_path, base, tiny_models, monkeypatch, capsys):
    from baselines import grid_plan

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot(0.5))  # every start earns the reward: the gates pass
    monkeypatch.setattr(benchmark, "_stamp", lambda: "20260101-000000")  # both invocations in the same second
    args = [LETTERS_ID, "--base", str(base), "--learners", "marft_a", "--seeds", "0", "--episodes", "4"]
    assert benchmark.main(args) == 0
    assert benchmark.main(args) == 0
    folders = sorted((tmp_path / "runs" / "benchmark" / "test_letters_v0").iterdir())
    assert [f.name for f in folders] == ["20260101-000000", "20260101-000000-2"]  # one folder per invocation
    first = {p.name: p.stat().st_mtime_ns for p in (folders[0] / "records").glob("*.json")}
    assert sorted(first) == ["marft_a_base_actor_0_seed0.json", "marft_a_base_reasoner_0_seed0.json",
                             "marft_a_seed0.json", "untrained_seed0.json"]
    assert sorted(p.name for p in (folders[1] / "records").glob("*.json")) == sorted(first)
    # the same folder with other settings: refused, its records untouched; the same settings: continued
    capsys.readouterr()
    assert benchmark.main([*args[:-1], "8", "--out", str(folders[0])]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a benchmark of other settings (budget, description, title differ)" in err
    assert len(err.splitlines()) == 1
    assert benchmark.main([*args, "--out", str(folders[0])]) == 0
    assert "ran 0, skipped 4" in capsys.readouterr().out
    assert first == {p.name: p.stat().st_mtime_ns for p in (folders[0] / "records").glob("*.json")}
    report = (folders[0] / "README.md").read_text()
    assert "## Leaderboard" in report and "## Per-agent contribution" in report and "## Plan" in report


def test_a_refused_plan_runs_nothing_unless_forced(tmp_path, base, tiny_models, monkeypatch, capsys):
    from baselines import grid_plan

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot(0))  # no start earns the reward: no policy gradient
    out = tmp_path / "bench"
    args = [LETTERS_ID, "--base", str(base), "--learners", "marft_a", "--seeds", "0", "--episodes", "4", "--out",
            str(out)]
    assert benchmark.main(args) == grid_mod.REFUSED
    captured = capsys.readouterr()
    assert "- cell marft_a: its starting policy earned the reward in 0 of 128 sampled episodes" in captured.out
    assert "the plan refuses this grid" in captured.err
    assert not list((out / "records").glob("*.json"))
    assert benchmark.main([*args, "--force"]) == 0
    assert (out / "records" / "marft_a_seed0.json").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plan"]["forced"] and not summary["plan"]["accepted"]


def test_the_leaderboard_ranks_cells_with_their_intervals():
    from leaderboards.grid_report import CellSummary, leaderboard_table

    seeded = CellSummary("marft_a", "train", "mappo_action", "dual", seeds=[0, 1, 2], accuracies=[0.4, 0.5, 0.6],
                         stderrs=[0.05] * 3, minutes=[2.0] * 3)
    single = CellSummary("untrained", "untrained", "eval_only", "dual", seeds=[0], accuracies=[0.3], stderrs=[0.05])
    rows = leaderboard_table([single, seeded])
    # 3 seeds: sd 0.1, s.e. 0.0577, t(0.975, 2) = 4.303: +-24.8 points; one evaluation: +-1.96 x 5 = +-9.8
    assert rows[2] == "| 1 | marft_a | train | mappo_action | dual | 3 | 50.0 | [25.2, 74.8] | 3 seeds (t) | 2.0 |"
    assert rows[3] == "| 2 | untrained | untrained | eval_only | dual | 1 | 30.0 | [20.2, 39.8] | one evaluation (normal) | - |"


def test_marft_benchmark_reaches_the_command_through_its_entry_point(tmp_path):
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    group = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["marft.commands"]
    assert group == {"benchmark": "baselines.benchmark:main"}
    info = tmp_path / "site" / "marft_commands-0.dist-info"  # what pip install -e . leaves for importlib.metadata
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: marft-commands\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[marft.commands]\n" + "".join(f"{k} = {v}\n" for k, v in group.items()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "site")])}

    def marft(*args):
        return subprocess.run([sys.executable, "-m", "marft_agents.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=60)

    assert "benchmark" in marft("--help").stdout
    assert "--learners" in marft("benchmark", "--help").stdout
    done = marft("benchmark", "nope/Env-v0")
    assert done.returncode == 2 and done.stderr.startswith("marft benchmark: error: 'nope/Env-v0' is not a registered")


def test_jobs_plan_once_then_run_one_shard_per_process(tmp_path, base, tiny_models, monkeypatch, capsys):
    from baselines import grid_plan

    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot(0.5))
    started = []

    class Shard:  # a shard process that ran its runs
        def __init__(self, command, env):
            started.append((command, env["OMP_NUM_THREADS"]))

        def wait(self):
            return 0

    monkeypatch.setattr(benchmark, "start_process", Shard)
    out = tmp_path / "bench"
    assert benchmark.main([LETTERS_ID, "--base", str(base), "--learners", "marft_a", "--seeds", "0", "--episodes", "4",
                           "--out", str(out), "--jobs", "2"]) == 0
    spec = str(out / benchmark.BENCHMARK_FILE)
    assert started == [([sys.executable, "-m", "baselines.grid", spec, "--shard", f"{i}/2"], "1") for i in range(2)]
    assert "plan accepted" in capsys.readouterr().out and (out / "plan.json").is_file() and (out / "README.md").is_file()
    # refused: no shard starts
    monkeypatch.setattr(grid_plan, "pilot", _fake_pilot(0.0))
    (out / "gates").rename(tmp_path / "old_gates")
    assert benchmark.main([LETTERS_ID, "--base", str(base), "--learners", "marft_a", "--seeds", "0", "--episodes", "4",
                           "--out", str(out), "--jobs", "2"]) == grid_mod.REFUSED
    assert len(started) == 2


def test_the_default_size_is_declared_once_and_the_docs_state_it(tmp_path):
    """DEFAULTS sizes the generated benchmark (no --base), and the docstring and ADDING_AN_ENV.md's
    "How long" name the same size, so the time stated there is of the size that runs."""
    defaults = benchmark.DEFAULTS
    out = tmp_path / "bench"
    assert benchmark.main(["marft/Arithmetic-v0", "--out", str(out), "--dry-run"]) == 0
    spec = _spec(out)
    base = yaml.safe_load((out / benchmark.BASE_FILE).read_text())
    assert spec["seeds"] == defaults["seeds"] and spec["budget"] == {"episodes": defaults["episodes"]}
    assert spec["gate"] == {"episodes": defaults["gate_episodes"]}
    assert base["eval"]["n_problems"] == defaults["eval_problems"]
    per_update = base["schedule"]["episodes_per_update"]
    size = f"{len(defaults['seeds'])} seeds x {defaults['episodes']} episodes"
    evals = f"evaluations of {defaults['eval_problems']} "
    at = f"at episodes 0, {spec['eval_every']['episodes']} and {defaults['episodes']}"
    gates = f"of {defaults['gate_episodes']} episodes"
    text = (REPO / "marft_envs" / "ADDING_AN_ENV.md").read_text(encoding="utf-8")
    how_long = " ".join(text[text.index("How long:"):].split("\n\n")[0].split())
    docstring = " ".join(benchmark.__doc__.split())
    for stated in (how_long, docstring):
        assert size in stated and f"updates of {per_update}" in stated and evals in stated and at in stated
        assert gates in stated
