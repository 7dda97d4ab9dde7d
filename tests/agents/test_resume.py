"""A run interrupted after k updates and resumed ends exactly where an uninterrupted run ends."""

from __future__ import annotations

import pytest
import torch

from agent_helpers import small_config, tiny_on_device
from marft_agents.run.checkpoint import list_checkpoints
from marft_agents.run.trainer import iter_train, train


def _tiny():
    return tiny_on_device(seed=0, hidden_size=32, num_layers=1)


@pytest.mark.parametrize("algorithm", ["mappo_action", "mappo_token"])
def test_resume_matches_uninterrupted_run(tmp_path, algorithm):
    overrides = {"algorithm": algorithm, "schedule.num_updates": 3, "ppo.agent_iteration_interval": 1,
                 "schedule.ppo_epochs": 2}
    full = train(small_config(tmp_path / "full", **overrides), model_and_tokenizer=_tiny())

    interrupted_cfg = small_config(tmp_path / "cut", **overrides)
    first = iter_train(interrupted_cfg, model_and_tokenizer=_tiny())
    next(first)  # one update (checkpointed), then the "crash"
    first.close()
    assert [p.name for p in list_checkpoints(interrupted_cfg.output_dir)] == ["update_000001"]
    resumed = train(interrupted_cfg, resume=True, model_and_tokenizer=_tiny())

    # train_seconds is wall-clock time: the only counter allowed to differ.
    timeless = lambda c: {k: v for k, v in c.items() if k != "train_seconds"}  # noqa: E731
    assert timeless(resumed.counters) == timeless(full.counters)
    assert len(resumed.history) == 2
    a, b = full.policy.adapter_state_dict(), resumed.policy.adapter_state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    for key in ("rollout/reward_mean", "losses/policy_loss", "losses/value_loss"):
        assert resumed.history[-1][key] == full.history[-1][key]


def test_fresh_run_refuses_to_overwrite_checkpoints(tmp_path):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 1})
    train(cfg, model_and_tokenizer=_tiny())
    with pytest.raises(FileExistsError, match="resume"):
        train(cfg, model_and_tokenizer=_tiny())


def test_time_budget_stops_early_and_saves(tmp_path):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 10_000, "schedule.time_budget_s": 1,
                                    "schedule.checkpoint_interval": 0})
    result = train(cfg, model_and_tokenizer=_tiny())
    assert 1 <= result.counters["update"] < 10_000
    assert result.counters["train_seconds"] >= 1.0
    # The stop counts as the last update: a checkpoint is written for it.
    assert list_checkpoints(cfg.output_dir)[-1].name == f"update_{result.counters['update']:06d}"
    # Resuming a run whose budget is spent runs no further update.
    again = train(cfg, resume=True, model_and_tokenizer=_tiny())
    assert again.history == [] and again.counters["update"] == result.counters["update"]


def _scripted_evaluations(monkeypatch, accuracies):
    """Trainer.evaluate returns ``accuracies[update]`` (a tiny random model always scores 0)."""
    from marft_agents.evaluation.problem_set import EvalResult
    from marft_agents.run.trainer import Trainer

    monkeypatch.setattr(Trainer, "evaluate", lambda self, progress=None: EvalResult(
        accuracy=accuracies[self.counters["update"]], stderr=0.1, n=10, distinct=10))


def test_best_evaluation_keeps_its_adapters_across_a_resume(tmp_path, monkeypatch):
    from marft_agents.run.checkpoint import BEST_DIR, load_adapters, load_checkpoint

    _scripted_evaluations(monkeypatch, {0: 0.0, 1: 0.2, 2: 0.5, 3: 0.5, 4: 0.4})
    cfg = small_config(tmp_path, **{"schedule.num_updates": 4, "eval.interval": 1})
    first = iter_train(cfg, model_and_tokenizer=_tiny())
    for _ in range(2):
        next(first)
    first.close()  # "crash" after update 2, the best so far
    resumed = train(cfg, resume=True, model_and_tokenizer=_tiny())

    # Update 3 ties and update 4 is worse: the best stays update 2, whose checkpoint it matches.
    assert resumed.best_eval == {"update": 2, "accuracy": 0.5, "stderr": 0.1}
    best = load_adapters(tmp_path / "run" / BEST_DIR)
    at_two = load_checkpoint(tmp_path / "run" / "checkpoints" / "update_000002")["adapters"]
    final = resumed.policy.adapter_state_dict()
    assert all(torch.equal(best[k], at_two[k]) for k in at_two)
    assert any(not torch.equal(best[k], final[k]) for k in final)  # training went on after it


