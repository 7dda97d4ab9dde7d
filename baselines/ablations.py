"""Evaluation-time ablations of a trained team: give each role another role's trained adapter.

The *swapped* ablation asks whether the roles specialised: if agent A's adapter serves agent B
as well as B's own, nothing role-specific was learnt; a large drop says the adapters differ in
what they do. :func:`rotation` pairs every agent with the next one's adapter (for two agents,
an exchange) and :func:`swap_agent_adapters` rewrites an ``adapter_state_dict`` accordingly,
touching only the policy adapters (a critic, unused at evaluation, stays as it was).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def rotation(agent_ids: Sequence[str]) -> dict[str, str]:
    """``{agent k: agent k+1 (mod n)}``: who gets whose adapter. Needs two or more agents."""
    agents = list(agent_ids)
    if len(agents) < 2:
        raise ValueError(f"swapping adapters needs two or more agents, got {agents}")
    return {agent: agents[(k + 1) % len(agents)] for k, agent in enumerate(agents)}


def swap_agent_adapters(state: Mapping[str, Any], policy: Any, assignment: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``state`` (``policy.adapter_state_dict()`` layout: ``lora/<adapter>/<param>``) in
    which agent ``a``'s adapter holds the weights trained for ``assignment[a]``.

    Args:
        state: the trained adapters (e.g. ``checkpoint.load_adapters(path)``).
        policy: the ``MultiAgentPolicy`` they will be loaded into (names each agent's adapter).
        assignment: agent -> the agent whose trained adapter it receives; must be a permutation
            of the policy's agents.
    """
    agents = list(policy.agent_ids)
    if getattr(policy, "shared_adapter", False):
        raise ValueError("the policy has one shared adapter for all agents: swapping adapters changes "
                         "nothing; the swapped ablation needs a run with one adapter per agent "
                         "(shared_adapter: false)")
    if sorted(assignment) != sorted(agents) or sorted(assignment.values()) != sorted(agents):
        raise ValueError(f"assignment must map every agent {agents} to a distinct agent, got {dict(assignment)}")
    prefix = {agent: f"lora/{policy.adapter_for(agent)}/" for agent in agents}
    swapped = {k: v for k, v in state.items() if not any(k.startswith(p) for p in prefix.values())}
    for receiver, giver in assignment.items():
        source = {k[len(prefix[giver]):]: v for k, v in state.items() if k.startswith(prefix[giver])}
        if not source:
            raise KeyError(f"the state dict has no adapter {policy.adapter_for(giver)!r} for agent {giver!r}")
        swapped.update({prefix[receiver] + key: value for key, value in source.items()})
    return swapped
