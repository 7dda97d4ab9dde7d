"""A stand-in for the parts of vLLM that ``marft_agents/engine/vllm_engine.py`` uses, backed by
the transformers model: ``install(monkeypatch)`` puts it in ``sys.modules`` as ``vllm`` (and
``vllm.lora.request``, ``vllm.platforms``).

Kept only for what the real vLLM cannot show on a CPU: sleep mode (vLLM's CPU build has none),
so the order of sleep, cache release, wake-up and sync around an update is tested here. Every
other engine test runs against the real vLLM (``tests/agents/test_vllm_engine.py``, ``make
test-vllm``): this module encodes the engine's own assumptions (its log-probs are the learner's
model's, any ``LLM(...)`` keyword is accepted), so it cannot show where vLLM differs.

What it does like vLLM: ``LLM(model=<folder>, ...)`` loads the base model from the folder;
``llm_engine.add_lora`` loads a LoRA request's adapter from its path with peft (a request not
added is loaded on first use, as vLLM does); ``llm_engine.remove_lora`` unloads it, and a request
naming a removed id is refused (a stale adapter); each request is sampled with its own adapter,
temperature and seed (``log_softmax(logits / temperature)`` log-probs of the sampled tokens, as
``logprobs_mode="processed_logprobs"``); ``sleep`` / ``wake_up`` are recorded and generating while
asleep is an error; its platform (``vllm.platforms.current_platform``) has sleep mode, on the
device type ``install`` is given. Every call is appended to ``LLM.events`` (and the class-level
``LLM.instances`` lists every engine built), so tests can check the order of things.
"""

from __future__ import annotations

import copy
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from marft_agents.engine import sample
from marft_agents.settings.sampling import SamplingConfig

TokensPrompt = dict
"""vLLM's token-id prompt: ``{"prompt_token_ids": [...]}``."""


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class SamplingParams:
    """vLLM's fields that the engine sets, with vLLM's defaults; any other keyword is a TypeError."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int | None = 16
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None
    seed: int | None = None
    skip_special_tokens: bool = True
    detokenize: bool = True


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


class _Engine:
    """``LLM.llm_engine``: the LoRA registry and the model's settings."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.model_config = types.SimpleNamespace(
            max_model_len=llm.kwargs.get("max_model_len") or llm.base.config.max_position_embeddings)

    def add_lora(self, request: LoRARequest) -> bool:
        self.llm._load(request)
        self.llm.events.append(("add_lora", request.lora_int_id))
        return True

    def remove_lora(self, lora_id: int) -> bool:
        self.llm.events.append(("remove_lora", lora_id))
        self.llm.removed.add(lora_id)
        return self.llm.loaded.pop(lora_id, None) is not None

    def list_loras(self) -> set[int]:
        return set(self.llm.loaded)


class LLM:
    instances: list[LLM] = []
    """Every engine built since the stand-in was installed."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model_path, self.kwargs = model, kwargs
        dtype = kwargs.get("dtype", "float32")
        self.base = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype)).eval()
        self.environment = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
        """What the engine-core process would inherit, as seen while the engine is built."""
        self.loaded: dict[int, torch.nn.Module] = {}
        """LoRA id -> the base with that adapter merged in."""
        self.removed: set[int] = set()
        self.events: list[tuple] = []
        self.asleep = False
        self.llm_engine = _Engine(self)
        LLM.instances.append(self)

    def _load(self, request: LoRARequest) -> torch.nn.Module:
        if request.lora_int_id in self.removed:
            raise RuntimeError(f"LoRA id {request.lora_int_id} ({request.lora_name}) was removed: a stale adapter")
        if request.lora_int_id not in self.loaded:
            if len(self.loaded) >= self.kwargs.get("max_loras", 1):
                raise RuntimeError(f"more than max_loras={self.kwargs.get('max_loras')} adapters loaded")
            peft_model = PeftModel.from_pretrained(copy.deepcopy(self.base), request.lora_path)
            self.loaded[request.lora_int_id] = peft_model.merge_and_unload().eval()
        return self.loaded[request.lora_int_id]

    def generate(self, prompts: list[dict], sampling_params: Any = None, *, use_tqdm: bool = True,
                 lora_request: Any = None) -> list[RequestOutput]:
        if self.asleep:
            raise RuntimeError("generate while asleep")
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        loras = lora_request if isinstance(lora_request, list) else [lora_request] * len(prompts)
        self.events.append(("generate", [lora.lora_int_id for lora in loras]))
        outputs = []
        for k, (prompt, p, lora) in enumerate(zip(prompts, params, loras)):
            assert p.logprobs == 0 and p.n == 1, "the engine asks for the sampled token's log-prob only"
            model = self._load(lora) if lora is not None else self.base
            greedy = p.temperature == 0
            cfg = SamplingConfig(max_new_tokens=p.max_tokens, temperature=1.0 if greedy else p.temperature,
                                 do_sample=not greedy, top_p=p.top_p, top_k=max(p.top_k, 0), engine="legacy",
                                 stop_token_ids=tuple(p.stop_token_ids or ()), share_prefix=False)
            generator = torch.Generator().manual_seed(int(p.seed)) if p.seed is not None else None
            with torch.inference_mode():
                (s,) = sample(model, [prompt["prompt_token_ids"]], cfg, cfg.stop_token_ids, 0, generator)
            completion = CompletionOutput(
                0, "", list(s.response_ids), float(sum(s.logprobs)),
                [{tok: Logprob(lp, 1)} for tok, lp in zip(s.response_ids, s.logprobs)],
                "stop" if s.finished else "length")
            outputs.append(RequestOutput(str(k), list(prompt["prompt_token_ids"]), [completion]))
        return outputs

    def shutdown(self) -> None:
        self.events.append(("shutdown",))

    def sleep(self, level: int = 1) -> None:
        self.events.append(("sleep", level))
        self.asleep = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.events.append(("wake_up",))
        self.asleep = False

    def reset_prefix_cache(self) -> bool:
        self.events.append(("reset_prefix_cache",))
        return True


@dataclass
class Platform:
    """``vllm.platforms.current_platform``: the device type, with sleep mode."""

    device_type: str

    def is_sleep_mode_available(self) -> bool:
        return True


def install(monkeypatch: Any, device_type: str = "cpu") -> types.ModuleType:
    """Make ``import vllm`` (and ``vllm.lora.request``, ``vllm.platforms``) give this stand-in,
    its platform on ``device_type``; returns it."""
    module = sys.modules[__name__]
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    lora.request = request
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = Platform(device_type)
    monkeypatch.setattr(module, "lora", lora, raising=False)
    monkeypatch.setattr(module, "platforms", platforms, raising=False)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(LLM, "instances", [])
    return module
