"""The throughput benchmarks run end to end on a tiny random model and print their ratio lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from marft_agents.settings.sampling import ENGINES

REPO = Path(__file__).resolve().parent.parent
TINY = ["--tiny", "--repeats", "1", "--threads", "1", "--batch", "2", "--new-tokens", "4"]


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *TINY, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("extra", [[], ["--no-share-prefix", "--engine", "legacy"],
                                   ["--engine", "legacy", "--dtype", "bfloat16"]])
def test_bench_rollout_prints_collector_against_raw_generate_and_the_bound(extra):
    out = _run("bench_rollout.py", *extra)
    engines = ["legacy"] if extra else list(ENGINES)
    for engine in engines:
        line = re.search(rf"engine {engine}: collector ([\d.]+) tok/s\s+raw generate ([\d.]+) tok/s\s+"
                         rf"bound ([\d.]+) tok/s.*collector/bound ([\d.]+)\s+generate/bound ([\d.]+)", out)
        assert line, out
        assert all(float(x) > 0 for x in line.groups())
    for other in ENGINES[1:]:
        assert (f"{ENGINES[0]} vs {other}: speed-up" in out) == (len(engines) > 1)
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"rollout/bound ratio: [\d.]+", last) and float(last.split()[-1]) > 0, out


def test_bench_rollout_runs_the_unmerged_critic_as_its_own_row():
    out = _run("bench_rollout.py", "--engine", "direct", "--unmerged-critic")
    for engine in ("direct", "direct+unmerged-critic"):
        assert re.search(rf"engine {re.escape(engine)}: collector [\d.]+ tok/s", out), out
    assert re.search(r"direct vs direct\+unmerged-critic: speed-up [\d.]+x", out), out


def test_profile_rollout_fills_every_bucket_it_can():
    out = _run("profile_rollout.py")
    for bucket in ("linear (base)", "LM head", "attention", "sampling + bookkeeping"):
        row = re.search(rf"^{re.escape(bucket)}\s+([\d.]+)\s+([\d.]+)", out, re.M)
        assert row and float(row.group(2)) > 0, out  # ms per step


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bench_update_prints_both_learners_against_bare_passes(dtype):
    # bfloat16: peft keeps the LoRA weights in float32 under a bf16 base, the bound must too
    out = _run("bench_update.py", "--minibatch", "2", "--recompute-old-logprobs", "--dtype", dtype,
               "--paths", "fast,unmerged,plain")
    for path in ("fast", "unmerged", "plain"):
        for learner in ("MARFT-A", "MARFT-T"):
            line = re.search(rf"\[{path}\] {learner} \(\w+\): update ([\d.]+) tok/s \(([\d.]+)s\)\s+"
                             rf"bare fwd\+bwd ([\d.]+) tok/s\s+ratio ([\d.]+)", out)
            assert line, out
            assert all(float(x) > 0 for x in line.groups())
    for learner in ("MARFT-A", "MARFT-T"):
        for other in ("unmerged", "plain"):
            assert re.search(rf"{learner} update speed-up fast vs {other}: [\d.]+x", out), out
    assert re.search(r"bare seconds per update by pass: .*token_logprobs with grad [\d.]+s", out), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"update/bound ratio: [\d.]+", last) and float(last.split()[-1]) > 0, out


def test_bench_critic_smoke_prints_one_row_per_dependency_and_mode(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_critic.py"), "--smoke", "--threads", "1",
                           "--updates", "1", "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^(independent|dag)\s+(centralised|local)\s+updates\s+1 .*acc_after ([\d.]+)", done.stdout, re.M)
    assert len(rows) == 4, done.stdout
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "dag_centralised" / "metrics.jsonl").is_file()
    assert json.loads((tmp_path / "dag_local" / "result.json").read_text())["mode"] == "local"


def test_bench_ddp_smoke_prints_phases_the_ceiling_and_the_efficiency():
    """2 gloo processes, 1 process and two independent ones on a tiny model (~30 s)."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_ddp.py"), "--smoke", "--side-by-side"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for processes in (1, 2):
        assert re.search(rf"{processes} process\(es\).*: [\d.]+ episodes/s .*collection [\d.]+ s, update [\d.]+ s", out), out
    assert re.search(r"rollout efficiency: [\d.]+", out) and re.search(r"update efficiency: [\d.]+", out), out
    assert re.search(r"ceiling without communication: [\d.]+", out), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"scaling efficiency \(2 processes vs 1, target >= 0.8\): [\d.]+", last), out
    assert float(last.split()[-1]) > 0


