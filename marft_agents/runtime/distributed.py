"""Data-parallel MARFT on ``torch.distributed`` (launched by ``torchrun``; guide: docs/distributed.md).

Every rank holds the base model and all adapters. One update runs as follows:

1. **Rollouts.** Every rank draws the *global* plan of the update from the same seeded task
   order (so the task order is a function of the seed only, whatever the world size) and plays
   its contiguous share of whole task groups (``RolloutCollector.collect(share=...)``), with its
   own sampling RNG (rank 0 keeps the run's seed, so one rank is exactly one process).
2. **Gather.** The finished episodes (token ids, log-probs, values, rewards: a few hundred KB,
   no activations) are all-gathered, so every rank holds the global rollout in plan order.
   Advantages, returns, whitening statistics and the minibatch permutation are then computed
   over the global batch, identically on every rank.
3. **Update.** Every global minibatch is split across ranks (greedily balanced by token count,
   the same split on every rank); each rank runs the forward/backward passes of its share with
   the loss normalisers of the *global* minibatch, and the gradients of every trainable adapter
   and value head are summed across ranks (:meth:`DataParallel.reduce_step`) before clipping
   and the optimizer step. The result equals one process on the same global batch up to float
   rounding, so the parameters stay identical on every rank.
4. **Evaluation** plays each rank's contiguous share of the fixed problem set and gathers the
   per-problem results in problem order (same figures as one process with greedy decoding).

Rank 0 alone writes metrics, checkpoints, ``best/`` and ``summary.json``; the checkpoint holds
every rank's RNG state (``state["ranks"]``), so a resume with the same world size continues
exactly. In one process the Trainer and the learners hold a :class:`SingleProcess` instead of a
:class:`DataParallel`: the same methods, which then keep everything on the one rank and run no
collective (``torch.distributed`` need not be initialised).

One process per GPU: :func:`process_group` makes ``cuda:<LOCAL_RANK>`` the current device of each
rank before joining, and nothing here touches another rank's GPU (the collectives run on the
current device; ``marft_agents/runtime/seeding.py``'s ``fork_rng`` and ``cuda_rng_state`` fork and save
the RNG of that device alone). Each rank builds its own sampling engine on its own device.

A collective that waits longer than the process group's timeout (:func:`process_group_timeout`:
``MARFT_DIST_TIMEOUT_S`` seconds, default 30 minutes) fails on every rank instead of hanging the
job: a rank that crashed or stalls (a stuck rollout, a full disk while rank 0 writes a
checkpoint) then ends the run with an error naming the collective.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from marft_agents.runtime.seeding import seed_everything

log = logging.getLogger(__name__)

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""Environment variables ``torchrun`` sets for every process it starts (``LOCAL_RANK`` too)."""

TIMEOUT_VARIABLE = "MARFT_DIST_TIMEOUT_S"
"""Environment variable overriding the process group's timeout, in seconds (:func:`process_group_timeout`)."""
DEFAULT_TIMEOUT_S = 30 * 60
"""The process group's timeout when ``MARFT_DIST_TIMEOUT_S`` is unset. Longer than torch's NCCL
default (10 minutes), which a healthy job can exceed while ranks wait at a collective for the
slowest one (rank 0 writing a checkpoint and ``best/``, a rank with the longest rollouts of a big
model); finite, so a dead or stuck rank ends the job with an error instead of holding every GPU."""


@dataclass(frozen=True)
class WorldInfo:
    """Where this process stands in the job."""

    rank: int = 0
    """Global rank, 0 .. world_size - 1."""
    world_size: int = 1
    """Number of processes training together."""
    local_rank: int = 0
    """Rank on this machine (picks the GPU ``cuda:<local_rank>``)."""

    @property
    def is_main(self) -> bool:
        """Rank 0: the only rank that writes files."""
        return self.rank == 0

    def share(self, count: int) -> range:
        """This rank's contiguous share of ``count`` items (earlier ranks get the remainder)."""
        base, extra = divmod(count, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))


