"""The critic's global-state log: an episode's critic inputs extend one another, and valuing them
together (one forward row per chain of prefixes) gives the same values and gradients as valuing
each input on its own row."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import marft_envs
from agent_helpers import LETTERS_ID, tiny  # noqa: F401 (fixture)
from marft_agents.model.critic import GlobalStateLog
from marft_agents.collector import RolloutCollector
from marft_agents.model.scoring import prefix_chains

TRIO = {"name": "ttrio", "roles": [{"name": "reasoner", "system_prompt": "Think."},
                                   {"name": "actor", "system_prompt": "Act."},
                                   {"name": "verifier", "system_prompt": "Check.", "graded": True}]}


def _policy(tiny, mode="centralised"):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.critic import CriticConfig

    model, tokenizer = tiny
    return MultiAgentPolicy(model, tokenizer, ["reasoner_0", "actor_0", "verifier_0"],
                            critic=CriticConfig(mode=mode, value_head_init_std=0.5))


def _collect(policy, episodes=4, values="state"):
    from marft_agents.settings.sampling import SamplingConfig

    envs = [marft_envs.make(LETTERS_ID, profile=TRIO, horizon=2) for _ in range(2)]
    torch.manual_seed(0)
    return RolloutCollector(envs, policy, SamplingConfig(max_new_tokens=6, temperature=1.0),
                            values=values, seed=0).collect(episodes)


def _letters_class():
    return type(marft_envs.make(LETTERS_ID, profile=TRIO, horizon=2).unwrapped)


def test_a_global_state_critic_on_an_env_without_state_says_so_in_one_line(tiny, monkeypatch):
    from pettingzoo import AECEnv

    monkeypatch.setattr(_letters_class(), "state", AECEnv.state)  # PettingZoo's placeholder: no state
    with pytest.raises(TypeError, match=r"^critic.mode 'centralised' values the global state, but env \w+ has no "
                                        r"state\(\); implement state\(\)"):
        _collect(_policy(tiny))


def test_an_error_inside_the_envs_state_reaches_the_caller_as_it_is(tiny, monkeypatch):
    def state(self):
        return self.no_such_field  # a bug inside state(): not "the env has no state()"

    monkeypatch.setattr(_letters_class(), "state", state)
    with pytest.raises(AttributeError, match="no_such_field"):
        _collect(_policy(tiny))


def test_an_episodes_critic_inputs_extend_one_another(tiny):
    policy = _policy(tiny)
    rollout = _collect(policy)
    pairs = 0
    for episode in rollout.episode_decisions():
        for earlier, later in zip(episode, episode[1:]):
            assert len(later.critic_prompt_ids) > len(earlier.critic_prompt_ids)
            assert later.critic_prompt_ids[:len(earlier.critic_prompt_ids)] == earlier.critic_prompt_ids
            pairs += 1
        for d in episode:  # each input ends at its own decision line
            role = d.agent_id.rsplit("_", 1)[0]
            assert policy.tokenizer.decode(d.critic_prompt_ids).endswith(f"NEXT TO ACT: {d.agent_id} ({role})")
    assert pairs >= 8


def test_token_level_inputs_extend_one_another_with_their_responses(tiny):
    rollout = _collect(_policy(tiny), values="token")
    pairs = 0
    for episode in rollout.episode_decisions():
        for earlier, later in zip(episode, episode[1:]):
            with_response = earlier.critic_prompt_ids + earlier.response_ids
            assert len(later.critic_prompt_ids) > len(with_response)
            assert later.critic_prompt_ids[:len(with_response)] == with_response
            pairs += 1
    assert pairs >= 8


@pytest.mark.parametrize("values", ["state", "token"])
def test_values_are_collected_one_row_per_episode(tiny, values):
    policy = _policy(tiny)
    rows = []
    original = policy.scoring.critic_hidden

    def hidden(critic, ids, *args, **kwargs):
        rows.append(ids.shape[0])
        return original(critic, ids, *args, **kwargs)

    policy.scoring.critic_hidden = hidden
    rollout = _collect(policy, episodes=4, values=values)
    assert sum(rows) == len(rollout.episodes) < len(rollout.decisions)
    if values == "state":
        assert all(d.value is not None for d in rollout.decisions)
    else:
        assert all(len(d.token_values) == len(d.response_ids) for d in rollout.decisions)


def test_log_restarts_when_the_transcript_is_rewritten_or_too_long():
    encode = lambda text: [ord(c) for c in text]  # noqa: E731 (one id per character)
    log = GlobalStateLog([1, 2], encode, max_chars=0)
    first = log.extend("TASK t: x", None, "a_0", "a", 1)
    second = log.extend("TASK t: x\n[round 1] a_0: hi", None, "b_0", "b", 1)
    assert second[:len(first)] == first and log.restarts == 0
    third = log.extend("TASK t: rewritten", None, "a_0", "a", 2)  # not an extension: restart
    assert third[:2] == [1, 2] and third[:len(second)] != second and log.restarts == 1
    assert "".join(map(chr, third[2:])).startswith("TASK t: rewritten\nDECISION round 2")
    short = GlobalStateLog([1], encode, max_chars=120)
    short.extend("TASK t: x", None, "a_0", "a", 1)
    short.extend("TASK t: x" + "\n[round 1] a_0: " + "y" * 100, None, "b_0", "b", 1)
    assert short.restarts == 1 and "[... truncated ...]" in "".join(map(chr, short.ids[1:]))


def test_token_level_log_cuts_the_transcripts_repeat_of_each_response():
    encode = lambda text: [ord(c) for c in text]  # noqa: E731 (one id per character)
    text = lambda ids: "".join(map(chr, ids))  # noqa: E731
    log = GlobalStateLog([1], encode)
    first = log.extend("TASK t: x", None, "a_0", "a", 1)
    log.add_response(encode(" 19 + 20 = 39\n"), " 19 + 20 = 39\n")
    second = log.extend("TASK t: x\n[round 1] a_0: 19 + 20 = 39 (graded)", None, "b_0", "b", 1)
    assert second[:len(first) + 14] == first + encode(" 19 + 20 = 39\n")  # input + response: a prefix
    gained = text(second[len(first) + 14:])
    assert gained.startswith("\n[round 1] a_0:  (graded)\nDECISION round 1") and "39" not in gained
    log.add_response(encode("42"), "42")  # too short to cut safely: kept
    transcript = "TASK t: x\n[round 1] a_0: 19 + 20 = 39 (graded)\n[round 1] b_0: 42"
    third = log.extend(transcript, None, "a_0", "a", 2)
    assert "[round 1] b_0: 42" in text(third)
    log.add_response(encode("not what the env shows"), "not what the env shows")  # rendered otherwise: kept
    fourth = log.extend(transcript + "\n[round 2] a_0: NOT WHAT", None, "b_0", "b", 2)
    assert "[round 2] a_0: NOT WHAT" in text(fourth) and log.restarts == 0
    plain = GlobalStateLog([1], encode)  # action-level logs never hold responses: nothing is cut
    plain.extend("TASK t: x", None, "a_0", "a", 1)
    assert "19 + 20 = 39" in text(plain.extend("TASK t: x\n[round 1] a_0: 19 + 20 = 39", None, "b_0", "b", 1))


def test_prefix_chains_groups_prefixes_under_the_longest():
    seqs = [[1, 2], [1, 2, 3, 4], [5], [1, 2, 3], [1, 2], [5, 6]]
    heads, where = prefix_chains(seqs)
    assert sorted(heads) == [1, 5]
    for i, (chain, length) in enumerate(where):
        assert length == len(seqs[i]) and seqs[heads[chain]][:length] == seqs[i]


def _critic_grads(policy, loss):
    params = policy.adapter_parameters("critic") + list(policy.value_heads["critic"].parameters())
    return torch.autograd.grad(loss, params)


def _plain_value(policy, ids, actor):
    """The reference: one unpadded row, no shared prefix, the value at its last token, read by
    the acting agent's value-head slot."""
    row = torch.tensor([ids], device=policy.device)  # [1, L]
    hidden = policy.scoring.critic_hidden("critic", row, torch.ones_like(row), torch.arange(len(ids), device=policy.device)[None])
    slot = torch.tensor(policy.value_slots([actor], None, 1), device=policy.device)  # [1]
    return policy.value_heads["critic"](hidden[:, -1], slot)  # [1]


