"""A team of different models trains, resumes, evaluates and runs on 2 ranks (issue 80).

Two tiny random models of two architectures and two tokenizers: ``default`` is Llama-shaped with
the ChatML tokenizer (hidden 32), ``other`` Qwen2-shaped with the Llama-3-style tokenizer (hidden
48, other special tokens, other byte ids and merges), so a token id or a hidden state routed to
the wrong model shows as a wrong shape or a wrong decoding. ``actor_0`` of the Letters env's dual
team runs on ``other``, ``reasoner_0`` on ``default``. Each test trains for 1 to 3 updates: every
learner that applies (GRPO in every grouping, MARFT-A with its critic on either model, MARFT-T and
``critic.mode: local`` with a critic on each model, single-agent PPO), exact resume, evaluation,
frozen teammates, per-agent settings, each agent's own tokens, reference log-probs, 2 ranks. Where
the critic sits in detail: ``test_critic_placement.py``; bad input: ``test_team_checks.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import marft_agents
from agent_helpers import DEVICE, LETTERS_ID, SOLO, small_config
from marft_agents.model.team import TeamPolicy
from marft_agents.run.trainer import Trainer, iter_train, load_policy, train

QUIET = {"eval_before": False, "tensorboard": False, "plot": False, "handle_signals": False}
OTHER_MODEL = {"other": {"name_or_path": "tiny-other", "device": str(DEVICE)}}
ON_OTHER = {"actor_0": {"model": "other"}}
GRPO = {"algorithm": "grpo", "critic": None, "learner": {"group_size": 2}, "schedule.episodes_per_update": 4,
        "schedule.minibatch_size": 4}


def pairs() -> dict:
    """Fresh tiny models by team model name (a run trains its adapters in place)."""
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    default = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)  # llama + chatml
    other = tiny_model_and_tokenizer(seed=1, hidden_size=48, num_layers=1, arch="qwen2", tokenizer="llama3")
    return {name: (model.to(DEVICE), tok) for name, (model, tok) in {"default": default, "other": other}.items()}


def team_config(path: Path, **sections):
    sections.setdefault("models", OTHER_MODEL)
    sections.setdefault("agents", ON_OTHER)
    return small_config(path, **sections)


def _member_of(policy: TeamPolicy, adapter: str) -> str:
    return next(name for name, member in policy.members.items() if adapter in member.adapter_names)


def _moved(before: dict, after: dict, adapter: str) -> bool:
    keys = [k for k in before if f"/{adapter}/" in k]
    assert keys, adapter
    return any(not torch.equal(before[k], after[k]) for k in keys)


def _initial_adapters(cfg) -> dict:
    """The adapters a run of ``cfg`` starts from (built as the Trainer builds them)."""
    with Trainer(cfg, pairs()) as trainer:
        return {k: v.clone() for k, v in trainer.policy.adapter_state_dict().items()}


def _train_and_check(tmp_path, **sections) -> object:
    """Train the team for 2 updates; both agents' adapters (and any critic's) moved on their own model."""
    cfg = team_config(tmp_path, **sections)
    before = _initial_adapters(cfg)
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    policy = result.policy
    assert isinstance(policy, TeamPolicy) and list(policy.members) == ["default", "other"]
    assert _member_of(policy, "policy_reasoner_0") == "default" and _member_of(policy, "policy_actor_0") == "other"
    after = policy.adapter_state_dict()
    assert before.keys() == after.keys()
    for adapter in policy.adapter_names:
        assert _moved(before, after, adapter), f"{adapter} did not train"
    assert len(result.history) == 2
    for metrics in result.history:
        assert metrics["agent/reasoner_0/trained"] == 1.0 and metrics["agent/actor_0/trained"] == 1.0
        assert torch.isfinite(torch.tensor(metrics["losses/policy_loss"])), metrics
    return result


# -- every learner that applies ----------------------------------------------------------------------
@pytest.mark.parametrize("grouping", ["team", "agent", "agent_turn", "step"])
def test_grpo_trains_a_team_of_two_models_in_every_grouping(tmp_path, grouping):
    result = _train_and_check(tmp_path, **{**GRPO, "learner": {"group_size": 2, "grouping": grouping}})
    assert result.policy.critic_adapters == [] and all(h["grpo/groups"] == 2.0 for h in result.history)


@pytest.mark.parametrize("critic_model", ["default", "other"])
@pytest.mark.parametrize("mode", ["centralised", "per_agent"])
def test_marft_a_trains_a_team_with_the_critic_on_either_model(tmp_path, mode, critic_model):
    result = _train_and_check(tmp_path, critic={"mode": mode, "model": critic_model})
    policy = result.policy
    critics = ["critic"] if mode == "centralised" else ["critic_reasoner_0", "critic_actor_0"]
    assert policy.critic_adapters == critics
    assert all(_member_of(policy, c) == critic_model for c in critics)
    assert set(policy.value_heads) == set(critics) and not policy.members[
        "other" if critic_model == "default" else "default"].critic_adapters
    assert all(policy.critic_reader(a) is policy.members[critic_model] for a in ("reasoner_0", "actor_0"))


def test_marft_a_with_a_group_baseline_builds_no_critic(tmp_path):
    result = _train_and_check(tmp_path, **{"advantage.baseline": "group", "schedule.group_size": 2})
    assert result.policy.critic_adapters == []


@pytest.mark.parametrize("sections, critics", [
    ({"algorithm": "mappo_token"}, ["critic-default", "critic-other"]),
    ({"algorithm": "mappo_token", "critic.mode": "per_agent"}, ["critic_reasoner_0", "critic_actor_0"]),
    ({"critic.mode": "local"}, ["critic-default", "critic-other"]),
], ids=["mappo_token", "mappo_token-per_agent", "mappo_action-local"])
def test_own_token_critics_train_on_each_agents_model(tmp_path, sections, critics):
    """Values in the acting agent's own tokens (MARFT-T, ``critic.mode: local``): each model
    carries the critic of its own agents, and every adapter trains over 2 updates."""
    result = _train_and_check(tmp_path, **sections)
    policy = result.policy
    assert sorted(policy.critic_adapters) == sorted(critics)
    for agent, model in (("reasoner_0", "default"), ("actor_0", "other")):
        assert policy.member_of_adapter(policy.critic_for(agent)) is policy.members[model]


def test_a_team_on_one_model_other_than_the_default_is_the_plain_policy(tmp_path):
    """Every agent and the critic on ``other``: one model, so the one-model policy of that model
    (MARFT-T's token values need no team)."""
    from marft_agents.model.policy import MultiAgentPolicy

    both = {"actor_0": {"model": "other"}, "reasoner_0": {"model": "other", "lora": {"r": 4}}}
    cfg = team_config(tmp_path, algorithm="mappo_token", agents=both, critic={"model": "other"})
    before = _initial_adapters(cfg)
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    assert type(result.policy) is MultiAgentPolicy and result.policy.lm.config.hidden_size == 48
    after = result.policy.adapter_state_dict()
    assert all(_moved(before, after, a) for a in ("policy_reasoner_0", "policy_actor_0", "critic"))
    assert all(h["agent/reasoner_0/trained"] == 1.0 for h in result.history)


def test_single_agent_ppo_on_the_second_model_with_the_critic_on_the_first(tmp_path):
    cfg = team_config(tmp_path, algorithm="ppo", env={"kwargs": {"profile": SOLO}}, critic={"model": "default"})
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    policy = result.policy
    assert _member_of(policy, "policy_actor_0") == "other" and _member_of(policy, "critic") == "default"
    assert policy.members["default"].agent_ids == []  # a base that hosts only the critic
    assert len(result.history) == 2 and result.history[-1]["agent/actor_0/trained"] == 1.0


# -- resume, evaluate -------------------------------------------------------------------------------
@pytest.mark.parametrize("sections", [
    {"critic": {"mode": "per_agent", "model": "other"}, "ppo.agent_iteration_interval": 1},
    {"algorithm": "mappo_token"},
    {**GRPO, "learner": {"group_size": 2, "kl_coef": 0.1}},
], ids=["mappo_action", "mappo_token", "grpo"])
def test_a_resumed_team_run_ends_bit_identical_to_an_uninterrupted_one(tmp_path, sections):
    overrides = {"schedule.num_updates": 3, "schedule.ppo_epochs": 2, **sections}
    full = train(team_config(tmp_path / "full", **overrides), model_and_tokenizer=pairs(), **QUIET)
    cut_cfg = team_config(tmp_path / "cut", **overrides)
    first = iter_train(cut_cfg, model_and_tokenizer=pairs())
    next(first)  # one update (checkpointed), then the "crash"
    first.close()
    resumed = train(cut_cfg, resume=True, model_and_tokenizer=pairs(), **QUIET)

    timeless = lambda c: {k: v for k, v in c.items() if k != "train_seconds"}  # noqa: E731
    assert timeless(resumed.counters) == timeless(full.counters) and len(resumed.history) == 2
    a, b = full.policy.adapter_state_dict(), resumed.policy.adapter_state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    for key in [k for k in full.history[-1] if k.startswith(("losses/", "rollout/"))]:
        assert resumed.history[-1][key] == full.history[-1][key] or full.history[-1][key] != full.history[-1][key], key


def test_a_trained_team_evaluates_and_its_checkpoint_loads_into_a_fresh_team(tmp_path):
    from marft_agents.evaluation.problem_set import evaluate
    from marft_agents.run.checkpoint import load_adapters

    cfg = team_config(tmp_path, **{"critic.mode": "per_agent"})
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    trained = evaluate(result.policy, LETTERS_ID, {}, n_problems=3, num_envs=2)
    assert trained.n == 3 and len(trained.per_task) == 3
    transcript = trained.per_task[0]["transcript"]
    assert {turn["agent"] for turn in transcript} == {"reasoner_0", "actor_0"}
    # marft eval's path: the team built from the config, the checkpoint's adapters loaded strictly
    with load_policy(cfg, ["reasoner_0", "actor_0"], pairs()) as fresh:
        untrained = evaluate(fresh, LETTERS_ID, {}, n_problems=3, num_envs=2)
        fresh.load_adapter_state_dict(load_adapters(result.last_checkpoint))
        again = evaluate(fresh, LETTERS_ID, {}, n_problems=3, num_envs=2)
    texts = lambda r: [[t["text"] for t in task["transcript"]] for task in r.per_task]  # noqa: E731
    assert texts(again) == texts(trained)  # greedy: the same adapters answer alike
    assert texts(untrained) != texts(trained)  # training changed the answers: the comparison is not vacuous


# -- frozen teammates, per-agent settings ------------------------------------------------------------
def test_a_frozen_teammate_at_its_base_model_is_never_trained(tmp_path):
    cfg = team_config(tmp_path, agents={"actor_0": {"model": "other"}, "reasoner_0": {"trainable": False}})
    before = _initial_adapters(cfg)
    with Trainer(cfg, pairs()) as trainer:
        assert set(trainer.learner.optimizers) == {"policy_actor_0", "critic"}  # none for the frozen one
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    after = result.policy.adapter_state_dict()
    frozen = [k for k in before if "/policy_reasoner_0/" in k]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)
    assert _moved(before, after, "policy_actor_0") and _moved(before, after, "critic")
    for metrics in result.history:
        assert metrics["agent/reasoner_0/trained"] == 0.0 and metrics["agent/actor_0/trained"] == 1.0
        assert metrics["agent/reasoner_0/decisions"] > 0  # it still acts


