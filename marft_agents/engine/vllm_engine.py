"""``sampling.engine: vllm``: rollouts sampled by one colocated vLLM engine, every agent's adapter
served at once (multi-LoRA); the critic, the rescoring and the gradient passes stay in the
policy's transformers model.

1. One engine per process, built the first time the policy generates with it: ``vllm.LLM`` on
   the base model's folder (``vllm.model_path``, else the folder the trainer loads), LoRA on
   with one slot per policy adapter, sleep mode on, in the policy's dtype, with vLLM's neutral
   generation defaults (``generation_config="vllm"``: the checkpoint's ``generation_config``
   does not merge into the sampling settings) and the log-probs of the processed distribution
   (``logprobs_mode="processed_logprobs"``: ``log_softmax(logits / temperature)``, what the
   learner scores).
2. Requests: token-id prompts, each with the ``LoRARequest`` of its agent's adapter; sampling
   settings exactly temperature (+ top-p / top-k for evaluation), no penalties, no ``min_p``,
   stopping at the policy's stop tokens only (``ignore_eos`` with the stop ids passed
   explicitly), the sampled token's log-prob returned (``logprobs=0``); every request gets a seed
   drawn from the caller's generator (else torch's global RNG), so a seeded run samples the
   same tokens again.
3. Versions: ``sync(version)`` exports every policy adapter with peft (``save_pretrained(...,
   selected_adapters=[name])``) to ``<adapter_dir>/v<version>/<adapter>``, registers each under a
   fresh integer LoRA id, removes the previous version's ids from the engine, deletes its
   folder and resets the prefix cache (cached KV of the old weights must not be reused). A
   never-synced engine exports ``policy.weights_version`` before its first generation.
4. ``suspend()``: the learner's update runs while vLLM sleeps (``vllm.sleep_level`` 1: KV cache
   freed, base weights moved to CPU memory), woken up on exit; generating or syncing while
   asleep is an error.
5. Its log-probs come from vLLM's kernels, not the learner's pass (``scores_in_learner``): the
   learner rescores the old log-probs (``ppo.recompute_old_logprobs``, required), and the
   engine's ones are kept as behaviour log-probs (``Sample.behaviour_logprobs``) for the optional
   truncated importance weight ``ppo.behaviour_is_cap``.

vLLM is an optional extra (``pip install 'marft[vllm]'``), imported when the engine is built.
The tests run this module against ``tests/agents/vllm_standin.py``, a module with vLLM's names
backed by the transformers model.
"""

from __future__ import annotations

import gc
import importlib
import shutil
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from marft_agents.engine import GenRequest, Generation
from marft_agents.engine.layout import effective_prefix_len
from marft_agents.engine.rollout_engine import RolloutEngine
from marft_agents.settings.sampling import SamplingConfig

__all__ = ["VLLMEngine", "import_vllm"]

SEED_RANGE = 2**31 - 1
"""Request seeds are drawn from ``[0, SEED_RANGE)``."""


def import_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError:
        raise ImportError("sampling.engine: vllm needs vLLM: pip install 'marft[vllm]'") from None


