"""The critic's view of the global state, and the value head (its config: ``settings/critic.py``).

The critic is a LoRA adapter on the *same* base model as the agents plus a linear value head
reading the final hidden state (after the model's last norm). The head is kept in float32
whatever the base dtype: it is tiny and its outputs feed value losses whose scale matters.

Critic modes (``CriticConfig.mode``, listed once in ``marft_agents.settings.critic``)
-----------------------------------------------------------------------------------
``centralised`` (default; MAPPO's centralised training, decentralised execution)
    One critic adapter ``critic`` for the team; its input at a decision is the **global state**
    before the acting agent speaks (:class:`GlobalStateLog`): the task, every agent's output
    so far (earlier rounds with their grades, and this round's outputs up to now) and D_t.
``per_agent`` (the SII-MARFT option)
    One critic adapter ``critic_<agent_id>`` per agent, each reading the same global state; an
    agent's decisions are valued (and trained) by its own critic.
``local`` (ablation; the behaviour before critic modes existed)
    One critic adapter ``critic`` reading the acting agent's own prompt (system prompt +
    observation). Under ``chain`` this sees the same outputs as the global state; under
    ``independent`` / ``dag`` / ``orchestrated`` it ignores what the agent cannot see.

Every mode gives action-level values (at the last token of the critic's input) and token-level
values (the acting agent's response appended to the critic's input, one value per prefix).

The global state as a growing log
---------------------------------
Under the global-state modes the critic reads, for each episode, one log that grows decision by
decision (:class:`GlobalStateLog`): the critic's system turn (``CRITIC_SYSTEM_PROMPT``, from the
tokenizer's chat template), then::

    TASK <id>: <prompt>                                   <- env.state()["text"] so far
    DECISION round 1: D_t acting order a -> b; a -> b (child sees parent's output); NEXT TO ACT: a (role)
    [round 1] a: <a's output>                             <- what the transcript gained since
    DECISION round 1: D_t ...; NEXT TO ACT: b (role)
    ...

Decision k's critic input is the log up to the end of its ``DECISION`` line, so the input of
decision k+1 *extends* the input of decision k token for token (each appended segment is
tokenised on its own). Under token-level values (MARFT-T) the log also holds each decision's
response tokens right after its ``DECISION`` line (:meth:`GlobalStateLog.add_response`): a
token's value is read on the input with the response so far appended, so decision k's input
plus its whole response must be a prefix of decision k+1's input too. The transcript line that
follows would repeat the output as the env rendered it (``[round 1] a: <a's output>``); when the
response's text (stripped, at least ``REPEAT_CUT_MIN_CHARS`` long) occurs verbatim in what the
transcript gained, its first occurrence is cut from the log, keeping the rest of the line
(speaker, grade): the critic has just read those very tokens. An env that renders the output
otherwise keeps its line whole. That is what makes the critic cheap: a no-grad or gradient pass over the
longest input of an episode yields the values of all its decisions at once
(``Scorer.state_values`` merges inputs that are prefixes of one another, exactly: causal
attention makes a prefix's last hidden state independent of what follows). The transcript is
the env's ``state()`` text (``TextTaskEnv.transcript``, append-only) read before the agent acts;
D_t is the round graph in the agent's ``infos["dependency"]``; both are whatever the env's
dependency produced, so every dependency kind is covered. When the transcript is not an
extension of what the log has read (an env whose state text is rewritten) or the log would pass
``max_state_chars``, the log restarts from the current transcript (head and tail kept): still the
whole global state, only not merged with the earlier decisions.

Version history: the first critic rendered one chat-formatted prompt per decision ("GLOBAL STATE
before <agent> ..."), whose inputs shared nothing across an episode's decisions; the log
replaced it to cut the critic's share of MARFT-A's rollout and update (measure: ``python
benchmarks/bench_rollout.py --train-settings --unmerged-critic``: merged rows against one row
per decision).
Token-level values then got the responses' own tokens in the log (``add_response``), so that
MARFT-T's values merge too; action-level logs are unchanged by that. Then the transcript's
verbatim repeat of each response was cut from token-level logs (``REPEAT_CUT_MIN_CHARS``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

CRITIC_SYSTEM_PROMPT = ("You are the critic of a team of agents solving a task together. Judge how "
                        "likely the team is to solve it, given the log of the episode below.")
"""The critic's system turn for the global-state modes (shared prefix of every critic input)."""
REPEAT_CUT_MIN_CHARS = 8
"""Shortest response text (stripped) whose verbatim repeat in the transcript a token-level log
cuts: shorter strings could match the env's own text (a round number, a one-digit answer) and
cost few tokens anyway."""