def _fixed_adapter(folder: Path) -> Path:
    """A peft LoRA adapter of the ``default`` tiny model with non-zero weights (rank 2, q/v only)."""
    from peft import LoraConfig, get_peft_model

    model, _ = pairs()["default"]
    peft_model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    peft_model.save_pretrained(folder)
    return folder


def test_a_frozen_teammate_acts_with_its_fixed_adapter_bit_identical_after_training(tmp_path):
    from peft.utils import load_peft_weights

    folder = _fixed_adapter(tmp_path / "fixed")
    saved = load_peft_weights(str(folder), device="cpu")
    cfg = team_config(tmp_path, algorithm="grpo", critic=None, learner={"group_size": 2},
                      schedule={"episodes_per_update": 4, "minibatch_size": 4, "num_updates": 2},
                      agents={"actor_0": {"model": "other"},
                              "reasoner_0": {"trainable": False, "adapter": str(folder)}})
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    state = result.policy.adapter_state_dict()
    mine = {k.split("/", 2)[2]: v for k, v in state.items() if k.startswith("lora/policy_reasoner_0/")}
    assert sorted(mine) == sorted(saved) and len(saved) == 4  # q and v, A and B: the folder's rank-2 layers
    assert all(torch.equal(mine[k].cpu(), saved[k]) for k in saved)
    assert all(v.shape[0 if "lora_A" in k else 1] == 2 for k, v in mine.items())
    assert all(h["agent/reasoner_0/trained"] == 0.0 for h in result.history)


