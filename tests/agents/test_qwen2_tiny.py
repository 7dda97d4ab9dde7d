"""A tiny random Qwen2 (q/k/v biases, tied embeddings: Qwen2.5-1.5B-Instruct's layout) trains
through every learner marft ships with every sampling engine that runs on this device.

Each run: ``Trainer.run`` on the Qwen2 for two updates (so the engine's life cycle, ``suspend``
and ``sync``, is the trainer's own); after each collection the sampled log-probs must equal the
training forward pass's; every update's losses are finite; at the end the adapters of the agents
the learner trained have moved, and nothing has when the learner's class says it trains nothing
(``trains = False``). Engines are read from their classes (``engine.base``): one whose
``devices`` excludes this device is skipped, as is one whose optional package is missing.

The learners are ``BUILTIN_LEARNERS`` (the registry's list of the shipped ones), not
``list_learners()``: that also holds what other test modules register at import
(``test_learner_plugins.py``'s ``test_counting`` trains nothing yet keeps ``trains`` true), so the
parameters would depend on which modules pytest collected first.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from agent_helpers import DEVICE, SOLO, small_config, tiny_on_device
from marft_agents.learners.interface import run_values
from marft_agents.engine.registry import engine_class
from marft_agents.learners import get_learner
from marft_agents.learners.registry import BUILTIN_LEARNERS, learner_trains
from marft_agents.settings.sampling import SAMPLING_ENGINES, SamplingConfig
from marft_agents.model.tiny_models import TINY_ARCHITECTURES

ARCH = "qwen2"
UPDATES = 2
SIZES = {"hidden_size": 32, "num_layers": 1}
POLICY_LOSSES = ("losses/policy_loss", "losses/entropy", "losses/approx_kl")
"""Metrics of every policy update that must be finite."""
VALUE_LOSSES = ("losses/value_loss",)
"""Metrics of every critic update (learners with a ``value_mode``) that must be finite."""

LOGPROB_ATOL = 1e-5
"""Sampled vs training-pass log-prob, per token, in float32, for an engine that computes them with
the learner's own model (``scores_in_learner`` false). Both are ``engine.sampling.scaled_logprobs``
of logits computed along two paths: one cached decode step per token against one full-sequence
pass (other matrix-kernel blocking, another summation order), so they differ by float32 rounding
only: a few hundred roundings (unit roundoff 2**-24 = 6e-8) of this model's order-1
activations. 1e-5 is the float32 bound ``SamplingConfig.recompute_logprobs`` documents and the
engine tests use (tests/agents/test_policy.py). The faults the check is for (a dropped q/k/v
bias, a wrong position or prefix, a stale or wrong adapter, another temperature) move log-probs
by orders of magnitude more."""


def _engine_skip_reason(engine: str) -> str | None:
    """Why ``engine`` cannot sample on ``DEVICE`` (its class's ``devices``), else None."""
    cls = engine_class(engine)
    if DEVICE.type not in cls.devices:
        return f"the {engine} engine runs on {', '.join(cls.devices)}, the tests on {DEVICE.type}"
    return None


def _runs() -> list:
    params = []
    for name in BUILTIN_LEARNERS:
        for engine in SAMPLING_ENGINES:
            reason = _engine_skip_reason(engine)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(name, engine, id=f"{name}-{engine}", marks=marks))
    return params


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory):
    """The tiny Qwen2 saved as a Hugging Face folder: the config names it as ``model.name_or_path``
    (an engine of its own, vLLM, loads the base weights from there; the loops use the model given)."""
    folder = tmp_path_factory.mktemp("tiny-qwen2")
    model, tokenizer = tiny_on_device(seed=0, arch=ARCH, **SIZES)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _config(tmp_path, folder, algorithm: str, engine: str):
    cls = get_learner(algorithm)
    overrides = {"model.name_or_path": str(folder), "sampling.engine": engine, "sampling.temperature": 0.7,
                 "sampling.max_new_tokens": 4, "schedule.num_updates": UPDATES, "schedule.checkpoint_interval": 0}
    if engine_class(engine).scores_in_learner:  # the engine's log-probs are not the learner's: rescore
        overrides["ppo.recompute_old_logprobs"] = True
    if getattr(cls, "max_agents", None) == 1:  # single-agent learners: a one-role profile
        overrides["env.kwargs"] = {"profile": SOLO}
    options = cls.options_class
    if options is not None and "group_size" in {f.name for f in dataclasses.fields(options)}:
        overrides["learner"] = {"group_size": 2}  # the smallest group that compares (2 episodes/update)
    return small_config(tmp_path, algorithm=algorithm, **overrides)


