"""The rollout collector on a tiny random model: recording, batching, rewards, determinism."""

from __future__ import annotations

import pytest
import torch

import marft_envs
from agent_helpers import LETTERS_ID, tiny  # noqa: F401 (fixture)
from marft_agents.episodes import rollout_metrics
from marft_agents.collector import RolloutCollector


@pytest.fixture
def policy(tiny):
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny
    return MultiAgentPolicy(model, tokenizer, ["reasoner_0", "actor_0"])


def _sampling(n=4):
    from marft_agents.settings.sampling import SamplingConfig

    return SamplingConfig(max_new_tokens=n, temperature=1.0)


def _count_generate_calls(policy):
    calls = []
    original = policy.generate

    def generate(requests, sampling):
        calls.append([r.agent_id for r in requests])
        return original(requests, sampling)

    policy.generate = generate
    return calls


def test_collector_records_decisions_on_arithmetic(policy):
    envs = [marft_envs.make("marft/Arithmetic-v0", level=1, horizon=2) for _ in range(3)]
    calls = _count_generate_calls(policy)
    torch.manual_seed(0)
    rollout = RolloutCollector(envs, policy, _sampling(), values="state", seed=0).collect(4)
    assert len(rollout.episodes) == 4
    for episode in rollout.episode_decisions():
        # a random model never solves: 2 rounds x (reasoner, actor), in turn order
        assert [d.agent_id for d in episode] == ["reasoner_0", "actor_0"] * 2
        assert [d.round for d in episode] == [0, 0, 1, 1]
        assert [d.step for d in episode] == [0, 1, 2, 3]
        assert [d.closes_round for d in episode] == [False, True, False, True]
        assert [d.done for d in episode] == [False, False, False, True] and episode[-1].truncated
        for d in episode:
            assert 1 <= len(d.response_ids) <= 4 and len(d.logprobs) == len(d.response_ids)
            assert all(lp <= 0 for lp in d.logprobs) and isinstance(d.value, float)
            assert d.adapter == policy.adapter_for(d.agent_id)
            system = envs[0].unwrapped.profile.role_of(d.agent_id).system_prompt
            assert d.prompt_ids == policy.chat_prompt_ids(system, d.observation)
            assert d.adjacency == [[0, 1], [0, 0]]  # chain: actor_0 sees reasoner_0
            assert d.team_reward == 0.0
        assert episode[1].agent_reward == 0.0  # format reward of the graded actor: no \boxed{}
    # Lock-step batching: each call serves one adapter, up to all 3 envs at once.
    assert all(len(set(agents)) == 1 for agents in calls)
    assert max(len(agents) for agents in calls) == 3
    assert sum(len(a) for a in calls) == len(rollout.decisions) == 16
    metrics = rollout_metrics(rollout, ["reasoner_0", "actor_0"])
    assert metrics["rollout/reward_mean"] == 0.0 and metrics["rollout/episodes"] == 4
    assert 1 <= metrics["agent/actor_0/length"] <= 4


def test_rewards_and_agent_rewards_land_on_the_right_decisions(policy):
    envs = [marft_envs.make(LETTERS_ID) for _ in range(2)]
    torch.manual_seed(1)
    rollout = RolloutCollector(envs, policy, _sampling(), values="token", seed=3).collect(3)
    for episode, record in zip(rollout.episode_decisions(), rollout.episodes):
        closing = [d for d in episode if d.closes_round]
        assert all(d.team_reward == 0.0 for d in episode if not d.closes_round)
        assert record.team_return == pytest.approx(sum(d.team_reward for d in closing))
        assert all(d.agent_reward == 0.5 for d in episode)  # the test env pays 0.5 to everyone
        assert record.agent_returns["reasoner_0"] == pytest.approx(record.team_return)
        assert episode[-1].done and record.solved == episode[-1].terminated
        for d in episode:
            assert len(d.token_values) == len(d.response_ids) and d.value is None


def test_task_order_is_seeded_and_resumable(policy):
    def make():
        return RolloutCollector([marft_envs.make(LETTERS_ID) for _ in range(2)], policy, _sampling(1),
                                values=None, seed=7)

    a, b = make(), make()
    first = [a._next_plan() for _ in range(5)]
    assert first == [b._next_plan() for _ in range(5)]
    state = a.state_dict()
    c = make()
    c.load_state_dict(state)
    assert [a._next_plan() for _ in range(30)] == [c._next_plan() for _ in range(30)]
    # each task once per epoch (20 tasks)
    fresh = make()
    indices = [fresh._next_plan()[1]["task_index"] for _ in range(20)]
    assert sorted(indices) == list(range(20))