def test_per_agent_learning_rate_and_lora_rank_are_applied(tmp_path):
    cfg = team_config(tmp_path, agents={"actor_0": {"model": "other", "actor_lr": 3e-3, "lora": {"r": 4}},
                                        "reasoner_0": {"lora": {"r": 2, "target_modules": ["q_proj"]}}})
    trainer = Trainer(cfg, pairs())
    lrs = {name: [group["lr"] for group in opt.param_groups] for name, opt in trainer.learner.optimizers.items()}
    assert lrs["policy_actor_0"] == [3e-3] and lrs["policy_reasoner_0"] == [cfg.schedule.actor_lr]
    assert lrs["critic"] == [cfg.schedule.critic_lr]
    owned = {id(p) for p in trainer.policy.adapter_parameters("policy_actor_0")}
    assert {id(p) for g in trainer.learner.optimizers["policy_actor_0"].param_groups for p in g["params"]} == owned
    shapes = {k: tuple(v.shape) for k, v in trainer.policy.adapter_state_dict().items()}
    actor = {k: s for k, s in shapes.items() if "/policy_actor_0/" in k}
    reasoner = {k: s for k, s in shapes.items() if "/policy_reasoner_0/" in k}
    assert actor and all(s == ((4, 48) if "lora_A" in k else (48, 4)) for k, s in actor.items() if "q_proj" in k)
    assert reasoner and all("q_proj" in k for k in reasoner)  # its own target modules
    assert all(s == ((2, 32) if "lora_A" in k else (32, 2)) for k, s in reasoner.items())
    critic = {k: s for k, s in shapes.items() if "/critic/" in k and "q_proj.lora_A" in k}
    assert critic and all(s == (cfg.lora.r, 32) for s in critic.values())  # the lora: section's