def test_a_benchmark_loads_the_model_that_model_names_from_a_local_folder(tmp_path):
    """``--model`` takes a Hugging Face folder (here a tiny random Qwen2 saved with
    ``save_pretrained``): the benchmark loads, times and reports that model."""
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    folder = tmp_path / "tiny-qwen2"
    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1, arch="qwen2")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    args = [a for a in TINY if a != "--tiny"]
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_rollout.py"), *args,
                           "--model", str(folder), "--engine", "fast"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(rf"^model {re.escape(str(folder))}  dtype float32", done.stdout, re.M), done.stdout
    line = re.search(r"engine fast: collector ([\d.]+) tok/s", done.stdout)
    assert line and float(line.group(1)) > 0, done.stdout
    clash = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_rollout.py"), *TINY, "--model", str(folder)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert clash.returncode != 0 and "--tiny and --model" in clash.stderr


def test_gpu_check_quick_runs_on_cpu_and_skips_the_gpu_parts(tmp_path):
    """On a CPU-only machine: the update check runs (tiny Qwen2, every loop engine), every GPU
    part says SKIP with a reason, and the summary is one JSON line, also written to --out."""
    out_file = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--quick", "--out", str(out_file)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary == json.loads(out_file.read_text())
    status = {c["name"]: c for c in summary["checks"]}
    assert list(status) == ["cuda_tests", "update", "throughput", "logprobs", "memory", "nccl", "team"]
    if summary["device"] == "cpu":
        for name in ("cuda_tests", "throughput", "logprobs", "memory", "nccl"):
            assert status[name]["status"] == "SKIP" and status[name]["summary"], status[name]
            assert re.search(rf"^SKIP {name}: \S", done.stdout, re.M), done.stdout
        assert "stand-in" in status["logprobs"]["summary"]  # not passed off as a check of vLLM
        engines = status["update"]["details"]["engines"]
        assert {e for e, r in engines.items() if r["status"] == "PASS"} == set(ENGINES)
        assert engines["vllm"]["status"] == "SKIP"
    assert status["update"]["status"] == "PASS" and re.search(r"^PASS update: ", done.stdout, re.M)
    # the GPU team config's team: one member per model, every adapter moved (CPU: the tiny models)
    team = status["team"]
    assert team["status"] == "PASS" and len(team["details"]["members"]) == 2, team
    assert sorted(team["details"]["adapters_moved"]) == ["critic", "policy_actor_0", "policy_reasoner_0"], team
    assert summary["counts"]["FAIL"] == 0


def test_team_speed_prints_the_team_against_its_parts_in_both_phases():
    out = _run("team_speed.py", "--update")
    assert "model 'default' (LlamaForCausalLM" in out and "model 'second' (Qwen2ForCausalLM" in out, out
    for phase in ("collect", "update"):
        line = re.search(rf"{phase}: team ([\d.]+)\s+parts ([\d.]+)\s+one-model A ([\d.]+)\s+B ([\d.]+)", out)
        assert line and all(float(x) > 0 for x in line.groups()), out
        assert re.search(rf"team/parts \({phase}\): median [\d.]+ of \[[\d.]+\] \(target <= 1.1: (PASS|MISS)\); "
                         r"cpu-time ratio median [\d.]+", out), out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(r"team/parts ratio: [\d.]+", last) and float(last.split()[-1]) > 0, out