def _check_sampled_logprobs(policy, rollout, temperature: float, exact: bool) -> int:
    """Score every decision of ``rollout`` with the training pass and compare with the sampled
    log-probs (``exact``: within ``LOGPROB_ATOL``; else, for an engine with kernels of its own,
    one finite log-prob <= 0 per token on both sides). Returns the tokens compared."""
    by_adapter: dict[str, list] = {}
    for d in rollout.decisions:
        if d.response_ids:
            by_adapter.setdefault(d.adapter, []).append(d)
    compared = 0
    with torch.no_grad():
        for adapter, decisions in by_adapter.items():
            stats = policy.token_logprobs(adapter, [d.prompt_ids for d in decisions],
                                          [d.response_ids for d in decisions], temperature,
                                          with_entropy=False, prefix_lens=[d.prefix_len for d in decisions])
            for row, d in enumerate(decisions):
                n = len(d.response_ids)
                trained, sampled = stats.logprobs[row, :n].cpu(), torch.tensor(d.logprobs)
                if exact:
                    torch.testing.assert_close(trained, sampled, atol=LOGPROB_ATOL, rtol=0)
                else:
                    assert sampled.shape == trained.shape and bool((sampled <= 0).all() and (trained <= 0).all())
                compared += n
    return compared


def _snapshot(policy) -> dict[str, list[torch.Tensor]]:
    return {name: [p.detach().clone() for p in policy.adapter_parameters(name)] for name in policy.adapter_names}


def _moved(before: dict[str, list[torch.Tensor]], policy) -> set[str]:
    return {name for name, old in before.items()
            if any(not torch.equal(a, b) for a, b in zip(old, policy.adapter_parameters(name)))}


def test_the_tiny_qwen2_has_qwen2s_layout():
    assert ARCH in TINY_ARCHITECTURES
    model, _ = tiny_on_device(seed=0, arch=ARCH, **SIZES)
    attn = model.model.layers[0].self_attn
    assert model.config.model_type == ARCH and model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):  # drawn, not transformers' zeros
        assert proj.bias is not None and float(proj.bias.detach().abs().max()) > 0
    assert attn.o_proj.bias is None