def test_per_agent_settings_and_a_frozen_teammate_on_one_model(tmp_path):
    """``agents:`` without ``models:``: the plain one-model policy, with a frozen agent and
    another agent's own rank and learning rate."""
    from agent_helpers import tiny_on_device
    from marft_agents.model.policy import MultiAgentPolicy

    tiny = lambda: tiny_on_device(seed=0, hidden_size=32, num_layers=1)  # noqa: E731
    cfg = small_config(tmp_path, agents={"reasoner_0": {"trainable": False},
                                         "actor_0": {"actor_lr": 2e-3, "lora": {"r": 4}}})
    with Trainer(cfg, tiny()) as trainer:
        assert type(trainer.policy) is MultiAgentPolicy
        assert {n: o.param_groups[0]["lr"] for n, o in trainer.learner.optimizers.items()} == {
            "policy_actor_0": 2e-3, "critic": cfg.schedule.critic_lr}
        before = {k: v.clone() for k, v in trainer.policy.adapter_state_dict().items()}
    result = train(cfg, model_and_tokenizer=tiny(), **QUIET)
    after = result.policy.adapter_state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if "/policy_reasoner_0/" in k)
    assert _moved(before, after, "policy_actor_0")
    assert {tuple(v.shape) for k, v in after.items() if "/policy_actor_0/" in k and "q_proj.lora_A" in k} == {(4, 32)}
    assert [h["agent/reasoner_0/trained"] for h in result.history] == [0.0, 0.0]