def test_team_speed_parts_are_each_agent_on_its_own_model():
    """The parts of a team: reasoner_0's seconds in A's run, actor_0's in B's, the critic's in its
    model's run, the rest averaged over the one-model runs."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import team_speed

    split = {"A": {"reasoner_0": 1.0, "actor_0": 2.0, "critic": 0.5}, "B": {"reasoner_0": 3.0, "actor_0": 4.0,
                                                                           "critic": 0.7}}
    total = {"A": 4.0, "B": 8.5}  # rest: 0.5 and 0.8
    parts = team_speed.parts_of(split, total, {"reasoner_0": "A", "actor_0": "B"}, "A")
    assert parts == pytest.approx({"agents": 5.0, "critic": 0.5, "rest": 0.65, "total": 6.15})
    swapped = team_speed.parts_of(split, total, {"reasoner_0": "B", "actor_0": "A"}, "B")
    assert swapped == pytest.approx({"agents": 5.0, "critic": 0.7, "rest": 0.65, "total": 6.35})
    assert team_speed.own(split["B"], total["B"]) == pytest.approx({"agents": 7.0, "critic": 0.7, "rest": 0.8,
                                                                    "total": 8.5})


def test_critic_known_value_smoke_prints_each_update_and_the_pooled_ratio():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "critic_known_value.py"), "--tiny", "--updates", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [line["update"] for line in lines[:-1]] == [0, 1]
    assert all(0.0 < line["true_ceiling"] < 1.0 for line in lines[:-1])  # level 8: easy and hard tasks
    summary = lines[-1]
    assert summary["decisions_per_episode"] == 2 and "ratio" in summary and "ceiling_last_half" in summary


def test_gpu_check_random_init_builds_each_qwen25_size_with_its_card_parameter_count():
    """``--random-init`` stands in for a real Qwen2.5 on a machine that cannot download one: its
    config must be that size's (parameters within 1% of the model card; counted on the meta
    device, so nothing is allocated), and it cannot be combined with ``--model``."""
    import torch
    from transformers import Qwen2ForCausalLM

    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_check
    import memory_estimate

    names = gpu_check.random_init_names()
    assert sorted(names) == ["qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"]
    for name, key in names.items():
        config = gpu_check.random_config(name)
        with torch.device("meta"):
            model = Qwen2ForCausalLM(config)
        params = sum(p.numel() for p in model.parameters())
        card = memory_estimate.QWEN25[key].card_params
        assert abs(params / card - 1) < 0.01, (name, params, card)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--random-init", "qwen2.5-3b",
                           "--model", "x", "--only", "update"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "give one" in done.stderr, done.stderr[-2000:]


def _critic_rows(residuals: list[float]) -> str:
    """metrics.jsonl rows of a run whose ceiling is 0.5 (between = within = 0.1, return var 0.2)."""
    return "\n".join(json.dumps({"step": k + 1, "critic/return_var": 0.2, "critic/residual_var_first": r,
                                 "critic/between_task_var": 0.1, "critic/within_task_var": 0.1,
                                 "critic/value_return_corr": 0.5}) for k, r in enumerate(residuals))


def test_critic_pairs_tests_the_paired_share_of_the_ceiling_over_the_later_half(tmp_path, capsys):
    """Share = (1 - mean residual / mean return var) / ceiling over the later half of the updates: the
    first half (residual 0.2, EV 0) must not count."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import critic_pairs

    runs = {}
    for side, late in (("a", (0.15, 0.14, 0.16)), ("b", (0.18, 0.175, 0.185))):
        for k, r in enumerate(late):
            folder = tmp_path / f"{side}{k}"
            folder.mkdir()
            (folder / "metrics.jsonl").write_text(_critic_rows([0.2, 0.2, r, r]))
            runs.setdefault(side, []).append(str(folder))
    result = critic_pairs.main(["--a", *runs["a"], "--b", *runs["b"]])
    assert result["share_a"] == pytest.approx([0.5, 0.6, 0.4]) and result["share_b"] == pytest.approx([0.2, 0.25, 0.15])
    assert result["difference"] == pytest.approx(0.3) and result["p"] < 0.05 and result["met_a"] == 2
    assert "sign-flip p 0.250 (smallest possible 0.250)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="must pair"):
        critic_pairs.main(["--a", *runs["a"], "--b", *runs["b"][:2]])


