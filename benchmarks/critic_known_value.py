"""Does the critic learn a value function it is told? Critic-only updates on a real model's inputs.

A fixed policy on Arithmetic, except that each episode's return is drawn from a *known* success
probability of its task (``--level 8``: 0.7 for the level-1 half of the tasks, 0.1 for the
three-digit half; ``--level 1``: falling linearly with a + b from 0.9 to 0.2). The critic then
has a known target, and the best explained variance of the first decisions' values, the
between-task share ``Var p / (Var p + E[p (1 - p)])``, is known too. Everything else is the real
thing: the model (``--model``, default the packaged SmolLM2), the critic's global-state inputs as
the collector builds them (``GlobalStateLog``; with two decisions per episode, the second after
the reasoner's sampled response, as in a one-round ``dual`` episode), and the learner of the
config (``--config``, default the shipped MARFT-A one) running its critic passes only
(``ppo.critic_warmup_updates`` for the whole run: the actors never move).

Per update it prints the critic health the learner logs (``critic/ev_first`` against the
measured ``critic/ev_ceiling``), the true ceiling of that update's tasks and the correlation of
the first values with the true probabilities; at the end, the first-decision EV pooled over the
last half of the updates against the pooled measured ceiling (their ratio: a critic that learned
the known values scores about 1 on the ceiling's footing), and the same for later decisions.

Usage::

    python benchmarks/critic_known_value.py [--level 8] [--updates 12] [--one] [--set key=json ...]
    python benchmarks/critic_known_value.py --tiny --updates 2     # a smoke run (tests)
"""

from __future__ import annotations

import argparse
import json
import re
import time

import numpy as np