def current_world() -> WorldInfo:
    """The process group's layout, or a world of one when ``torch.distributed`` is not running."""
    if not (dist.is_available() and dist.is_initialized()):
        return WorldInfo()
    return WorldInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def launched_by_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (or anything setting its variables)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def process_group_timeout(environ: Mapping[str, str] = os.environ) -> datetime.timedelta:
    """How long a collective may wait before it fails on every rank: ``MARFT_DIST_TIMEOUT_S``
    seconds (a positive number) when set, else :data:`DEFAULT_TIMEOUT_S`.

    Set it on every rank alike (``MARFT_DIST_TIMEOUT_S=7200 torchrun ...``); raise it when one
    step between two collectives legitimately takes longer (a very slow evaluation or rollout),
    lower it to learn sooner that a rank died. With NCCL, torch enforces it through its watchdog
    (``TORCH_NCCL_ASYNC_ERROR_HANDLING``, on by default), which aborts the stuck collective.
    """
    raw = environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{TIMEOUT_VARIABLE}={raw!r}: expected a positive number of seconds "
                         f"(unset it for the default, {DEFAULT_TIMEOUT_S} s)")
    return datetime.timedelta(seconds=seconds)


@contextlib.contextmanager
def process_group() -> Iterator[WorldInfo]:
    """Join the job ``torchrun`` started (gloo on CPU, NCCL when CUDA is available) for the
    duration of the block; a no-op world of one when not launched by ``torchrun`` or when the
    caller already initialised a group. Each rank's current CUDA device becomes
    ``cuda:<LOCAL_RANK>`` first; collectives time out after :func:`process_group_timeout`."""
    if not launched_by_torchrun() or (dist.is_available() and dist.is_initialized()):
        yield current_world()
        return
    if not dist.is_available():
        raise RuntimeError("launched by torchrun, but this torch build has no torch.distributed")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)  # "cuda" in the config now means this rank's GPU
    timeout = process_group_timeout()  # read before joining: a bad value fails here, not in a collective
    dist.init_process_group(backend="nccl" if cuda else "gloo", timeout=timeout)
    try:
        yield current_world()
    finally:
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """The sampling seed of ``rank``: the run's seed on rank 0 (one rank = one process), a
    derived independent one elsewhere."""
    return seed if rank == 0 else int(np.random.SeedSequence([seed, rank, 0xD15]).generate_state(1)[0])


def balanced_partition(costs: Sequence[float], world_size: int) -> list[int]:
    """Owner rank of every item: greedy longest-first onto the least loaded rank (ties: lower
    rank). Deterministic, so every rank computes the same split."""
    load = [0.0] * world_size
    owner = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        owner[i] = rank
        load[rank] += costs[i]
    return owner


def sample_cost(sample: Any) -> float:
    """Tokens a learner's forward pass reads for ``sample`` (the split's balancing weight)."""
    return float(len(sample.prompt_ids) + len(sample.response_ids))


