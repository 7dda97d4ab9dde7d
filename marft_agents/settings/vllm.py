"""The ``vllm:`` section: options of the vLLM sampling engine (``sampling.engine: vllm``).

Plain data; the engine is ``marft_agents/engine/vllm_engine.py``. Read only when the sampling
engine is ``vllm``; the other engines ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass

CPU_KV_CACHE_GIB = 1.0
"""The KV cache on vLLM's CPU backend when ``vllm.kv_cache_gib`` is unset: 1 GiB of RAM holds
~23,000 tokens of SmolLM2-135M in float32 (30 layers x 3 KV heads x 64 x 2 x 4 bytes a token)
and ~37,000 of Qwen2.5-1.5B in bfloat16, more than a CPU run samples at once."""


@dataclass
class VLLMConfig:
    """How the colocated vLLM engine is built and how it shares the device with training."""

    model_path: str | None = None
    """The folder (or Hub id) vLLM loads the base weights from; None = the folder the trainer
    loads ``model.name_or_path`` from (an alias's converted folder, a local folder or a Hub id).
    It must hold the same weights as the policy's base: vLLM samples with them and the learner
    scores with the policy's."""
    gpu_memory_utilization: float = 0.4
    """vLLM's memory share. On a GPU: the share of the GPU's memory vLLM reserves for its weights
    and KV cache. The learner's passes run in the same process on the same GPU (the base weights
    then exist twice), so this leaves room for them; while vLLM sleeps (``sleep_level``) the
    learner gets its share back. On vLLM's CPU backend it would be a share of the machine's RAM
    (0.4 of 24 GiB asks ~9 GiB); the KV cache is sized by ``kv_cache_gib`` there instead, so
    this share does not apply."""
    kv_cache_gib: float | None = None
    """Size of vLLM's KV cache in GiB (vLLM's ``kv_cache_memory_bytes``); when set,
    ``gpu_memory_utilization`` no longer sizes the cache. None = by platform: on a GPU, vLLM
    sizes the cache from ``gpu_memory_utilization``; on the CPU backend,
    ``CPU_KV_CACHE_GIB`` of RAM (the environment variable ``VLLM_CPU_KVCACHE_SPACE``, in whole
    GiB, overrides either inside vLLM)."""
    max_model_len: int | None = None
    """Longest prompt + response vLLM accepts (tokens); None = the model's context length. A
    prompt that leaves no room for a response is refused before vLLM is called, with a message
    naming this setting."""
    enforce_eager: bool = False
    """True: no CUDA graphs (faster start, slower decoding; graphs also take memory)."""
    sleep_level: int | None = None
    """What vLLM frees during a learner update (``LLM.sleep``): 1 = its KV cache, with its base
    weights moved to CPU memory and copied back on wake-up; 0 = never sleep (vLLM keeps its
    memory during updates). None = by platform: 1 where the installed vLLM has sleep mode (CUDA
    GPUs), 0 where it has not (its CPU backend); 1 where it has not is refused when the engine
    is built. vLLM's level 2 (weights discarded) is not offered: the base never changes, so
    reloading it from disk after every update would only cost time."""
    adapter_dir: str | None = None
    """Where each update's adapters are exported for vLLM (``<adapter_dir>/v<version>/<adapter>``,
    the previous version's folder deleted); None = ``<output_dir>/vllm_adapters``."""
    seed: int = 0
    """vLLM's own engine seed. Each request also gets a seed drawn from the run's RNG, so
    rollouts are reproducible either way."""

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"vllm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_gib is not None and not self.kv_cache_gib > 0:
            raise ValueError(f"vllm.kv_cache_gib must be > 0 (GiB) or null, got {self.kv_cache_gib}")
        if self.sleep_level not in (None, 0, 1):
            raise ValueError(f"vllm.sleep_level must be 0 (never sleep) or 1 (free the KV cache, weights to "
                             f"CPU memory during updates) or null (by platform), got {self.sleep_level}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"vllm.max_model_len must be >= 1 or null, got {self.max_model_len}")