def test_refit_forward_scores_rules_on_the_update_after_the_window(tmp_path):
    """A window whose returns are a linear function of the first decisions' features plus noise:
    refitting predicts the held-out last update (EV near the true share), an untrained head and the
    window's mean do not; a checkpoint without a window says what it expected."""
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    import refit_forward
    from marft_agents.model.critic import ValueHead
    from marft_agents.learners.head_refit import Batch, RefitBuffer

    gen = torch.Generator().manual_seed(0)
    hidden, tasks_per_update, episodes = 8, 10, 4
    w_true = torch.randn(hidden, generator=gen)
    buffer = RefitBuffer(4)
    for update in range(4):
        task_features = torch.randn(tasks_per_update, hidden, generator=gen)  # [T, H]
        x = task_features.repeat_interleave(episodes, 0)  # [T*k, H] one state per task's first decision
        returns = x @ w_true + 0.5 * torch.randn(len(x), generator=gen)  # [T*k]
        tasks = [(update, t) for t in range(tasks_per_update) for _ in range(episodes)]
        buffer.add("critic", Batch(torch.cat([x, x]), torch.cat([torch.zeros(len(x)), torch.ones(len(x))]).long(),
                                   torch.cat([returns, returns]), tasks + tasks))
    head = ValueHead(hidden, slots=2)
    adapters = {f"value_head/critic/{k}": v for k, v in head.state_dict().items()}
    for name, state in (("prior", {}), ("last", {"learner": {"head_refit": buffer.state_dict()}})):
        (tmp_path / name).mkdir()
        torch.save(adapters, tmp_path / name / "adapters.pt")
        torch.save(state, tmp_path / name / "state.pt")
    evs, ceiling, points = refit_forward.forward_ev(str(tmp_path / "last"), str(tmp_path / "prior"))
    true_share = float(w_true @ w_true) / (float(w_true @ w_true) + 0.25)
    assert points == 3 * tasks_per_update * episodes and 0.5 < ceiling <= 1.0
    assert evs["shipped rule (ridge_refit)"] > 0.8 * true_share, evs
    assert evs["window mean"] < 0.1 and evs["prior head, unchanged"] < 0.1, evs
    with pytest.raises(SystemExit, match="kept no refit window"):
        refit_forward.forward_ev(str(tmp_path / "prior"), str(tmp_path / "prior"))


def _relay5_run(folder: Path, success_of, tasks_per_update: int = 48, episodes: int = 8) -> None:
    """A run folder whose one checkpoint keeps a 4-update refit window of Relay level-5 first
    decisions: each return a Bernoulli draw of success_of(size class, task index)."""
    import random

    import torch

    from marft_envs.tasks.relay import RelayTasks

    tasks, rng = RelayTasks(level=5, split="train", seed=0), random.Random(0)
    kept = []
    for update in range(4):
        ids, returns = [], []
        for t in range(tasks_per_update):
            index = tasks_per_update * update + t
            task = tasks[index]
            big = int(min(task.metadata["values"].values()) >= 100)
            for _ in range(episodes):
                ids.append(task.task_id)
                returns.append(float(rng.random() < success_of(big, index)))
        kept.append({"features": torch.zeros(len(ids), 4), "slots": torch.zeros(len(ids), dtype=torch.long),
                     "targets": torch.tensor(returns), "tasks": ids})
    checkpoint = folder / "checkpoints" / "update_000004"
    checkpoint.mkdir(parents=True)
    torch.save({}, checkpoint / "adapters.pt")
    torch.save({"learner": {"head_refit": {"critic": kept}}}, checkpoint / "state.pt")


