"""Several LLM agents (and their critic) as LoRA adapters on ONE shared base model.

``MultiAgentPolicy`` wraps a causal LM with peft: one adapter per agent (``policy_<agent_id>``,
or a single ``policy_shared``), plus a critic adapter with a float32 value head. The base
weights are frozen and exist once in memory, whatever the number of agents; switching agent is
``set_adapter``, the reference model for KL terms is the same network with adapters disabled.

Adapters are switched by mutating the shared model, and autograd records whichever adapter was
active during each forward pass, so a loss may mix several adapters' passes. Gradient
checkpointing (``enable_gradient_checkpointing``, ``schedule.gradient_checkpointing``) is the
exception: its backward re-runs each decoder layer with whatever adapter is active *then*. So
every checkpointed layer checks, when it is recomputed, that the adapter state (active adapter,
adapters on or off) is the one its forward pass ran under, and raises
:class:`AdapterSwitchError` otherwise: under checkpointing, backward each loss before switching
adapter (the learners do: one adapter per micro-batch, backward at once).

Sampling goes through the sampling engine ``sampling.engine`` names (``policy.engine``,
``engine/base.py``): the in-process loops (``marft_agents.engine.sample``) or vLLM.
Log-probs are defined once, by ``engine.sampling.scaled_logprobs`` (``log_softmax(logits.float() /
temperature)``), and used both while sampling (``generate``) and in the training forward pass
(``token_logprobs``, run by the policy's ``scoring.Scorer``), so PPO ratios start at 1 up to float rounding.

Every method that runs prompts takes optional per-row ``prefix_lens`` (see "shared prefixes" in
``engine/layout.py``): rows declaring the same prefix share one forward pass of it.
A row must be scored with the ``prefix_len`` it was sampled with (``Generation.prefix_len``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.modeling_layers import GradientCheckpointingLayer

from marft_agents.model.adapters import (
    check_adapter_name,
    copy_into,
    default_target_modules,
    group_adapter_parameters,
    to_peft_config,
)
from marft_agents.model.critic import ValueHead
from marft_agents.engine import GenRequest, Generation
from marft_agents.engine.attention import in_training_passes, training_passes, use_grouped_matmul_attention
from marft_agents.engine.compiled_norm import use_compiled_rms_norm
from marft_agents.engine.registry import engine_class
from marft_agents.engine.base import EngineSettings, SamplingEngine
from marft_agents.model.loading import prepare_tokenizer
from marft_agents.model.scoring import Scorer, TokenStats
from marft_agents.settings.critic import CriticConfig
from marft_agents.settings.lora import LoraSpec
from marft_agents.settings.sampling import SamplingConfig
from marft_agents.settings.team import DEFAULT_MODEL_NAME

__all__ = ["AdapterSwitchError", "GenRequest", "Generation", "MultiAgentPolicy", "TokenStats"]

_CACHE_KWARGS = ("cache", "past_key_values", "layer_past")
"""The names under which transformers' decoder layers receive the KV cache they update."""


class AdapterSwitchError(RuntimeError):
    """A checkpointed decoder layer is recomputed in the backward under another adapter state
    than its forward pass ran under (its gradient would be that of another network)."""


def _contiguous_input(module: nn.Module, args: tuple) -> tuple:
    """Forward pre-hook: make the first positional input contiguous (no-op if it already is)."""
    if args and isinstance(args[0], torch.Tensor) and not args[0].is_contiguous():
        return (args[0].contiguous(), *args[1:])
    return args


def _adapter_state(probe: BaseTunerLayer | None) -> tuple[tuple[str, ...], bool] | None:
    """Which adapters a LoRA layer runs: ``(active adapters, adapters disabled)``; None for a
    layer without LoRA (any adapter state computes the same there)."""
    if probe is None:
        return None
    return tuple(probe.active_adapters), bool(probe.disable_adapters)


def _describe(state: tuple[tuple[str, ...], bool] | None) -> str:
    if state is None:
        return "no adapter"
    names, disabled = state
    return "adapters disabled (reference model)" if disabled else f"adapter {', '.join(map(repr, names))}"