def test_orchestrated_dependency_varies_who_acts(tiny):
    from marft_agents.model.policy import MultiAgentPolicy

    model, tokenizer = tiny
    envs = [marft_envs.make(LETTERS_ID, profile="orchestrated", horizon=2) for _ in range(2)]
    agents = envs[0].possible_agents
    policy = MultiAgentPolicy(model, tokenizer, agents)
    torch.manual_seed(0)
    rollout = RolloutCollector(envs, policy, _sampling(3), values="state", seed=0).collect(2)
    for episode in rollout.episode_decisions():
        rounds = sorted({d.round for d in episode})
        for r in rounds:
            mine = [d for d in episode if d.round == r]
            assert mine[0].agent_id == "orchestrator_0"  # the orchestrator always acts first
            assert [d.closes_round for d in mine] == [False] * (len(mine) - 1) + [True]
            # D_t seen by a follower includes the edge orchestrator -> follower
            for d in mine[1:]:
                i, j = agents.index("orchestrator_0"), agents.index(d.agent_id)
                assert d.adjacency[i][j] == 1


# -- the critic's input ----------------------------------------------------------------------------
TRIO = {"name": "ttrio", "roles": [{"name": "reasoner", "system_prompt": "Think."},
                                   {"name": "actor", "system_prompt": "Act."},
                                   {"name": "verifier", "system_prompt": "Check.", "graded": True}]}


def _collect_with_critic(tiny, mode, dependency, values="state", episodes=3):
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.critic import CriticConfig

    model, tokenizer = tiny
    envs = [marft_envs.make(LETTERS_ID, profile=TRIO, dependency=dependency, horizon=2) for _ in range(2)]
    policy = MultiAgentPolicy(model, tokenizer, envs[0].possible_agents, critic=CriticConfig(mode=mode, value_head_init_std=0.5))
    torch.manual_seed(0)
    rollout = RolloutCollector(envs, policy, _sampling(6), values=values, seed=0).collect(episodes)
    return policy, rollout


def _earlier_outputs_missing(policy, rollout):
    """(checked, missing): earlier decisions of the same episode whose output text is not in a
    later decision's decoded critic input."""
    checked, missing = 0, 0
    for episode in rollout.episode_decisions():
        for k, d in enumerate(episode):
            seen = policy.tokenizer.decode(d.critic_prompt_ids)
            for earlier in episode[:k]:
                if earlier.text.strip():
                    checked += 1
                    missing += f"{earlier.agent_id}: {earlier.text}" not in seen
    return checked, missing


@pytest.mark.parametrize("dependency", ["independent", {"dag": [["reasoner", "verifier"], ["actor", "verifier"]]}])
@pytest.mark.parametrize("mode", ["centralised", "per_agent"])
def test_global_state_critic_sees_every_earlier_output(tiny, dependency, mode):
    policy, rollout = _collect_with_critic(tiny, mode, dependency)
    checked, missing = _earlier_outputs_missing(policy, rollout)
    assert checked >= 10 and missing == 0
    d = rollout.decisions[1]  # the actor's first decision: D_t is written out
    text = policy.tokenizer.decode(d.critic_prompt_ids)
    expected = "no edges: agents act independently" if dependency == "independent" else "reasoner_0 -> verifier_0"
    assert expected in text and "TASK letters/" in text
    # The shared-prefix split recorded for the critic is the one its stored value was computed
    # with: re-valuing the same ids without any prefix sharing gives the stored values.
    assert all(d.critic_prefix_len > 0 for d in rollout.decisions)
    with torch.no_grad():
        again = torch.cat([policy.state_values([d.critic_prompt_ids], d.agent_id) for d in rollout.decisions[:6]])
    stored = torch.tensor([d.value for d in rollout.decisions[:6]])
    assert stored.unique().numel() > 1  # a non-trivial head: equal values would prove nothing
    torch.testing.assert_close(again.cpu(), stored, atol=1e-5, rtol=0)


def test_local_critic_misses_what_the_agent_cannot_see(tiny):
    # The same check fails for the ablation: under `independent` the acting agent's prompt holds
    # none of this round's other outputs (so the test above can tell the two apart).
    policy, rollout = _collect_with_critic(tiny, "local", "independent")
    checked, missing = _earlier_outputs_missing(policy, rollout)
    assert checked >= 10 and missing > 0


def test_token_level_values_append_the_response_to_the_critic_input(tiny):
    policy, rollout = _collect_with_critic(tiny, "centralised", "independent", values="token", episodes=2)
    d = next(d for d in rollout.decisions if len(d.response_ids) > 1)
    with torch.no_grad():
        again = policy.token_values([d.critic_prompt_ids], [d.response_ids], d.agent_id)[0]
    torch.testing.assert_close(again.cpu(), torch.tensor(d.token_values), atol=1e-5, rtol=0)
