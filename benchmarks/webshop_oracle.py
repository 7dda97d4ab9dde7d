"""Acceptance check of WebShop: an oracle policy scores >= 0.95, a random policy scores low.

* **oracle**: searches the goal's query, pages to the goal's product, clicks the goal's option
  values, buys (``marft_envs.webshop.policies.oracle_action``);
* **random**: a uniformly random valid action each step; the search query is 1-4 random words of
  the instruction (``random_action``);
* **rule**: the paper's rule baseline for reference: search the instruction text, buy the first
  hit without choosing options (``first_result_action``).

Both run on a :class:`WebShopSession` over the goals of a split (default: the 500 test goals of
the embedded catalog) with the default 15-step limit. The oracle also plays every goal through
the PettingZoo env for each multi-agent profile (scripted planner text, verifier "APPROVE"), to
show the D_t hooks change nothing for a correct team. Prints mean reward, success rate (reward
1), mean steps. Exit status 1 when the oracle's mean reward is below 0.95 on the embedded catalog.

Usage: ``python benchmarks/webshop_oracle.py [--goals 500] [--split test] [--seed 0]
[--data-dir DIR (official files: items_shuffle_1000.json ...)] [--synthetic]``
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from marft_envs.envs.webshop import WebShopEnv  # noqa: E402
from marft_envs.webshop import (  # noqa: E402
    EmbeddedConfig, OfficialConfig, WebShopSession, build_embedded_catalog, load_official_catalog,
)
from marft_envs.webshop.policies import (  # noqa: E402
    first_result_action, oracle_action, random_action, run_episode,
)

BAR = 0.95


def evaluate(session, goals, policy, seed):
    rng = random.Random(seed)
    rewards, steps = [], []
    for goal in goals:
        reward, n, _ = run_episode(session, goal, policy, rng)
        rewards.append(reward)
        steps.append(n)
    return rewards, steps


def env_oracle(catalog, profile, goals_count, seed):
    """Mean team reward of the oracle shopper through the AEC env with ``profile``."""
    env = WebShopEnv(catalog=catalog, profile=profile)
    rng, total = random.Random(seed), 0.0
    for index in range(goals_count):
        env.reset(seed=seed, options={"task_index": index})
        for agent in env.agent_iter():
            _, reward, term, trunc, info = env.last()
            if agent == "shopper_0":
                total += reward
            if term or trunc:
                env.step(None)
            elif info["role"] == "planner":
                env.step("Search for the product type with its attributes, pick the options, check the price.")
            elif info["role"] == "verifier":
                env.step("APPROVE")
            else:
                env.step(oracle_action(env.session, rng))
    return total / goals_count


def report(name, rewards, steps, seconds):
    n = len(rewards)
    success = sum(r >= 1.0 - 1e-9 for r in rewards) / n
    print(f"{name:<8} mean reward {sum(rewards) / n:.4f}  success {success:.3f}  "
          f"mean steps {sum(steps) / n:.2f}  ({n} goals, {seconds:.2f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--goals", type=int, default=500)
    parser.add_argument("--split", default="test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None, help="folder with the official WebShop files")
    parser.add_argument("--synthetic", action="store_true", help="official synthetic goals, not human goals")
    args = parser.parse_args()

    t0 = time.perf_counter()
    if args.data_dir:
        catalog = load_official_catalog(OfficialConfig(data_dir=args.data_dir, human_goals=not args.synthetic))
    else:
        catalog = build_embedded_catalog(EmbeddedConfig())
    goals = catalog.split(args.split)[: args.goals]
    print(f"catalog {catalog.name}: {len(catalog.products)} products, {len(catalog.goals)} goals; "
          f"split {args.split}: {len(goals)} goals used (built in {time.perf_counter() - t0:.2f} s)")
    session = WebShopSession(catalog)
    results = {}
    for name, policy in (("oracle", oracle_action), ("random", random_action), ("rule", first_result_action)):
        t = time.perf_counter()
        rewards, steps = evaluate(session, goals, policy, args.seed)
        report(name, rewards, steps, time.perf_counter() - t)
        results[name] = sum(rewards) / len(rewards)
    print(f"oracle / random mean reward ratio: {results['oracle'] / max(results['random'], 1e-9):.1f}x")
    for profile in ("shopper", "planner_shopper", "shopper_verifier"):
        t = time.perf_counter()
        mean = env_oracle(catalog, profile, len(goals), args.seed)
        print(f"env oracle, profile {profile:<17} mean reward {mean:.4f}  ({time.perf_counter() - t:.2f} s)")
    if not args.data_dir and results["oracle"] < BAR:
        print(f"FAIL: oracle mean reward {results['oracle']:.4f} < {BAR}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
