"""Solvability of the cooperative tasks: scripted teams' accuracy per level (no model involved).

For ``marft/Relay-v0`` (levels 1-4; level 4, ``two_stage``, with its team ``relay_reduce``) and
``marft/SolveCheck-v0`` (levels 1-3), the team profile and ``solo``, plays each scripted team of
:mod:`marft_envs.tasks.scripted_teams` on the first ``--n`` problems of the test split and
prints accuracy, mean rounds and mean per-agent reward (for SolveCheck's checker: how often its
verdict was right). The oracle must score 1.0 everywhere (exit status 1 otherwise); ``mute``
(Relay: holders say nothing) shows what an answerer alone reaches, and ``noisy+oracle_checker``
vs ``noisy+rubber_stamp`` what a checker's correct verdicts buy.

Usage: ``python benchmarks/coop_oracle.py [--n 200] [--horizon 3] [--levels 1 2 3 4]`` (``--levels``
plays those levels of every env; by default each env's :data:`LEVELS`)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from marft_envs.tasks.relay import LEVELS as RELAY_LEVELS  # noqa: E402
from marft_envs.tasks.scripted_teams import TEAMS, play  # noqa: E402

PROFILES = {"marft/Relay-v0": ("relay", "solo"), "marft/SolveCheck-v0": ("solver_checker", "solo")}
"""Profiles played per env: the team, then the single agent that sees everything."""
LEVEL_PROFILES = {("marft/Relay-v0", 4): ("relay_reduce", "solo")}
"""(env, level) -> the profiles played there instead of ``PROFILES[env]``."""
LEVELS = {"marft/Relay-v0": sorted(RELAY_LEVELS), "marft/SolveCheck-v0": [1, 2, 3]}
"""Levels played per env when ``--levels`` is not given."""
BAR = 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="problems per level (test split)")
    parser.add_argument("--horizon", type=int, default=3, help="rounds per episode")
    parser.add_argument("--levels", type=int, nargs="+", default=None, help="default: each env's LEVELS")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    failures = []
    print(f"{'env':<20} {'lvl':>3} {'profile':<15} {'team':<21} {'accuracy':>8} {'rounds':>6}  per-agent reward")
    for env_id, teams in TEAMS.items():
        for level in args.levels or LEVELS[env_id]:
            for profile in LEVEL_PROFILES.get((env_id, level), PROFILES[env_id]):
                for name, policy in teams.items():
                    result = play(env_id, policy, n=args.n, seed=args.seed, level=level, split="test",
                                  profile=profile, horizon=args.horizon)
                    rewards = " ".join(f"{a}={r:.2f}" for a, r in result.agent_rewards.items())
                    print(f"{env_id:<20} {level:>3} {profile:<15} {name:<21} {result.accuracy:>8.3f} "
                          f"{result.rounds:>6.2f}  {rewards}")
                    if name == "oracle" and result.accuracy < BAR:
                        failures.append(f"{env_id} level {level} {profile}: oracle {result.accuracy:.3f}")
    if failures:
        print("oracle below 1.0: " + "; ".join(failures))
        return 1
    print(f"oracle: 1.000 on every env, level and profile (n={args.n} each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
