"""The sampling-engine interface: the loops behind it sample exactly what they sampled before it
existed, the registry covers every engine name, and the policy keeps one engine per class."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from agent_helpers import seeded_generator, small_config, tiny_on_device

from marft_agents.config import ConfigError
from marft_agents.engine import Generation, sample
from marft_agents.engine.attention import training_passes
from marft_agents.engine.layout import effective_prefix_len
from marft_agents.engine.registry import engine_class, engine_classes
from marft_agents.engine.base import LoopEngine, SamplingEngine
from marft_agents.model.policy import GenRequest, MultiAgentPolicy
from marft_agents.settings.sampling import ENGINES, SAMPLING_ENGINES, SamplingConfig
from test_policy import perturb

AGENTS = ["reasoner_0", "actor_0"]


def _policy() -> MultiAgentPolicy:
    model, tok = tiny_on_device(seed=0)
    policy = MultiAgentPolicy(model, tok, AGENTS)
    perturb(policy, 1)
    return policy


def _requests(policy):
    """Both agents, interleaved, two system prompts (two shared prefixes per agent), prompts of
    several lengths, one without a shared prefix."""
    out = []
    for i in range(12):
        system = "Think." if i % 3 else "Answer now."
        prompt = policy.chat_prompt_ids(system, f"Say {i}" + "!" * (i % 4))
        prefix = policy.shared_prefix_len(system, prompt) if i % 5 else 0
        out.append(GenRequest(AGENTS[i % 2], prompt, prefix))
    return out


def _reference_generate(policy, requests, sampling, generator):
    """``MultiAgentPolicy.generate`` as it was before the engine interface (a copy of its code)."""
    groups = {}
    for i, req in enumerate(requests):
        shared = effective_prefix_len(req.prompt_ids, req.prefix_len)
        groups.setdefault((policy.adapter_for(req.agent_id), tuple(req.prompt_ids[:shared])), []).append(i)
    results = [None] * len(requests)
    with torch.inference_mode():
        for (adapter, prefix), idxs in groups.items():
            with policy.using(adapter):
                if len(idxs) > sampling.max_batch_size:
                    idxs = sorted(idxs, key=lambda i: -len(requests[i].prompt_ids))
                stop = policy.stop_token_ids if sampling.stop_token_ids is None else sampling.stop_token_ids
                for start in range(0, len(idxs), sampling.max_batch_size):
                    chunk = idxs[start:start + sampling.max_batch_size]
                    prompts = [requests[i].prompt_ids for i in chunk]
                    sampled = sample(policy.lm, prompts, sampling, stop, policy.tokenizer.pad_token_id, generator,
                                     prefix_len=len(prefix))
                    if sampling.recompute_logprobs:
                        with training_passes():
                            stats = policy.scoring.batch_stats(prompts, [s.response_ids for s in sampled], len(prefix),
                                                               sampling.temperature, with_entropy=False)
                        for row, s in enumerate(sampled):
                            s.logprobs = stats.logprobs[row, :len(s.response_ids)].tolist()
                    texts = policy.tokenizer.batch_decode([s.response_ids for s in sampled], skip_special_tokens=True)
                    for i, s, text in zip(chunk, sampled, texts):
                        results[i] = Generation(requests[i].agent_id, list(requests[i].prompt_ids), s.response_ids,
                                                text, s.logprobs, s.finished, len(prefix))
    return results


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("recompute", [False, True])
def test_loop_engines_sample_exactly_what_generate_sampled_before(engine, recompute):
    policy = _policy()
    requests = _requests(policy)
    # max_batch_size 2: groups split (longest first), the RNG drawn batch by batch
    cfg = SamplingConfig(max_new_tokens=6, temperature=0.8, max_batch_size=2, engine=engine,
                         recompute_logprobs=recompute)
    ours = policy.generate(requests, cfg, seeded_generator(3))
    reference = _reference_generate(policy, requests, cfg, seeded_generator(3))
    assert [dataclasses.asdict(g) for g in ours] == [dataclasses.asdict(g) for g in reference]
    assert len({tuple(g.response_ids) for g in ours}) > 1  # sampled, not all one answer
    # the global RNG path (no generator) too: same numbers under the same seed
    torch.manual_seed(11)
    ours = policy.generate(requests, cfg)
    torch.manual_seed(11)
    assert [g.response_ids for g in ours] == [g.response_ids for g in _reference_generate(policy, requests, cfg, None)]


def test_every_engine_name_has_a_class_with_capabilities():
    classes = engine_classes()
    assert set(classes) == set(SAMPLING_ENGINES) and set(ENGINES) < set(SAMPLING_ENGINES)
    assert all(classes[name] is LoopEngine for name in ENGINES)
    for cls in classes.values():
        assert issubclass(cls, SamplingEngine) and cls.devices and isinstance(cls.scores_in_learner, bool)
    assert not LoopEngine.scores_in_learner and "cpu" in LoopEngine.devices
    assert engine_class("vllm").scores_in_learner and engine_class("vllm").mixes_adapters
    assert not LoopEngine.mixes_adapters  # the loops' RNG draws follow one call per adapter
    with pytest.raises(ValueError, match="unknown sampling engine"):
        engine_class("hf")


def test_the_policy_keeps_one_loop_engine_for_every_loop_and_rebuilds_after_close():
    policy = _policy()
    engine = policy.engine
    assert isinstance(engine, LoopEngine)
    requests = _requests(policy)[:2]
    for name in ENGINES:
        policy.generate(requests, SamplingConfig(max_new_tokens=2, engine=name))
        assert policy.engine is engine  # the loops share one engine: nothing to rebuild
    with engine.suspend():  # loops hold no memory of their own: suspending and syncing change nothing
        pass
    policy.sync_engine(1)
    assert policy.weights_version == 1 and policy.engine is engine
    policy.close_engine()
    assert policy._engine is None and policy.engine is not engine


def test_an_engine_refuses_a_device_it_does_not_run_on():
    class GpuOnly(LoopEngine):
        devices = ("cuda",)

    with pytest.raises(RuntimeError, match="runs on cuda"):
        GpuOnly(_policy())


def test_training_with_an_engine_that_scores_elsewhere_needs_rescored_old_logprobs(tmp_path):
    with pytest.raises(ConfigError, match="recompute_old_logprobs: true"):
        small_config(tmp_path, **{"sampling.engine": "vllm"})
    with pytest.raises(ConfigError, match="sampling.recompute_logprobs"):
        small_config(tmp_path, **{"sampling.engine": "vllm", "ppo.recompute_old_logprobs": True,
                                  "sampling.recompute_logprobs": True})
    with pytest.raises(ConfigError, match="behaviour_is_cap .*recompute_old_logprobs"):
        small_config(tmp_path, **{"ppo.behaviour_is_cap": 2.0})
    with pytest.raises(ConfigError, match="behaviour_is_cap must be > 0"):
        small_config(tmp_path, **{"ppo.behaviour_is_cap": 0.0, "ppo.recompute_old_logprobs": True})
    with pytest.raises(ConfigError, match="sleep_level"):
        small_config(tmp_path, **{"vllm.sleep_level": 2})
    cfg = small_config(tmp_path, **{"sampling.engine": "vllm", "ppo.recompute_old_logprobs": True,
                                    "ppo.behaviour_is_cap": 2.0, "vllm.gpu_memory_utilization": 0.3})
    assert cfg.vllm.gpu_memory_utilization == 0.3 and cfg.ppo.behaviour_is_cap == 2.0
    # evaluation-only runs (no training) may sample with vLLM without rescoring
    assert small_config(tmp_path, algorithm="eval_only", **{"sampling.engine": "vllm"}).sampling.engine == "vllm"
