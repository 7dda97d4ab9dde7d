"""LoRA with peft: the ``peft.LoraConfig`` of a ``LoraSpec``, and several named adapters on one model.

peft stores every adapter's weights inside the same injected layers
(``...q_proj.lora_A.<adapter>.weight``); the helpers here group those parameters by adapter
name so the policy can freeze, save and load each adapter on its own.

:func:`default_target_modules` picks the layers to adapt when ``lora.target_modules`` is unset
and peft knows no default for the model type (Phi-3, any architecture missing from peft's
table): the model's own attention projections.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import torch
from peft import LoraConfig
from torch import nn

from marft_agents.config_schema import ConfigError
from marft_agents.settings.lora import LoraSpec

log = logging.getLogger(__name__)

# Sub-module names under which peft keeps one entry per adapter; the adapter name is the path
# component right after one of these.
_PER_ADAPTER_CONTAINERS = frozenset({
    "lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector",
})
_VALID_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


def to_peft_config(spec: LoraSpec, default_targets: Sequence[str] | None = None) -> LoraConfig:
    """The ``peft.LoraConfig`` of ``spec`` for a causal LM; ``default_targets`` (from
    :func:`default_target_modules`) stands in for an unset ``target_modules``."""
    targets: Any = spec.target_modules
    if targets is None and default_targets is not None:
        targets = tuple(default_targets)
    if isinstance(targets, tuple):
        targets = list(targets)
    return LoraConfig(task_type="CAUSAL_LM", r=spec.r, lora_alpha=spec.alpha,
                      lora_dropout=spec.dropout, target_modules=targets, bias="none")


# Leaf names of attention projections (matched case-insensitively): one fused QKV projection
# (Phi-3, GPT-2 / StarCoder, GPT-NeoX / Falcon / Bloom, MPT / DBRX, Baichuan), else separate
# query and value projections (Llama-like, BERT-like, DistilBERT, T5, Llama's original wq/wv).
_FUSED_QKV = frozenset({"qkv_proj", "c_attn", "query_key_value", "wqkv", "w_pack", "qkv",
                        "qkv_linear"})
_QUERY = frozenset({"q_proj", "query", "q", "wq", "q_lin", "query_proj", "q_linear"})
_VALUE = frozenset({"v_proj", "value", "v", "wv", "v_lin", "value_proj", "v_linear"})
_ATTENTION_PART = re.compile(r"attn|attention", re.IGNORECASE)


def _peft_default_targets(model_type: str | None) -> Any:
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    return TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type) if model_type else None


def _linear_leaves(model: nn.Module) -> dict[str, nn.Module]:
    """``{name: module}`` of the linear leaf layers LoRA can adapt (``nn.Linear`` and
    transformers' ``Conv1D``), the output head excluded."""
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return {name: module for name, module in model.named_modules()
            if isinstance(module, (nn.Linear, Conv1D)) and module is not head
            and next(module.children(), None) is None}


def _in_attention(name: str, modules: dict[str, nn.Module]) -> bool:
    """Whether the layer ``name`` sits in an attention block: an enclosing module is named like
    one (``self_attn``, ``attention``, ``attn``) or its class is (``LlamaAttention``)."""
    parts = name.split(".")[:-1]
    for i in range(len(parts), 0, -1):
        if _ATTENTION_PART.search(parts[i - 1]):
            return True
        parent = modules.get(".".join(parts[:i]))
        if parent is not None and "attention" in type(parent).__name__.lower():
            return True
    return False


def _projections(names: Sequence[str]) -> list[str]:
    """The attention projections to adapt among ``names``: the fused QKV ones, else the query and
    value ones (peft's choice for the families it knows); [] if neither is there."""
    leaf = {name: name.rsplit(".", 1)[-1].lower() for name in names}
    fused = [n for n in names if leaf[n] in _FUSED_QKV]
    if fused:
        return fused
    query = [n for n in names if leaf[n] in _QUERY]
    value = [n for n in names if leaf[n] in _VALUE]
    return query + value if query and value else []


def _shortest_suffixes(chosen: Sequence[str], all_names: Sequence[str]) -> list[str]:
    """For each of ``chosen``, the shortest dotted suffix (how peft matches a ``target_modules``
    entry) that matches no module outside ``chosen``: ``c_proj`` names GPT-2's MLP output too,
    so its attention one becomes ``attn.c_proj``."""
    chosen_set = set(chosen)
    out: set[str] = set()
    for name in chosen:
        parts = name.split(".")
        for i in range(len(parts) - 1, -1, -1):
            suffix = ".".join(parts[i:])
            hits = {n for n in all_names if n == suffix or n.endswith("." + suffix)}
            if hits <= chosen_set:
                out.add(suffix)
                break
    return sorted(out)


def default_target_modules(model: nn.Module) -> list[str] | None:
    """LoRA targets for a model whose type peft has no default for; None when peft has one.

    The rule: among the model's linear leaf layers (``nn.Linear`` / ``Conv1D``, not the output
    head), those inside attention blocks; of these, the fused QKV projection if there is one
    (``qkv_proj``, ``c_attn``, ``query_key_value``, ``Wqkv``, ...), else the query and value
    projections (``q_proj`` + ``v_proj``, ``query`` + ``value``, ...), else all of them. A model
    without recognisable attention blocks gets its QKV or query + value projections wherever they
    are. Logs one line naming the choice; raises :class:`ConfigError` (one line, listing the
    linear layer names found) when there is nothing to choose.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if _peft_default_targets(model_type) is not None:
        return None
    linears = _linear_leaves(model)
    modules = dict(model.named_modules())
    attention = [name for name in linears if _in_attention(name, modules)]
    chosen = _projections(attention) or attention or _projections(list(linears))
    if not chosen:
        leaves = sorted({name.rsplit(".", 1)[-1] for name in linears})
        raise ConfigError(
            f"no LoRA targets for model type {model_type!r}: peft has no default for it and no attention "
            f"projection was found among its linear layers {leaves}; set lora.target_modules to the ones to "
            f"adapt (a list of names from these) or to all-linear")
    targets = _shortest_suffixes(chosen, list(modules))
    log.info("peft has no default LoRA targets for model type %r: adapting its attention projections "
             "%s (%d layers); set lora.target_modules to choose others", model_type, targets, len(chosen))
    return targets


def check_adapter_name(name: str) -> str:
    """Adapter names become module-dict keys: letters, digits, '_' and '-' only."""
    if not _VALID_NAME.match(name):
        raise ValueError(f"{name!r} cannot name an adapter: use letters, digits, '_' and '-' "
                         f"only (agent ids such as 'reasoner_0' are fine)")
    return name


def adapter_of(param_name: str) -> tuple[str, str] | None:
    """Split a peft parameter name into (adapter, name with the adapter component removed).

    ``base_model.model.layers.0.self_attn.q_proj.lora_A.policy_a.weight`` ->
    ``("policy_a", "base_model.model.layers.0.self_attn.q_proj.lora_A.weight")``;
    None for parameters that belong to no adapter (the base weights).
    """
    parts = param_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in _PER_ADAPTER_CONTAINERS:
            return parts[i + 1], ".".join(parts[: i + 1] + parts[i + 2:])
    return None


def group_adapter_parameters(model: nn.Module) -> dict[str, dict[str, nn.Parameter]]:
    """``{adapter: {name without adapter: parameter}}`` for every adapter in ``model``."""
    groups: dict[str, dict[str, nn.Parameter]] = {}
    for name, param in model.named_parameters():
        split = adapter_of(name)
        if split is not None:
            groups.setdefault(split[0], {})[split[1]] = param
    return groups


def base_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters that belong to no adapter (the shared, frozen base)."""
    return {n: p for n, p in model.named_parameters() if adapter_of(n) is None}


def copy_into(params: dict[str, nn.Parameter], tensors: dict[str, torch.Tensor],
              what: str) -> None:
    """Copy ``tensors`` into ``params`` (same keys and shapes), with errors naming the keys."""
    missing = sorted(set(params) - set(tensors))
    unexpected = sorted(set(tensors) - set(params))
    if missing or unexpected:
        raise KeyError(f"{what}: state dict does not match (missing {missing[:5]}"
                       f"{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
                       f"{'...' if len(unexpected) > 5 else ''}); was it saved from a policy "
                       f"with the same agents, LoRA targets and critic layout?")
    with torch.no_grad():
        for key, param in params.items():
            value = tensors[key]
            if value.shape != param.shape:
                raise ValueError(f"{what}: {key} has shape {tuple(value.shape)}, expected "
                                 f"{tuple(param.shape)} (different LoRA rank or model?)")
            param.copy_(value.to(device=param.device, dtype=param.dtype))


def spec_of_folder(folder: str) -> LoraSpec:
    """The LoRA settings a peft adapter folder was saved with (its ``adapter_config.json``): a
    frozen teammate's fixed adapter is built with them before its weights load. ``ConfigError``
    (one line) for a folder that is no peft LoRA adapter."""
    import json
    from pathlib import Path

    path = Path(folder).expanduser() / "adapter_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"adapter {folder!r}: no readable {path.name} ({type(err).__name__}); expected a peft "
                          "adapter folder, e.g. a checkpoint's models/<model>/policy_<agent>/") from None
    if str(data.get("peft_type", "LORA")).upper() != "LORA":
        raise ConfigError(f"adapter {folder!r} is a {data.get('peft_type')} adapter; marft loads LoRA adapters")
    targets = data.get("target_modules")
    return LoraSpec(r=int(data.get("r", 8)), alpha=float(data.get("lora_alpha", 8)), dropout=0.0,
                    target_modules=tuple(sorted(targets)) if isinstance(targets, (list, set, tuple)) else targets)
