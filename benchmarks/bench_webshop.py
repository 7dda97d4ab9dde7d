"""WebShop speed on the embedded catalog: build time, search latency, env steps per second.

Figures (all measured in this run, on this machine):

* catalog generation and BM25 index build (1,000 products by default);
* search latency for the goals' queries and for the instructions (longer queries), mean / p50 /
  p99, against a same-run reference: a plain-Python scan that counts query-word hits in every
  product's text (what a hand-written ranker would do) -> "BM25 is Nx faster than the scan";
* steps per second of a random valid-action policy on a bare :class:`WebShopSession` and
  through the PettingZoo AEC env (``shopper`` profile), and their ratio (the env's overhead).

Usage: ``python benchmarks/bench_webshop.py [--products 1000] [--queries 500] [--steps 5000]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from marft_envs.envs.webshop import WebShopEnv  # noqa: E402
from marft_envs.webshop import EmbeddedConfig, SearchEngine, WebShopSession, build_embedded_catalog  # noqa: E402
from marft_envs.webshop.policies import random_action  # noqa: E402


def latency(fn, queries):
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.mean(times), times[len(times) // 2], times[min(len(times) - 1, int(0.99 * len(times)))]


def fmt(stats):
    return "mean {:.3f} ms  p50 {:.3f} ms  p99 {:.3f} ms".format(*(1000 * s for s in stats))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--products", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()

    t = time.perf_counter()
    catalog = build_embedded_catalog(EmbeddedConfig(num_products=args.products))
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    engine = SearchEngine(catalog.products)
    index_s = time.perf_counter() - t
    print(f"catalog: {len(catalog.products)} products, {len(catalog.goals)} goals, generated in {build_s:.3f} s; "
          f"BM25 index built in {index_s:.3f} s")

    goals = catalog.goals[: args.queries]
    short = [g.search_query for g in goals]
    long = [g.instruction_text for g in goals]
    texts = [p.search_text() for p in catalog.products]

    def scan(query):  # the reference: count query-word hits per product, sort, top 50
        words = query.lower().split()
        scores = [sum(w in text for w in words) for text in texts]
        return sorted(range(len(texts)), key=lambda i: -scores[i])[:50]

    bm25_short, bm25_long = latency(engine.search, short), latency(engine.search, long)
    scan_short = latency(scan, short)
    print(f"search (goal queries, {len(short)}):   {fmt(bm25_short)}")
    print(f"search (instructions, {len(long)}):    {fmt(bm25_long)}")
    print(f"reference scan (goal queries):    {fmt(scan_short)}  -> BM25 {scan_short[0] / bm25_short[0]:.1f}x faster")

    rng = random.Random(0)
    session = WebShopSession(catalog)
    steps, episodes, t = 0, 0, time.perf_counter()
    while steps < args.steps:
        session.reset(goals[episodes % len(goals)])
        episodes += 1
        while not (session.done or session.truncated):
            session.step(random_action(session, rng))
            steps += 1
    session_sps = steps / (time.perf_counter() - t)

    env = WebShopEnv(catalog=catalog, split="all")
    env_steps, t = 0, time.perf_counter()
    env.reset(seed=0)
    while env_steps < args.steps:
        for agent in env.agent_iter():
            _, _, term, trunc, _ = env.last()
            env.step(None if term or trunc else random_action(env.session, rng))
            env_steps += not (term or trunc)
        env.reset()
    env_sps = env_steps / (time.perf_counter() - t)
    print(f"random policy, session:  {session_sps:,.0f} steps/s ({steps} steps, {episodes} episodes)")
    print(f"random policy, AEC env:  {env_sps:,.0f} steps/s ({env_steps} steps) -> env/session {env_sps / session_sps:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