def test_class_ceiling_reaches_the_ceiling_only_when_the_difficulty_is_the_size_class(tmp_path):
    """Success probability set by the size class alone (small 0.7, big 0.05): the class oracle
    explains the whole between-task share. Set per task, independent of the class (0.7 or 0.05 at
    random): a ceiling as large, of which the class explains next to nothing. Tolerances: ~190
    tasks of 8 Bernoulli episodes, so each share has an s.e. of a few hundredths."""
    import random

    import numpy as np

    from marft_agents.learners.critic_health import between_task_split

    sys.path.insert(0, str(REPO / "benchmarks"))
    import class_ceiling

    _relay5_run(tmp_path / "visible", lambda big, task: 0.05 if big else 0.7)
    _relay5_run(tmp_path / "hidden", lambda big, task: 0.05 if random.Random(task).random() < 0.5 else 0.7)
    results = class_ceiling.main([str(tmp_path / "visible"), str(tmp_path / "hidden"), "--updates", "1-4"])
    visible, hidden = results[str(tmp_path / "visible")], results[str(tmp_path / "hidden")]
    assert visible["updates"] == 4 and visible["ceiling"] > 0.3 and hidden["ceiling"] > 0.3
    assert visible["class_share"] == pytest.approx(1.0, abs=0.15) and abs(hidden["class_share"]) < 0.15, results
    # the footing: an all-class world with many tasks per update scores the whole ceiling
    rng = np.random.default_rng(0)
    between = by_class = 0.0
    for _ in range(200):  # updates of 16 tasks x 8 episodes, success 0.7 (small) or 0.05 (big)
        classes = rng.integers(0, 2, 16)
        p = np.where(classes == 1, 0.05, 0.7)
        returns = (rng.random((16, 8)) < p[:, None]).astype(float)
        split = between_task_split(returns.tolist())
        between += split.between
        by_class += class_ceiling.class_component(returns.mean(1).tolist(), classes.tolist(), split.within / 8)
    assert 0.95 <= by_class / between <= 1.05, by_class / between
    with pytest.raises(SystemExit, match="FIRST-LAST"):
        class_ceiling.main([str(tmp_path / "visible"), "--updates", "9"])


def test_class_component_against_hand_computed_values():
    """Task means 0.6, 0.8 (small) and 0.0, 0.1 (big): SS between classes 4 x 0.325^2 = 0.4225,
    residual mean square 0.025 / 2, so (0.4225 - 0.0125) / (4 - 1); one class: 0."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import class_ceiling

    assert class_ceiling.class_component([0.6, 0.8, 0.0, 0.1], [0, 0, 1, 1], 0.0) == pytest.approx(0.41 / 3)
    assert class_ceiling.class_component([0.6, 0.8, 0.1], [0, 0, 0], 0.0) == 0.0


def test_baseline_variance_pools_each_baselines_residual_over_the_later_half(tmp_path, capsys):
    """Two positions over four updates; the later half (updates 3-4) pooled by hand: position 0
    returns 0.25, LOO 0.3, critic 0.2 -> reductions -0.2 / 0.2 and a gain of 1 - 0.2 / 0.3."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import baseline_variance

    def row(step, ret, loo, critic, anchored):
        return {"step": step, **{f"critic/{key}/pos{p}": value for p in (0, 1) for key, value in (
            ("group_return_var", ret), ("loo_residual_var", loo), ("critic_residual_var", critic),
            ("anchored_residual_var", anchored))}}

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 0, "eval/accuracy": 0.1}, row(1, 9, 9, 9, 9), row(2, 9, 9, 9, 9),
            row(3, 0.2, 0.3, 0.1, 0.3), row(4, 0.3, 0.3, 0.3, 0.2)]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    table = baseline_variance.main([str(run)])[str(run)]
    assert table[0] == pytest.approx({"none": 0.25, "group": 0.3, "critic": 0.2, "group_critic": 0.25})
    assert "| run | 0 | 0.2500 | 0.3000 | 0.2000 | 0.2500 | -0.200 / 0.200 / 0.000 | 0.333 |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="group_size >= 2"):
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "losses/value_loss": 0.1}))
        baseline_variance.main([str(run)])


def test_replan_relay_decomposition_prints_the_planners_figures_for_the_records(capsys, monkeypatch):
    """The figures behind relay_decomposition's stop on futility come from the records and the
    planner's own functions (a changed record or formula changes the printed line)."""
    import statistics

    from leaderboards import stats

    sys.path.insert(0, str(REPO / "benchmarks"))
    import replan_relay_decomposition as replan

    monkeypatch.setattr("sys.argv", ["replan", "--total", "1920"])
    replan.main()
    out = capsys.readouterr().out
    rows = replan.records()
    sd_j, sd_s = statistics.stdev(replan.finals(rows, "joint")), statistics.stdev(replan.finals(rows, "solo"))
    affordable = int(out.split(" buy ")[1].split(" seeds")[0])
    mde = stats.minimal_detectable_effect("independent", sd_j, affordable, sd_s, affordable).effect
    assert f"at {affordable} seeds per cell: MDE {mde:.1f} points" in out
    assert mde > replan.MEANINGFUL  # the stop on futility: the affordable seeds cannot resolve 15 points