# -- tokens ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["direct", "fast", "legacy"])
def test_each_agents_prompts_are_in_its_own_tokenizer_and_the_critics_in_its_models(tmp_path, engine):
    """Every decision's prompt is its agent's chat template in its model's tokens, its
    sampling-time log-probs are that model's (rescored: the same up to rounding), and the
    critic's input is in the critic model's tokens; with every sampling engine a team can use."""
    cfg = team_config(tmp_path, critic={"model": "other"}, sampling={"engine": engine, "max_new_tokens": 4})
    with Trainer(cfg, pairs()) as trainer:
        rollout = trainer.collector.collect(2)
        systems = {"reasoner_0": "Think.", "actor_0": "Answer."}
        seen = set()
        for d in rollout.decisions:
            own = trainer.policy.for_agent(d.agent_id).tokenizer
            other = trainer.policy.members["default" if d.agent_id == "actor_0" else "other"].tokenizer
            messages = [{"role": "system", "content": systems[d.agent_id]}, {"role": "user", "content": d.observation}]
            rendered = own.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            assert own.decode(d.prompt_ids) == rendered
            assert other.decode(d.prompt_ids) != rendered
            start = "<|begin_of_text|><|start_header_id|>system" if d.agent_id == "actor_0" else "<|im_start|>system"
            assert rendered.startswith(start)
            assert own.decode(d.response_ids, skip_special_tokens=True) == d.text
            rescored = trainer.policy.token_logprobs(d.adapter, [d.prompt_ids], [d.response_ids], with_entropy=False)
            assert torch.allclose(rescored.logprobs[0, :len(d.response_ids)].float().cpu(), torch.tensor(d.logprobs),
                                  atol=1e-4), (d.agent_id, engine)
            critic_text = trainer.policy.members["other"].tokenizer.decode(d.critic_prompt_ids)
            assert critic_text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are the "
                                          "critic")
            seen.add(d.agent_id)
    assert seen == {"reasoner_0", "actor_0"}


def test_reference_log_probs_come_from_each_rows_own_base_model(tmp_path, monkeypatch):
    """With ``kl_coef > 0`` every sample's reference log-probs are its own model's base (adapters
    off), for both models' rows batched together; at the second update the adapters have moved,
    so the base differs from the policy and the check tells them apart."""
    from marft_agents.learners.logprob_targets import LogprobTargets

    updates: list[list] = []
    attach = LogprobTargets._attach_reference_logprobs

    def spy(self, samples):
        attach(self, samples)
        updates.append(list(samples))

    monkeypatch.setattr(LogprobTargets, "_attach_reference_logprobs", spy)
    cfg = team_config(tmp_path, **{**GRPO, "learner": {"group_size": 2, "kl_coef": 0.1}})
    result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
    policy = result.policy
    assert len(updates) == 2 and {s.adapter for s in updates[-1]} == {"policy_reasoner_0", "policy_actor_0"}
    apart = set()
    for s in updates[-1]:
        member = policy.members[_member_of(policy, s.adapter)]
        score = lambda: member.token_logprobs(s.adapter, [s.prompt_ids], [s.response_ids],  # noqa: E731
                                              cfg.sampling.temperature, with_entropy=False,
                                              prefix_lens=[s.prefix_len]).logprobs[0, :len(s.response_ids)].float().cpu()
        with member.using(None):  # the base model, adapters off
            base = score()
        assert torch.allclose(s.ref_logprobs, base, atol=1e-5), s.adapter
        if not torch.allclose(s.ref_logprobs, score(), atol=1e-5):  # the trained adapter scores otherwise
            apart.add(s.adapter)
    assert apart == {"policy_reasoner_0", "policy_actor_0"}
    # the learner's micro-batches hold one adapter each; a batch mixing both models' rows is split
    # by model and merged back in row order, [B, max T] right-padded
    by_adapter = {a: [s for s in updates[-1] if s.adapter == a] for a in ("policy_actor_0", "policy_reasoner_0")}
    mixed = [s for pair in zip(by_adapter["policy_actor_0"][:2], by_adapter["policy_reasoner_0"][:2]) for s in pair]
    assert [s.adapter for s in mixed] == ["policy_actor_0", "policy_reasoner_0"] * 2
    stats = policy.reference_logprobs([s.prompt_ids for s in mixed], [s.response_ids for s in mixed],
                                      cfg.sampling.temperature, prefix_lens=[s.prefix_len for s in mixed],
                                      adapters=[s.adapter for s in mixed])
    longest = max(len(s.response_ids) for s in mixed)
    assert stats.logprobs.shape == (len(mixed), longest)
    for b, s in enumerate(mixed):
        n = len(s.response_ids)
        assert torch.allclose(stats.logprobs[b, :n].float().cpu(), s.ref_logprobs, atol=1e-5), (b, s.adapter)
        assert stats.mask[b, :n].all() and not stats.mask[b, n:].any()
    with pytest.raises(ValueError, match="pass adapters="):
        policy.reference_logprobs([s.prompt_ids for s in mixed], [s.response_ids for s in mixed])


