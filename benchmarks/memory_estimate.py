"""GPU memory of one MARFT-A update of Qwen2.5-1.5B/3B/7B-Instruct at MATH lengths: ESTIMATES.

What one update holds on the GPU, part by part (GiB):

1. **weights**: the frozen base model in bfloat16 (2 bytes a parameter), counted from the
   models' config numbers (:data:`QWEN25`; the count is checked against the model cards' totals);
2. **LoRA + optimizer**: the adapters (one per agent plus the critic's; peft keeps them in float32
   under a bf16 base), their gradients and AdamW's two moments: 16 bytes a LoRA parameter;
3. **activations**: what the training forward keeps for the backward, per token of the
   micro-batch, with and without gradient checkpointing. CALIBRATED BY MEASUREMENT, not by a
   formula from the literature: a Qwen2 of the model's exact width (hidden, intermediate, heads,
   kv heads) but 2 layers, random weights, bfloat16, the configs' LoRA adapter on, runs a training
   forward of a few hundred tokens on the CPU, and every tensor autograd saves for the backward is
   counted through ``torch.autograd.graph.saved_tensors_hooks`` (bytes of each distinct storage,
   parameters excluded), attributed to the decoder layer that saved it. The per-layer figure is
   the mean over the layers; with checkpointing the layers keep only their inputs and the peak
   adds one layer recomputed in the backward, plus a workspace of two of the layer's largest
   tensors (the gradients in flight);
4. **head**: the log-prob/entropy pass over the vocabulary. marft's fused head
   (``marft_agents/engine/head_logprobs.py``) keeps the response positions' hidden states and
   three chunk buffers of ``CHUNK_BYTES``; the plain ``[N, V]`` float32 logits with their
   log-softmax, probabilities and gradient are shown for comparison;
5. **vLLM**: the engine's share, ``vllm.gpu_memory_utilization`` x the GPU's memory (its own copy
   of the weights and its KV cache) while it samples; during the update, with ``vllm.sleep_level``
   >= 1 it has released all of it except :data:`VLLM_SLEEPING_GIB` (an assumption, not measured);
6. :data:`CUDA_CONTEXT_GIB` for the CUDA context and allocator fragmentation (an assumption).

Every total is an estimate from the measured per-token figures and the config numbers; nothing
here ran on a GPU. ``benchmarks/gpu_check.py --only memory`` measures the real peak on one.

**A team of different models** (``models:`` / ``agents:``, ``--team`` or ``--config``): each
distinct base model is held once, with the adapters of the agents on it (and the critic's, on
the critic's model); a frozen agent's fixed adapter counts its weights only (4 bytes a
parameter: no gradient, no AdamW state). The learner's passes run one adapter's micro-batch at
a time, so the update holds every member's weights and adapters plus the *largest* member's
activations and head (:func:`team_estimate`). vLLM serves one model per process, so a team
samples with a loop engine (``fast``), whose share is computed, not a setting: per row its
preallocated bf16 KV cache (:meth:`ModelShape.kv_bytes_per_token` x the row's tokens, exact
arithmetic) and the prefill's workspace, three of a layer's largest tensors per prompt token
(the MLP's gate, up and their product; an assumption on the measured ``largest``), for the
batch of one generate call (one model at a time: the team's engines run in turn); the critic's
no-grad value pass over the episodes' global states is the same workspace on the critic's
model. The sampling peak is every member's weights and adapters plus the largest of these.

Usage::

    python benchmarks/memory_estimate.py                        # measure, then the table for MATH lengths
    python benchmarks/memory_estimate.py --tokens 512 --json    # also the JSON of every figure
    python benchmarks/memory_estimate.py --team 1.5B:2,7B:1     # a team: 1.5B with 2 adapters, 7B with 1
    python benchmarks/memory_estimate.py --config baselines/configs/marft_a_math_qwen2.5_team.yaml
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, replace

GIB = 1 << 30
GPU_GIB = 79.0
"""What an "80 GB" H100 or A100 offers (81,559-81,920 MiB, of which the driver keeps some): the
budget of the configs' check, which keeps :data:`HEADROOM` of it free."""
HEADROOM = 0.10
"""Share of the GPU an estimate must leave free to count as fitting (the estimate's error)."""
CUDA_CONTEXT_GIB = 1.0
"""CUDA context, cuBLAS workspaces and allocator fragmentation (an assumption, not measured)."""
VLLM_SLEEPING_GIB = 1.0
"""What a vLLM engine asleep at level >= 1 still holds (CUDA graphs, its context; an assumption)."""
MATH_ROW_TOKENS = 2300
"""A MATH actor row: system turn + problem (~250) + the reasoner's 1,024 tokens + its own 1,024."""
ROWS_PER_ADAPTER = 8
"""Rows of one adapter per micro-batch in the MATH setting of ``gpu_check.py``'s memory check."""


