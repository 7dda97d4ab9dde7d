"""Peak memory of a policy with 1 agent vs N agents (default 4) on the same base model.

Each configuration runs in a fresh subprocess that loads the model, builds the
``MultiAgentPolicy`` (one LoRA adapter per agent + the critic), generates one batch (requests
dealt round-robin to the agents) and runs one training forward/backward over it (policy
log-probs under each response's agent adapter + critic values, in micro-batches of the same
size in both runs). The parent prints each child's peak RSS
(``ru_maxrss``) and the N-agent / 1-agent ratio: with one shared base it should stay close to
1 (target <= 1.15x), where N full model copies would cost ~N x.

``--critic-free`` compares instead, with the same N agents (default 2 in that mode), a learner
with a critic (MARFT-A: critic adapter + value head, one state value per decision in the training
pass) against a critic-free one (GRPO: ``critic=None``, no value pass), and prints both peaks.

Usage: ``python benchmarks/bench_memory.py [--agents 4] [--batch 8] [--new-tokens 32] [--model NAME_OR_PATH]``
       ``python benchmarks/bench_memory.py --critic-free [--agents 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

from marft_agents.settings.model import DEFAULT_MODEL  # plain data: the parent process loads no torch


def child(args: argparse.Namespace) -> None:
    import torch

    from marft_agents.engine import GenRequest
    from marft_agents.model.loading import load_model_and_tokenizer
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.settings.critic import CriticConfig
    from marft_agents.settings.model import ModelConfig
    from marft_agents.settings.sampling import SamplingConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rss = {}

    def mark(stage: str) -> None:
        rss[stage] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB

    model, tok = load_model_and_tokenizer(ModelConfig(args.model, dtype=args.dtype))
    mark("model loaded")
    agents = [f"agent_{i}" for i in range(args.n)]
    policy = MultiAgentPolicy(model, tok, agents, critic=None if args.values == "none" else CriticConfig())
    mark("policy built")
    prompts = [policy.chat_prompt_ids("You are a careful mathematician.",
                                      f"Compute {3 + i} + {11 + 2 * i}.")
               for i in range(args.batch)]
    reqs = [GenRequest(agents[i % args.n], p) for i, p in enumerate(prompts)]
    gens = policy.generate(reqs, SamplingConfig(max_new_tokens=args.new_tokens))
    mark("after generate")
    policy.train()
    # Same micro-batches (of --micro-batch rows, each from one agent) in both runs, so the
    # activation peak is equal and the difference is what the extra adapters cost.
    for agent in agents:
        mine = [g for g in gens if g.agent_id == agent]
        for start in range(0, len(mine), args.micro_batch):
            part = mine[start:start + args.micro_batch]
            prompts_, responses = [g.prompt_ids for g in part], [g.response_ids for g in part]
            stats = policy.token_logprobs(policy.adapter_for(agent), prompts_, responses)
            loss = -stats.logprobs.sum() - 0.01 * stats.entropy.sum()
            if args.values == "token":
                loss = loss + policy.token_values(prompts_, responses).pow(2).sum()
            elif args.values == "state":
                loss = loss + policy.state_values(prompts_).pow(2).sum()
            loss.backward()
    mark("after forward/backward")
    n_adapter = sum(p.numel() for n in policy.adapter_names for p in policy.adapter_parameters(n))
    print(json.dumps({"rss_mib": rss, "adapter_params": n_adapter,
                      "tokens": sum(len(g.response_ids) for g in gens)}))


def run_child(n: int, args: argparse.Namespace, values: str = "token") -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--n", str(n), "--values", values,
           "--model", args.model, "--dtype", args.dtype, "--batch", str(args.batch),
           "--new-tokens", str(args.new_tokens), "--threads", str(args.threads),
           "--micro-batch", str(args.micro_batch)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="NAME_OR_PATH",
                        help=f"an alias, a local Hugging Face folder or a Hub id (default: {DEFAULT_MODEL})")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--agents", type=int, default=None, help="N of the N-agent run (default 4; 2 with --critic-free)")
    parser.add_argument("--critic-free", action="store_true",
                        help="compare MARFT-A (critic, state values) with GRPO (no critic) at N agents")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=2, help="rows per training pass")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--values", default="token", choices=("token", "state", "none"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.agents is None:
        args.agents = 2 if args.critic_free else 4
    print(f"model={args.model} dtype={args.dtype} batch={args.batch} "
          f"new_tokens={args.new_tokens} micro_batch={args.micro_batch} "
          f"(each run in a fresh process)")
    if args.critic_free:
        critic_free(args)
        return
    results = {n: run_child(n, args) for n in (1, args.agents)}
    for n, res in results.items():
        stages = ", ".join(f"{k} {v:.0f}" for k, v in res["rss_mib"].items())
        print(f"{n} agent(s): peak RSS {res['rss_mib']['after forward/backward']:.0f} MiB "
              f"(running peak after: {stages}); adapter+critic params {res['adapter_params']:,}")
    one = results[1]["rss_mib"]["after forward/backward"]
    many = results[args.agents]["rss_mib"]["after forward/backward"]
    print(f"ratio {args.agents} agents / 1 agent: {many / one:.3f}x   target <= 1.15x")


def critic_free(args: argparse.Namespace) -> None:
    """MARFT-A's policy (critic adapter + value head + state-value pass) vs GRPO's (none)."""
    runs = {"MARFT-A (critic)": run_child(args.agents, args, "state"),
            "GRPO (no critic)": run_child(args.agents, args, "none")}
    for name, res in runs.items():
        print(f"{name}, {args.agents} agents: peak RSS {res['rss_mib']['after forward/backward']:.0f} MiB; "
              f"adapter+critic params {res['adapter_params']:,}")
    a, g = (r["rss_mib"]["after forward/backward"] for r in runs.values())
    print(f"GRPO / MARFT-A peak RSS: {g / a:.3f}x ({a - g:.0f} MiB less)")


if __name__ == "__main__":
    main()