class SingleProcess:
    """:class:`DataParallel`'s stand-in in one process: the same methods, no collectives.

    Rank 0 of a world of one owns every item, a gather is ``[obj]``, and a step's gradients,
    loss and statistics are already those of the whole minibatch, so :meth:`reduce_step` returns
    them unchanged. Stateless: one instance (:data:`SINGLE_PROCESS`) serves every holder.
    """

    world = WorldInfo()
    """A world of one (rank 0 of 1)."""

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def max(self, value: float) -> float:
        return value

    def broadcast_parameters(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Nothing to copy: rank 0's values are the only ones."""

    def local_indices(self, samples: Sequence[Any], cost: Callable[[Any], float] = sample_cost) -> list[int]:
        return list(range(len(samples)))

    def share(self, samples: Sequence[Any]) -> list[Any]:
        return list(samples)

    def share_groups(self, samples: Sequence[Any], key: Callable[[Any], Any]) -> list[Any]:
        return list(samples)

    def share_attribute(self, samples: Sequence[Any], local: Sequence[int], name: str) -> None:
        """Every sample is local: nothing to share."""

    def reduce_step(self, optimizers: Sequence[torch.optim.Optimizer], loss_total: float,
                    sums: dict[str, float]) -> tuple[float, dict[str, float]]:
        """The minibatch's loss and statistics as given; the gradients are left as they are."""
        return loss_total, sums

    def __repr__(self) -> str:
        return "SingleProcess()"


SINGLE_PROCESS = SingleProcess()
"""The one-process stand-in the Trainer and ``BaseLearner`` hold outside ``torchrun``."""


class DataParallel:
    """The collectives a learner and the trainer run when several ranks train together
    (:class:`SingleProcess` has the same methods for one process)."""

    def __init__(self, world: WorldInfo):
        if world.world_size < 2:
            raise ValueError("DataParallel needs a world of at least 2 ranks")
        self.world = world
        self.device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
            else torch.device("cpu")

    # -- generic collectives -------------------------------------------------------------------
    def gather(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order (pickled: for small metadata only)."""
        out: list[Any] = [None] * self.world.world_size
        dist.all_gather_object(out, obj)
        return out

    def max(self, value: float) -> float:
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor.item())

    def broadcast_parameters(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Copy rank 0's values into ``params`` everywhere (adapters initialised with different
        RNG states, or a model loaded differently, would otherwise drift apart silently)."""
        with torch.no_grad():
            for p in params:
                buffer = p.data.to(self.device)
                dist.broadcast(buffer, src=0)
                p.data.copy_(buffer)

    # -- the learner's hooks -------------------------------------------------------------------
    def local_indices(self, samples: Sequence[Any], cost: Callable[[Any], float] = sample_cost) -> list[int]:
        """Indices of the items of ``samples`` this rank processes (balanced, same on all ranks)."""
        owner = balanced_partition([cost(s) for s in samples], self.world.world_size)
        return [i for i, r in enumerate(owner) if r == self.world.rank]

    def share(self, samples: Sequence[Any]) -> list[Any]:
        """This rank's share of a global minibatch, in minibatch order."""
        return [samples[i] for i in self.local_indices(samples)]

    def share_groups(self, samples: Sequence[Any], key: Callable[[Any], Any]) -> list[Any]:
        """This rank's share of a global minibatch whose items stay with their group (``key``):
        the value loss keeps an episode's decisions on one rank, since their critic inputs run
        as one row (``critic.GlobalStateLog``). Balanced by the groups' summed cost."""
        groups: dict[Any, list[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault(key(s), []).append(i)
        members = list(groups.values())
        owner = balanced_partition([sum(sample_cost(samples[i]) for i in m) for m in members], self.world.world_size)
        mine = sorted(i for m, r in zip(members, owner) if r == self.world.rank for i in m)
        return [samples[i] for i in mine]

    def share_attribute(self, samples: Sequence[Any], local: Sequence[int], name: str) -> None:
        """After each rank set ``name`` on its ``local`` samples, give every rank all of them."""
        mine = {i: getattr(samples[i], name) for i in local}
        for part in self.gather(mine):
            for i, value in part.items():
                setattr(samples[i], name, value)

    def reduce_step(self, optimizers: Sequence[torch.optim.Optimizer], loss_total: float,
                    sums: dict[str, float]) -> tuple[float, dict[str, float]]:
        """Sum the gradients, the loss and the statistic sums of one minibatch step over ranks.

        Each rank's loss terms are already divided by the global minibatch's normalisers, so the
        sum of the ranks' gradients is the gradient of the global minibatch loss. A parameter
        that got no gradient on any rank keeps ``grad = None`` (AdamW skips it, as in one process).
        """
        params = [p for opt in optimizers for group in opt.param_groups for p in group["params"] if p.requires_grad]
        if params:
            # [sum numel + P]: every gradient (zeros where absent) and a has-gradient flag per parameter
            flat = torch.cat([(p.grad.detach().float() if p.grad is not None
                               else torch.zeros(p.shape, device=p.device)).reshape(-1).to(self.device) for p in params]
                             + [torch.tensor([float(p.grad is not None) for p in params], device=self.device)])
            dist.all_reduce(flat)
            present = flat[-len(params):].tolist()
            offset = 0
            for p, flag in zip(params, present):
                n = p.numel()
                p.grad = flat[offset: offset + n].view(p.shape).to(device=p.device, dtype=p.dtype).clone() \
                    if flag > 0 else None
                offset += n
        parts = self.gather((loss_total, sums))
        total: dict[str, float] = {}
        for _loss, part in parts:
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + value
        return sum(loss for loss, _ in parts), total


def merge_rollouts(parts: Sequence[Any]) -> Any:
    """One rollout from the ranks' rollouts (rank order = plan order): decision and episode
    indices are renumbered, task groups keep their global index."""
    from marft_agents.episodes import Rollout

    merged = Rollout()
    for part in parts:
        episode_offset, decision_offset = len(merged.episodes), len(merged.decisions)
        for decision in part.decisions:
            decision.episode += episode_offset
            merged.decisions.append(decision)
        for episode in part.episodes:
            episode.decisions = [i + decision_offset for i in episode.decisions]
            merged.episodes.append(episode)
    return merged


# -- the trainer's hooks (marft_agents/run/trainer.py) -------------------------------------------------
def attach(trainer: Any) -> DataParallel | SingleProcess:
    """Prepare a freshly built ``Trainer`` for a world of several ranks; :data:`SINGLE_PROCESS`
    in one process (the learner keeps its own ``data_parallel``: it is not touched).

    Checks that the update splits into whole task groups per rank, makes every rank start from
    rank 0's adapters, hands the learner its :class:`DataParallel` and seeds this rank's
    sampling RNG (after the model and adapters were built from the run's seed).
    """
    from marft_agents.config_schema import ConfigError

    world = trainer.world
    if world.world_size < 2:
        return SINGLE_PROCESS
    cfg, group = trainer.cfg, trainer.plan.group_size  # the run plan's (marft_agents/run_plan.py)
    episodes = cfg.schedule.episodes_per_update
    if episodes % (group * world.world_size):
        raise ConfigError(
            f"schedule.episodes_per_update ({episodes}) must be a multiple of the learner's group_size "
            f"({group}) times the number of ranks ({world.world_size}) = {group * world.world_size}: every rank "
            "plays the same number of whole task groups; change episodes_per_update or --nproc_per_node")
    learner = trainer.learner
    if not hasattr(learner, "data_parallel"):
        raise ConfigError(
            f"algorithm {cfg.algorithm!r} ({type(learner).__name__}) does not support data-parallel training "
            "(it has no data_parallel attribute; derive it from marft_agents.learners.BaseLearner); run it "
            "in one process")
    dp = DataParallel(world)
    learner.data_parallel = dp
    policy = trainer.policy
    dp.broadcast_parameters([p for name in policy.adapter_names for p in policy.adapter_parameters(name)])
    seed_everything(rank_seed(cfg.seed, world.rank))
    log.info("rank %d of %d: %d episodes per update on this rank", world.rank, world.world_size,
             episodes // world.world_size)
    return dp


def collect(trainer: Any, num_episodes: int) -> Any:
    """This rank's share of the update's episodes, gathered into the global rollout."""
    dp = trainer.data_parallel
    mine = trainer.collector.collect(num_episodes, share=(dp.world.rank, dp.world.world_size))
    return merge_rollouts(dp.gather(mine))


def agree_on_stop(trainer: Any) -> str | None:
    """The stop request (a signal name) if any rank got one, on every rank alike, so that all
    ranks stop after the same update instead of one waiting forever in a collective."""
    dp = trainer.data_parallel
    requests = [r for r in dp.gather(trainer.stop_requested) if r is not None]
    if requests and trainer.stop_requested is None:
        trainer.stop_requested = requests[0]
    return trainer.stop_requested


def agree_on_seconds(trainer: Any, seconds: float) -> float:
    """The slowest rank's duration (time budgets must end the run after the same update everywhere)."""
    return trainer.data_parallel.max(seconds)


def rank_states(trainer: Any, rng_state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint adds for several ranks: every rank's RNG state, in rank order (nothing
    in one process: ``state["rng"]`` is the only rank's)."""
    dp = trainer.data_parallel
    if dp.world.world_size == 1:
        return {}
    return {"ranks": dp.gather(rng_state)}


def rng_state_to_restore(trainer: Any, state: dict[str, Any]) -> dict[str, Any] | None:
    """This rank's RNG state from a checkpoint; None (and a reseed) when it was written by
    another number of ranks, which works but cannot repeat the uninterrupted run exactly."""
    world = trainer.world
    ranks = state.get("ranks")
    saved = len(ranks) if ranks else 1
    if saved == world.world_size:
        return ranks[world.rank] if ranks else state["rng"]
    if world.is_main:
        log.warning("the checkpoint was written by %d rank(s), this run has %d: adapters, optimizers, counters "
                    "and the task order resume as saved, but the ranks' sampling RNG streams cannot, so the run "
                    "will not repeat an uninterrupted one exactly", saved, world.world_size)
    if world.rank == 0:
        return state["rng"]
    update = int(state["counters"]["update"])
    seed_everything(int(np.random.SeedSequence([trainer.cfg.seed, world.rank, update]).generate_state(1)[0]))
    return None