@dataclass(frozen=True)
class ModelShape:
    """The config numbers of one model that memory depends on."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    card_params: float
    """The parameter count its model card gives (a check of :meth:`params`)."""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        """One decoder layer: q/k/v (with biases), o, gate/up/down, two RMSNorms."""
        q, kv = self.hidden, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + (q + 2 * kv) + self.hidden * self.hidden
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden

    def kv_bytes_per_token(self) -> int:
        """The bf16 keys and values one token leaves in the KV cache, over every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def lora_params(self, r: int) -> int:
        """One adapter on q_proj and v_proj (peft's default for qwen2, the configs' choice)."""
        kv = self.kv_heads * self.head_dim
        return self.layers * r * ((self.hidden + self.hidden) + (self.hidden + kv))


QWEN25: dict[str, ModelShape] = {
    "Qwen/Qwen2.5-1.5B-Instruct": ModelShape(hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2,
                                             vocab=151936, tied=True, card_params=1.54e9),
    "Qwen/Qwen2.5-3B-Instruct": ModelShape(hidden=2048, intermediate=11008, layers=36, heads=16, kv_heads=2,
                                           vocab=151936, tied=True, card_params=3.09e9),
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4,
                                           vocab=152064, tied=False, card_params=7.61e9),
}
"""Source: ``config.json`` of each Hub repository (hidden_size, intermediate_size,
num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size, tie_word_embeddings);
``card_params``: "Number of Parameters" on each model card."""


@dataclass(frozen=True)
class Calibration:
    """Bytes per token the training forward saves, measured at one model's width."""

    layer: float
    """Per decoder layer, without checkpointing (mean over the layers measured)."""
    layer_checkpointed: float
    """Per decoder layer, with checkpointing (what a layer keeps: its inputs)."""
    outside: float
    """Outside the layers (embedding output, final norm, the head's saved hidden states)."""
    largest: float
    """Largest single saved tensor of a layer (the workspace of the backward is 2 of these)."""
    tokens: int
    """Tokens of the measured forward."""


STORED: dict[str, Calibration] = {}
"""This run's measurements, by model (filled by :func:`main`; the tests measure their own)."""


