"""The decoding and scoring paths use transformers' current KV-cache API (``cache=`` in, ``.cache``
out): no ``past_key_values is deprecated`` FutureWarning (which ``make demo`` used to print), and
no "``past_key_values``/``cache_params`` are deprecated" log line from reading the old attribute."""

from __future__ import annotations

import contextlib
import logging
import warnings

import pytest
import torch
from agent_helpers import seeded_generator
from test_policy import make_policy, prompts

from marft_agents.model.policy import GenRequest
from marft_agents.model.scoring import Scorer, ScoringPaths
from marft_agents.settings.critic import CriticConfig
from marft_agents.settings.sampling import ENGINES, SamplingConfig


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def no_cache_deprecations():
    """FutureWarnings become errors; transformers' deprecation log lines are collected (its
    ``warning_once`` memo is cleared first, so a line logged by an earlier test shows again)."""
    logging.Logger.warning_once.cache_clear()
    handler = _Collect()
    hf_logger = logging.getLogger("transformers")  # transformers' root: it does not propagate
    hf_logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            yield
    finally:
        hf_logger.removeHandler(handler)
    stale = [m for m in handler.messages if "past_key_values" in m or "cache_params" in m]
    assert not stale, stale


@pytest.fixture(scope="module")
def policy():
    return make_policy(critic=CriticConfig(mode="local"))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("share", [False, True])
def test_decoding_uses_the_current_cache_api(policy, engine, share):
    p = [policy.chat_prompt_ids("Think carefully.", f"Say {i}" + "!" * i) for i in range(4)]
    prefix = policy.shared_prefix_len("Think carefully.", p[0]) if share else 0
    # rows stop at different steps, so the cache is also pruned mid-decode
    cfg = SamplingConfig(max_new_tokens=6, temperature=0.7, stop_token_ids=tuple(range(3, 130)),
                         engine=engine)
    with no_cache_deprecations():
        gens = policy.generate([GenRequest("actor_0", q, prefix) for q in p], cfg,
                               generator=seeded_generator(5))
    assert all(g.response_ids for g in gens)
    with torch.no_grad():  # the outputs are what the training pass scores (checked without the filter)
        stats = policy.token_logprobs("policy_actor_0", p, [g.response_ids for g in gens], 0.7,
                                      prefix_lens=[g.prefix_len for g in gens])
    for row, g in enumerate(gens):
        torch.testing.assert_close(stats.logprobs[row, :len(g.response_ids)].cpu(),
                                   torch.tensor(g.logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("fused_head", [True, False])
def test_scoring_with_shared_prefixes_uses_the_current_cache_api(policy, fused_head):
    p = prompts(policy, 4)
    r = [[40, 41, 42], [43, 44], [45], [46, 47]]
    prefix = [policy.shared_prefix_len("Think." * (i % 3), q) for i, q in enumerate(p)]
    assert any(prefix)
    scorer = Scorer(policy, ScoringPaths(fused_head=fused_head))
    with torch.no_grad(), no_cache_deprecations():
        shared = scorer.token_logprobs("policy_actor_0", p, r, prefix_lens=prefix)
        values = scorer.token_values(p, r, prefix_lens=prefix)
        state = scorer.state_values(p, prefix_lens=prefix)
    with torch.no_grad():
        plain = scorer.token_logprobs("policy_actor_0", p, r)  # no prefix cache at all
        plain_values = scorer.token_values(p, r)
        plain_state = scorer.state_values(p)
    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(values, plain_values, atol=1e-5, rtol=0)
    torch.testing.assert_close(state, plain_state, atol=1e-5, rtol=0)