def lora_rank_slot(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds ``rank`` (its slots are 8, 16, 32, ...)."""
    return max(8, 1 << (rank - 1).bit_length())


class VLLMEngine(RolloutEngine):
    """Rollouts by a colocated multi-LoRA vLLM engine; see the module docstring."""

    scores_in_learner = True
    devices = ("cuda",)
    mixes_adapters = True

    def __init__(self, policy: Any) -> None:
        super().__init__(policy)
        cfg = policy.engine_settings
        if cfg is None or getattr(cfg, "vllm", None) is None:
            raise RuntimeError("sampling.engine: vllm needs the run's config on the policy "
                               "(policy.engine_settings = cfg; trainer.build_policy sets it)")
        self.options = cfg.vllm
        vllm = import_vllm()
        self._lora_request = importlib.import_module("vllm.lora.request").LoRARequest
        self._sampling_params = vllm.SamplingParams
        self.adapter_root = Path(self.options.adapter_dir or Path(cfg.output_dir) / "vllm_adapters")
        peft_configs = policy.model.peft_config
        self.llm = vllm.LLM(
            model=self.options.model_path or _base_folder(cfg.model),
            enable_lora=True,
            max_loras=len(policy.policy_adapters),
            max_lora_rank=lora_rank_slot(max(int(peft_configs[a].r) for a in policy.policy_adapters)),
            enable_sleep_mode=self.options.sleep_level > 0,
            dtype=str(policy.lm.dtype).removeprefix("torch."),
            gpu_memory_utilization=self.options.gpu_memory_utilization,
            max_model_len=self.options.max_model_len,
            enforce_eager=self.options.enforce_eager,
            seed=self.options.seed,
            skip_tokenizer_init=True,  # token-id prompts in, token ids out: the policy's tokenizer decodes
            generation_config="vllm",
            logprobs_mode="processed_logprobs",
        )
        self.version: int | None = None
        """The adapters' version vLLM serves (None: not exported yet)."""
        self.loras: dict[str, Any] = {}
        """Policy adapter name -> the ``LoRARequest`` of its current version."""
        self.asleep = False
        self._last_id = 0

    # -- versions ------------------------------------------------------------------------------
    def sync(self, version: int) -> None:
        """Export the policy's adapters as a new version; see the module docstring, step 3. A
        version at or below the one served (a restore to an earlier checkpoint) takes the next
        number instead, so ids and folders are never reused."""
        if self.asleep:
            raise RuntimeError("VLLMEngine.sync inside suspend(): sync after the update, once vLLM is awake")
        if self.version is not None and version <= self.version:
            version = self.version + 1
        folder = self.adapter_root / f"v{version}"
        if folder.exists():  # left by an earlier process in the same adapter_dir
            shutil.rmtree(folder)
        requests = {}
        for adapter in self.policy.policy_adapters:
            with warnings.catch_warnings():  # peft 0.21 calls an API transformers 5 deprecated
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
                self.policy.model.save_pretrained(str(folder), selected_adapters=[adapter])
            self._last_id += 1
            requests[adapter] = self._lora_request(f"{adapter}@v{version}", self._last_id, str(folder / adapter))
        engine = self.llm.llm_engine
        for old in self.loras.values():  # before adding: max_loras slots hold one version
            engine.remove_lora(old.lora_int_id)
        for request in requests.values():
            engine.add_lora(request)
        self.llm.reset_prefix_cache()
        if self.version is not None:
            shutil.rmtree(self.adapter_root / f"v{self.version}", ignore_errors=True)
        self.loras, self.version = requests, version

    @contextmanager
    def suspend(self) -> Iterator[None]:
        """vLLM sleeps while the body runs (``vllm.sleep_level``; 0 = it does not)."""
        if self.options.sleep_level == 0:
            yield
            return
        self.llm.sleep(level=self.options.sleep_level)
        self.asleep = True
        try:
            yield
        finally:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Drop the engine (its memory goes with the last reference) and the exported adapters."""
        if self.version is not None:
            shutil.rmtree(self.adapter_root / f"v{self.version}", ignore_errors=True)
        self.llm = None
        self.loras, self.version = {}, None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- sampling ------------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig,
                 generator: torch.Generator | None = None) -> list[Generation]:
        if self.llm is None:
            raise RuntimeError("VLLMEngine.generate after close()")
        if self.asleep:
            raise RuntimeError("VLLMEngine.generate inside suspend(): vLLM is asleep during the update")
        if not requests:
            return []
        if self.version is None:
            self.sync(self.policy.weights_version)
        stop = self.policy.stop_token_ids if sampling.stop_token_ids is None else list(sampling.stop_token_ids)
        seeds = request_seeds(len(requests), generator)
        params = [self._params(sampling, stop, seed) for seed in seeds]
        prompts = [{"prompt_token_ids": list(req.prompt_ids)} for req in requests]
        loras = [self.loras[self.policy.adapter_for(req.agent_id)] for req in requests]
        outputs = self.llm.generate(prompts, params, lora_request=loras, use_tqdm=False)
        completions = [out.outputs[0] for out in outputs]
        responses = [[int(t) for t in c.token_ids] for c in completions]
        texts = self.policy.tokenizer.batch_decode(responses, skip_special_tokens=True)
        return [Generation(req.agent_id, list(req.prompt_ids), ids, text, sampled_logprobs(c, ids),
                           c.finish_reason == "stop", effective_prefix_len(req.prompt_ids, req.prefix_len))
                for req, c, ids, text in zip(requests, completions, responses, texts)]

    def _params(self, sampling: SamplingConfig, stop: Sequence[int], seed: int) -> Any:
        """vLLM's sampling settings for one request: ``sampling`` and nothing else."""
        return self._sampling_params(
            n=1, temperature=sampling.temperature if sampling.do_sample else 0.0, top_p=sampling.top_p,
            top_k=sampling.top_k,  # 0 = off, in vLLM too
            min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            max_tokens=sampling.max_new_tokens, stop_token_ids=list(stop), ignore_eos=True,
            logprobs=0, seed=seed, skip_special_tokens=True, detokenize=False,
        )


def request_seeds(n: int, generator: torch.Generator | None) -> list[int]:
    """One seed per request, drawn from ``generator`` (else torch's global RNG)."""
    if generator is None:
        return torch.randint(0, SEED_RANGE, (n,)).tolist()
    return torch.randint(0, SEED_RANGE, (n,), generator=generator, device=generator.device).tolist()


def sampled_logprobs(completion: Any, token_ids: Sequence[int]) -> list[float]:
    """The log-prob vLLM reported for each sampled token (``logprobs=0``: one entry per position,
    keyed by token id)."""
    positions = completion.logprobs or []
    if len(positions) != len(token_ids):
        raise RuntimeError(f"vLLM returned {len(positions)} log-probs for {len(token_ids)} tokens; "
                           "the request must ask for logprobs=0")
    return [float(entry[token].logprob) for entry, token in zip(positions, token_ids)]


def _base_folder(model_cfg: Any) -> str:
    """Where vLLM reads the base weights: the folder (or Hub id) the trainer loads."""
    from marft_agents.models import _source_folder

    return _source_folder(model_cfg)