def _cache_entry(cache: Any, index: int) -> dict[str, Any] | None:
    """A shallow copy of the state of the cache's layer ``index`` (None: no such layer yet)."""
    layers = cache.layers
    return dict(vars(layers[index])) if index < len(layers) else None


def _restore_cache_entry(cache: Any, index: int, entry: dict[str, Any] | None) -> None:
    """Put the cache's layer ``index`` back in the state ``_cache_entry`` copied (fresh if None)."""
    if index >= len(cache.layers):
        return
    layer = cache.layers[index]
    if entry is None:
        layer.reset()
    else:
        vars(layer).clear()
        vars(layer).update(entry)


@contextmanager
def _as_at_forward(layer_index: int, state: tuple[tuple[str, ...], bool] | None,
                   probe: BaseTunerLayer | None, passes: bool, cache: Any, cache_index: int,
                   entry: dict[str, Any] | None) -> Iterator[None]:
    """The recomputation of checkpointed decoder layer ``layer_index``: under the adapter state
    (checked, :class:`AdapterSwitchError`), attention path (``training_passes``) and KV-cache
    entry its forward pass had."""
    now = _adapter_state(probe)
    if now != state:
        raise AdapterSwitchError(
            f"gradient checkpointing: decoder layer {layer_index} ran forward under {_describe(state)} but its "
            f"backward recomputes it under {_describe(now)}; call backward on each loss before switching "
            f"adapter (or turn schedule.gradient_checkpointing off)")
    if cache is not None:  # the layer appends its keys again: from the entry its forward saw
        _restore_cache_entry(cache, cache_index, entry)
    with training_passes(passes):
        yield


def _checkpointed_forward(layer: nn.Module, layer_index: int) -> Callable[..., Any]:
    """``layer.forward`` under non-reentrant activation checkpointing whenever grad is on."""
    inner = layer.forward
    probe = next((m for m in layer.modules() if isinstance(m, BaseTunerLayer)), None)
    cache_index = getattr(getattr(layer, "self_attn", None), "layer_idx", layer_index)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # no backward: nothing to recompute
            return inner(*args, **kwargs)
        cache = next((kwargs[k] for k in _CACHE_KWARGS if kwargs.get(k) is not None), None)

        def contexts() -> tuple[Any, Any]:  # called once, as the forward pass starts
            entry = None if cache is None else _cache_entry(cache, cache_index)
            return nullcontext(), _as_at_forward(layer_index, _adapter_state(probe), probe, in_training_passes(),
                                                 cache, cache_index, entry)

        return checkpoint(functools.partial(inner, **kwargs), *args, use_reentrant=False, context_fn=contexts)

    forward.marft_checkpointed = True  # type: ignore[attr-defined]
    return forward


