"""The names ``ppo.credit`` accepts, declared once: the config validates against them and
``marft_agents/learners/credit.py`` implements them (and refuses any other)."""

from __future__ import annotations

import typing
from typing import Literal

__all__ = ["CREDIT_STRATEGIES", "CreditStrategy"]

CreditStrategy = Literal["team", "step_discounted", "per_step"]
"""How the env's rewards become per-decision training rewards (``ppo.credit``;
``marft_agents/learners/credit.py`` implements them)."""
CREDIT_STRATEGIES: tuple[str, ...] = typing.get_args(CreditStrategy)