def _build(shape: ModelShape, layers: int, r: int, vocab: int):
    """A ``layers``-layer Qwen2 of ``shape``'s width in bfloat16 with one LoRA adapter on q/v."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, max_position_embeddings=4096,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "v_proj"]))
    # train mode: transformers checkpoints a layer only in it; Qwen2 and the adapter have no
    # dropout here (attention_dropout 0, lora_dropout 0), so it computes what eval mode would
    model.train()
    return model.base_model.model


def _saved_bytes(model, tokens: int, vocab: int) -> dict[str, list[int]]:
    """Bytes of each distinct storage autograd saves in one training forward of ``tokens``
    tokens (parameters excluded), by where it was saved: ``layer<i>`` or ``outside``."""
    import torch

    from marft_agents.engine.head_logprobs import head_logprobs

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    where = ["outside"]
    saved: dict[int, tuple[str, int]] = {}

    def enter(index: int):
        return lambda *_: where.append(f"layer{index}")

    def leave(*_):
        where.pop()

    hooks = []
    for index, layer in enumerate(model.model.layers):
        hooks += [layer.register_forward_pre_hook(enter(index)), layer.register_forward_hook(leave)]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and storage.data_ptr() not in saved and storage.nbytes() > 0:
            saved[storage.data_ptr()] = (where[-1], storage.nbytes())
        return t

    ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(0))  # [1, T]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state  # [1, T, H]
            logprobs, entropy = head_logprobs(hidden[0, :-1], model.lm_head, ids[0, 1:], 1.0, True)  # [T-1]
        (logprobs.sum() + 0.01 * entropy.sum()).backward()  # the graph is whole: it trains
    finally:
        for hook in hooks:
            hook.remove()
    by_place: dict[str, list[int]] = {}
    for place, nbytes in saved.values():
        by_place.setdefault(place, []).append(nbytes)
    return by_place


def measure(shape: ModelShape, tokens: int = 256, layers: int = 2, r: int = 8) -> Calibration:
    """Count the bytes autograd saves in a training forward of a ``layers``-layer Qwen2 of
    ``shape``'s width (random weights, bfloat16, one LoRA adapter of rank ``r`` on q/v, sdpa
    attention), on the CPU, without and then with gradient checkpointing: one row of ``tokens``
    tokens, the loss the token log-probs and entropies through marft's fused head. Returns the
    per-token figures (per layer: the mean over the layers)."""
    import warnings

    vocab = 512  # the head's memory is computed (item 4); a real vocabulary would only slow this down
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' renamed checkpointing API
        model = _build(shape, layers, r, vocab)
        plain = _saved_bytes(model, tokens, vocab)
        model.activation_checkpointing_enable()
        ckpt = _saved_bytes(model, tokens, vocab)

    def per_layer(by_place: dict[str, list[int]]) -> float:
        return sum(sum(v) for k, v in by_place.items() if k != "outside") / layers / tokens

    largest = max((n for k, v in plain.items() if k != "outside" for n in v), default=0)
    return Calibration(layer=per_layer(plain), layer_checkpointed=per_layer(ckpt),
                       outside=sum(plain.get("outside", [])) / tokens, largest=largest / tokens, tokens=tokens)


class _Peaks:
    """An estimate's peak: the larger of its update's and its sampling's footprint."""

    update_peak: float
    sampling_peak: float

    @property
    def peak(self) -> float:
        return max(self.update_peak, self.sampling_peak)


@dataclass(frozen=True)
class Estimate(_Peaks):
    """GiB of one update; every figure an estimate."""

    model: str
    tokens_per_micro_batch: int
    response_tokens: int
    gradient_checkpointing: bool
    weights: float
    lora_and_optimizer: float
    activations: float
    head_fused: float
    head_plain: float
    vllm_sampling: float
    vllm_during_update: float
    context: float
    update_peak: float
    """weights + LoRA/optimizer + activations + fused head + vLLM asleep (or not) + context."""
    sampling_peak: float
    """weights + LoRA/optimizer + vLLM's share + context: the rollout's footprint."""