# -- 2 ranks ---------------------------------------------------------------------------------------
TEAM_DDP = {"model.device": "cpu", "models": {"other": {"name_or_path": "tiny-other", "device": "cpu"}},
            "sampling.do_sample": False, "schedule.episodes_per_update": 4, "schedule.ppo_epochs": 2,
            "eval.at_end": False, "ppo.gamma": 0.9}
DDP_CASES = {"mappo_action": {"critic.model": "other"},  # one critic, on the second model
             "mappo_token": {"algorithm": "mappo_token"}}  # a critic on each model
"""The team runs compared on 2 ranks and in one process (greedy: the same global batch)."""


def ddp_run(out: Path, rank: int = 0) -> dict:
    """Every ``DDP_CASES`` run of the team; saved to ``out/rank<r>.pt`` for the test."""
    from ddp_worker import counting_positions, optimizer_steps
    from marft_agents.run.checkpoint import load_checkpoint

    found = {}
    for name, sections in DDP_CASES.items():
        cfg = team_config(out / name, **TEAM_DDP, **sections)
        with counting_positions() as positions:
            result = train(cfg, model_and_tokenizer=pairs(), **QUIET)
        learner_state = load_checkpoint(result.last_checkpoint)["state"]["learner"] if rank == 0 else None
        found[name] = {"adapters": result.policy.adapter_state_dict(), "history": result.history,
                       "arithmetic": {"steps": optimizer_steps(learner_state) if learner_state else 0,
                                      "positions": max(positions),
                                      "lr": max(cfg.schedule.actor_lr, cfg.schedule.critic_lr)}}
    torch.save(found, out / f"rank{rank}.pt")
    return found


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """(each rank's runs, the one-process runs, a folder for more) of ``DDP_CASES``."""
    tmp_path = tmp_path_factory.mktemp("team_ddp")
    here = Path(__file__).resolve().parent
    root = str(Path(marft_agents.__file__).resolve().parents[1])
    path = os.pathsep.join([root, str(here)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    from test_distributed import _free_port

    port = _free_port()
    code = ("import sys, torch; torch.set_num_threads(1); from pathlib import Path\n"
            "from marft_agents.runtime.distributed import process_group\n"
            "from test_team import ddp_run\n"
            "with process_group() as world: ddp_run(Path(sys.argv[1]), world.rank)\n")
    for folder in ("ddp", "single"):
        (tmp_path / folder).mkdir()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
               "CUDA_VISIBLE_DEVICES": "", "MARFT_TEST_DEVICE": "cpu", "PYTHONPATH": path}
        procs.append(subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "ddp")], env=env, cwd=here,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    single = ddp_run(tmp_path / "single")  # the one-process reference, while the ranks run
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    ranks = [torch.load(tmp_path / "ddp" / f"rank{r}.pt", weights_only=False) for r in range(2)]
    return ranks, single, tmp_path


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no torch.distributed gloo")
@pytest.mark.parametrize("case", list(DDP_CASES))
def test_two_ranks_train_the_team_one_process_trains(ddp_runs, case):
    """Both ranks hold the same adapters, within float rounding of one process's
    (``test_distributed.adapter_tolerance``), and log the same loss and gradient figures."""
    from test_distributed import _diffs, adapter_tolerance

    ranks, single, tmp_path = ddp_runs
    two, one = ranks[0][case], single[case]
    assert _diffs(two["adapters"], ranks[1][case]["adapters"])[1] == 0.0  # the ranks stay in lock-step
    initial = _initial_adapters(team_config(tmp_path / f"initial_{case}", **TEAM_DDP, **DDP_CASES[case]))
    mean_tol, max_tol = adapter_tolerance(one["arithmetic"])
    assert _diffs(one["adapters"], initial)[0] > 100 * mean_tol, "training did not move the adapters"
    mean, largest = _diffs(two["adapters"], one["adapters"])
    assert mean <= mean_tol and largest <= max_tol, (mean, mean_tol, largest, max_tol)
    for h2, h1 in zip(two["history"], one["history"], strict=True):
        figures = [k for k in h1 if k.startswith(("losses/", "grad/")) and h1[k] == h1[k]]
        assert figures and all(h2[k] == pytest.approx(h1[k], rel=1e-4, abs=1e-6) for k in figures)
