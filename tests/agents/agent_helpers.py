"""Helpers for the learner tests: tiny random models, cheap envs, small configs.

Not a ``conftest.py`` on purpose: ``tests/envs`` does ``from conftest import ...`` (the root
conftest), which a second module named ``conftest`` would shadow. Tests import from here.

Device: the model tests run on ``DEVICE``, read once from the environment variable
``MARFT_TEST_DEVICE`` (default ``cpu``), so that ``MARFT_TEST_DEVICE=cuda pytest tests/agents``
runs the same tests on a GPU. ``small_config`` sets ``model.device`` to it, the ``tiny`` fixture,
``tiny_on_device`` and ``load_tiny_model`` put the tiny model there, and ``seeded_generator``
gives a sampling generator on it. Asking for a device this machine lacks is an error at import,
not a silent fallback to the CPU.
"""

from __future__ import annotations

import os

import pytest
import torch

import marft_envs
from marft_envs import RoundOutcome, Task, TextTaskEnv

# Tiny models gain nothing from intra-op threads, and on a loaded machine OpenMP threads that
# spin-wait for a busy core make each matmul ~100x slower (measured: 0.3 s vs 2 ms a forward).
torch.set_num_threads(1)

DEVICE_VARIABLE = "MARFT_TEST_DEVICE"


def _device_from_environment() -> torch.device:
    name = os.environ.get(DEVICE_VARIABLE, "").strip() or "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise RuntimeError(f"{DEVICE_VARIABLE}={name!r} is not a torch device string such as 'cpu', "
                           f"'cuda' or 'cuda:1' ({err})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"{DEVICE_VARIABLE}={name!r} but torch.cuda.is_available() is False on this "
                               f"machine; unset {DEVICE_VARIABLE} to run the tests on the CPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(f"{DEVICE_VARIABLE}={name!r} but this machine has "
                               f"{torch.cuda.device_count()} CUDA device(s)")
    return device


DEVICE = _device_from_environment()
"""Where the model tests run (``MARFT_TEST_DEVICE``, default cpu)."""

# Short system prompts keep the byte-level tiny tokenizer's prompts short (fast tests).
DUAL = {"name": "tdual", "roles": [{"name": "reasoner", "system_prompt": "Think."},
                                   {"name": "actor", "system_prompt": "Answer.", "graded": True}]}
SOLO = {"name": "tsolo", "roles": [{"name": "actor", "system_prompt": "Answer.", "graded": True}]}


class LetterTasks:
    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> Task:
        return Task(task_id=f"letters/{index}", prompt=f"Say {index}.", answer=None)


class LettersEnv(TextTaskEnv):
    """Team reward = share of ASCII letters in the graded output: a dense signal a random model
    gets non-trivially, so advantages vary. Solved (terminates) at >= 0.9."""

    metadata = {"name": "test_letters_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, **kwargs):
        kwargs.setdefault("profile", DUAL)
        kwargs.setdefault("horizon", 2)
        super().__init__(LetterTasks(), **kwargs)

    def grade_round(self, task, outputs, round_index):
        text = self.graded_output(outputs)
        share = sum(c.isascii() and c.isalpha() for c in text) / max(len(text), 1)
        return RoundOutcome(team_reward=share, solved=share >= 0.9, feedback="More letters.",
                            agent_rewards={a: 0.5 for a in outputs})


LETTERS_ID = "test/Letters-v0"
if LETTERS_ID not in marft_envs.list_envs():
    marft_envs.register(LETTERS_ID, LettersEnv)


def tiny_on_device(**kwargs):
    """``tiny_model_and_tokenizer(**kwargs)`` with the model moved to ``DEVICE``."""
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(**kwargs)
    return model.to(DEVICE), tokenizer


def load_tiny_model(cfg, hardware=None):
    """A stand-in for ``models.load_model_and_tokenizer`` (tests monkeypatch it): the tiny model
    of the ``tiny`` fixture, on the configured ``cfg.device`` like the real loader (``hardware``,
    the run plan's, is not read: the tiny model is built in float32)."""
    from marft_agents.model.loading import resolve_device
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)
    return model.to(resolve_device(cfg.device)), tokenizer


def seeded_generator(seed: int) -> torch.Generator:
    """A sampling generator on ``DEVICE`` (``policy.generate`` needs one on the model's device)."""
    return torch.Generator(device=DEVICE).manual_seed(seed)


@pytest.fixture
def tiny():
    return tiny_on_device(seed=0, hidden_size=32, num_layers=1)


def small_config(tmp_path, **sections):
    """A TrainConfig small enough for CPU tests, on ``DEVICE``; ``sections`` override dotted keys."""
    from marft_agents.config import load_config

    data = {
        "algorithm": "mappo_action",
        "model": {"device": str(DEVICE)},
        "env": {"id": LETTERS_ID, "kwargs": {}, "num_envs": 2},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0},
        "schedule": {"num_updates": 2, "episodes_per_update": 2, "ppo_epochs": 1, "minibatch_size": 2,
                     "actor_lr": 1e-2, "critic_lr": 1e-2, "checkpoint_interval": 1, "keep_checkpoints": 5},
        "eval": {"at_end": False, "n_problems": 2, "num_envs": 2},
        "output_dir": str(tmp_path / "run"),
    }
    return load_config(data, overrides=sections)


class FakePolicy:
    """Just what a learner's constructor reads of a policy (adapter names, one parameter each):
    for tests of a learner's maths without a model."""

    def adapter_for(self, agent):
        return f"policy_{agent}"

    def critic_for(self, agent):
        return "critic"

    def adapter_parameters(self, name):
        return [torch.nn.Parameter(torch.zeros(1))]


CLI_CONFIG = {
    "algorithm": "mappo_action",
    "env": {"id": "marft/Arithmetic-v0", "kwargs": {"level": 1, "profile": "dual", "horizon": 1}, "num_envs": 2},
    "schedule": {"num_updates": 1, "episodes_per_update": 2, "minibatch_size": 2},
    "eval": {"n_problems": 2, "num_envs": 2},
}
"""A valid one-update config for the CLI's error tests (each test breaks one part of a copy)."""


@pytest.fixture
def no_model_load(monkeypatch):
    """A user error must be reported before the (slow) model load: loading fails the test."""
    import marft_agents.model.loading as models

    def refuse(cfg, hardware=None):
        raise AssertionError("the model was loaded before the user error was reported")

    monkeypatch.setattr(models, "load_model_and_tokenizer", refuse)