def estimate(model: str, cal: Calibration, tokens_per_micro_batch: int, gradient_checkpointing: bool,
             response_tokens: int | None = None, adapters: int = 3, r: int = 8,
             gpu_memory_utilization: float = 0.35, vllm_sleeps: bool = True,
             gpu_gib: float = GPU_GIB) -> Estimate:
    """One update's GiB for ``model`` (a key of :data:`QWEN25`) with ``cal``'s per-token figures.

    ``adapters``: LoRA adapters trained (a duo's two policies plus the critic = 3);
    ``response_tokens``: positions the head scores (default: half the micro-batch's tokens).
    """
    from marft_agents.engine.head_logprobs import CHUNK_BYTES

    shape = QWEN25[model]
    t = tokens_per_micro_batch
    n = t // 2 if response_tokens is None else response_tokens
    weights = 2 * shape.params() / GIB
    lora = 16 * adapters * shape.lora_params(r) / GIB
    if gradient_checkpointing:
        activations = shape.layers * cal.layer_checkpointed * t + cal.layer * t + 2 * cal.largest * t
    else:
        activations = shape.layers * cal.layer * t + 2 * cal.largest * t
    activations = (activations + cal.outside * t) / GIB
    head_fused = (2 * n * shape.hidden + 3 * CHUNK_BYTES) / GIB
    head_plain = 4 * 4 * n * shape.vocab / GIB  # logits, log-softmax, probs, their gradient (float32)
    vllm_sampling = gpu_memory_utilization * gpu_gib
    vllm_update = VLLM_SLEEPING_GIB if vllm_sleeps else vllm_sampling
    update_peak = weights + lora + activations + head_fused + vllm_update + CUDA_CONTEXT_GIB
    sampling_peak = weights + lora + vllm_sampling + CUDA_CONTEXT_GIB
    return Estimate(model, t, n, gradient_checkpointing, weights, lora, activations, head_fused, head_plain,
                    vllm_sampling, vllm_update, CUDA_CONTEXT_GIB, update_peak, sampling_peak)


def fits(est: Estimate, gpu_gib: float = GPU_GIB) -> bool:
    """Whether ``est`` leaves :data:`HEADROOM` of the GPU free, in sampling and in the update."""
    return est.peak <= (1 - HEADROOM) * gpu_gib


@dataclass(frozen=True)
class Member:
    """One base model of a team and the LoRA adapters it carries."""

    model: str
    """A key of :data:`QWEN25`."""
    trained: tuple[int, ...]
    """Ranks of its trained adapters (its agents' and, on the critic's model, the critic's)."""
    frozen: tuple[int, ...] = ()
    """Ranks of frozen agents' fixed adapters (weights only)."""
    critic: bool = False
    """Whether the critic runs on it (its value pass over the global states)."""

    def lora_gib(self) -> float:
        shape = QWEN25[self.model]
        return (16 * sum(shape.lora_params(r) for r in self.trained)
                + 4 * sum(shape.lora_params(r) for r in self.frozen)) / GIB


@dataclass(frozen=True)
class TeamEstimate(_Peaks):
    """GiB of one update and of sampling for a team of different models; every figure an estimate."""

    members: tuple[Estimate, ...]
    """Each model's own figures (its weights, adapters, activations and head; no vLLM)."""
    sampling_workspace: tuple[float, ...]
    """Per member: the loop engine's KV cache + prefill workspace of one generate call, or the
    critic's value pass on the critic's model, whichever is larger."""
    weights: float
    lora_and_optimizer: float
    activations: float
    """The largest member's (one adapter's micro-batch at a time)."""
    head_fused: float
    context: float
    update_peak: float
    """Every weight and adapter + the largest member's activations and fused head + context."""
    sampling_peak: float
    """Every weight and adapter + the largest sampling workspace + context."""