@pytest.mark.parametrize("algorithm, engine", _runs())
def test_tiny_qwen2_trains_through_every_learner_and_engine(tmp_path, qwen2_folder, algorithm, engine):
    from marft_agents.run.trainer import Trainer

    cfg = _config(tmp_path, qwen2_folder, algorithm, engine)
    trainer = Trainer(cfg, tiny_on_device(seed=0, arch=ARCH, **SIZES))
    policy, learner = trainer.policy, trainer.learner
    if run_values(learner) is None:
        assert not policy.critic_adapters
    exact = not engine_class(engine).scores_in_learner
    collect = trainer.collector.collect
    compared: list[int] = []

    def collect_and_check(*args, **kwargs):
        rollout = collect(*args, **kwargs)
        compared.append(_check_sampled_logprobs(policy, rollout, cfg.sampling.temperature, exact))
        return rollout

    trainer.collector.collect = collect_and_check
    before = _snapshot(policy)
    trained: set[str] = set()
    try:
        try:
            history = list(trainer.run())
        except ImportError as err:  # an engine's optional package (vLLM) is not installed
            pytest.skip(f"the {engine} engine: {err}")
    finally:
        trainer.close()
    assert len(history) == UPDATES and len(compared) == UPDATES and all(n > 0 for n in compared)
    for metrics in history:
        trained |= {a for a in trainer.agent_ids if metrics.get(f"agent/{a}/trained") == 1.0}
    moved = _moved(before, policy)
    if not learner_trains(algorithm):
        assert moved == set() and trained == set()
        return
    # the optimised terms; diagnostics may be NaN by definition (explained variance without a critic)
    keys = POLICY_LOSSES + (VALUE_LOSSES if run_values(learner) is not None else ())
    for metrics in history:
        losses = {k: metrics[k] for k in keys}
        assert all(math.isfinite(v) for v in losses.values()), losses
    assert trained, "no agent trained"
    assert {policy.adapter_for(a) for a in trained} <= moved
    assert set(policy.critic_adapters) <= moved


def test_lora_targets_resolve_for_qwen2():
    """peft's default for ``qwen2`` (the q and v projections, the ones with biases) applies, so
    ``adapters.default_target_modules`` stays out of it; the biases stay in the frozen base."""
    from marft_agents.model.adapters import default_target_modules
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny_on_device(seed=0, arch=ARCH, **SIZES)
    assert default_target_modules(model) is None
    policy = MultiAgentPolicy(model, tokenizer, ["actor_0"])
    adapted = {name.rsplit(".", 1)[-1] for name, module in policy.lm.named_modules() if hasattr(module, "lora_A")}
    assert adapted == {"q_proj", "v_proj"}
    assert policy.adapter_parameters("policy_actor_0")
    biases = [p for n, p in policy.lm.named_parameters() if n.endswith("bias")]
    assert biases and not any(p.requires_grad for p in biases)


def test_direct_engine_samples_the_qwen2_as_fast_does(monkeypatch):
    """``direct`` computes Qwen2's layers itself (Llama's layer with q/k/v biases): it must give
    the ``fast`` loop's tokens and log-probs, so it must keep the biases (the tiny Qwen2's are
    random, not zero), and it must really run rather than fall back to ``fast``."""
    from marft_agents.engine import GenRequest
    from marft_agents.engine.direct import DirectDecoder
    from marft_agents.model.policy import MultiAgentPolicy

    built = []
    original = DirectDecoder.build.__func__
    monkeypatch.setattr(DirectDecoder, "build",
                        classmethod(lambda cls, lm, cache: built.append(original(cls, lm, cache)) or built[-1]))

    model, tokenizer = tiny_on_device(seed=0, arch=ARCH, **SIZES)
    policy = MultiAgentPolicy(model, tokenizer, ["actor_0"])
    rng = torch.Generator(device=DEVICE).manual_seed(1)
    with torch.no_grad():  # off the zero LoRA-B init: the adapter's delta must be computed too
        for p in policy.adapter_parameters("policy_actor_0"):
            p.add_(0.05 * torch.randn(p.shape, generator=rng, device=p.device, dtype=p.dtype))
    prompts = [policy.chat_prompt_ids("Answer.", f"Say {i}.") for i in range(3)]
    requests = [GenRequest("actor_0", p) for p in prompts]
    out = {}
    for engine in ("direct", "fast"):
        cfg = SamplingConfig(max_new_tokens=6, temperature=0.7, stop_token_ids=(), engine=engine)
        out[engine] = policy.generate(requests, cfg, generator=torch.Generator(device=DEVICE).manual_seed(0))
    assert built and all(decoder is not None for decoder in built)  # the direct path ran
    assert [g.response_ids for g in out["direct"]] == [g.response_ids for g in out["fast"]]
    for a, b in zip(out["direct"], out["fast"]):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=LOGPROB_ATOL, rtol=0)
