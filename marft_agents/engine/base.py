"""The sampling-engine interface: what samples the policy's responses, and how it follows the
policy's weights through training.

``MultiAgentPolicy.generate`` hands its requests to one :class:`SamplingEngine` (the one
``sampling.engine`` names, built the first time it is asked for: ``MultiAgentPolicy.engine_for``).
The trainer drives the engine's life cycle around each update:

1. ``generate(requests, sampling, generator)``: one :class:`~marft_agents.engine.Generation` per
   request, in request order, each sampled with its agent's adapter;
2. ``with suspend():`` the learner's update runs inside: an engine that holds memory of its own
   (vLLM's weights and KV cache) frees it for the update's passes; the loops hold none;
3. ``sync(version)``: after every update and after a checkpoint restore; the next ``generate``
   must sample with the policy's adapters as they are now. ``version`` increases with every
   update (the trainer passes the number of updates done);
4. ``close()``: at the end of a run (on error too), releasing what the engine holds. Every
   entry point owns its trainer through one context (``with prepare_trainer(cfg) as trainer:``,
   ``Trainer.__exit__`` closes the engine) or, for an evaluation only, its policy (``with
   build_policy(...) as policy:``).

An engine reads the policy and, for what the per-call sampling config does not say, the policy's
:class:`EngineSettings` (``policy.engine_settings``): the few run settings an engine needs, not
the whole run config.

Capabilities are class attributes, read by the config checks, the trainer and the collector
(``policy.engine_for(name).mixes_adapters``: it asks the policy's engine, never its name):

* ``scores_in_learner``: True when the engine's log-probs come from another implementation
  than the learner's forward pass (vLLM's kernels), so the learner must score the old log-probs
  itself (``ppo.recompute_old_logprobs``, required by ``TrainConfig.validate``); the engine's own
  log-probs are then the *behaviour* log-probs, kept on each sample
  (``Sample.behaviour_logprobs``) for the optional importance-weight correction
  (``ppo.behaviour_is_cap``);
* ``devices``: the device types (``torch.device.type``) the engine runs on;
* ``mixes_adapters``: whether one call batches requests of several adapters together (the
  collector then makes one call per tick instead of one per adapter).

Engines: :class:`LoopEngine` runs this package's own decoding loops (``legacy``, ``fast``,
``direct``: ``engine.sample``) in-process on the policy's model, which *is* the trained
model, so there is nothing to sync or free; ``vllm`` is
:class:`marft_agents.engine.vllm_engine.VLLMEngine`. ``engine/registry.py`` maps every name of
``settings.sampling.SAMPLING_ENGINES`` to its class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from marft_agents.engine import GenRequest, Generation, sample
from marft_agents.engine.attention import training_passes
from marft_agents.engine.layout import effective_prefix_len
from marft_agents.run_plan import RunConfig
from marft_agents.settings.sampling import SamplingConfig
from marft_agents.settings.vllm import VLLMConfig

__all__ = ["EngineSettings", "LoopEngine", "SamplingEngine"]


@dataclass(frozen=True)
class EngineSettings:
    """What a sampling engine may read beyond each call's sampling config (``policy.engine_settings``,
    set by ``trainer.build_policy`` from the run's config with :meth:`of`): the run's sampling
    config, the ``vllm:`` options, the folder the base weights were read from and the run folder. A
    policy built without them gets the defaults (the loops need none of it)."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """The run's sampling config: :attr:`MultiAgentPolicy.engine` builds the engine it names."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """The ``vllm:`` section (read by the vLLM engine only)."""
    model_folder: str | None = None
    """The folder (or Hub id) the policy's base weights were read from (``model.name_or_path``
    after ``load_model_and_tokenizer``): the vLLM engine loads the same weights from it. None: the
    model was built in memory (the vLLM engine then needs ``vllm.model_path``)."""
    output_dir: str = "."
    """The run folder (the vLLM engine exports adapter versions under it by default)."""

    @classmethod
    def of(cls, cfg: RunConfig, model_folder: str | None = None) -> EngineSettings:
        """The engine settings of a run config (a ``TrainConfig``): three of its sections, no more,
        and where its model's weights were read from."""
        return cls(sampling=cfg.sampling, vllm=cfg.vllm, model_folder=model_folder, output_dir=str(cfg.output_dir))


