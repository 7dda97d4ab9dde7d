"""Is the task in what the value head reads? Linear probes on the critic's last hidden state.

The value head of marft's critic reads the final hidden state (after the model's last norm) at
the last token of the critic's input, the global-state log (``marft_agents/model/critic.py``). For
Arithmetic level 1 ("Compute a + b."), this script builds that input for the first decision of
``--n`` training tasks exactly as the collector does (``GlobalStateLog``), runs the model with
the critic adapter at initialisation (= the base model), and prints:

* ``spread``: the across-task variance of the hidden state summed over dimensions, as a share of
  its mean square: how large the part that tells tasks apart is next to what all states share;
* held-out ridge R^2 (standardised dimensions, the best of a few ridge strengths, last quarter of
  the tasks held out) for decoding ``a``, ``b`` and ``a + b`` linearly from that state, and from
  its mean over the log's tokens.

A state that decodes the operands well but whose spread is tiny is what a linear head trained
with per-weight (Adam) steps cannot use without standardising its input: the reason for
``critic.feature_norm``.

``--task relay5`` probes Relay level 5 instead (``mixed_sizes``: half the tasks have a
three-digit operand, and the model solves those far less often), with the critic adapter and
value head of a run's checkpoint (``--checkpoint``, a folder with ``adapters.pt``; default the
untrained critic). It prints the head's value of the first decision for each size class, and how
well a ridge on the standardised state predicts the class of held-out tasks when trained on 16,
32, 64, ... tasks (strength chosen by cross-validation inside the training tasks): whether a
critic that sees 8 tasks per update could find the size from its features.

Usage::

    python benchmarks/critic_probe.py [--model smollm2-135m-instruct] [--n 240]
    python benchmarks/critic_probe.py --task relay5 --n 200 --checkpoint RUN/checkpoints/update_000016
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np


def ridge_r2(features: np.ndarray, target: np.ndarray, strengths=(1.0, 10.0, 100.0, 1000.0)) -> float:
    """Held-out R^2 of a ridge regression on standardised features (last quarter held out)."""
    n = len(features)
    train = np.arange(n) < n * 3 // 4
    mean, std = features[train].mean(0), features[train].std(0) + 1e-6
    z = (features - mean) / std
    best = -np.inf
    for lam in strengths:
        a = z[train]
        w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ (target[train] - target[train].mean()))
        pred = z[~train] @ w + target[train].mean()
        best = max(best, 1 - ((target[~train] - pred) ** 2).mean() / target[~train].var())
    return float(best)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model name, alias or folder")
    parser.add_argument("--n", type=int, default=240, help="training tasks to probe")
    parser.add_argument("--task", choices=("arithmetic", "relay5"), default="arithmetic")
    parser.add_argument("--checkpoint", default=None, help="relay5: a checkpoint folder whose critic to probe")
    args = parser.parse_args(argv)
    if args.task == "relay5":
        return relay5(args)

    import marft_envs
    from marft_agents.config import load_config
    from marft_agents.model.critic import CRITIC_SYSTEM_PROMPT
    from marft_agents.model.loading import load_model_and_tokenizer
    from marft_agents.model.policy import MultiAgentPolicy

    cfg = load_config("baselines/configs/marft_a_arithmetic.yaml", overrides={"model.name_or_path": args.model})
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    env = marft_envs.make("marft/Arithmetic-v0", level=1, profile="dual", horizon=1)
    policy = MultiAgentPolicy(model, tokenizer, env.possible_agents, critic=cfg.critic)
    system_ids = policy.system_turn_ids(CRITIC_SYSTEM_PROMPT)
    last, mean, targets = [], [], []
    for index in range(args.n):
        text, _, _, hidden = first_decision(env, policy, system_ids, cfg, index)  # hidden [T, H]
        a, b = map(int, re.findall(r"Compute (\d+) \+ (\d+)", text)[0])
        last.append(hidden[-1].numpy())
        mean.append(hidden[len(system_ids):].mean(0).numpy())
        targets.append([a, b, a + b])
    y = np.asarray(targets, dtype=float)
    report = {"model": args.model, "tasks": args.n}
    for name, rows in (("last_token", last), ("mean_over_log", mean)):
        x = np.asarray(rows)
        report[name] = {"spread": float(x.var(0).sum() / (x ** 2).mean(0).sum()),
                        **{f"r2_{t}": ridge_r2(x, y[:, j]) for j, t in enumerate(("a", "b", "a_plus_b"))}}
        r = report[name]
        print(f"{name}: spread {r['spread']:.5f} of the mean square; held-out ridge R^2 "
              f"a {r['r2_a']:.2f}, b {r['r2_b']:.2f}, a + b {r['r2_a_plus_b']:.2f}")
    print(json.dumps(report))
    return report


def first_decision(env, policy, system_ids, cfg, index: int):
    """Task ``index``'s first decision as the collector gives it to the critic: ``(state text,
    acting agent, critic input ids, final hidden states [T, H] after the last norm, on the CPU)``."""
    import torch

    from marft_agents.model.critic import GlobalStateLog

    env.reset(options={"task_index": index})
    agent = env.agent_selection
    info = env.infos[agent]
    text = str(env.unwrapped.state()["text"])
    log = GlobalStateLog(system_ids, policy.encode_text, cfg.critic.max_state_chars)
    ids = log.extend(text, info.get("dependency"), agent, str(info.get("role", agent)), 0)
    with torch.no_grad(), policy.using(policy.critic_for(agent)):
        out = policy.model(input_ids=torch.tensor([ids], device=policy.device), output_hidden_states=True)
    return text, agent, ids, out.hidden_states[-1][0].float().cpu()


def class_accuracy(z: np.ndarray, y: np.ndarray, train: np.ndarray,
                   strengths=(1.0, 10.0, 100.0, 1000.0, 10000.0)) -> float:
    """Held-out accuracy of a ridge on ``z`` for the 0/1 ``y``, trained on ``train`` (bool mask),
    its strength chosen by 4-fold cross-validation inside the training tasks."""
    idx = np.flatnonzero(train)

    def fit(rows, lam):
        a = z[rows]
        w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ (y[rows] - y[rows].mean()))
        return w, y[rows].mean()

    def cv_error(lam):
        err = 0.0
        for f in range(4):
            held = idx[f::4]
            w, b = fit(np.setdiff1d(idx, held), lam)
            err += float((((z[held] @ w + b) > 0.5) != (y[held] > 0.5)).sum())
        return err

    lam = min(strengths, key=cv_error)
    w, b = fit(idx, lam)
    return float((((z[~train] @ w + b) > 0.5) == (y[~train] > 0.5)).mean())


def relay5(args) -> dict:
    """The ``--task relay5`` probe (module docstring)."""
    import torch

    import marft_envs
    from marft_agents.config import load_config
    from marft_agents.model.critic import CRITIC_SYSTEM_PROMPT
    from marft_agents.model.loading import load_model_and_tokenizer
    from marft_agents.model.policy import MultiAgentPolicy

    cfg = load_config("baselines/configs/grid/relay.yaml",
                      overrides={"model.name_or_path": args.model, "env.kwargs.level": 5})
    model, tokenizer = load_model_and_tokenizer(cfg.model)
    env = marft_envs.make("marft/Relay-v0", level=5, profile="relay", horizon=1)
    policy = MultiAgentPolicy(model, tokenizer, env.possible_agents, critic=cfg.critic)
    if args.checkpoint:
        state = torch.load(f"{args.checkpoint}/adapters.pt", map_location=policy.device, weights_only=False)
        policy.load_adapter_state_dict(state)
    system_ids = policy.system_turn_ids(CRITIC_SYSTEM_PROMPT)
    states, labels, values = [], [], []
    for index in range(args.n):
        text, agent, ids, hidden = first_decision(env, policy, system_ids, cfg, index)  # hidden [T, H]
        with torch.no_grad():
            values.append(float(policy.state_values([ids], agent)[0]))
        states.append(hidden[-1].numpy())  # [H] what the head reads
        labels.append(float(max(int(v) for v in re.findall(r"= (\d+)", text)) >= 100))
    x, y, v = np.asarray(states), np.asarray(labels), np.asarray(values)
    small, large = v[y == 0], v[y == 1]
    print(f"{args.n} tasks, {y.mean():.2f} with a three-digit operand; checkpoint {args.checkpoint or 'none'}")
    print(f"the head's first-decision value: small {small.mean():.3f} (sd {small.std():.3f}), "
          f"three-digit {large.mean():.3f} (sd {large.std():.3f})")
    report = {"model": args.model, "tasks": args.n, "checkpoint": args.checkpoint,
              "value_small": float(small.mean()), "value_large": float(large.mean()),
              "value_sd_small": float(small.std()), "value_sd_large": float(large.std()), "accuracy": {}}
    rng = np.random.default_rng(0)
    for m in (16, 32, 64, 128):
        if m >= args.n - 8:
            break
        accs = []
        for _ in range(20):
            train = np.zeros(args.n, dtype=bool)
            train[rng.permutation(args.n)[:m]] = True
            mean, std = x[train].mean(0), x[train].std(0) + 1e-6
            accs.append(class_accuracy((x - mean) / std, y, train))
        report["accuracy"][m] = float(np.mean(accs))
        print(f"ridge trained on {m} tasks: held-out size-class accuracy {np.mean(accs):.3f} (20 random splits)")
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