def test_merged_state_values_and_gradients_equal_row_by_row(tiny):
    policy = _policy(tiny)
    rollout = _collect(policy, episodes=2)
    decisions = rollout.decisions
    ids = [d.critic_prompt_ids for d in decisions]
    prefix_lens = [d.critic_prefix_len for d in decisions]
    assert len(prefix_chains(ids)[0]) < len(ids)  # the rows really merge
    policy.set_trainable(set(), critic=True)
    weights = torch.linspace(0.5, 2.0, len(ids))  # distinct per row: a wrong column changes the loss
    actors = [d.agent_id for d in decisions]
    assert len(set(policy.value_slots(actors, None, len(actors)))) == len(set(actors)) > 1  # a head slot each
    merged = policy.state_values(ids, "reasoner_0", prefix_lens=prefix_lens, actors=actors)  # [B]
    alone = torch.cat([_plain_value(policy, i, a) for i, a in zip(ids, actors)])  # [B]
    torch.testing.assert_close(merged, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(merged.detach().cpu(), torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    for got, want in zip(_critic_grads(policy, (merged * weights).sum()), _critic_grads(policy, (alone * weights).sum())):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def _plain_token_values(policy, ids, response, actor):
    """The reference: one unpadded row of prompt + response, no shared prefix; the values before
    each response token and after the last one, read by the acting agent's value-head slot."""
    row = torch.tensor([ids + response], device=policy.device)  # [1, L]
    hidden = policy.scoring.critic_hidden("critic", row, torch.ones_like(row), torch.arange(row.shape[1], device=policy.device)[None])
    slot = torch.tensor(policy.value_slots([actor], None, 1), device=policy.device)  # [1]
    return policy.value_heads["critic"](hidden[0, len(ids) - 1:], slot)  # [T + 1]


def test_merged_token_values_and_gradients_equal_row_by_row(tiny):
    policy = _policy(tiny)
    rollout = _collect(policy, episodes=2, values="token")
    decisions = rollout.decisions
    ids = [d.critic_prompt_ids for d in decisions]
    responses = [d.response_ids for d in decisions]
    assert len(prefix_chains([i + r for i, r in zip(ids, responses)])[0]) < len(ids)  # the rows really merge
    policy.set_trainable(set(), critic=True)
    actors = [d.agent_id for d in decisions]
    merged = policy.token_values(ids, responses, "reasoner_0", include_final=True,
                                 prefix_lens=[d.critic_prefix_len for d in decisions], actors=actors)  # [B, T + 1]
    alone = [_plain_token_values(policy, i, r, a) for i, r, a in zip(ids, responses, actors)]  # [T_b + 1] each
    weights = torch.linspace(0.5, 2.0, merged.shape[1])  # distinct per column: a shifted column changes the loss
    merged_loss, alone_loss = 0.0, 0.0
    for b, (d, want) in enumerate(zip(decisions, alone)):
        n = len(d.response_ids)
        torch.testing.assert_close(merged[b, : n + 1], want, atol=1e-5, rtol=0)
        assert not merged[b, n + 1:].any()  # past the final value: zeros
        torch.testing.assert_close(merged[b, :n].detach().cpu(), torch.tensor(d.token_values), atol=1e-5, rtol=0)
        merged_loss = merged_loss + (merged[b, : n + 1] * weights[: n + 1]).sum()
        alone_loss = alone_loss + (want * weights[: n + 1]).sum()
    for got, want in zip(_critic_grads(policy, merged_loss), _critic_grads(policy, alone_loss)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_critic_minibatches_keep_an_episodes_decisions_together():
    from marft_agents.learners.value_fit import ValueFit

    samples = [SimpleNamespace(episode=e, step=k) for e in range(8) for k in range(2)]
    engine = SimpleNamespace(rng=np.random.default_rng(0), schedule=SimpleNamespace(minibatch_size=4))
    batches = ValueFit.minibatches(engine, samples)  # the critic's own call
    flat = [s for b in batches for s in b]
    assert sorted(map(id, flat)) == sorted(map(id, samples)) and [len(b) for b in batches] == [4] * 4
    for batch in batches:
        assert all(sum(t.episode == s.episode for t in batch) == 2 for s in batch)  # with its partner
    assert [s.episode for s in flat] != sorted(s.episode for s in flat)  # episodes shuffled
    unknown = [SimpleNamespace(episode=-1, step=k) for k in range(5)]  # no episode: each on its own
    flat = [s for b in ValueFit.minibatches(engine, unknown) for s in b]
    assert sorted(map(id, flat)) == sorted(map(id, unknown)) and flat != unknown
