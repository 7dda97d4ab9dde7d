"""``marft score``, ``marft envs --verbose`` and the evaluation's train-split warning."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml

import marft_agents.model.loading as models
from agent_helpers import LETTERS_ID, load_tiny_model, small_config
from marft_agents.score import evaluate_scripted, load_scripted, run_score
from marft_agents.cli import main
from marft_agents.config import config_to_dict
from marft_agents.evaluation.problem_set import TrainingTasksWarning
from marft_agents.learners import register_learner
from marft_agents.run.trainer import train

import marft_envs


def say_letters(agent, observation, info):
    return "abcdefghij"


def test_envs_verbose_shows_agents_profile_and_package(capsys):
    assert main(["envs", "--verbose"]) == 0
    out = capsys.readouterr().out
    block = out.split("marft/Arithmetic-v0\n", 1)[1].split("\nmarft/", 1)[0]
    assert "reasoner_0, actor_0 (default profile 'dual')" in block
    assert "package: marft " in block and "marft_envs.envs.arithmetic:ArithmeticEnv" in block


def test_env_without_split_warns_that_it_scores_training_tasks():
    with pytest.warns(TrainingTasksWarning, match="has no 'split' keyword"):
        result = evaluate_scripted(say_letters, LETTERS_ID, {}, n_problems=3, seed=0)
    assert result.accuracy == 1.0 and result.n == 3  # all-letter answers solve the Letters env


def test_test_split_evaluates_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingTasksWarning)
        evaluate_scripted(say_letters, "marft/Arithmetic-v0", {"split": "test", "profile": "solo", "horizon": 1},
                          n_problems=2, seed=0)


def test_scripted_score_writes_into_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    policy = "scripted:test_score:say_letters"
    assert main(["score", "--env", "marft/Arithmetic-v0", "--policy", policy, "--n", "4",
                 "--env-kwargs", "{profile: solo, horizon: 1}"]) == 0
    record = json.loads((tmp_path / "score_marft_arithmetic_v0_say_letters.json").read_text())
    # The env has a split, so the score is of its test split; letters never answer arithmetic.
    assert record["env_kwargs"] == {"profile": "solo", "horizon": 1, "split": "test"}
    assert record["eval_after"]["accuracy"] == 0.0 and record["eval_after"]["n"] == 4
    assert record["env_package"]["distribution"] == "marft" and record["env_package"]["origin"] == "builtin"
    assert "leaderboard record:" in capsys.readouterr().out


def test_the_former_name_bench_still_scores_and_says_it_is_now_score(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--env", "marft/Arithmetic-v0", "--policy", "scripted:test_score:say_letters", "--n", "2",
                 "--env-kwargs", "{profile: solo, horizon: 1}"]) == 0
    assert (tmp_path / "score_marft_arithmetic_v0_say_letters.json").is_file()
    assert capsys.readouterr().err.strip().splitlines() == ["marft bench is now marft score"]

def test_a_score_record_is_an_ordinary_file_not_a_private_one(tmp_path, monkeypatch):
    import os
    import stat

    monkeypatch.chdir(tmp_path)
    previous = os.umask(0o022)
    try:
        assert main(["score", "--env", "marft/Arithmetic-v0", "--policy", "scripted:test_score:say_letters", "--n", "1",
                     "--name", "shared", "--env-kwargs", "{profile: solo, horizon: 1}"]) == 0
    finally:
        os.umask(previous)
    # the mode open() gives (0644 under umask 022), not the temp file's 0600: others can read it
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o644
    assert not list(tmp_path.glob("*.tmp"))


def test_a_score_record_names_its_task_revision_so_only_older_splits_are_flagged(tmp_path, monkeypatch):
    from leaderboards.records import load_records
    from marft_envs.envs.relay import RelayEnv

    monkeypatch.chdir(tmp_path)
    current, older = max(RelayEnv.task_revisions), min(RelayEnv.task_revisions)
    for name, kwargs in (("now", "{profile: solo}"), ("old", f"{{profile: solo, task_revision: {older}}}")):
        assert main(["score", "--env", "marft/Relay-v0", "--policy", "scripted:test_score:say_letters", "--n", "2",
                     "--name", name, "--env-kwargs", kwargs]) == 0
    records = {r["name"]: r for r in load_records(tmp_path)}
    assert records["now"]["task_revision"] == current and records["now"]["caveats"] == []
    assert records["old"]["task_revision"] == older and f"task revision {older}" in records["old"]["caveats"][0]


@pytest.mark.parametrize("argv, message", [
    (["--policy", "scripted:test_score:say_letters"], "needs --env"),
    (["--env", "marft/Nope-v0", "--policy", "scripted:test_score:say_letters"], "unknown environment id"),
    (["--env", LETTERS_ID, "--policy", "scripted:test_score"], "scripted:module:function"),
    (["--env", LETTERS_ID, "--policy", "scripted:test_score:missing"], "no function 'missing'"),
    (["--env", LETTERS_ID, "--policy", "scripted:no_such_module:f"], "cannot import"),
    (["--env", LETTERS_ID, "--policy", "scripted:test_score:say_letters", "--env-kwargs", "[1]"], "YAML mapping"),
])
def test_bad_score_input_is_one_clear_line(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["score", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.glob("*.json"))


def test_config_score_evaluates_once_without_training(tmp_path, monkeypatch):
    calls = []

    def loader(cfg, hardware=None):
        calls.append(cfg.name_or_path)
        return load_tiny_model(cfg)

    monkeypatch.setattr(models, "load_model_and_tokenizer", loader)
    import marft_agents.collector as collector

    collected = []
    original = collector.RolloutCollector.collect
    monkeypatch.setattr(collector.RolloutCollector, "collect",
                        lambda self, n, plans=None: collected.append(n) or original(self, n, plans))
    cfg = small_config(tmp_path, **{"eval.n_problems": 3, "algorithm": "eval_only"})
    path = tmp_path / "baseline.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    with pytest.warns(TrainingTasksWarning):
        record_path = run_score(str(path), records_dir=tmp_path / "out")
    record = json.loads(record_path.read_text())
    assert collected == [3] and len(calls) == 1  # one evaluation pass, no training rollout
    assert record["env_id"] == LETTERS_ID and record["algorithm"] == "none"
    assert record["config"]["train_config"]["algorithm"] == "eval_only"
    assert record_path.parent == tmp_path / "out" and record["eval_after"]["n"] == 3
    assert 0.0 <= record["eval_after"]["accuracy"] <= 1.0 and record["commit"] is not None


class NoCriticLearner:
    """A plug-in learner without a critic (``value_mode = None``) that trains nothing."""

    value_mode = None
    options_class = None
    group_size = 1

    def __init__(self, policy, cfg, agent_ids):
        self.updates = 0

    def trainable_agents(self, update):
        return []

    def update(self, rollout, update):
        self.updates += 1
        return {}

    def state_dict(self):
        return {"updates": self.updates}

    def load_state_dict(self, state):
        self.updates = state["updates"]


register_learner("test_score_no_critic", NoCriticLearner, replace=True)


@pytest.mark.parametrize("algorithm, sections", [
    ("grpo", {"learner": {"group_size": 2}, "schedule.episodes_per_update": 4}),
    ("test_score_no_critic", {}),
])
def test_config_score_loads_a_critic_less_checkpoint_like_eval(algorithm, sections, tmp_path, monkeypatch, capsys):
    # grpo and plug-in learners with value_mode None train no value head: score must build the
    # policy without one, as `marft eval` does, or loading their adapters fails.
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    cfg = small_config(tmp_path, **{"algorithm": algorithm, "schedule.num_updates": 1, **sections})
    with pytest.warns(TrainingTasksWarning):
        trained = train(cfg, model_and_tokenizer=load_tiny_model(cfg.model), tensorboard=False, plot=False,
                        handle_signals=False)
    assert not any(key.startswith("value_head/") for key in trained.policy.adapter_state_dict())
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    # `marft eval` of the checkpoint works (the reference behaviour) ...
    with pytest.warns(TrainingTasksWarning):
        assert main(["eval", "--config", str(path), "--checkpoint", "latest", "--quiet"]) == 0
    # ... and so does `marft score` of latest, best, a checkpoint folder and a run folder.
    for k, checkpoint in enumerate(["latest", "best", str(trained.last_checkpoint), cfg.output_dir]):
        records = tmp_path / "records" / str(k)
        with pytest.warns(TrainingTasksWarning):
            code = main(["score", "--policy", str(path), "--checkpoint", checkpoint, "--records", str(records)])
        assert code == 0, capsys.readouterr().err
        record = json.loads(next(records.glob("*.json")).read_text())
        assert record["algorithm"] == algorithm and record["eval_after"]["n"] == 2
        # best/ holds the untrained baseline unless the one update beat it (a random model rarely does).
        assert record["budget"]["updates"] in ((0, 1) if checkpoint == "best" else (1,))


def test_load_scripted_accepts_the_prefixless_form():
    assert load_scripted("test_score:say_letters") is say_letters
    assert marft_envs.env_source(LETTERS_ID).origin == "runtime"


def test_a_second_score_never_overwrites_the_first_record(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["score", "--env", "marft/Arithmetic-v0", "--policy", "scripted:test_score:say_letters", "--n", "2",
            "--env-kwargs", "{profile: solo, horizon: 1}"]
    assert main(argv) == 0
    first = (tmp_path / "score_marft_arithmetic_v0_say_letters.json").read_text()
    assert main([*argv, "--seed", "7"]) == 0
    assert (tmp_path / "score_marft_arithmetic_v0_say_letters.json").read_text() == first
    second = json.loads((tmp_path / "score_marft_arithmetic_v0_say_letters_2.json").read_text())
    assert second["name"] == "score_marft_arithmetic_v0_say_letters_2" and second["eval_after"]["seed"] == 7
    capsys.readouterr()
    # a name given twice is refused in one line, and the record stays as it was
    assert main([*argv, "--name", "score_marft_arithmetic_v0_say_letters"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "never overwrites a record" in err[0], err
    assert (tmp_path / "score_marft_arithmetic_v0_say_letters.json").read_text() == first


def test_a_config_scores_default_name_says_which_adapters(tmp_path):
    from marft_agents.score import record_name_for

    policy = str(tmp_path / "my_run.yaml")
    assert record_name_for(tmp_path, None, "marft/Relay-v0", policy, None) == "score_marft_relay_v0_my_run_untrained"
    ckpt = tmp_path / "run" / "checkpoints" / "update_000003"
    assert record_name_for(tmp_path, None, "marft/Relay-v0", policy, ckpt) == \
        "score_marft_relay_v0_my_run_update_000003"
    (tmp_path / "score_marft_relay_v0_my_run_update_000003.json").write_text("{}")
    assert record_name_for(tmp_path, None, "marft/Relay-v0", policy, ckpt) == \
        "score_marft_relay_v0_my_run_update_000003_2"
