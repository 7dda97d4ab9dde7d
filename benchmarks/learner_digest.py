"""Digests of seeded tiny training runs, one per learner and estimator: a refactor's
"behaviour unchanged" check.

Each run trains a tiny random Llama (``marft_agents.model.tiny_models``) on a two-agent,
two-round test env for a few updates, on the CPU with one thread, and prints the SHA-256 of its
trained tensors (adapters, critic, value heads) and of its metrics (``time/*`` left out). Run it
on two checkouts and compare the lines::

    PYTHONPATH=/path/to/before python benchmarks/learner_digest.py > before.txt
    PYTHONPATH=$PWD python benchmarks/learner_digest.py > after.txt
    diff before.txt after.txt

Digests are bit-exact only on one machine (float kernels differ between CPUs, e.g. AVX2 vs
AVX-512). ``--only NAME`` runs one case. ``--ignore-prefix P`` leaves the metrics starting with
``P`` out of the metrics digest (repeatable): a change that only adds metrics (e.g.
``baseline/``) compares with the checkout before it.

The ``*_flat`` cases play an env whose every round pays the team 2.9 (and each agent 0.7), in
groups of 3: equal scores whose float32 mean is not exact, the groups GRPO's ``mean_std`` used to give
random-sign advantages (issue 78's equal-group defect).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import torch

import marft_envs
from marft_envs import RoundOutcome, Task, TextTaskEnv

_DUAL = {"name": "digest_dual", "roles": [{"name": "reasoner", "system_prompt": "Think."},
                                          {"name": "actor", "system_prompt": "Answer.", "graded": True}]}


class _Tasks:
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> Task:
        return Task(task_id=f"digest/{index}", prompt=f"Say {index}.", answer=None)


class LettersEnv(TextTaskEnv):
    """Team reward = share of ASCII letters in the graded output (dense, varies by sample)."""

    metadata = {"name": "digest_letters_v0", "render_modes": ["ansi"], "is_parallelizable": True}
    flat = False

    def __init__(self, **kwargs):
        kwargs.setdefault("profile", _DUAL)
        kwargs.setdefault("horizon", 2)
        super().__init__(_Tasks(), **kwargs)

    def grade_round(self, task, outputs, round_index):
        if self.flat:
            return RoundOutcome(team_reward=2.9, solved=False, feedback="Again.",
                                agent_rewards={a: 0.7 for a in outputs})
        text = self.graded_output(outputs)
        share = sum(c.isascii() and c.isalpha() for c in text) / max(len(text), 1)
        return RoundOutcome(team_reward=share, solved=share >= 0.9, feedback="More letters.",
                            agent_rewards={a: 0.5 * share for a in outputs})


class FlatEnv(LettersEnv):
    metadata = {**LettersEnv.metadata, "name": "digest_flat_v0"}
    flat = True


CASES: dict[str, dict] = {
    "mappo_action_critic": {"algorithm": "mappo_action", "advantage": {"baseline": "critic"}},
    "mappo_action_group": {"algorithm": "mappo_action", "advantage": {"baseline": "group"},
                           "schedule": {"group_size": 2}},
    "mappo_action_group_critic": {"algorithm": "mappo_action", "advantage": {"baseline": "group_critic"},
                                  "schedule": {"group_size": 2}},
    "mappo_token_critic": {"algorithm": "mappo_token", "advantage": {"baseline": "critic"}},
    "mappo_token_group_critic": {"algorithm": "mappo_token", "advantage": {"baseline": "group_critic"},
                                 "schedule": {"group_size": 2}},
    "grpo_team_mean_std": {"algorithm": "grpo", "learner": {"group_size": 2}},
    "grpo_agent_turn_loo": {"algorithm": "grpo", "learner": {"group_size": 2, "grouping": "agent_turn",
                                                             "normalisation": "leave_one_out",
                                                             "agent_rewards": True}},
    "grpo_agent_mean_seq": {"algorithm": "grpo", "learner": {"group_size": 2, "grouping": "agent",
                                                             "normalisation": "mean", "aggregation": "sequence",
                                                             "agent_rewards": True}},
    "grpo_step": {"algorithm": "grpo", "learner": {"group_size": 2, "grouping": "step"}},
    "grpo_team_mean_std_flat": {"algorithm": "grpo", "learner": {"group_size": 3}, "env": "flat",
                                "schedule": {"episodes_per_update": 6}},
    "grpo_agent_turn_mean_std_flat": {"algorithm": "grpo", "env": "flat", "schedule": {"episodes_per_update": 6},
                                      "learner": {"group_size": 3, "grouping": "agent_turn",
                                                  "agent_rewards": True}},
    "mappo_action_group_flat": {"algorithm": "mappo_action", "advantage": {"baseline": "group"}, "env": "flat",
                                "schedule": {"group_size": 3, "episodes_per_update": 6}},
}


def _config(case: dict, out: Path):
    from marft_agents.config import load_config

    schedule = {"num_updates": 2, "episodes_per_update": 4, "ppo_epochs": 2, "minibatch_size": 4,
                "actor_lr": 1e-2, "critic_lr": 1e-2, "checkpoint_interval": 0, **case.get("schedule", {})}
    data = {"algorithm": case["algorithm"], "seed": 3, "model": {"device": "cpu", "dtype": "float32"},
            "env": {"id": "digest/Flat-v0" if case.get("env") == "flat" else "digest/Letters-v0",
                    "kwargs": {}, "num_envs": 2},
            "sampling": {"max_new_tokens": 4, "temperature": 1.0}, "schedule": schedule,
            "eval": {"at_end": False, "n_problems": 2, "num_envs": 2}, "output_dir": str(out)}
    for key in ("learner", "advantage"):
        if key in case:
            data[key] = case[key]
    return load_config(data)


def _digest_tensors(learner) -> str:
    h = hashlib.sha256()
    for name in sorted(learner.optimizers):
        for group in learner.optimizers[name].param_groups:
            for p in group["params"]:
                h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _digest_metrics(history: list[dict], ignored: tuple[str, ...] = ()) -> str:
    left_out = ("time/", *ignored)
    kept = [{k: repr(float(v)) for k, v in sorted(m.items()) if not k.startswith(left_out)} for m in history]
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def run_case(name: str, ignored: tuple[str, ...] = ()) -> str:
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer
    from marft_agents.run.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(CASES[name], Path(tmp) / "run")
        model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)
        trainer = Trainer(cfg, (model, tokenizer))
        history = list(trainer.run())
        zero = [m.get("grpo/zero_advantage_share") for m in history]
        extra = f" zero_share={zero}" if zero[0] is not None else ""
        return f"{name}: weights={_digest_tensors(trainer.learner)} metrics={_digest_metrics(history, ignored)}{extra}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(CASES), action="append", help="run only this case (repeatable)")
    parser.add_argument("--ignore-prefix", action="append", default=[], metavar="P",
                        help="leave metrics starting with P out of the metrics digest (repeatable)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for env_id, cls in (("digest/Letters-v0", LettersEnv), ("digest/Flat-v0", FlatEnv)):
        if env_id not in marft_envs.list_envs():
            marft_envs.register(env_id, cls)
    for name in args.only or CASES:
        print(run_case(name, tuple(args.ignore_prefix)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
