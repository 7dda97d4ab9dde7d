"""Per-agent contribution ablations (baselines/ablations.py), ``ppo.train_agents`` and the two-call solo profile."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

import marft_agents.model.loading as models
import marft_envs
from agent_helpers import LETTERS_ID, load_tiny_model, small_config, tiny, tiny_on_device  # noqa: F401 (fixture)
from baselines import grid as grid_mod
from baselines.ablations import (
    ABLATIONS,
    DEFAULT_MESSAGE,
    combine_adapters,
    zero_seat_adapter,
)
from marft_agents.config import ConfigError, config_to_dict

AGENTS = ["reasoner_0", "actor_0"]


def _trained_policy(tiny, seed=1, **kwargs):
    """A policy whose adapters hold random non-zero weights (LoRA B included), as after training."""
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny
    policy = MultiAgentPolicy(model, tokenizer, AGENTS, **kwargs)
    generator = torch.Generator().manual_seed(seed)
    state = {k: torch.randn(v.shape, generator=generator, dtype=v.dtype) * 0.1 for k, v in
             policy.adapter_state_dict().items()}
    policy.load_adapter_state_dict(state)
    return policy, state


def _scores(policy, adapter):
    prompt = policy.chat_prompt_ids("Think.", "Say 3.")
    response = [[5, 17, 42, 9]]
    with torch.no_grad():
        if adapter is None:
            return policy.reference_logprobs([prompt], response).logprobs
        return policy.token_logprobs(adapter, [prompt], response, with_entropy=False).logprobs


# -- ppo.train_agents --------------------------------------------------------------------------------
def test_train_agents_trains_only_the_named_agents(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, **{"ppo.train_agents": ["actor_0"]})
    trainer = Trainer(cfg, tiny)
    policy = trainer.policy
    before = policy.adapter_state_dict()
    history = list(trainer.run())
    after = policy.adapter_state_dict()
    assert len(history) == 2 and all(m["agent/actor_0/trained"] == 1.0 and m["agent/reasoner_0/trained"] == 0.0
                                     for m in history)
    frozen = [k for k in before if k.startswith("lora/policy_reasoner_0/")]
    trained = [k for k in before if k.startswith("lora/policy_actor_0/")]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)  # still at initialisation
    assert any(not torch.equal(before[k], after[k]) for k in trained)


def test_train_agents_restricts_the_agent_by_agent_rotation(tmp_path, tiny):
    from marft_agents.learners import make_learner
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny
    agents = ["planner_0", "reasoner_0", "actor_0"]
    policy = MultiAgentPolicy(model, tokenizer, agents)

    def schedule(**overrides):
        cfg = small_config(tmp_path, **overrides)
        learner = make_learner(cfg.algorithm, policy, cfg, agents)
        return [learner.trainable_agents(u) for u in range(6)]

    assert schedule(**{"ppo.train_agents": ["actor_0", "planner_0"]}) == [["planner_0", "actor_0"]] * 6
    assert schedule(**{"ppo.train_agents": ["actor_0", "planner_0"], "ppo.agent_iteration_interval": 2}) == [
        ["planner_0"], ["planner_0"], ["actor_0"], ["actor_0"], ["planner_0"], ["planner_0"]]
    assert schedule(**{"ppo.agent_iteration_interval": 1})[:3] == [["planner_0"], ["reasoner_0"], ["actor_0"]]
    with pytest.raises(ValueError, match=r"^ppo.train_agents names \['nobody'\], not agents of this env; "
                                         r"its agents: planner_0, reasoner_0, actor_0$"):
        schedule(**{"ppo.train_agents": ["actor_0", "nobody"]})


@pytest.mark.parametrize("overrides, message", [
    ({"ppo.train_agents": []}, "non-empty list of distinct"),
    ({"ppo.train_agents": ["actor_0", "actor_0"]}, "non-empty list of distinct"),
    ({"ppo.train_agents": ["actor_0"], "shared_adapter": True}, "needs one adapter per agent"),
    ({"eval.samples_per_problem": 4}, "only with eval.greedy: false"),
    ({"eval.samples_per_problem": 0, "eval.greedy": False}, "must be >= 1"),
])
def test_config_refuses_bad_train_agents_and_samples(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        small_config(tmp_path, **overrides)


# -- the ablations -----------------------------------------------------------------------------------
def test_base_seat_makes_the_seat_the_base_model_and_leaves_the_others_bit_identical(tiny):
    policy, trained = _trained_policy(tiny)
    assert not torch.allclose(_scores(policy, "policy_reasoner_0"), _scores(policy, None))  # training shows
    policy.load_adapter_state_dict(zero_seat_adapter(trained, policy, "reasoner_0"))
    now = policy.adapter_state_dict()
    assert all(torch.equal(now[k], trained[k]) for k in trained if not k.startswith("lora/policy_reasoner_0/"))
    assert torch.equal(_scores(policy, "policy_reasoner_0"), _scores(policy, None))  # the seat is the base model
    assert not torch.allclose(_scores(policy, "policy_actor_0"), _scores(policy, None))
    with pytest.raises(ValueError, match="not an agent"):
        zero_seat_adapter(trained, policy, "nobody")
    shared, state = _trained_policy(tiny_on_device(seed=0, hidden_size=32, num_layers=1), shared_adapter=True)
    with pytest.raises(ValueError, match="shared_adapter: false"):
        zero_seat_adapter(state, shared, "reasoner_0")


def test_combined_takes_each_agent_from_its_run(tiny):
    policy, x = _trained_policy(tiny, seed=1)
    y = {k: v + 1.0 for k, v in x.items()}  # another run's adapters
    combined = combine_adapters(x, policy, {"actor_0": (y, "actor_0")})
    assert set(combined) == set(x)
    for key, value in combined.items():
        assert torch.equal(value, (y if key.startswith("lora/policy_actor_0/") else x)[key]), key
    # the kind loads the source's state and asks for the other cell's by name
    ablation = ABLATIONS["combined"].from_cell({"adapters": {"actor_0": "actor_alone"}}, "here")
    asked = []
    meta = ablation.prepare(policy, x, lambda cell: asked.append(cell) or y)
    assert asked == ["actor_alone"] and meta == {"adapters": {"actor_0": "actor_alone"}}
    loaded = policy.adapter_state_dict()
    assert all(torch.equal(loaded[k], combined[k]) for k in combined)
    with pytest.raises(ConfigError, match="name at least one agent"):
        ABLATIONS["combined"].from_cell({}, "here")


def test_fixed_message_replaces_the_seats_output_in_what_its_successor_reads(tiny):
    from marft_agents.evaluation.problem_set import evaluate
    from marft_agents.settings.sampling import SamplingConfig

    policy, _ = _trained_policy(tiny)
    asked = []
    generate = policy.generate

    def counting(requests, sampling=None):
        asked.extend(r.agent_id for r in requests)
        return generate(requests, sampling)

    policy.generate = counting
    ablation = ABLATIONS["fixed_message"].from_cell({"seat": "reasoner_0"}, "here")
    state = policy.adapter_state_dict()
    assert ablation.prepare(policy, state, lambda cell: {}) == {"seat": "reasoner_0", "message": DEFAULT_MESSAGE}
    result = evaluate(policy, LETTERS_ID, {"horizon": 1}, n_problems=3, sampling=SamplingConfig(max_new_tokens=4),
                      num_envs=2, scripted=ablation.scripted_seats())
    assert asked and set(asked) == {"actor_0"}  # the model never ran for the muted seat
    for task in result.per_task:
        reasoner, actor = task["transcript"]
        assert reasoner["agent"] == "reasoner_0" and reasoner["text"] == DEFAULT_MESSAGE
        assert actor["observation"].endswith(f"reasoner_0 (reasoner) wrote:\n{DEFAULT_MESSAGE}")
    unmuted = evaluate(policy, LETTERS_ID, {"horizon": 1}, n_problems=3, sampling=SamplingConfig(max_new_tokens=4),
                       num_envs=2)
    assert all(t["transcript"][0]["text"] != DEFAULT_MESSAGE for t in unmuted.per_task)


# -- as grid cells -----------------------------------------------------------------------------------
@pytest.fixture
def tiny_models(monkeypatch):
    monkeypatch.setattr(models, "load_model_and_tokenizer", load_tiny_model)
    monkeypatch.setattr(grid_mod, "git_commit", lambda: "abc1234")


def _grid(tmp_path, cells):
    cfg = small_config(tmp_path, **{"schedule.num_updates": 100, "eval.at_end": True, "env.kwargs.horizon": 1})
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(config_to_dict(cfg)))
    spec = {"name": "tiny", "base": str(base), "budget": {"episodes": 2}, "seeds": [0], "cells": cells,
            "gate": {"episodes": 4, "min_signal": 0},  # a short pilot that refuses nothing: not the test here
            "records": str(tmp_path / "board" / "records"), "output_root": str(tmp_path / "runs")}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


ABLATION_CELLS = [
    {"name": "team"},
    {"name": "reasoner_alone", "overrides": {"ppo.train_agents": ["reasoner_0"]}},
    {"name": "actor_alone", "overrides": {"ppo.train_agents": ["actor_0"]}},
    {"name": "base_reasoner", "evaluate": "base_seat", "source": "team", "ablation": {"seat": "reasoner_0"}},
    {"name": "mute_reasoner", "evaluate": "fixed_message", "source": "team",
     "ablation": {"seat": "reasoner_0", "message": "No idea."}},
    {"name": "separate", "evaluate": "combined", "source": "reasoner_alone",
     "ablation": {"adapters": {"actor_0": "actor_alone"}}},
    {"name": "team_k3", "evaluate": "final", "source": "team",
     "overrides": {"eval.greedy": False, "eval.samples_per_problem": 3}},
]


def test_ablation_cells_run_from_their_sources(tmp_path, tiny_models, capsys):
    path = _grid(tmp_path, ABLATION_CELLS)
    assert grid_mod.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "blocked  separate_seed0" in out and "combined from reasoner_alone_seed0" in out
    assert grid_mod.main([str(path)]) == 0
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "board" / "records").glob("*.json")}
    assert len(records) == len(ABLATION_CELLS)
    team_accuracy = records["team_seed0"]["eval_after"]["accuracy"]
    base = records["base_reasoner_seed0"]["grid"]
    assert base["kind"] == "base_seat" and base["seat"] == "reasoner_0" and base["source_accuracy"] == team_accuracy
    assert base["checkpoint"].startswith(str(tmp_path / "runs" / "team" / "seed0"))
    separate = records["separate_seed0"]["grid"]
    assert separate["adapters"] == {"actor_0": "actor_alone"}
    assert sorted(separate["checkpoints"]) == ["actor_alone", "reasoner_alone"]
    assert separate["checkpoints"]["actor_alone"].startswith(str(tmp_path / "runs" / "actor_alone" / "seed0"))
    sampled = records["team_k3_seed0"]["eval_after"]
    assert sampled["samples_per_problem"] == 3 and sampled["greedy"] is False
    assert {"avg_at_k", "avg_at_k_stderr", "pass_at_k", "pass_at_k_stderr"} <= set(sampled)
    mute = tmp_path / "runs" / "mute_reasoner" / "seed0" / "fixed_message_transcripts.jsonl"
    rows = [json.loads(line) for line in mute.read_text().splitlines()]
    assert rows and all(r["transcript"][0]["text"] == "No idea." for r in rows)
    assert records["mute_reasoner_seed0"]["grid"]["message"] == "No idea."


@pytest.mark.parametrize("cell, message", [
    ({"name": "x", "evaluate": "base_seat", "source": "team", "ablation": {"seat": "holder_0"}},
     "['holder_0'] not agents of the env; its agents: reasoner_0, actor_0"),
    ({"name": "x", "evaluate": "base_seat", "source": "team", "ablation": {"sit": "actor_0"}}, "unknown key"),
    ({"name": "x", "evaluate": "combined", "source": "team", "ablation": {"adapters": {"actor_0": "nope"}}},
     "got 'nope'"),
    ({"name": "x", "evaluate": "base_seat", "source": "team", "ablation": {"seat": "actor_0"},
      "overrides": {"algorithm": "grpo"}}, "only eval"),
    ({"name": "x", "evaluate": "swapped", "source": "team", "ablation": {"seat": "actor_0"}}, "takes no options"),
    ({"name": "x", "ablation": {"seat": "actor_0"}}, "only for evaluate"),
    ({"name": "x", "evaluate": "base_seat", "source": "shared", "ablation": {"seat": "actor_0"}},
     "one adapter shared by all agents"),
])
def test_bad_ablation_cells_are_refused_before_any_run(tmp_path, capsys, cell, message):
    path = _grid(tmp_path, [{"name": "team"}, {"name": "shared", "overrides": {"shared_adapter": True}}, cell])
    assert grid_mod.main([str(path), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


# -- the two-call solo profile -----------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["marft/Relay-v0", "marft/SolveCheck-v0", "marft/Arithmetic-v0"])
def test_two_call_solo_sees_the_whole_problem_and_submits_its_second_answer(env_id):
    env = marft_envs.make(env_id, profile="solo_two_calls", horizon=1)
    solo = marft_envs.make(env_id, profile="solo", horizon=1)
    env.reset(seed=3, options={"task_index": 4})
    solo.reset(seed=3, options={"task_index": 4})
    assert env.possible_agents == ["solver_0", "solver_1"] and env.unwrapped.profile.solo
    whole = solo.observe("actor_0")["text"]
    prompts = {env.unwrapped.profile.role_of(a).system_prompt for a in env.possible_agents}
    assert len(prompts) == 1  # one role-prompt, called twice
    assert env.observe("solver_0")["text"] == whole
    env.step("a draft")
    assert env.observe("solver_1")["text"].startswith(whole) and "a draft" in env.observe("solver_1")["text"]
    answer = str(env.unwrapped.task.answer)
    env.step(f"\\boxed{{{answer}}}")
    assert env.infos["solver_1"]["last_outcome"]["solved"]  # the second call's answer is graded


def test_two_call_solo_trains_one_shared_adapter(tmp_path, tiny):
    from marft_agents.run.trainer import Trainer

    cfg = small_config(tmp_path, **{"env.id": "marft/Arithmetic-v0", "env.kwargs": {"profile": "solo_two_calls",
                                                                                     "horizon": 1},
                                    "shared_adapter": True, "schedule.num_updates": 1})
    trainer = Trainer(cfg, tiny)
    assert {trainer.policy.adapter_for(a) for a in trainer.agent_ids} == {"policy_shared"}
    history = list(trainer.run())
    assert len(history) == 1 and history[0]["agent/solver_0/trained"] == history[0]["agent/solver_1/trained"] == 1.0