def team_estimate(members: list[Member], cal: dict[str, Calibration], tokens_per_micro_batch: int,
                  gradient_checkpointing: bool, sampling_rows: int, row_tokens: int, new_tokens: int,
                  response_tokens: int | None = None) -> TeamEstimate:
    """One update's and one rollout's GiB for a team: ``members`` (one per distinct base model),
    ``cal`` their calibrations by model, a micro-batch of ``tokens_per_micro_batch``;
    ``sampling_rows`` rows per generate call (and per critic pass) of up to ``row_tokens``
    tokens, the last ``new_tokens`` of them generated."""
    own = []
    workspace = []
    for member in members:
        shape, c = QWEN25[member.model], cal[member.model]
        est = estimate(member.model, c, tokens_per_micro_batch, gradient_checkpointing, response_tokens,
                       adapters=0, gpu_memory_utilization=0.0, vllm_sleeps=False)
        prompt = max(row_tokens - new_tokens, 0)
        generate = sampling_rows * (row_tokens * shape.kv_bytes_per_token() + 3 * c.largest * prompt)
        critic = 3 * c.largest * sampling_rows * row_tokens if member.critic else 0.0
        workspace.append(max(generate, critic) / GIB)
        lora = member.lora_gib()
        own.append(replace(est, lora_and_optimizer=lora, context=0.0,  # this member alone, no context
                           update_peak=est.weights + lora + est.activations + est.head_fused,
                           sampling_peak=est.weights + lora + workspace[-1]))
    weights = sum(e.weights for e in own)
    lora = sum(e.lora_and_optimizer for e in own)
    busiest = max(own, key=lambda e: e.activations + e.head_fused)
    update_peak = weights + lora + busiest.activations + busiest.head_fused + CUDA_CONTEXT_GIB
    sampling_peak = weights + lora + max(workspace) + CUDA_CONTEXT_GIB
    return TeamEstimate(tuple(own), tuple(workspace), weights, lora, busiest.activations, busiest.head_fused,
                        CUDA_CONTEXT_GIB, update_peak, sampling_peak)


def model_key(name_or_path: str) -> str:
    """The :data:`QWEN25` key of a model name: a Hub id, or a folder named after one."""
    for key in QWEN25:
        if name_or_path == key or name_or_path.rstrip("/").split("/")[-1] == key.split("/")[-1]:
            return key
    raise SystemExit(f"model {name_or_path!r} is none of the shapes known here ({', '.join(QWEN25)}); "
                     "give a Hub id or a folder named after one")


def members_of_config(cfg) -> list[Member]:
    """The team of a ``TrainConfig``: per base model its agents' adapters (trained, or a frozen
    agent's fixed one) and the critic adapters it carries (``run.trainer.team_layout``: one critic
    model, or each model the critic of its own agents; ``critic.mode`` per_agent: one per agent)."""
    from marft_agents.run.trainer import team_layout
    from marft_envs.core.roles import load_profile

    profile = cfg.env.kwargs.get("profile")
    if profile is None:
        raise SystemExit(f"{cfg.env.id}: the config names no env.kwargs.profile; the team's agents come from it")
    layout = team_layout(cfg, list(load_profile(profile).agent_ids))
    critic_rank = (cfg.critic.lora or cfg.lora).r if layout.critic_of else 0
    members = []
    for name, on in layout.agents_on.items():
        trained = [cfg.lora_of(a).r for a in on if cfg.agent_spec(a).trainable]
        frozen = [cfg.lora_of(a).r for a in on if not cfg.agent_spec(a).trainable and cfg.agent_spec(a).adapter]
        valued = layout.critic_agents(name)
        critics = (len(valued) if cfg.critic.mode == "per_agent" else 1) if valued else 0
        members.append(Member(model_key(cfg.team_models()[name].name_or_path), tuple(trained + [critic_rank] * critics),
                              tuple(frozen), bool(valued)))
    if len({m.model for m in members}) != len(members):
        raise SystemExit("two of the team's models have the same shape; this estimate keys them by shape")
    return members


def parse_team(spec: str) -> list[Member]:
    """``--team 1.5B:2,7B:1``: sizes with the number of rank-8 adapters each carries; the first
    size carries the critic (its last adapter)."""
    members = []
    for k, part in enumerate(p.strip() for p in spec.split(",") if p.strip()):
        size, _, count = part.partition(":")
        chosen = [m for m in QWEN25 if m.split("-")[1] == size]
        if not chosen or not count.isdigit():
            raise SystemExit(f"--team: expected SIZE:ADAPTERS,... with sizes of {[m.split('-')[1] for m in QWEN25]}, "
                             f"got {part!r}")
        members.append(Member(chosen[0], (8,) * int(count), critic=k == 0))
    return members


