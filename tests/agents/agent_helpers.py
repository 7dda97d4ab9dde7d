"""Helpers for the learner tests: tiny random models, cheap envs, small configs.

Not a ``conftest.py`` on purpose: ``tests/envs`` does ``from conftest import ...`` (the root
conftest), which a second module named ``conftest`` would shadow. Tests import from here.
"""

from __future__ import annotations

import pytest
import torch

import marft_envs
from marft_envs import RoundOutcome, Task, TextTaskEnv

# Tiny models gain nothing from intra-op threads, and on a loaded machine OpenMP threads that
# spin-wait for a busy core make each matmul ~100x slower (measured: 0.3 s vs 2 ms a forward).
torch.set_num_threads(1)

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


@pytest.fixture
def tiny():
    from marft_agents.models import tiny_model_and_tokenizer

    return tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)


def small_config(tmp_path, **sections):
    """A TrainConfig small enough for CPU tests; ``sections`` override dotted keys."""
    from marft_agents.config import load_config

    data = {
        "algorithm": "mappo_action",
        "env": {"id": LETTERS_ID, "kwargs": {}, "num_envs": 2},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0},
        "schedule": {"num_updates": 2, "episodes_per_update": 2, "ppo_epochs": 1, "minibatch_size": 2,
                     "actor_lr": 1e-2, "critic_lr": 1e-2, "checkpoint_interval": 1, "keep_checkpoints": 5},
        "eval": {"at_end": False, "n_problems": 2, "num_envs": 2},
        "output_dir": str(tmp_path / "run"),
    }
    return load_config(data, overrides=sections)
