"""The env contract's checks fail on envs that break them, and name the check that failed.

``GoodEnv`` passes every check; each broken env differs from it in one way and must fail the check
for that way (and a second check only where the same flaw necessarily shows there too).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import AECEnv
from toy import NumberTasks, ToyEnv

from marft_envs import Task
from marft_envs.core.dependency import Dependency
from marft_envs.testing import CHECKS, PASSED, EnvContractError, check_env


class SplitTasks(NumberTasks):
    """Tasks ``offset .. offset + n``: the splits are disjoint when their ranges are."""

    def __init__(self, offset: int, n: int = 40):
        super().__init__(n)
        self.offset = offset

    def __getitem__(self, index: int) -> Task:
        return super().__getitem__(self.offset + index)


class GoodEnv(ToyEnv):
    """The toy env with disjoint train (0-39) and test (1000-1039) splits; a reasoner -> actor chain."""

    test_offset = 1000

    def __init__(self, split: str = "train", profile: str = "dual", **kwargs):
        super().__init__(profile=profile, **kwargs)
        self.tasks = SplitTasks(0 if split == "train" else self.test_offset)


class ApiBroken(GoodEnv):
    """A new observation space object on every call (PettingZoo requires the same object)."""

    def observation_space(self, agent):
        return spaces.Dict({"text": spaces.Text(10)})


_resets = itertools.count()


class SeedBroken(GoodEnv):
    """Picks its task from a process-wide counter, not from the seed, so ``reset(seed=...)`` does
    not fix the episode. (Not the global RNG: two draws of it hit the same task 1 time in 40, and
    then seed_test passes.)"""

    def _next_task_index(self) -> int:
        return next(_resets) % len(self.tasks)


class SplitsBroken(GoodEnv):
    """The test split starts inside the training range: tasks 20-39 are in both."""

    test_offset = 20


class StateBroken(GoodEnv):
    """``state()`` shows only the latest transcript line, so it shrinks as the episode goes on."""

    def state(self):
        state = super().state()
        return {**state, "text": state["text"].splitlines()[-1]}


class HidesParents(GoodEnv):
    """Its observations leave out this round's parents although D_t says the actor sees the reasoner."""

    def compose_observation(self, agent):
        return self.template.render(task=self.task, history=self.history, parents=[],
                                    graded_agent=self.quoted_output_agent)


class LeaksNonParents(GoodEnv):
    """Declares independent agents (D = 0) but shows every output of this round to everyone."""

    def __init__(self, **kwargs):
        super().__init__(dependency="independent", **kwargs)

    def compose_observation(self, agent):
        said = "\n".join(f"{a} wrote: {t}" for a, t in self.round_outputs.items() if a != agent)
        return f"{super().compose_observation(agent)}\n{said}"


class StateDisagrees(GoodEnv):
    """``state()["dependency"]`` is another graph than the one in ``infos``."""

    def state(self):
        other = Dependency.independent().plan(self.possible_agents, self.round_index, self.history)
        return {**super().state(), "dependency": other.as_dict()}


class AdjacencyTransposed(GoodEnv):
    """Its D_t's adjacency matrix is transposed, so it disagrees with the edges it lists."""

    def _refresh_infos(self):
        super()._refresh_infos()
        for info in self.infos.values():
            info["dependency"] = {**info["dependency"],
                                  "adjacency": np.array(info["dependency"]["adjacency"]).T.tolist()}


class NotInCycles(AECEnv):
    """A plain (non-marft) AEC env that claims to be parallelizable while agent ``a_0`` acts twice
    per cycle, which PettingZoo's ``aec_to_parallel`` cannot convert. Fine as an AEC env."""

    metadata = {"name": "not_in_cycles_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self):
        super().__init__()
        self.possible_agents = ["a_0", "a_1"]
        self._space = spaces.Discrete(2)
        self.render_mode = None

    def observation_space(self, agent):
        return self._space

    def action_space(self, agent):
        return self._space

    def observe(self, agent):
        return np.int64(self._turn % 2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._turn, self.agent_selection = 0, "a_0"

    def step(self, action):
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self._turn += 1
        self.agent_selection = ["a_0", "a_0", "a_1"][self._turn % 3]
        if self._turn >= 9:
            self.truncations = dict.fromkeys(self.agents, True)

    def render(self):
        return None

    def close(self):
        pass


def test_a_sound_env_passes_every_check():
    assert check_env(GoodEnv) == dict.fromkeys(CHECKS, PASSED)


@pytest.mark.parametrize("broken,check,says", [
    (ApiBroken, "api", "api_test failed"),
    (SeedBroken, "seed", "seed_test failed"),
    (NotInCycles, "parallel", "expects agents to step in a cycle"),
    (SplitsBroken, "splits", "share 20 task(s)"),
    (StateBroken, "state", "shrank or changed"),
    (HidesParents, "dependency", "does not hold reasoner_0's utterance"),
    (LeaksNonParents, "dependency", "but D_t has no edge ['reasoner_0', 'actor_0']"),
    (StateDisagrees, "dependency", "state()['dependency']"),
    (AdjacencyTransposed, "dependency", "disagrees with its edges"),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_a_broken_env_fails_its_check_by_name(broken, check, says):
    with pytest.raises(EnvContractError) as caught:
        check_env(broken)
    failures = caught.value.failures
    assert check in failures and says in failures[check], failures
    assert f"[{check}]" in str(caught.value) and broken.__qualname__ in str(caught.value)
    # Only the flaw's own check fails, but for a flaw that also shows in the parallel view.
    assert set(failures) - {check} <= {"parallel"}, failures


def test_checks_that_do_not_apply_are_skipped_with_a_reason():
    outcomes = check_env(NotInCycles, checks=["splits", "state", "dependency"])
    assert outcomes == {"splits": "skipped: the env takes no split keyword",
                        "state": "skipped: the env does not implement state()",
                        "dependency": "skipped: the env exposes no D_t (no infos[agent]['dependency'])"}
    aec_only = type("AecOnly", (GoodEnv,), {"metadata": {**GoodEnv.metadata, "is_parallelizable": False}})
    assert check_env(aec_only, checks=["parallel"])["parallel"].startswith("skipped: AEC-only env")
    assert check_env(GoodEnv, checks=["api"], skip={"api": "not today"}) == {"api": "skipped: not today"}


def test_a_split_whose_data_is_absent_is_skipped():
    class NoTestData(GoodEnv):
        def __init__(self, split="train", **kwargs):
            if split == "test":
                raise FileNotFoundError("test.jsonl not found")
            super().__init__(split=split, **kwargs)

    assert check_env(NoTestData, checks=["splits"])["splits"].startswith("skipped: split 'test' could not be made")


def test_bad_input_gets_one_clear_line():
    with pytest.raises(ValueError, match=r"unknown check 'stat'; expected names from \['api'"):
        check_env(GoodEnv, checks=["stat"])
    with pytest.raises(ValueError, match="unknown environment id 'marft/Nope-v0'"):
        check_env("marft/Nope-v0")
    with pytest.raises(TypeError, match="an env id .* or a class/factory"):
        check_env(3)