def test_best_written_after_the_last_checkpoint_is_not_overwritten_by_a_weaker_rerun(tmp_path, monkeypatch):
    from marft_agents.run.checkpoint import load_best_meta

    accuracies = {0: 0.0, 1: 0.2, 2: 0.3, 3: 0.9, 4: 0.1}
    _scripted_evaluations(monkeypatch, accuracies)
    cfg = small_config(tmp_path, **{"schedule.num_updates": 4, "eval.interval": 1,
                                    "schedule.checkpoint_interval": 2})
    first = iter_train(cfg, model_and_tokenizer=_tiny())
    for _ in range(3):
        next(first)
    first.close()  # "crash" after update 3's evaluation (the best) but before its checkpoint
    assert load_best_meta(cfg.output_dir)["update"] == 3
    # The re-run update 3 evaluates lower (bf16 runs need not repeat exactly); it beats the
    # checkpoint's best (0.3 at update 2) but not the adapters already in best/.
    accuracies[3] = 0.6
    resumed = train(cfg, resume=True, model_and_tokenizer=_tiny())
    assert resumed.best_eval == {"update": 3, "accuracy": 0.9, "stderr": 0.1}
    assert load_best_meta(cfg.output_dir)["accuracy"] == 0.9


def test_keep_best_off_writes_no_best_folder(tmp_path, monkeypatch):
    from marft_agents.run.checkpoint import BEST_DIR

    _scripted_evaluations(monkeypatch, {0: 0.0, 1: 0.2, 2: 0.5})
    cfg = small_config(tmp_path, **{"eval.interval": 1, "eval.keep_best": False})
    assert train(cfg, model_and_tokenizer=_tiny()).best_eval is None
    assert not (tmp_path / "run" / BEST_DIR).exists()


@pytest.mark.parametrize("changes, named", [
    ({"eval.n_problems": 3}, "eval.n_problems: 2 -> 3"),
    ({"eval.seed": 7}, "eval.seed: 1234 -> 7"),
    ({"eval.greedy": False}, "eval.greedy: True -> False"),
    ({"eval.env_kwargs": {"horizon": 1}}, "eval.env_kwargs.horizon: <unset> -> 1"),
    ({"env.kwargs": {"horizon": 1}}, "env.kwargs.horizon: <unset> -> 1"),
])
def test_resume_refuses_a_changed_evaluation_setting(tmp_path, monkeypatch, changes, named):
    from marft_agents.run.checkpoint import load_best_meta
    from marft_agents.config import ConfigError
    from marft_agents.run.trainer import Trainer, prepare_trainer

    # Update 1 evaluates best on the old problem set; a resume on another set would compare with it.
    _scripted_evaluations(monkeypatch, {0: 0.0, 1: 0.5, 2: 0.4, 3: 0.9})
    cfg = small_config(tmp_path, **{"schedule.num_updates": 3, "eval.interval": 1})
    first = iter_train(cfg, model_and_tokenizer=_tiny())
    next(first)
    first.close()
    changed = small_config(tmp_path, **{"schedule.num_updates": 3, "eval.interval": 1, **changes})
    with pytest.raises(ConfigError, match="evaluation setting changed") as refused:
        train(changed, resume=True, model_and_tokenizer=_tiny())
    message = str(refused.value)
    assert "\n" not in message and named in message
    assert "--output-dir" in message and "restore" in message
    assert load_best_meta(cfg.output_dir)["update"] == 1  # best/ untouched
    # Trainer.restore (a path of its own) refuses too.
    with pytest.raises(ConfigError, match="evaluation setting changed"):
        Trainer(changed, _tiny()).restore()
    # Settings that leave the problem set alone may change; restoring the old setting resumes.
    same = small_config(tmp_path, **{"schedule.num_updates": 2, "eval.interval": 2, "eval.num_envs": 1,
                                     "eval.keep_best": True})
    assert prepare_trainer(same, resume=True, model_and_tokenizer=_tiny()).counters["update"] == 1