class MultiAgentPolicy(nn.Module):
    """N agents' LoRA adapters + critic adapter(s) and value head(s) on one frozen base."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        agent_ids: Sequence[str],
        lora: LoraSpec | None = None,
        shared_adapter: bool = False,
        critic: CriticConfig | None = CriticConfig(),
        gradient_checkpointing: bool = False,
        agent_lora: Mapping[str, LoraSpec] | None = None,
        critic_agents: Sequence[str] | None = None,
        critic_name: str = "critic",
    ) -> None:
        """1. Name the adapters: one policy adapter per agent (or one shared), the critic's by
           ``critic.mode`` (``_name_adapters``).
        2. Freeze the base and inject every adapter's LoRA layers into it in place (``_inject_adapters``).
        3. Build the float32 value heads, one per critic adapter (``_build_value_heads``).
        4. Speed the base up for the CPU paths (``_speed_up_base``), then train every adapter
           by default and start in eval mode; checkpoint the decoder layers if asked.

        ``agent_lora``: an agent's own LoRA settings (``agents.<id>.lora``), others get ``lora``.
        ``critic_agents``: the agents the critic values, when they are not all on this model (a
        team of different models, :mod:`marft_agents.model.team`); None = ``agent_ids``. A base
        that hosts only the critic has no agents of its own. ``critic_name``: the team critic's
        adapter (``centralised`` / ``local``), unique in a team whose models each carry one."""
        super().__init__()
        agent_ids = list(agent_ids)
        self.critic_agents = list(critic_agents) if critic_agents is not None else agent_ids
        if (not agent_ids and not (critic is not None and self.critic_agents)) or len(set(agent_ids)) != len(agent_ids):
            raise ValueError(f"agent_ids must be a non-empty list of distinct ids, got {agent_ids}")
        for agent in agent_ids:
            check_adapter_name(agent)
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.agent_ids = agent_ids
        self.shared_adapter = shared_adapter
        self.critic_config = critic
        self._critic_name = check_adapter_name(critic_name)
        self._name_adapters(agent_ids, shared_adapter, critic)
        self._inject_adapters(model, lora or LoraSpec(), critic, agent_lora or {})
        self._build_value_heads(self.critic_agents, critic)
        self._stop_ids = self._find_stop_ids()
        self._speed_up_base()
        # the training-time forward passes (token_logprobs, state_values, ...): a collaborator
        # reading this policy through its public members
        self.scoring = Scorer(self)
        self._active: str | None = None
        self._system_turns: dict[str, list[int]] = {}  # system prompt -> its chat-template turn ids
        self._trainable: set[str] = set()
        self.set_trainable(None, critic=critic is not None)
        self.eval()
        self.checkpointed_layers = 0  # decoder layers under gradient checkpointing (0 = off)
        if gradient_checkpointing:
            self.enable_gradient_checkpointing()

    def _name_adapters(self, agent_ids: list[str], shared_adapter: bool, critic: CriticConfig | None) -> None:
        """Which policy adapter acts for each agent (``policy_<id>``, or ``policy_shared`` for
        all) and the critic adapters: one per agent for ``per_agent``, else one for the team."""
        self._policy_of = {a: "policy_shared" if shared_adapter else f"policy_{a}"
                           for a in agent_ids}
        self.policy_adapters: list[str] = list(dict.fromkeys(self._policy_of.values()))
        if critic is None:
            self.critic_adapters: list[str] = []
        elif critic.mode == "per_agent":
            self.critic_adapters = [f"critic_{a}" for a in self.critic_agents]
        else:  # centralised and local: one critic for the team (they differ in what it reads)
            self.critic_adapters = [self._critic_name]

    def _inject_adapters(self, model: PreTrainedModel, lora: LoraSpec, critic: CriticConfig | None,
                         agent_lora: Mapping[str, LoraSpec]) -> None:
        """Freeze ``model`` (the base is shared by everyone and never trained) and wrap it with
        peft, every adapter added: the policies' with ``lora``, the critics' with ``critic.lora``
        where set. peft injects the LoRA layers in place: the base weights exist once."""
        for param in model.parameters():
            param.requires_grad_(False)
        specs = {name: lora for name in self.policy_adapters}
        for agent, spec in agent_lora.items():
            specs[self._policy_of[agent]] = spec
        specs.update({name: (critic.lora or lora) for name in self.critic_adapters
                      if critic is not None})
        names = list(specs)
        # unset target_modules on a model type peft has no default for: its attention projections
        default_targets = (default_target_modules(model)
                           if any(spec.target_modules is None for spec in specs.values()) else None)
        with warnings.catch_warnings():  # peft 0.21 calls an API transformers 5 deprecated
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            self.model = get_peft_model(model, to_peft_config(specs[names[0]], default_targets),
                                        adapter_name=names[0])
        for name in names[1:]:
            self.model.add_adapter(name, to_peft_config(specs[name], default_targets))
        self._params = group_adapter_parameters(self.model)

    def _build_value_heads(self, agent_ids: list[str], critic: CriticConfig | None) -> None:
        """One float32 value head per critic adapter (seeded: the same heads every build), with
        one output slot per acting agent for a team critic with ``critic.per_agent_head``; a
        per-agent critic values one agent's decisions only (one slot)."""
        hidden = self.lm.config.get_text_config().hidden_size
        device = self.device
        head_rng = torch.Generator().manual_seed(0)
        self._value_slot = {a: (i if critic is not None and critic.per_agent_head and len(self.critic_adapters) == 1
                                else 0) for i, a in enumerate(agent_ids)}
        self.value_heads = nn.ModuleDict({
            name: ValueHead(hidden, critic.value_head_init_std, critic.value_head_bias,
                            generator=head_rng, slots=max(self._value_slot.values()) + 1).to(device)
            for name in self.critic_adapters if critic is not None
        })

    def _speed_up_base(self) -> None:
        """The base model's CPU speed-ups, none of which changes what it computes beyond rounding."""
        # With a frozen weight, torch (2.13, CPU) multiplies a non-contiguous 3-D input such as
        # hidden[:, -1:] (what logits_to_keep=1 hands the LM head at prefill) through a strided
        # GEMM that is far slower in bf16 and fp32 alike. A contiguous copy of the input avoids it.
        self.lm.get_output_embeddings().register_forward_pre_hook(_contiguous_input)
        # half precision on a CPU: the fused attention kernel's backward is slow there, and
        # RMSNorm's elementwise chain is compiled for the update's passes
        use_grouped_matmul_attention(self.lm)
        use_compiled_rms_norm(self.lm)

    # ------------------------------------------------------------------ structure

    @property
    def lm(self) -> PreTrainedModel:
        """The causal LM with LoRA layers injected (peft's wrapped base model)."""
        return self.model.get_base_model()

    @property
    def device(self) -> torch.device:
        """Where the base model (and so every input tensor) lives."""
        return self.lm.get_input_embeddings().weight.device

    @property
    def adapter_names(self) -> list[str]:
        """Every adapter: agents' first, then critics'."""
        return self.policy_adapters + self.critic_adapters

    def adapter_for(self, agent_id: str) -> str:
        """Name of the LoRA adapter that acts for ``agent_id``."""
        try:
            return self._policy_of[agent_id]
        except KeyError:
            raise KeyError(f"unknown agent {agent_id!r}; this policy serves {self.agent_ids}"
                           ) from None

    def model_of(self, agent_id: str) -> str:
        """The name of the base model ``agent_id`` runs on: ``default``, the one model here."""
        self.adapter_for(agent_id)
        return DEFAULT_MODEL_NAME

    def for_agent(self, agent_id: str) -> MultiAgentPolicy:
        """The policy whose base model ``agent_id`` runs on, for its prompts and tokens: this one
        (a team of different models answers with the agent's model, :mod:`marft_agents.model.team`)."""
        self.adapter_for(agent_id)
        return self

    def critic_reader(self, agent_id: str) -> MultiAgentPolicy:
        """The policy whose critic values ``agent_id``'s decisions (and whose tokenizer renders
        their global state): this one."""
        return self

    def load_fixed_adapter(self, agent_id: str, folder: str | Path) -> None:
        """Load a peft adapter folder (``adapter_config.json`` + weights) into ``agent_id``'s
        adapter: a frozen teammate's fixed adapter (``agents.<id>.adapter``). The adapter must have
        been built with the folder's LoRA settings (:func:`marft_agents.model.adapters.spec_of_folder`)."""
        from peft.utils import load_peft_weights

        weights = load_peft_weights(str(folder), device="cpu")
        adapter = self.adapter_for(agent_id)
        params = self._params[adapter]
        # peft's saved keys omit the adapter name, as ours do (``adapters.adapter_of``)
        saved = {key.removeprefix("base_model.model."): value for key, value in weights.items()}
        mine = {key.removeprefix("base_model.model."): key for key in params}
        stray = sorted(set(saved) - set(mine))
        if stray:
            raise KeyError(f"fixed adapter {str(folder)!r} of {agent_id!r} has weights for other layers ({stray[:3]}); "
                           "was it trained on another base model?")
        copy_into(params, {mine[key]: value for key, value in saved.items()}, f"fixed adapter {str(folder)!r}")

    def critic_for(self, agent_id: str | None = None) -> str:
        """Name of the critic adapter valuing ``agent_id``'s states (any agent unless the
        critic mode is ``per_agent``)."""
        if not self.critic_adapters:
            raise RuntimeError("this policy was built with critic=None: no value function")
        if self.critic_config.mode != "per_agent":
            return self.critic_adapters[0]
        if agent_id is None:
            raise ValueError("per-agent critics (critic.mode: per_agent): pass agent_id to choose whose "
                             "value to use")
        if agent_id not in self.critic_agents:
            raise KeyError(f"unknown agent {agent_id!r}; this policy's critic values {self.critic_agents}")
        return f"critic_{agent_id}"

    @property
    def stop_token_ids(self) -> list[int]:
        """Tokens that end a response by default: tokenizer eos + generation-config eos ids."""
        return list(self._stop_ids)

    def _find_stop_ids(self) -> list[int]:
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen_eos = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            ids.add(gen_eos)
        elif gen_eos is not None:
            ids.update(int(i) for i in gen_eos)
        return sorted(ids)

    # ------------------------------------------------------------------ adapters on/off

    def _apply_trainable(self) -> None:
        # peft's set_adapter / disable_adapter flip requires_grad themselves; this restores ours.
        for name, params in self._params.items():
            flag = name in self._trainable
            for param in params.values():
                param.requires_grad_(flag)
        for name, head in self.value_heads.items():
            head.requires_grad_(name in self._trainable)

    @contextmanager
    def using(self, adapter: str | None) -> Iterator[None]:
        """Run the body with exactly one adapter active, or none (``adapter=None``)."""
        if adapter is None:
            with self.model.disable_adapter():
                yield
            self._apply_trainable()
            return
        if adapter not in self._params:
            raise KeyError(f"unknown adapter {adapter!r}; adapters: {self.adapter_names}")
        if adapter != self._active:
            self.model.set_adapter(adapter)
            self._active = adapter
            self._apply_trainable()
        yield

    def set_trainable(self, agent_ids: set[str] | None, critic: bool) -> None:
        """Unfreeze the adapters of ``agent_ids`` (None = all agents, empty = none) and, if
        ``critic``, the critic adapter(s) + value head(s); freeze every other adapter."""
        if agent_ids is None:
            policy = set(self.policy_adapters)
        else:
            policy = {self.adapter_for(a) for a in agent_ids}
        if critic and not self.critic_adapters:
            raise RuntimeError("critic=True but this policy was built without a critic")
        self._trainable = policy | (set(self.critic_adapters) if critic else set())
        self._apply_trainable()

    def adapter_parameters(self, name: str) -> list[nn.Parameter]:
        """The parameters of adapter ``name`` (a critic's include its value head)."""
        if name not in self._params:
            raise KeyError(f"unknown adapter {name!r}; adapters: {self.adapter_names}")
        params = list(self._params[name].values())
        if name in self.value_heads:
            params += list(self.value_heads[name].parameters())
        return params

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Parameters of the adapters currently unfrozen by ``set_trainable``."""
        return [p for name in self.adapter_names if name in self._trainable
                for p in self.adapter_parameters(name)]

    # ------------------------------------------------------------------ gradient checkpointing

    def enable_gradient_checkpointing(self) -> int:
        """Checkpoint every decoder layer of the base model in the passes that run with grad
        (``schedule.gradient_checkpointing``); returns how many layers are checkpointed.

        Each layer keeps only its inputs in the forward pass and is recomputed in the backward
        (``torch.utils.checkpoint``, non-reentrant): activation memory of one layer at a time
        instead of all, for one more forward pass of compute. Passes without grad (sampling,
        reference and rescoring passes) run the layers as they are.

        * **One adapter per backward.** Each recomputation runs with whatever adapter is active
          when the backward reaches it, so it checks that this is the adapter state (active
          adapter, adapters on or off) its forward pass ran under, and raises
          :class:`AdapterSwitchError` if not. The learners satisfy it: a micro-batch runs under
          one adapter and is backwarded before the next switches (``BaseLearner._accumulate``);
          the reference passes (``using(None)``) run without grad.
        * **Non-reentrant**, so no ``enable_input_require_grads``: the recomputation only
          refills the tensors the original graph saved, and gradients reach the LoRA weights
          although the layer input (frozen embeddings) does not require grad. The reentrant
          form would need that input to require grad.
        * **Shared prefixes.** A layer given a KV cache appends its keys to it; the
          recomputation first puts the layer's cache entry back as its forward saw it, so the
          prefix passes (``engine.layout.prefix_cache``) keep working. (transformers'
          ``gradient_checkpointing_enable`` drops the cache instead, and checkpoints only in
          training mode, while the policy runs in eval mode: hence this wrapper.)
        * **marft's kernels.** The fused head log-probs run after the decoder, outside the
          checkpointed layers (their own backward already recomputes the logits). The
          grouped-matmul attention and the compiled RMSNorm run inside them; a recomputation
          takes the ``training_passes`` mode of its forward pass, so it computes the same
          numbers on the same path.
        """
        layers = [m for m in self.lm.modules() if isinstance(m, GradientCheckpointingLayer)]
        if not layers:
            raise ValueError(f"{type(self.lm).__name__} has no transformers decoder layers "
                             f"(GradientCheckpointingLayer) to checkpoint; set schedule.gradient_checkpointing: false")
        for index, layer in enumerate(layers):
            if not getattr(vars(layer).get("forward"), "marft_checkpointed", False):
                layer.forward = _checkpointed_forward(layer, index)
        self.checkpointed_layers = len(layers)
        return len(layers)

    # ------------------------------------------------------------------ prompts & sampling

    def chat_prompt_ids(self, system_prompt: str, user_text: str) -> list[int]:
        """Token ids of a system + user exchange ending with the assistant's turn header, from
        the tokenizer's own chat template. An empty ``system_prompt`` omits the system turn
        (the template may then insert its default one)."""
        messages = [{"role": "user", "content": user_text}]
        if system_prompt:
            messages.insert(0, {"role": "system", "content": system_prompt})
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError("the tokenizer has no chat template; load an instruct/chat model "
                             "or set tokenizer.chat_template")
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=True, return_dict=False)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # older/newer return conventions
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def system_turn_ids(self, system_prompt: str) -> list[int]:
        """The chat template's system turn alone (token ids; cached): the start of every
        ``chat_prompt_ids(system_prompt, ...)`` in the usual templates."""
        turn = self._system_turns.get(system_prompt)
        if turn is None:
            turn = self.tokenizer.apply_chat_template(
                [{"role": "system", "content": system_prompt}], tokenize=True, return_dict=False)
            if isinstance(turn, dict) or hasattr(turn, "keys"):
                turn = turn["input_ids"]
            turn = self._system_turns[system_prompt] = [int(i) for i in turn]
        return list(turn)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no special tokens, no chat template)."""
        return [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def shared_prefix_len(self, system_prompt: str, prompt_ids: Sequence[int]) -> int:
        """Length of the system turn that ``chat_prompt_ids(system_prompt, ...)`` put at the start
        of ``prompt_ids`` (the part every request of an agent shares), or 0 when there is none
        or the template tokenised it differently inside the full prompt."""
        if not system_prompt:
            return 0
        turn = self.system_turn_ids(system_prompt)
        return len(turn) if list(prompt_ids[:len(turn)]) == turn else 0

    # ------------------------------------------------------------------ the sampling engine

    engine_settings: EngineSettings | None = None
    """What an engine reads beyond each call's sampling config (:class:`EngineSettings`:
    ``trainer.build_policy`` sets it from the run's config); None = none (the loops need none,
    and :attr:`engine` then builds the default sampling config's engine)."""
    _engine: SamplingEngine | None = None
    weights_version: int = 0
    """Version of the adapters' weights, as last given to :meth:`sync_engine` (an engine built
    later exports this version first)."""

    def engine_for(self, name: str) -> SamplingEngine:
        """The sampling engine ``name`` (a ``sampling.engine``), built on first use; asking for an
        engine of another class closes the current one."""
        cls = engine_class(name)
        if type(self._engine) is not cls:
            self.close_engine()
            self._engine = cls(self)
        return self._engine

    @property
    def engine(self) -> SamplingEngine:
        """The current sampling engine; if none is built yet, the one the run's (or the default)
        sampling config names."""
        if self._engine is not None:
            return self._engine
        sampling = getattr(self.engine_settings, "sampling", None) or SamplingConfig()
        return self.engine_for(sampling.engine)

    def sync_engine(self, version: int) -> None:
        """The adapters changed (an update, a restore): the engine, if one is built, samples with
        them from its next call on (:meth:`SamplingEngine.sync`)."""
        self.weights_version = version
        if self._engine is not None:
            self._engine.sync(version)

    def close_engine(self) -> None:
        """Close the sampling engine, if one is built (a later ``generate`` builds a new one)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    def __enter__(self) -> MultiAgentPolicy:
        """``with build_policy(...) as policy:`` for a run that only evaluates: the block's end
        closes the sampling engine (a training run owns it through its ``Trainer`` instead)."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_engine()

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingConfig | None = None,
                 generator: torch.Generator | None = None) -> list[Generation]:
        """Sample one response per request with the sampling engine ``sampling.engine`` names
        (:meth:`engine_for`; ``engine/base.py``), batching requests that share an adapter.

        Results come back in request order. Sampling uses ``generator`` if given (it must live
        on the policy's device), else torch's global RNG (so ``torch.manual_seed`` makes a call
        reproducible). The loops run in eval mode (no LoRA dropout) and restore the previous mode.
        """
        sampling = sampling or SamplingConfig()
        return self.engine_for(sampling.engine).generate(requests, sampling, generator)

    # ------------------------------------------------------------------ scoring (scoring.Scorer)

    def token_logprobs(self, adapter: str, prompt_ids: Sequence[Sequence[int]],
                       response_ids: Sequence[Sequence[int]], temperature: float = 1.0,
                       with_entropy: bool = True,
                       prefix_lens: Sequence[int] | None = None) -> TokenStats:
        """Log-probs (and entropies) of the response tokens under ``adapter``, with grad when
        grad mode is on (:meth:`Scorer.token_logprobs`)."""
        return self.scoring.token_logprobs(adapter, prompt_ids, response_ids, temperature, with_entropy,
                                           prefix_lens)

    def reference_logprobs(self, prompt_ids: Sequence[Sequence[int]],
                           response_ids: Sequence[Sequence[int]], temperature: float = 1.0,
                           with_entropy: bool = False,
                           prefix_lens: Sequence[int] | None = None,
                           adapters: Sequence[str] | None = None) -> TokenStats:
        """``token_logprobs`` of the base model, without grad (:meth:`Scorer.reference_logprobs`).
        ``adapters``: each row's adapter, which a team of different models needs to choose each
        row's base; one base model ignores it."""
        return self.scoring.reference_logprobs(prompt_ids, response_ids, temperature, with_entropy, prefix_lens)

    def token_values(self, prompt_ids: Sequence[Sequence[int]],
                     response_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                     include_final: bool = False,
                     prefix_lens: Sequence[int] | None = None,
                     actors: Sequence[str] | None = None) -> torch.Tensor:
        """Critic value of the state before each response token: ``[B, T]`` float32, ``[B, T+1]``
        with ``include_final`` (:meth:`Scorer.token_values`). ``actors``: the agent acting at
        each row (its value-head slot, :meth:`value_slots`); None = ``agent_id``'s slot, else 0."""
        return self.scoring.token_values(prompt_ids, response_ids, agent_id, include_final, prefix_lens,
                                         self.value_slots(actors, agent_id, len(prompt_ids)))

    def state_values(self, prompt_ids: Sequence[Sequence[int]], agent_id: str | None = None,
                     prefix_lens: Sequence[int] | None = None,
                     actors: Sequence[str] | None = None) -> torch.Tensor:
        """Critic value at the last prompt token: ``[B]`` float32 (:meth:`Scorer.state_values`);
        ``actors`` as in :meth:`token_values`."""
        return self.scoring.state_values(prompt_ids, agent_id, prefix_lens,
                                         self.value_slots(actors, agent_id, len(prompt_ids)))

    def value_slots(self, actors: Sequence[str] | None, agent_id: str | None, rows: int) -> list[int]:
        """The value-head slot of each of ``rows`` rows (``ValueHead``'s slots: one per acting
        agent under ``critic.per_agent_head``): ``actors``' slots, else ``agent_id``'s for every
        row, else slot 0."""
        if actors is not None:
            if len(actors) != rows:
                raise ValueError(f"actors has {len(actors)} entries for {rows} rows")
            for actor in set(actors):
                self._check_valued(actor)  # an unknown agent: a clear KeyError
            return [self._value_slot[a] for a in actors]
        if agent_id is None:
            return [0] * rows
        self._check_valued(agent_id)
        return [self._value_slot[agent_id]] * rows

    def _check_valued(self, agent_id: str) -> None:
        if agent_id not in self._value_slot:
            raise KeyError(f"unknown agent {agent_id!r}; this policy serves {self.agent_ids}")

    def value_rows(self, seqs: Sequence[Sequence[int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """The forward rows a ``state_values`` pass runs for ``seqs`` (:meth:`Scorer.value_rows`)."""
        return self.scoring.value_rows(seqs)

    # ------------------------------------------------------------------ state

    def adapter_state_dict(self) -> dict[str, torch.Tensor]:
        """Every adapter and value head as a flat ``{key: cpu tensor}`` dict (safetensors-ready):
        ``lora/<adapter>/<parameter>`` and ``value_head/<critic>/<parameter>``."""
        state = {f"lora/{name}/{key}": p.detach().cpu().clone()
                 for name, params in self._params.items() for key, p in params.items()}
        for name, head in self.value_heads.items():
            for key, tensor in head.state_dict().items():
                state[f"value_head/{name}/{key}"] = tensor.detach().cpu().clone()
        return state

    def peft_files(self, model_name: str = DEFAULT_MODEL_NAME) -> dict[str, bytes]:
        """Every agent's policy adapter as a peft adapter folder, ``{relative path: file bytes}``:
        ``models/<model_name>/<adapter>/adapter_config.json`` + ``adapter_model.safetensors``,
        what ``peft.PeftModel.from_pretrained(base, folder)`` loads and ``agents.<id>.adapter``
        takes for a frozen teammate (checkpoints write them beside ``adapters.pt``, which stays
        what a resume reads; the critic and its value head are in ``adapters.pt`` only)."""
        import json

        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save as safetensors_bytes

        files: dict[str, bytes] = {}
        for adapter in self.policy_adapters:
            config = self.model.peft_config[adapter].to_dict()
            config.update(base_model_name_or_path=getattr(self.lm.config, "name_or_path", None) or None,
                          inference_mode=True)
            weights = get_peft_model_state_dict(self.model, adapter_name=adapter)
            folder = f"models/{model_name}/{adapter}"
            files[f"{folder}/adapter_config.json"] = json.dumps(
                config, indent=2, default=lambda o: sorted(o) if isinstance(o, (set, frozenset)) else str(o)).encode()
            files[f"{folder}/adapter_model.safetensors"] = safetensors_bytes(
                {key: value.detach().cpu().contiguous() for key, value in weights.items()})
        return files

    def load_adapter_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load what ``adapter_state_dict`` produced (strict: same adapters, keys and shapes)."""
        known = {f"lora/{n}/" for n in self._params} | {f"value_head/{n}/"
                                                        for n in self.value_heads}
        stray = sorted(k for k in state if not any(k.startswith(p) for p in known))
        if stray:
            raise KeyError(f"state dict has keys for unknown adapters: {stray[:5]}; this "
                           f"policy has adapters {self.adapter_names}")
        for name, params in self._params.items():
            prefix = f"lora/{name}/"
            copy_into(params, {k[len(prefix):]: v for k, v in state.items()
                               if k.startswith(prefix)}, f"adapter {name!r}")
        for name, head in self.value_heads.items():
            prefix = f"value_head/{name}/"
            mine = head.upgrade_state({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
            buffers = dict(head.named_buffers())
            copy_into(dict(head.named_parameters()), {k: v for k, v in mine.items() if k not in buffers},
                      f"value head {name!r}")
            # the value normaliser's buffers (critic.value_norm); absent from checkpoints written
            # before it existed, whose heads were plain linear maps: the defaults are exactly that
            for key, buffer in buffers.items():
                if key in mine:
                    buffer.copy_(mine[key].to(buffer.device, buffer.dtype))