def describe_dependency(dependency: Mapping[str, Any] | None) -> str:
    """D_t as one line: acting order and edges (``infos["dependency"]``, ``RoundGraph.as_dict``)."""
    if not dependency:
        return "unknown"
    order = " -> ".join(dependency.get("active", [])) or "nobody"
    edges = [f"{parent} -> {child}" for parent, child in dependency.get("edges", [])]
    seen = "; ".join(edges) + " (child sees parent's output)" if edges else "no edges: agents act independently"
    return f"acting order {order}; {seen}"


def decision_line(dependency: Mapping[str, Any] | None, agent: str, role: str, round_index: int) -> str:
    """The log line the critic's value of a decision is read at (see the module docstring)."""
    return f"DECISION round {round_index}: D_t {describe_dependency(dependency)}; NEXT TO ACT: {agent} ({role})"


def truncate_middle(text: str, max_chars: int) -> str:
    """``text`` cut to about ``max_chars`` characters, keeping its head (the task) and its tail
    (the freshest outputs); 0 = no limit."""
    if not max_chars or len(text) <= max_chars:
        return text
    half = max(max_chars // 2 - 16, 1)
    return text[:half] + "\n[... truncated ...]\n" + text[-half:]


class GlobalStateLog:
    """One episode's critic input under the global-state modes, grown one decision at a time.

    Args:
        system_ids: the critic's system turn (token ids; the start of every input).
        encode: text -> token ids without special tokens.
        max_chars: longest log text before the log restarts (0 = no limit).
    """

    def __init__(self, system_ids: list[int], encode: Callable[[str], list[int]], max_chars: int = 0):
        self.system_ids, self.encode, self.max_chars = list(system_ids), encode, max_chars
        self.ids: list[int] = []
        self.seen = ""  # transcript text the log has read
        self.chars = 0  # log text length so far (without the system turn)
        self.restarts = 0  # how often the log could not be extended (diagnostics, tests)
        self.repeat = ""  # the last response's text, already in the log as tokens (token level)

    def extend(self, transcript: str, dependency: Mapping[str, Any] | None, agent: str, role: str,
               round_index: int) -> list[int]:
        """The critic's input ids for the decision about to be taken (a new list)."""
        line = decision_line(dependency, agent, role, round_index)
        fresh = not self.ids or not transcript.startswith(self.seen)
        gained = transcript[len(self.seen):]
        if self.repeat and self.repeat in gained:  # the response's tokens precede it in the log
            gained = gained.replace(self.repeat, "", 1)
        self.repeat = ""
        segment = f"{gained}\n{line}" if not fresh else ""
        if not fresh and self.max_chars and self.chars + len(segment) > self.max_chars:
            fresh = True
        if fresh:
            self.restarts += bool(self.ids)
            segment = f"{truncate_middle(transcript, self.max_chars)}\n{line}"
            self.ids, self.chars = list(self.system_ids), 0
        self.ids += self.encode(segment)
        self.seen, self.chars = transcript, self.chars + len(segment)
        return list(self.ids)

    def add_response(self, response_ids: list[int], text: str) -> None:
        """Append the acting agent's response tokens (token-level values; see the module
        docstring), so that the last input returned by :meth:`extend` plus ``response_ids`` is a
        prefix of the next one. ``text`` (the decoded response) counts towards ``max_chars``; its
        verbatim repeat in the next transcript segment is cut (module docstring)."""
        self.ids += list(response_ids)
        self.chars += len(text)
        stripped = text.strip()
        self.repeat = stripped if len(stripped) >= REPEAT_CUT_MIN_CHARS else ""


class ValueHead(nn.Module):
    """``hidden [..., H]`` and ``slots [...]`` -> ``value [...]``, in float32:
    ``scale * (w[k] . (hidden - feat_shift[k]) / feat_scale[k] + b[k]) + shift`` for slot ``k``.

    **Slots** (``critic.per_agent_head``): one row of weights and feature statistics per acting
    agent, so that a team critic values each agent's decisions with a head of their own on the
    shared critic adapter. The state each decision is valued at ends with that decision's line
    (``NEXT TO ACT: <agent> (<role>)``, or the agent's own prompt under ``local``); the hidden
    states of different agents' decision points differ far more than those of different tasks,
    so one set of feature statistics over all of them leaves each agent's task spread small
    after standardisation, and one weight vector must serve inputs of different geometry.
    One slot: the single head of before.

    Two normalisations, both off until first folded (then the head is the plain ``w . h + b``):

    * **Features** (``critic.feature_norm``): ``feat_shift, feat_scale [S, H]`` are the moving
      per-dimension mean and spread of the hidden states each slot read in the learner's first
      critic pass of each update (handed to :meth:`gather` by the learner; folded after the update,
      :meth:`fold_features`, so an update's state is whole when it is saved). A language
      model's last hidden states share one large component across states; what tells two tasks
      apart is a small spread around it, from which the task can still be decoded linearly
      (measure: ``python benchmarks/critic_probe.py``). Standardising the
      dimensions lets a linear head with Adam's per-weight steps find that spread instead of
      fitting the shared component.
    * **Targets** (``critic.value_norm``, PopArt): ``shift, scale`` (``mu, sigma``), the moving
      mean and spread of the regression targets (:meth:`update_normaliser`), shared by the slots
      (they predict the same returns).

    Each fold rescales ``w, b`` so that every output stays what it was. The moments (debiased
    exponential moving averages) travel with the head's state dict; the features gathered
    since the last fold (``pending``) do not.
    """

    SCALE_FLOOR = 1e-2
    """Smallest ``sigma``: targets that do not vary yet (every early episode failed) would
    otherwise blow normalised errors up without bound."""
    FEATURE_FLOOR = 1e-6
    """Smallest per-dimension feature spread (a dimension constant across states)."""

    def __init__(self, hidden_size: int, init_std: float = 0.0, bias: float = 0.0,
                 generator: torch.Generator | None = None, slots: int = 1) -> None:
        super().__init__()
        if slots < 1:
            raise ValueError(f"a value head needs >= 1 slot, got {slots}")
        self.slots = slots
        # nn.Linear draws its default init from the global RNG: one row's worth, whatever the
        # slots, so seeded runs sample the same tokens with any number of slots (the init is
        # overwritten below anyway)
        self.linear = nn.Linear(hidden_size, 1, dtype=torch.float32)
        if slots > 1:  # weight [S, H], bias [S]
            self.linear.weight = nn.Parameter(torch.empty(slots, hidden_size, dtype=torch.float32))
            self.linear.bias = nn.Parameter(torch.empty(slots, dtype=torch.float32))
            self.linear.out_features = slots
        with torch.no_grad():
            if init_std > 0:
                self.linear.weight.normal_(0.0, init_std, generator=generator)
            else:
                self.linear.weight.zero_()
            self.linear.bias.fill_(bias)
        self.register_buffer("shift", torch.zeros((), dtype=torch.float32))
        self.register_buffer("scale", torch.ones((), dtype=torch.float32))
        self.register_buffer("moments", torch.zeros(3, dtype=torch.float32))
        self.register_buffer("feat_shift", torch.zeros(slots, hidden_size, dtype=torch.float32))
        self.register_buffer("feat_scale", torch.ones(slots, hidden_size, dtype=torch.float32))
        # float64: the spread is ~1e-4 of the mean square, which E[x^2] - E[x]^2 in float32 loses
        self.register_buffer("feat_moments", torch.zeros(slots, 2, hidden_size, dtype=torch.float64))
        self.register_buffer("feat_weight", torch.zeros(slots, dtype=torch.float64))
        self.register_buffer("pending", torch.zeros(slots, 2, hidden_size, dtype=torch.float64), persistent=False)
        self.register_buffer("pending_count", torch.zeros(slots, dtype=torch.float64), persistent=False)

    def forward(self, hidden: torch.Tensor, slots: torch.Tensor | None = None) -> torch.Tensor:
        """``hidden [..., H]``, ``slots [...]`` (long; None = slot 0 everywhere) -> ``[...]``."""
        # contiguous: callers pass slices, and torch's linear is very slow on strided inputs
        # when the weight is frozen (see MultiAgentPolicy.__init__)
        x = hidden.float().contiguous()  # [..., H]
        if slots is None:
            slots = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)  # [...]
        slots = slots.to(device=x.device, dtype=torch.long).expand(x.shape[:-1])  # [...]
        z = (x - self.feat_shift[slots]) / self.feat_scale[slots]  # [..., H]
        out = (z * self.linear.weight[slots]).sum(-1) + self.linear.bias[slots]  # [...]
        return out * self.scale + self.shift

    @torch.no_grad()
    def gather(self, hidden: torch.Tensor, slots: torch.Tensor | None = None) -> None:
        """Add the hidden states a pass read (``hidden [..., H]``, ``slots [...]``, as given to
        :meth:`forward`; ``scoring.HeadReads``) to the sums :meth:`fold_features` folds."""
        x = hidden.float().contiguous()  # [..., H]
        if slots is None:
            slots = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)  # [...]
        slots = slots.to(device=x.device, dtype=torch.long).expand(x.shape[:-1])  # [...]
        flat = x.reshape(-1, x.shape[-1]).double()  # [N, H]
        index = slots.reshape(-1).to(self.pending.device)  # [N]
        flat = flat.to(self.pending.device)
        self.pending[:, 0].index_add_(0, index, flat)
        self.pending[:, 1].index_add_(0, index, flat * flat)
        self.pending_count.index_add_(0, index, torch.ones_like(index, dtype=torch.float64))

    @torch.no_grad()
    def fold_features(self, beta: float, pending: torch.Tensor | None = None,
                      count: torch.Tensor | None = None) -> bool:
        """Fold the gathered feature sums (``pending [S, 2, H]`` and ``count [S]``: this head's own
        by default; a data-parallel caller passes the sums of every rank) into each slot's moving
        moments, move its ``feat_shift, feat_scale`` to them, keep every output
        (``w'_i = w_i s'_i / s_i``, ``b' = b + sum_i w_i (m'_i - m_i) / s_i``) and clear the pending
        sums. Slots that read nothing keep their statistics. False when nothing was gathered."""
        pending = (self.pending if pending is None else pending).to(self.pending, copy=True)  # [S, 2, H]
        count = (self.pending_count if count is None else torch.as_tensor(count)).to(self.pending_count, copy=True)
        self.pending.zero_()
        self.pending_count.zero_()
        folded = False
        for k in range(self.slots):
            if count[k] <= 0:
                continue
            folded = True
            batch = pending[k] / count[k]  # [2, H] first and second moments
            self.feat_moments[k].mul_(beta).add_((1.0 - beta) * batch)
            self.feat_weight[k] = beta * self.feat_weight[k] + (1.0 - beta)
            first = self.feat_moments[k, 0] / self.feat_weight[k]  # [H]
            var = self.feat_moments[k, 1] / self.feat_weight[k] - first ** 2  # [H]
            mean = first.float()  # [H]
            scale = var.clamp(min=0.0).sqrt().float().clamp(min=self.FEATURE_FLOOR)  # [H]
            w = self.linear.weight[k]  # [H]
            self.linear.bias[k] += (w * (mean - self.feat_shift[k]) / self.feat_scale[k]).sum()
            w.mul_(scale / self.feat_scale[k])
            self.feat_shift[k] = mean
            self.feat_scale[k] = scale
        return folded

    def upgrade_state(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` (this head's entries of a saved state dict) in this head's shapes: a head
        saved with one slot (or before slots and feature statistics existed) serves every slot,
        its one row copied to each."""
        out = dict(state)
        rows = {"linear.weight": 2, "linear.bias": 1, "feat_shift": 2, "feat_scale": 2, "feat_moments": 3,
                "feat_weight": 1}  # the dims of each per-slot tensor, slot dim included
        for key, dims in rows.items():
            tensor = out.get(key)
            if tensor is None:
                continue
            if tensor.dim() == dims - 1:  # before slots: add the slot dim
                tensor = tensor.unsqueeze(0)
            if tensor.shape[0] == 1 and self.slots > 1:
                tensor = tensor.expand(self.slots, *tensor.shape[1:]).clone()
            out[key] = tensor
        return out

    @torch.no_grad()
    def update_normaliser(self, targets: torch.Tensor, beta: float) -> None:
        """Fold ``targets [N]`` into the moving moments and move ``shift, scale`` to them,
        rescaling ``w, b`` so that every output stays what it was (PopArt's "preserving
        outputs precisely": ``w' = w sigma / sigma'``, ``b' = (sigma b + mu - mu') / sigma'``).

        Except at the first fold: a fresh head has learned nothing worth preserving, and
        preserving its initial output (0) would leave the bias to walk to the mean return in
        normalised units, at most about one learning rate per Adam step (hundreds of steps).
        The first fold keeps ``w, b``, so a zero-initialised head then predicts the mean return."""
        targets = targets.detach().float().reshape(-1).to(self.moments.device)  # [N]
        if targets.numel() == 0:
            return
        first = bool(self.moments[2] == 0)
        batch = torch.stack([targets.mean(), (targets * targets).mean(), torch.ones((), device=targets.device)])
        self.moments.mul_(beta).add_((1.0 - beta) * batch)
        mean = self.moments[0] / self.moments[2]
        var = (self.moments[1] / self.moments[2] - mean * mean).clamp(min=0.0)
        scale = var.sqrt().clamp(min=self.SCALE_FLOOR)
        if not first:
            self.linear.weight.mul_(self.scale / scale)
            self.linear.bias.copy_((self.scale * self.linear.bias + self.shift - mean) / scale)
        self.shift.copy_(mean)
        self.scale.copy_(scale)
