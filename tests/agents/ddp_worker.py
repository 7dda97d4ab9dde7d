"""The runs ``test_distributed.py`` compares: called in-process for the one-process reference,
and as ``python ddp_worker.py OUT_DIR`` with torchrun's environment variables for each rank.

Greedy sampling makes the rollouts a function of the policy alone, so a 2-rank run and a
1-process run see the same global batch (up to float rounding in generation).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # agent_helpers when run as a script

import torch  # noqa: E402

from agent_helpers import SOLO, small_config  # noqa: E402

ALGORITHMS = {
    # name: config overrides (minibatches of 2 decisions: each rank runs one of every minibatch)
    "mappo_action": {"eval.at_end": True, "eval.n_problems": 5},
    "mappo_token": {},
    "ppo": {"env.kwargs": {"profile": SOLO}},
}
"""Learners compared on whole training runs (greedy rollouts: the same global batch)."""
UPDATE_ONLY = {
    # Greedy groups of one task are identical (zero advantages): GRPO needs sampled rollouts.
    "grpo": {"learner": {"group_size": 2, "kl_coef": 0.1}, "ppo.recompute_old_logprobs": True},
    "mappo_action": {"ppo.kl_coef": 0.1, "ppo.recompute_old_logprobs": True},
}
"""Learners compared on their updates of the same sampled global rollouts (every rank collects
the whole rollout with the same seed); these settings also run the sharded reference and
rescoring passes."""
RESUMED = "mappo_action"


def config(out: Path, algorithm: str, extra: dict | None = None):
    # model.device cpu whatever MARFT_TEST_DEVICE says: the ranks are gloo processes with CUDA hidden,
    # and this process's reference must run where they do.
    overrides = {"algorithm": algorithm, "model.device": "cpu", "sampling.do_sample": False,
                 "schedule.episodes_per_update": 4,
                 "schedule.ppo_epochs": 2, "schedule.num_updates": 2, "eval.at_end": False, "ppo.gamma": 0.9,
                 **ALGORITHMS.get(algorithm, {}), **(extra or {})}
    return small_config(out / algorithm, **overrides)


def update_only(out: Path, algorithm: str) -> dict:
    """Adapters and metrics after 2 updates on the same sampled rollouts on every rank."""
    from marft_agents.run.trainer import Trainer

    cfg = config(out, algorithm, {"sampling.do_sample": True, **UPDATE_ONLY[algorithm]})
    trainer = Trainer(cfg, tiny())
    history, tokens = [], 0
    for update in range(2):
        torch.manual_seed(100 + update)
        rollout = trainer.collector.collect(cfg.schedule.episodes_per_update)
        rollout = trainer.data_parallel.gather(rollout)[0]  # rank 0's rollout on every rank: the same global batch
        history.append(trainer.learner.update(rollout, update))
        tokens = max(tokens, rollout_positions(rollout))
    return {"adapters": trainer.policy.adapter_state_dict(), "history": history,
            "arithmetic": {"steps": optimizer_steps(trainer.learner.state_dict()), "positions": tokens,
                           "lr": max(cfg.schedule.actor_lr, cfg.schedule.critic_lr)}}


def rollout_positions(rollout) -> int:
    """Token positions of every forward pass over ``rollout`` (policy and critic rows): an upper
    bound on the number of terms in any one gradient entry's float32 sum."""
    return sum(len(d.prompt_ids) + len(d.response_ids) + len(d.critic_prompt_ids or ())
               for d in rollout.decisions)


@contextlib.contextmanager
def counting_positions():
    """Within the block, every rollout collected appends its ``rollout_positions`` to the list."""
    from marft_agents.collector import RolloutCollector

    seen: list[int] = []
    collect = RolloutCollector.collect

    def counted(self, *args, **kwargs):
        rollout = collect(self, *args, **kwargs)
        seen.append(rollout_positions(rollout))
        return rollout

    RolloutCollector.collect = counted
    try:
        yield seen
    finally:
        RolloutCollector.collect = collect


def optimizer_steps(learner_state: dict) -> int:
    """The most Adam steps any adapter's optimizer took (from a learner's ``state_dict``)."""
    return max(int(p["step"]) for opt in learner_state["optimizers"].values() for p in opt["state"].values())


def tiny():
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    return tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)


def tiny_initial_adapters(algorithm: str, extra: dict | None = None) -> dict:
    """The adapters every run of ``algorithm`` starts from (built as the Trainer builds them)."""
    import tempfile

    from marft_agents.run.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        return Trainer(config(Path(tmp), algorithm, extra), tiny()).policy.adapter_state_dict()


def run_all(out: Path, rank: int = 0) -> dict:
    """Train every learner for 2 updates, plus an interrupted-and-resumed run of ``RESUMED``;
    returns (and on every rank saves to ``out/rank<r>.pt``) adapters, metrics and evaluations."""
    from marft_agents.run.checkpoint import load_checkpoint
    from marft_agents.run.trainer import iter_train, train

    quiet = {"eval_before": False, "tensorboard": False, "plot": False, "handle_signals": False}
    results: dict = {}
    for algorithm in ALGORITHMS:
        cfg = config(out / "full", algorithm)
        with counting_positions() as positions:
            result = train(cfg, model_and_tokenizer=tiny(), **quiet)
        results[algorithm] = {"adapters": result.policy.adapter_state_dict(), "history": result.history}
        if rank == 0:  # rank 0 writes the checkpoints; the test reads the 1-process run's figures
            learner_state = load_checkpoint(result.last_checkpoint)["state"]["learner"]
            results[algorithm]["arithmetic"] = {"steps": optimizer_steps(learner_state), "positions": max(positions),
                                                "lr": max(cfg.schedule.actor_lr, cfg.schedule.critic_lr)}
        if result.final_eval is not None:
            results["eval"] = result.final_eval.per_task
    for algorithm in UPDATE_ONLY:
        results[f"update/{algorithm}"] = update_only(out / "update", algorithm)
    # GRPO end to end (sampled, so not compared): whole groups per rank, gathered.
    grpo = config(out / "full", "grpo", {"sampling.do_sample": True, **UPDATE_ONLY["grpo"]})
    results["grpo_history"] = train(grpo, model_and_tokenizer=tiny(), **quiet).history
    cut = config(out / "cut", RESUMED)
    first = iter_train(cut, model_and_tokenizer=tiny())
    next(first)  # update 1, checkpointed; then the "crash"
    first.close()
    results["resumed"] = train(cut, resume=True, model_and_tokenizer=tiny(), **quiet).policy.adapter_state_dict()
    torch.save(results, out / f"rank{rank}.pt")
    return results


if __name__ == "__main__":
    from marft_agents.runtime.distributed import process_group

    torch.set_num_threads(1)
    with process_group() as world:
        run_all(Path(sys.argv[1]), world.rank)
