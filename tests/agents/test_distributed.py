"""Data-parallel training on torch.distributed (gloo, 2 CPU processes) equals one process.

One module-scoped job launches 2 ranks (``ddp_worker.py``, with the environment variables
``torchrun`` sets) that train every learner for 2 updates on a global batch of 4 episodes and
run an interrupted-then-resumed run; the same runs in this process are the reference.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ddp_worker
import marft_agents
from agent_helpers import small_config
from marft_agents.runtime.distributed import WorldInfo, balanced_partition, merge_rollouts
from marft_agents.episodes import Decision, EpisodeRecord, Rollout

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with the gloo backend is not available")

WORLD_SIZE = 2
UNIT_ROUNDOFF = 2.0 ** -24
"""float32's unit roundoff u."""


def summation_bound(n: int) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of a float32 sum of n terms in any
    order (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.4)."""
    return n * UNIT_ROUNDOFF / (1 - n * UNIT_ROUNDOFF)


def adapter_tolerance(arithmetic: dict) -> tuple[float, float]:
    """(mean, max) allowed |difference| of an adapter entry between 2 ranks and 1 process.

    Only float rounding differs: the ranks sum each gradient in another order (another split of
    the batch, other matrix-kernel blocking on another CPU), which moves every gradient entry by at
    most gamma_N of its terms' magnitude, N the token positions of the update's forward passes.
    Adam's step lr * m / sqrt(v) is scale-free, so to first order a relative gradient error
    gamma_N moves each of the S steps by lr * gamma_N: the mean |difference| over entries is at
    most S * lr * gamma_N. No per-entry bound follows without each entry's gradient: an entry
    whose gradient lies within its rounding error of zero may step either way (Adam divides by
    its own scale), so the largest difference is only bounded by two steps of size lr, one each
    way. The real failures this test is for (a rank's gradient dropped, averaged instead of
    summed, one rank on another batch) move whole matrices by ~lr per step, far above the mean
    bound; the history check below catches a mis-scaled gradient that Adam would hide."""
    mean = arithmetic["steps"] * arithmetic["lr"] * summation_bound(arithmetic["positions"])
    return mean, 2 * arithmetic["lr"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(2-rank results per rank, 1-process results, the 2-rank run's folder)."""
    out = tmp_path_factory.mktemp("ddp")
    port = _free_port()
    worker = Path(ddp_worker.__file__)
    # The ranks import this checkout's marft_agents, the one under test.
    root = str(Path(marft_agents.__file__).resolve().parents[1])
    path = os.pathsep.join([root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    procs = []
    for rank in range(WORLD_SIZE):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD_SIZE),
               "LOCAL_WORLD_SIZE": str(WORLD_SIZE), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "MARFT_TEST_DEVICE": "cpu",
               "PYTHONPATH": path}
        procs.append(subprocess.Popen([sys.executable, str(worker), str(out / "ddp")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    single = ddp_worker.run_all(out / "single")
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    ranks = [torch.load(out / "ddp" / f"rank{r}.pt", weights_only=False) for r in range(WORLD_SIZE)]
    return ranks, single, out / "ddp"


def _diffs(a: dict, b: dict) -> tuple[float, float]:
    """(mean, max) |a - b| over every entry of every tensor."""
    assert a.keys() == b.keys()
    flat = torch.cat([(a[k] - b[k]).abs().flatten().double() for k in a])
    return float(flat.mean()), float(flat.max())


def _assert_same_run(ranks: list[dict], single: dict, key: str, initial: dict) -> None:
    """Both ranks hold the same adapters, within rounding (``adapter_tolerance``) of one
    process's, and logged the same loss and gradient-norm figures (normalisers and gradient sums
    are global: a mean instead of a sum over ranks, which Adam would hide in the adapters, shows
    in grad/*_norm)."""
    # The ranks stay in lock-step: the summed gradient is bit-identical on both.
    assert _diffs(ranks[0][key]["adapters"], ranks[1][key]["adapters"])[1] == 0.0
    mean_tol, max_tol = adapter_tolerance(single[key]["arithmetic"])
    moved_mean, _ = _diffs(single[key]["adapters"], initial)
    assert moved_mean > 100 * mean_tol, "training did not move the adapters: the comparison would be vacuous"
    mean, largest = _diffs(ranks[0][key]["adapters"], single[key]["adapters"])
    assert mean <= mean_tol and largest <= max_tol, (mean, mean_tol, largest, max_tol)
    for two, one in zip(ranks[0][key]["history"], single[key]["history"], strict=True):
        figures = [k for k in one if k.startswith(("losses/", "grad/")) and one[k] == one[k]]  # not nan
        assert figures and all(two[k] == pytest.approx(one[k], rel=1e-4, abs=1e-6) for k in figures), \
            {k: (two[k], one[k]) for k in figures}


@pytest.mark.parametrize("algorithm", list(ddp_worker.ALGORITHMS))
def test_two_ranks_train_the_adapters_one_process_trains(runs, algorithm):
    ranks, single, _ = runs
    _assert_same_run(ranks, single, algorithm, ddp_worker.tiny_initial_adapters(algorithm))


@pytest.mark.parametrize("algorithm", list(ddp_worker.UPDATE_ONLY))
def test_two_ranks_update_on_the_same_sampled_batch_as_one_process(runs, algorithm):
    ranks, single, _ = runs
    initial = ddp_worker.tiny_initial_adapters(algorithm, ddp_worker.UPDATE_ONLY[algorithm])
    _assert_same_run(ranks, single, f"update/{algorithm}", initial)


def test_grpo_trains_end_to_end_on_two_ranks(runs):
    ranks, _, _ = runs
    history = ranks[0]["grpo_history"]
    assert len(history) == 2 and all(h["grpo/groups"] == 2.0 and h["rollout/episodes"] == 4.0 for h in history)
    timeless = [[{k: None if v != v else v for k, v in h.items() if not k.startswith("time/")}  # nan -> None
                 for h in r["grpo_history"]] for r in ranks]
    assert timeless[0] == timeless[1]  # every rank computed the same global metrics


def test_a_rank_plays_whole_groups_of_the_global_task_order():
    from agent_helpers import LettersEnv
    from marft_agents.model.policy import MultiAgentPolicy
    from marft_agents.collector import RolloutCollector
    from marft_agents.settings.sampling import SamplingConfig

    model, tokenizer = ddp_worker.tiny()
    policy = MultiAgentPolicy(model, tokenizer, LettersEnv().possible_agents)
    sampling = SamplingConfig(max_new_tokens=2, do_sample=False)

    def tasks(share):
        collector = RolloutCollector([LettersEnv(), LettersEnv()], policy, sampling, values=None, seed=3, group_size=2)
        rollout = collector.collect(8, share=share)
        return [(e.task_id, e.group) for e in rollout.episodes], collector.state_dict()

    whole, whole_state = tasks(None)
    parts = [tasks((rank, 2)) for rank in range(2)]
    assert parts[0][0] + parts[1][0] == whole  # contiguous whole groups, global group indices
    assert all(state == whole_state for _, state in parts)  # the task order does not depend on the rank


def test_resume_after_update_one_matches_the_uninterrupted_two_rank_run(runs):
    ranks, _, _ = runs
    for rank in range(WORLD_SIZE):
        resumed, full = ranks[rank]["resumed"], ranks[rank][ddp_worker.RESUMED]["adapters"]
        assert all(torch.equal(resumed[k], full[k]) for k in full)


def test_sharded_evaluation_gathers_the_figures_of_one_process(runs):
    ranks, single, _ = runs
    assert len(single["eval"]) == 5
    for rank in range(WORLD_SIZE):
        assert [t["task_index"] for t in ranks[rank]["eval"]] == [t["task_index"] for t in single["eval"]]
        assert [(t["solved"], t["reward"]) for t in ranks[rank]["eval"]] == \
            [(t["solved"], t["reward"]) for t in single["eval"]]


def test_only_rank_zero_writes_and_the_checkpoint_holds_every_ranks_rng(runs):
    from marft_agents.run.checkpoint import list_checkpoints, load_checkpoint

    _, _, out = runs
    run = out / "full" / ddp_worker.RESUMED / "run"
    assert (run / "summary.json").is_file() and (run / "metrics.jsonl").is_file()
    state = load_checkpoint(list_checkpoints(run)[-1])["state"]
    assert len(state["ranks"]) == WORLD_SIZE
    assert not torch.equal(state["ranks"][0]["torch"], state["ranks"][1]["torch"])  # seeded per rank


def test_resuming_with_another_world_size_works_and_warns(runs, tmp_path, caplog):
    from marft_agents.run.trainer import train

    _, _, out = runs
    cfg = ddp_worker.config(tmp_path, ddp_worker.RESUMED)
    source = out / "cut" / ddp_worker.RESUMED / "run" / "checkpoints" / "update_000001"
    shutil.copytree(source, Path(cfg.output_dir) / "checkpoints" / source.name)
    with caplog.at_level(logging.WARNING, logger="marft_agents.runtime.distributed"):
        result = train(cfg, resume=True, model_and_tokenizer=ddp_worker.tiny(), eval_before=False,
                       tensorboard=False, plot=False, handle_signals=False)
    assert result.counters["update"] == 2
    assert "written by 2 rank(s), this run has 1" in caplog.text


def test_the_balanced_split_gives_every_item_one_rank_and_evens_the_load():
    costs = [9.0, 1.0, 1.0, 5.0, 4.0, 3.0, 3.0]
    owner = balanced_partition(costs, 2)
    loads = [sum(c for c, r in zip(costs, owner) if r == rank) for rank in range(2)]
    assert sorted(set(owner)) == [0, 1] and abs(loads[0] - loads[1]) <= 1.0
    assert [list(WorldInfo(r, 3).share(7)) for r in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]


def test_merged_rollouts_renumber_episodes_and_decisions():
    def part(task: str, group: int) -> Rollout:
        d = Decision(env_index=0, episode=0, step=0, round=0, agent_id="a", adapter="a", observation="",
                     prompt_ids=[1], response_ids=[2], text="x", logprobs=[0.0], group=group)
        return Rollout(decisions=[d], episodes=[EpisodeRecord(0, task, decisions=[0], group=group)])

    merged = merge_rollouts([part("t0", 0), part("t1", 1)])
    assert [e.task_id for e in merged.episodes] == ["t0", "t1"]
    assert [d.episode for d in merged.decisions] == [0, 1] and merged.episodes[1].decisions == [1]
    assert merged.groups() == {0: [0], 1: [1]}


def test_an_update_that_does_not_split_into_whole_groups_per_rank_is_refused(tmp_path, monkeypatch):
    from marft_agents.runtime import distributed
    from marft_agents.config import ConfigError
    from marft_agents.run.trainer import Trainer

    monkeypatch.setattr(distributed, "current_world", lambda: WorldInfo(0, 4))
    cfg = small_config(tmp_path, **{"schedule.episodes_per_update": 6})
    with pytest.raises(ConfigError, match="multiple of .* times the number of ranks"):
        Trainer(cfg, ddp_worker.tiny())


# -- the process group's timeout and each rank's own GPU (no GPU needed: torch is monkeypatched) --
def test_the_process_group_timeout_defaults_to_30_minutes_and_reads_the_environment():
    from datetime import timedelta

    from marft_agents.runtime.distributed import DEFAULT_TIMEOUT_S, TIMEOUT_VARIABLE, process_group_timeout

    assert process_group_timeout({}) == timedelta(seconds=DEFAULT_TIMEOUT_S) == timedelta(minutes=30)
    assert process_group_timeout({TIMEOUT_VARIABLE: " "}) == timedelta(minutes=30)
    assert process_group_timeout({TIMEOUT_VARIABLE: "90"}) == timedelta(seconds=90)
    assert process_group_timeout({TIMEOUT_VARIABLE: "0.5"}) == timedelta(milliseconds=500)
    for bad in ("0", "-5", "soon", "inf", "nan"):
        with pytest.raises(ValueError, match=TIMEOUT_VARIABLE):
            process_group_timeout({TIMEOUT_VARIABLE: bad})


def _fake_torchrun(monkeypatch, local_rank: int, calls: list) -> None:
    """The environment of rank ``local_rank`` of a torchrun job on a machine with 8 visible GPUs,
    with the process group's and the GPUs' functions recording their calls instead."""
    for name, value in {"RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": "8",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    current = {"device": 0}

    def set_device(index):
        calls.append(("set_device", index))
        current["device"] = index

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current["device"])
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: calls.append(("init", kwargs)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append(("destroy",)))


def test_joining_the_job_binds_this_ranks_gpu_and_passes_the_timeout(monkeypatch):
    from datetime import timedelta

    from marft_agents.runtime.distributed import TIMEOUT_VARIABLE, process_group

    calls: list = []
    _fake_torchrun(monkeypatch, 3, calls)
    monkeypatch.setenv(TIMEOUT_VARIABLE, "120")
    with process_group():
        assert calls == [("set_device", 3), ("init", {"backend": "nccl", "timeout": timedelta(seconds=120)})]
    assert calls[-1] == ("destroy",)
    monkeypatch.setenv(TIMEOUT_VARIABLE, "never")
    calls.clear()
    with pytest.raises(ValueError, match=TIMEOUT_VARIABLE), process_group():
        pass
    assert not any(c[0] == "init" for c in calls)  # refused before joining


def test_each_rank_forks_saves_and_restores_the_rng_of_its_own_gpu_only(monkeypatch):
    import contextlib

    from marft_agents.runtime import seeding
    calls: list = []
    _fake_torchrun(monkeypatch, 5, calls)
    torch.cuda.set_device(5)  # what process_group does on LOCAL_RANK 5
    forked: list = []

    @contextlib.contextmanager
    def fake_fork_rng(devices=None, **kwargs):
        forked.append(list(devices))
        yield

    monkeypatch.setattr(torch.random, "fork_rng", fake_fork_rng)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda index: calls.append(("get", index)) or torch.tensor([index]))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, index: calls.append(("set", int(state), index)))
    calls.clear()

    assert seeding.cuda_rng_devices() == [5]
    assert seeding.cuda_rng_devices("cuda") == [5] and seeding.cuda_rng_devices("cuda:2") == [2]
    assert seeding.cuda_rng_devices("cpu") == []
    with seeding.fork_rng():
        pass
    with seeding.fork_rng("cpu"):
        pass
    assert forked == [[5], []]
    state = seeding.cuda_rng_state()
    seeding.restore_cuda_rng_state(state)
    # a checkpoint written with every device's state (torch.cuda.get_rng_state_all): this GPU's entry
    seeding.restore_cuda_rng_state([torch.tensor([10 + i]) for i in range(8)])
    seeding.restore_cuda_rng_state([torch.tensor([0])])  # no entry for this GPU: left alone
    assert calls == [("get", 5), ("set", 5, 5), ("set", 15, 5)]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU-only machine: no GPU touched
    calls.clear()
    assert seeding.cuda_rng_devices() == [] and seeding.cuda_rng_state() is None
    seeding.restore_cuda_rng_state([torch.tensor([1])])
    with seeding.fork_rng():
        pass
    assert calls == [] and forked[-1] == []
