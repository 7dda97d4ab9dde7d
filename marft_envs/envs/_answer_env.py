"""Old private path of :mod:`marft_envs.envs.answer_env`, kept so existing imports keep working."""

from marft_envs.envs.answer_env import FEEDBACK_QUOTE_CHARS, FinalAnswerEnv

__all__ = ["FEEDBACK_QUOTE_CHARS", "FinalAnswerEnv"]