def success_probability(level: int, prompt: str) -> float:
    """The known success probability of an Arithmetic task (see the module docstring)."""
    a, b = map(int, re.findall(r"Compute (\d+) \+ (\d+)", prompt)[0])
    if level == 8:
        return 0.7 if max(a, b) <= 20 else 0.1
    return 0.9 - 0.7 * (a + b - 4) / 36


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="baselines/configs/marft_a_arithmetic.yaml")
    parser.add_argument("--model", default=None, help="model alias, folder or Hub id (default: the config's)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke runs)")
    parser.add_argument("--level", type=int, default=8, choices=(1, 8))
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--one", action="store_true", help="one decision per episode (no reasoner turn)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="config override")
    args = parser.parse_args(argv)

    import torch

    import marft_envs
    from marft_agents.config import load_config
    from marft_agents.model.critic import CRITIC_SYSTEM_PROMPT, GlobalStateLog
    from marft_agents.engine import GenRequest
    from marft_agents.episodes import Decision, EpisodeRecord, Rollout
    from marft_agents.learners import make_learner
    from marft_agents.learners.critic_health import pooled_share
    from marft_agents.model.loading import load_model_and_tokenizer
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer
    from marft_agents.run.trainer import build_policy

    torch.set_num_threads(args.threads)
    overrides = {"ppo.critic_warmup_updates": 10**9, "seed": args.seed}
    if args.model:
        overrides["model.name_or_path"] = args.model
    if args.tiny:
        overrides.update({"sampling.max_new_tokens": 4, "schedule.episodes_per_update": 16})
    overrides.update({k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.set)})
    cfg = load_config(args.config, overrides=overrides)
    model, tokenizer = tiny_model_and_tokenizer(seed=0) if args.tiny else load_model_and_tokenizer(cfg.model)
    make_env = lambda: marft_envs.make("marft/Arithmetic-v0", level=args.level, profile="dual", horizon=1)  # noqa: E731
    agents = list(make_env().possible_agents)
    policy = build_policy(cfg, model, tokenizer, agents)
    learner = make_learner(cfg.algorithm, policy, cfg, agents)
    system_ids = policy.system_turn_ids(CRITIC_SYSTEM_PROMPT)
    prefix = len(system_ids) if cfg.sampling.share_prefix else 0
    k = learner.group_size  # episodes per task (the ceiling needs >= 2)
    if k < 2:
        raise SystemExit("schedule.group_size must be >= 2 here: the ceiling is measured from repeated tasks")
    if cfg.schedule.episodes_per_update % k:
        raise SystemExit(f"schedule.episodes_per_update ({cfg.schedule.episodes_per_update}) must be a multiple of {k}")
    n_tasks = cfg.schedule.episodes_per_update // k
    envs = [make_env() for _ in range(cfg.schedule.episodes_per_update)]
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    def decision(**fields) -> Decision:
        return Decision(env_index=0, round=0, observation="", prompt_ids=[1, 2], response_ids=[7, 8], text="x",
                        logprobs=[-1.0, -1.0], critic_prefix_len=prefix, **fields)

    history, start = [], time.perf_counter()
    for update in range(args.updates):
        probabilities, pending = [], []
        for group in range(n_tasks):  # k episodes of each task, as grouped sampling collects them
            index = int(rng.integers(10**6))
            for j in range(k):
                env = envs[group * k + j]
                env.reset(options={"task_index": index})
                agent = env.agent_selection
                info = env.infos[agent]
                text = str(env.unwrapped.state()["text"])
                if j == 0:
                    probabilities.append(success_probability(args.level, text))
                log = GlobalStateLog(system_ids, policy.encode_text, cfg.critic.max_state_chars)
                ids = log.extend(text, info.get("dependency"), agent, str(info.get("role", agent)), 0)
                prompt = policy.chat_prompt_ids(info.get("system_prompt", ""), env.observe(agent)["text"])
                pending.append((env, group, agent, log, ids, prompt))
        responses = (None if args.one else
                     policy.generate([GenRequest(agent, prompt) for _, _, agent, _, _, prompt in pending], cfg.sampling))
        decisions, episodes = [], []
        for i, (env, group, agent, log, ids, _) in enumerate(pending):
            ret = float(rng.random() < probabilities[group])
            first, task = len(decisions), f"u{update}g{group}"
            common = dict(episode=len(episodes), group=group, task_id=task)
            if args.one:
                decisions.append(decision(step=0, agent_id=agent, adapter=policy.adapter_for(agent), team_reward=ret,
                                          closes_round=True, done=True, terminated=True, critic_prompt_ids=ids, **common))
            else:  # the actor's state: after the reasoner's sampled response
                env.step(responses[i].text)
                second = env.agent_selection
                info = env.infos[second]
                later = log.extend(str(env.unwrapped.state()["text"]), info.get("dependency"), second,
                                   str(info.get("role", second)), 0)
                decisions.append(decision(step=0, agent_id=agent, adapter=policy.adapter_for(agent), team_reward=0.0,
                                          closes_round=False, done=False, critic_prompt_ids=ids, **common))
                decisions.append(decision(step=1, agent_id=second, adapter=policy.adapter_for(second), team_reward=ret,
                                          closes_round=True, done=True, terminated=True, critic_prompt_ids=later,
                                          **common))
            episodes.append(EpisodeRecord(0, task, decisions=list(range(first, len(decisions))), team_return=ret,
                                          group=group))
        with torch.no_grad():  # the values the collector would record, before the update
            values = policy.state_values([d.critic_prompt_ids for d in decisions], decisions[0].agent_id,
                                         prefix_lens=[prefix] * len(decisions),
                                         actors=[d.agent_id for d in decisions]).tolist()
        for d, v in zip(decisions, values):
            d.value = v
        metrics = learner.update(Rollout(decisions=decisions, episodes=episodes), update)
        p = np.asarray(probabilities)
        firsts = np.asarray([values[ep.decisions[0]] for ep in episodes])[::k]  # [n_tasks]
        metrics["true_ceiling"] = float(p.var() / (p.var() + (p * (1 - p)).mean()))
        metrics["corr_value_p"] = float(np.corrcoef(firsts, p)[0, 1]) if firsts.std() > 0 and p.std() > 0 else float("nan")
        history.append(metrics)
        shown = ("critic/ev_first", "critic/ev_later", "critic/ev_ceiling", "true_ceiling", "critic/value_std",
                 "critic/return_std", "corr_value_p")
        print(json.dumps({"update": update, **{key: round(float(metrics.get(key, float("nan"))), 4) for key in shown},
                          "seconds": round(time.perf_counter() - start, 1)}), flush=True)

    late = history[len(history) // 2:]
    return_var = np.mean([h["critic/return_var"] for h in late])
    ev_first = 1 - np.mean([h["critic/residual_var_first"] for h in late]) / return_var
    ceiling = pooled_share([h["critic/between_task_var"] for h in late], [h["critic/within_task_var"] for h in late])
    summary = {"level": args.level, "updates": args.updates, "decisions_per_episode": 1 if args.one else 2,
               "ev_first_last_half": float(ev_first), "ceiling_last_half": float(ceiling),
               "ratio": float(ev_first / ceiling) if ceiling > 0 else float("nan"),
               "true_ceiling_mean": float(np.mean([h["true_ceiling"] for h in history])),
               "ev_later_last_half": float(np.nanmean([h.get("critic/ev_later", float("nan")) for h in late])),
               "overrides": args.set}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