def print_team(members: list[Member], cal: dict[str, Calibration], tokens: int, ckpt_options: tuple[bool, ...],
               rows: int, row_tokens: int, new_tokens: int, report: dict) -> None:
    """The team's table, in the one-model table's columns (``KV+`` = the loop engine's workspace in
    place of vLLM's share), one line per member and one for the team."""
    desc = ", ".join(f"{m.model.split('/')[-1]} with {len(m.trained)} trained adapter(s)"
                     + (", the critic's included" if m.critic else "")
                     + (f" and {len(m.frozen)} frozen" if m.frozen else "") for m in members)
    print(f"\nESTIMATES (not measured on a GPU) for one MARFT-A update of a TEAM of {len(members)} models ({desc}), "
          f"a micro-batch of {tokens} tokens, sampling with a loop engine (no vLLM: one model per process) "
          f"{rows} rows of ~{row_tokens} tokens ({new_tokens} new) a call:")
    print(f"  {'model':<28} {'ckpt':>5} {'weights':>8} {'LoRA+opt':>8} {'activ.':>8} {'head':>6} "
          f"{'(plain)':>8} {'KV+':>6} {'update':>7} {'sampling':>8}  fits 80 GB")
    for ckpt in ckpt_options:
        est = team_estimate(members, cal, tokens, ckpt, rows, row_tokens, new_tokens)
        for member, own, work in zip(members, est.members, est.sampling_workspace):
            print(f"  {member.model:<28} {'on' if ckpt else 'off':>5} {own.weights:8.2f} {own.lora_and_optimizer:8.3f} "
                  f"{own.activations:8.2f} {own.head_fused:6.2f} {own.head_plain:8.2f} {work:6.1f} "
                  f"{'':>7} {'':>8}")
        print(f"  {'team (sum; largest activ.)':<28} {'on' if ckpt else 'off':>5} {est.weights:8.2f} "
              f"{est.lora_and_optimizer:8.3f} {est.activations:8.2f} {est.head_fused:6.2f} {'':>8} "
              f"{max(est.sampling_workspace):6.1f} {est.update_peak:7.2f} {est.sampling_peak:8.2f}  "
              f"{'yes' if fits(est) else 'NO'}")
        report.setdefault("team", {})["checkpointing" if ckpt else "no_checkpointing"] = asdict(est)
    print("  (GiB; team 'update' = every model's weights and adapters + the largest member's activations and fused "
          f"head + {CUDA_CONTEXT_GIB:.0f} GiB context; 'sampling' = weights and adapters + the largest 'KV+' (KV cache "
          "and prefill of one call, or the critic's value pass) + context)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=256, help="tokens of each measured forward (default 256)")
    parser.add_argument("--models", default=",".join(m.split("-")[1] for m in QWEN25),
                        help="sizes to measure and estimate, e.g. 1.5B,7B (default all three)")
    parser.add_argument("--micro-batch-tokens", type=int, default=ROWS_PER_ADAPTER * MATH_ROW_TOKENS,
                        help=f"tokens of one micro-batch (default {ROWS_PER_ADAPTER} rows x {MATH_ROW_TOKENS})")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    parser.add_argument("--json", action="store_true", help="also print every figure as one JSON line")
    parser.add_argument("--team", default=None, metavar="SIZE:ADAPTERS,...",
                        help="a team of different models instead, e.g. 1.5B:2,7B:1 (the first carries the critic)")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="the team of a training config (models:, agents:, critic.model, lora, schedule, sampling)")
    parser.add_argument("--sampling-rows", type=int, default=64, help="--team: rows per generate call (default 64)")
    parser.add_argument("--row-tokens", type=int, default=MATH_ROW_TOKENS,
                        help=f"--team/--config: tokens of the longest row (default {MATH_ROW_TOKENS})")
    parser.add_argument("--new-tokens", type=int, default=1024, help="--team: tokens generated per call (default 1024)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    members = None
    ckpt_options = (False, True)
    if args.config:
        from marft_agents.config import load_config

        cfg = load_config(args.config)
        members = members_of_config(cfg)
        ckpt_options = (cfg.schedule.gradient_checkpointing,)
        args.micro_batch_tokens = cfg.schedule.max_tokens_per_micro_batch or args.micro_batch_tokens
        args.sampling_rows = min(cfg.sampling.max_batch_size, cfg.env.num_envs)
        args.new_tokens = cfg.sampling.max_new_tokens
    elif args.team:
        members = parse_team(args.team)
    if members is not None:
        chosen = [m for m in QWEN25 if m in {member.model for member in members}]
    else:
        sizes = [s.strip() for s in args.models.split(",") if s.strip()]
        chosen = [m for m in QWEN25 if m.split("-")[1] in sizes]
    if not chosen:
        parser.error(f"--models: none of {sizes} is one of {[m.split('-')[1] for m in QWEN25]}")
    report: dict[str, dict] = {}
    print("MEASURED on this CPU (bf16, 2 layers at the model's width, LoRA r=8 on q/v, sdpa; "
          f"{args.tokens} tokens; bytes autograd saves for the backward, via saved_tensors_hooks):")
    for model in chosen:
        shape = QWEN25[model]
        assert abs(shape.params() / shape.card_params - 1) < 0.01, (model, shape.params())
        cal = measure(shape, args.tokens)
        STORED[model] = cal
        print(f"  {model}: per layer {cal.layer / 1024:.1f} KiB/token without checkpointing, "
              f"{cal.layer_checkpointed / 1024:.2f} KiB/token with; outside the layers {cal.outside / 1024:.1f} "
              f"KiB/token; largest tensor of a layer {cal.largest / 1024:.1f} KiB/token")
        report[model] = {"calibration": asdict(cal), "params": shape.params()}
    t = args.micro_batch_tokens
    if members is not None:
        print_team(members, STORED, t, ckpt_options, args.sampling_rows, args.row_tokens, args.new_tokens, report)
        if args.json:
            print(json.dumps({"gpu_gib": GPU_GIB, "headroom": HEADROOM, "micro_batch_tokens": t, "models": report}))
        return 0
    print(f"\nESTIMATES (not measured on a GPU) for one MARFT-A update, a micro-batch of {t} tokens "
          f"({t // MATH_ROW_TOKENS} MATH rows of ~{MATH_ROW_TOKENS}), 3 adapters (2 agents + critic), "
          f"vLLM at gpu_memory_utilization {args.gpu_memory_utilization} of {GPU_GIB:.0f} GiB, asleep in the update:")
    print(f"  {'model':<28} {'ckpt':>5} {'weights':>8} {'LoRA+opt':>8} {'activ.':>8} {'head':>6} "
          f"{'(plain)':>8} {'vLLM':>6} {'update':>7} {'sampling':>8}  fits 80 GB")
    for model in chosen:
        for ckpt in (False, True):
            est = estimate(model, STORED[model], t, ckpt, gpu_memory_utilization=args.gpu_memory_utilization)
            print(f"  {model:<28} {'on' if ckpt else 'off':>5} {est.weights:8.2f} {est.lora_and_optimizer:8.3f} "
                  f"{est.activations:8.2f} {est.head_fused:6.2f} {est.head_plain:8.2f} {est.vllm_sampling:6.1f} "
                  f"{est.update_peak:7.2f} {est.sampling_peak:8.2f}  {'yes' if fits(est) else 'NO'}")
            report[model]["checkpointing" if ckpt else "no_checkpointing"] = asdict(est)
    per_token = {m: (QWEN25[m].layers * STORED[m].layer_checkpointed + STORED[m].layer) for m in chosen}
    print("  (GiB; 'update' = weights + LoRA/optimizer + activations + fused head + vLLM asleep + "
          f"{CUDA_CONTEXT_GIB:.0f} GiB context; '(plain)' = the head without marft's fused pass, not added)")
    if args.json:
        print(json.dumps({"gpu_gib": GPU_GIB, "headroom": HEADROOM, "micro_batch_tokens": t,
                          "checkpointed_bytes_per_token": per_token, "models": report}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