class SamplingEngine(ABC):
    """Samples a ``MultiAgentPolicy``'s responses; see the module docstring for the life cycle."""

    scores_in_learner: ClassVar[bool] = False
    """True: the returned log-probs are not the learner's forward pass (another implementation),
    so training must rescore the old log-probs (``ppo.recompute_old_logprobs``)."""
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    """Device types (``torch.device.type``) of the policy this engine can serve."""
    mixes_adapters: ClassVar[bool] = False
    """True: one batch may serve several adapters at once (vLLM's multi-LoRA batches), so the
    collector sends each tick's requests in one call; False: one call per adapter (the loops,
    whose RNG draws follow that order)."""

    def __init__(self, policy: Any) -> None:
        if policy.device.type not in self.devices:
            raise RuntimeError(f"{type(self).__name__} runs on {' or '.join(self.devices)}, but the policy is on "
                               f"{policy.device}; set model.device accordingly or choose another sampling.engine")
        self.policy = policy

    @abstractmethod
    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig,
                 generator: torch.Generator | None = None) -> list[Generation]:
        """One response per request, in request order (``MultiAgentPolicy.generate``'s contract)."""

    def sync(self, version: int) -> None:
        """The policy's adapters changed (an update, a restore): later calls must sample with them.
        ``version`` is larger than every earlier one."""

    @contextmanager
    def suspend(self) -> Iterator[None]:
        """The body (a learner update) runs while the engine holds as little memory as it can."""
        yield

    def close(self) -> None:
        """Release what the engine holds; the policy builds a new engine if asked to generate again."""


class LoopEngine(SamplingEngine):
    """The in-process decoding loops (``sampling.engine``: legacy, fast or direct, chosen per
    call by ``engine.sample``) on the policy's own model.

    Requests are grouped by (adapter, shared prefix), each group decoded as batches of at most
    ``sampling.max_batch_size`` rows (longest prompts first when a group is split), groups in
    order of their first request: the order in which the RNG is drawn from.
    """

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig,
                 generator: torch.Generator | None = None) -> list[Generation]:
        policy = self.policy
        # one group per (adapter, shared prefix): each is decoded as one batch
        groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
        for i, req in enumerate(requests):
            shared = effective_prefix_len(req.prompt_ids, req.prefix_len)
            key = (policy.adapter_for(req.agent_id), tuple(req.prompt_ids[:shared]))
            groups.setdefault(key, []).append(i)
        results: list[Generation | None] = [None] * len(requests)
        was_training = policy.training
        policy.eval()
        try:
            with torch.inference_mode():
                for (adapter, prefix), idxs in groups.items():
                    with policy.using(adapter):
                        self._generate_group(requests, idxs, len(prefix), sampling, generator, results)
        finally:
            policy.train(was_training)
        return results  # type: ignore[return-value]

    def _generate_group(self, requests: Sequence[GenRequest], idxs: list[int], prefix_len: int,
                        sampling: SamplingConfig, generator: torch.Generator | None,
                        results: list[Generation | None]) -> None:
        policy = self.policy
        if len(idxs) > sampling.max_batch_size:  # similar lengths together: less padding
            idxs = sorted(idxs, key=lambda i: -len(requests[i].prompt_ids))
        stop = policy.stop_token_ids if sampling.stop_token_ids is None else sampling.stop_token_ids
        for start in range(0, len(idxs), sampling.max_batch_size):
            chunk = idxs[start:start + sampling.max_batch_size]
            prompts = [requests[i].prompt_ids for i in chunk]
            sampled = sample(policy.lm, prompts, sampling, stop, policy.tokenizer.pad_token_id,
                             generator, prefix_len=prefix_len)
            if sampling.recompute_logprobs:  # score with the training forward pass itself
                with training_passes():
                    stats = policy.scoring.batch_stats(prompts, [s.response_ids for s in sampled], prefix_len,
                                                       sampling.temperature, with_entropy=False)
                for row, s in enumerate(sampled):
                    s.logprobs = stats.logprobs[row, :len(s.response_ids)].tolist()
            texts = policy.tokenizer.batch_decode([s.response_ids for s in sampled], skip_special_tokens=True)
            for i, s, text in zip(chunk, sampled, texts):
                req = requests[i]
                results[i] = Generation(req.agent_id, list(req.prompt_ids), s.response_ids,
                                        text, s.logprobs, s.finished, prefix_len)
