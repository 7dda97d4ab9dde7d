"""CPU fast paths are probed by trying them, fall back with one log line, and the fallback gives
the fast path's numbers: every machine runs the fallback here (``plain_kernels``), so a CPU
without the fast path (AVX2-only) is not the first to execute it."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time

import pytest
import torch
import torch.nn.functional as F
from test_direct_decode import STOPS, _requests, _seeded_policy

from marft_agents.engine import cpu_support
from marft_agents.engine.direct import _Linear, packs
from marft_agents.settings.sampling import SamplingConfig


@pytest.fixture
def fresh_probe(monkeypatch):
    """Probes run again in this test (the process-wide answers are put back afterwards)."""
    monkeypatch.setattr(cpu_support, "_probed", {})


def _bf16(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_a_prepacking_that_raises_falls_back_with_one_log_line(fresh_probe, monkeypatch, caplog):
    def unsupported(weight, rows_hint):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert "
                           "or avx512bw, avx512vl and avx512dq")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", unsupported)
    weight = _bf16(24, 16, 0)
    with caplog.at_level(logging.WARNING, logger="marft_agents.engine.cpu_support"):
        assert not packs(weight)
        assert not packs(weight)  # probed once: no second line
        linear = _Linear(weight, None)  # would raise if it still tried to prepack
    lines = [r for r in caplog.records if r.name == "marft_agents.engine.cpu_support"]
    assert len(lines) == 1 and "avx512bw" in lines[0].getMessage() and "F.linear" in lines[0].getMessage()
    x = _bf16(5, 16, 1)
    assert linear.packed is None and torch.equal(linear(x), F.linear(x, weight))


def test_the_environment_variable_and_the_context_force_the_plain_path(fresh_probe, monkeypatch):
    weight = _bf16(24, 16, 0)
    with cpu_support.plain_kernels():
        assert not packs(weight) and _Linear(weight, None).packed is None
    monkeypatch.setenv(cpu_support.PLAIN_KERNELS_VARIABLE, "1")
    assert not packs(weight)
    monkeypatch.setenv(cpu_support.PLAIN_KERNELS_VARIABLE, "0")
    assert packs(weight) == (cpu_support._try_onednn_bf16_prepack() is None)


def test_plain_kernels_decode_the_same_bfloat16_tokens_and_logprobs_bit_for_bit():
    """The direct engine in bf16 with the probed path (prepacked on AVX-512/AMX CPUs) and with the
    fallback forced: the prepacked product equals F.linear bit for bit, so whole decodes match."""
    policy = _seeded_policy()
    policy.to(torch.bfloat16)
    cfg = SamplingConfig(max_new_tokens=8, do_sample=False, stop_token_ids=STOPS, engine="direct")
    probed = policy.generate(_requests(policy), cfg)
    with cpu_support.plain_kernels():
        plain = policy.generate(_requests(policy), cfg)
        # the fused products were rebuilt unpacked (the cache key holds the packing decision)
        fused = [v[1] for m in policy.lm.modules() for v in getattr(m, "_marft_direct_fused", {}).values()]
        assert fused and all(linear.packed is None for linear in fused)
    assert [g.response_ids for g in plain] == [g.response_ids for g in probed]
    for a, b in zip(plain, probed):
        assert torch.equal(torch.tensor(a.logprobs), torch.tensor(b.logprobs))
    sampled = dataclasses.replace(cfg, do_sample=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        probed = policy.generate(_requests(policy), sampled)
    with cpu_support.plain_kernels(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        plain = policy.generate(_requests(policy), sampled)
    assert [g.response_ids for g in plain] == [g.response_ids for g in probed]


# -- threads chosen for the machine as it is -----------------------------------------------------------
def _choose(**kwargs):
    """``choose_threads`` with a quiet environment, 2 cores in affinity, torch at its default."""
    defaults = {"environ": {}, "cores": 2, "load": 0.0, "own": 0.0, "current": 2}
    return cpu_support.choose_threads(**{**defaults, **kwargs})


def test_an_idle_machine_gets_every_core_in_the_affinity_mask():
    choice = _choose(load=0.3)
    assert (choice.threads, choice.apply, choice.automatic) == (2, True, True)
    assert choice.why == "2 cores in affinity, load 0.3 besides marft: idle"
    assert _choose(cores=16, current=16, load=0.0).threads == 16


def test_a_busy_machine_gets_fewer_threads_and_is_called_busy():
    assert _choose(load=1.9).threads == 1 and _choose(load=1.9).why.endswith("load 1.9 besides marft: busy")
    assert _choose(load=6.5).threads == 1  # never fewer than one
    assert _choose(cores=16, current=16, load=4.2).threads == 12
    # the process's own part of the load average is not "other work"
    assert _choose(load=0.9, own=0.8).threads == 2


def test_the_affinity_mask_not_the_machine_sets_the_core_count(monkeypatch):
    monkeypatch.setattr(cpu_support.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(cpu_support.os, "cpu_count", lambda: 64)
    assert cpu_support.cores_in_affinity() == 1
    choice = cpu_support.choose_threads(environ={}, load=0.0, own=0.0, current=1)
    assert choice.threads == 1 and choice.why.startswith("1 core in affinity")


def test_explicit_settings_win_in_order():
    assert _choose(configured=3, environ={"MARFT_THREADS": "5"}, load=1.9).threads == 3  # model.threads
    marft = _choose(environ={"MARFT_THREADS": "5", "OMP_NUM_THREADS": "1"}, load=1.9)
    assert (marft.threads, marft.why, marft.apply, marft.automatic) == (5, "MARFT_THREADS", True, False)
    omp = _choose(environ={"OMP_NUM_THREADS": "2"}, load=1.9)  # busy, but the user said 2
    assert (omp.threads, omp.why, omp.apply) == (2, "OMP_NUM_THREADS=2", False)
    torch_set = _choose(current=1, load=0.0)  # someone called torch.set_num_threads(1)
    assert (torch_set.threads, torch_set.apply) == (1, False) and "torch.set_num_threads" in torch_set.why
    with pytest.raises(ValueError, match="MARFT_THREADS must be a whole number >= 1, got 'many'"):
        _choose(environ={"MARFT_THREADS": "many"})


def test_a_count_marft_set_earlier_is_chosen_again(monkeypatch):
    monkeypatch.setattr(cpu_support, "_applied", None)
    threads = torch.get_num_threads()
    try:
        cpu_support.apply_threads(_choose(load=1.9))  # the first model load of the process
        assert torch.get_num_threads() == 1
        again = _choose(current=torch.get_num_threads(), load=0.0)  # a later load, the machine idle now
        assert (again.threads, again.apply) == (2, True)
    finally:
        torch.set_num_threads(threads)


def test_no_load_average_means_every_core():
    choice = _choose(load=lambda: None)
    assert (choice.threads, choice.why) == (2, "2 cores in affinity")


def test_the_start_up_line_says_dtype_device_threads_and_why():
    from marft_agents.model.loading import CpuBf16, setup_line

    slower = CpuBf16(False, "bf16 measured 0.80x the speed of float32 on this CPU")
    line = setup_line(torch.float32, torch.device("cpu"), _choose(load=1.9), bf16=slower)
    assert line == ("float32 on cpu (bf16 measured 0.80x the speed of float32 on this CPU), 1 thread (2 cores in "
                    "affinity, load 1.9 besides marft: busy); set MARFT_THREADS or OMP_NUM_THREADS to override")
    line = setup_line(torch.bfloat16, torch.device("cpu"), _choose(environ={"OMP_NUM_THREADS": "2"}), bf16=slower)
    assert line == ("bfloat16 on cpu (bf16 measured 0.80x the speed of float32 on this CPU: model.dtype float32 "
                    "(or auto) may be faster), 2 threads (OMP_NUM_THREADS=2)")
    faster = CpuBf16(True, "bf16 measured 1.90x faster than float32 on this CPU")
    line = setup_line(torch.float32, torch.device("cpu"), _choose(), bf16=faster)
    assert line.startswith("float32 on cpu (bf16 measured 1.90x faster than float32 on this CPU: model.dtype "
                           "bfloat16 (or auto) may be faster), 2 threads")
    assert setup_line(torch.bfloat16, torch.device("cpu"), _choose(), bf16=faster).startswith(
        "bfloat16 on cpu (bf16 measured 1.90x faster than float32 on this CPU), 2 threads")
    assert setup_line(torch.float16, torch.device("cpu"), _choose(), bf16=faster).startswith("float16 on cpu, 2 threads")


# -- is bf16 faster than float32 here? (measured once, stored per CPU and torch version) --------------
CPUINFO = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx512f avx512_bf16\n"


@pytest.fixture
def fresh_speedups(monkeypatch):
    """No speed-up measured in this process yet, no kernel cap in the environment."""
    monkeypatch.setattr(cpu_support, "_speedups", {})
    for name in cpu_support.KERNEL_CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)


class _Timer:
    """A stand-in for ``time_bf16_step``: fixed seconds per pair, counts its calls."""

    def __init__(self, float32_s=(0.02, 0.02, 0.02), bfloat16_s=(0.01, 0.01, 0.01)):
        self.timings, self.calls = (list(float32_s), list(bfloat16_s)), 0

    def __call__(self):
        self.calls += 1
        return self.timings


def test_the_speedup_is_the_median_pair_ratio_and_bf16_must_win_by_1_2x():
    # per pair float32/bf16: 2, 2, 0.5 (a pre-empted bf16 step): the median ignores the outlier
    assert cpu_support.bf16_speedup_from([0.02, 0.02, 0.02], [0.01, 0.01, 0.04]) == 2.0
    assert cpu_support.bf16_speedup_from([0.01, 0.01, 0.01], [0.0125, 0.0125, 0.002]) == pytest.approx(0.8)
    assert cpu_support.bf16_wins(2.0) and cpu_support.bf16_wins(cpu_support.BF16_WIN_RATIO)
    assert not cpu_support.bf16_wins(1.15) and not cpu_support.bf16_wins(0.8)
    with pytest.raises(ValueError, match="expected as many float32 as bfloat16 timings"):
        cpu_support.bf16_speedup_from([0.01, 0.01], [0.01])
    with pytest.raises(ValueError, match="at least one"):
        cpu_support.bf16_speedup_from([], [])


def test_the_speedup_is_measured_once_then_read_from_the_cache(fresh_speedups, tmp_path, monkeypatch, caplog):
    cache = tmp_path / "marft" / "cpu-bf16-speed.json"
    timer = _Timer()
    with caplog.at_level(logging.INFO, logger="marft_agents.engine.cpu_support"):
        assert cpu_support.bf16_speedup(CPUINFO, cache, timer) == 2.0
    assert timer.calls == 1 and "measured bf16 at 2.00x float32's speed" in caplog.text
    stored = cache.read_text()
    cache.unlink()
    assert cpu_support.bf16_speedup(CPUINFO, cache, timer) == 2.0  # the same process: its own answer
    assert timer.calls == 1 and not cache.exists()
    cache.write_text(stored)
    monkeypatch.setattr(cpu_support, "_speedups", {})  # a later process reads the file
    assert cpu_support.bf16_speedup(CPUINFO, cache, timer) == 2.0 and timer.calls == 1
    # a kernel ISA cap runs other kernels on the same CPU: measured again, stored beside the first
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    capped = _Timer(bfloat16_s=(0.25, 0.25, 0.25))
    assert cpu_support.bf16_speedup(CPUINFO, cache, capped) == pytest.approx(0.08) and capped.calls == 1
    stored = json.loads(cache.read_text())
    assert sorted(stored.values()) == pytest.approx([0.08, 2.0]) and any(key.endswith("|ONEDNN_MAX_CPU_ISA=AVX2") for key in stored)


def test_processes_started_together_measure_once_and_agree(fresh_speedups, tmp_path):
    """Two ranks of one ``torchrun`` (here two threads, each with its own lock descriptor): the
    second waits for the first one's measurement instead of timing on its own."""
    cache = tmp_path / "cpu-bf16-speed.json"
    second_timer, answers = _Timer(bfloat16_s=(0.04, 0.04, 0.04)), {}
    second = threading.Thread(target=lambda: answers.update(second=cpu_support.bf16_speedup(CPUINFO, cache, second_timer)))

    def first_timer():  # the second rank starts while the first one is still timing
        second.start()
        time.sleep(0.3)
        return [0.02] * 3, [0.01] * 3

    answers["first"] = cpu_support.bf16_speedup(CPUINFO, cache, first_timer)
    second.join(10)
    assert answers == {"first": 2.0, "second": 2.0} and second_timer.calls == 0


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"k": "fast"}', ""])
def test_a_damaged_cache_is_ignored_and_rewritten(fresh_speedups, tmp_path, caplog, damage):
    cache = tmp_path / "cpu-bf16-speed.json"
    cache.write_text(damage)
    timer = _Timer()
    with caplog.at_level(logging.WARNING, logger="marft_agents.engine.cpu_support"):
        assert cpu_support.bf16_speedup(CPUINFO, cache, timer) == 2.0
    assert timer.calls == 1 and "ignoring the damaged bf16 speed cache" in caplog.text
    assert json.loads(cache.read_text()) == {cpu_support.bf16_probe_key(CPUINFO): 2.0}


def test_the_cache_key_is_the_cpu_its_flags_torch_and_kernel_caps(monkeypatch):
    key = cpu_support.bf16_probe_key(CPUINFO, environ={})
    assert key.startswith("Some CPU|flags ") and f"|torch {torch.__version__}" in key
    assert cpu_support.bf16_probe_key(CPUINFO.replace("fpu avx512f", "avx512f fpu"), environ={}) == key  # same set
    assert cpu_support.bf16_probe_key(CPUINFO.replace("fpu ", ""), environ={}) != key
    assert cpu_support.bf16_probe_key(CPUINFO.replace("Some CPU", "Other CPU"), environ={}) != key
    assert cpu_support.bf16_probe_key(CPUINFO, environ={"ATEN_CPU_CAPABILITY": "avx2"}) == key + "|ATEN_CPU_CAPABILITY=avx2"
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert cpu_support.bf16_probe_key(CPUINFO, environ={}) != key


def test_the_timer_runs_interleaved_pairs_on_one_thread_within_its_budget(monkeypatch):
    ran = []  # (dtype, torch threads) per step
    monkeypatch.setattr(cpu_support, "_decoder_step",
                        lambda dtype: lambda: ran.append((dtype, torch.get_num_threads())))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        float32_s, bfloat16_s = cpu_support.time_bf16_step()  # instant steps: every pair runs
        assert torch.get_num_threads() == 2  # put back
        monkeypatch.setattr(cpu_support, "BF16_PROBE_BUDGET_S", 0.0)  # budget spent at once: the fewest pairs
        assert len(cpu_support.time_bf16_step()[0]) == cpu_support.BF16_PROBE_MIN_PAIRS
    finally:
        torch.set_num_threads(threads)
    assert len(float32_s) == len(bfloat16_s) == cpu_support.BF16_PROBE_MAX_PAIRS
    assert {n for _, n in ran} == {1}
    f32, b16 = torch.float32, torch.bfloat16
    assert [d for d, _ in ran[:6]] == [f32, b16, f32, b16, b16, f32]  # warm-up, then pairs in alternating order


def test_the_timed_step_runs_forward_and_backward_in_both_dtypes(monkeypatch):
    monkeypatch.setattr(cpu_support, "BF16_PROBE_SHAPES", (8, 16, 2))  # tiny: this checks it runs, not its speed
    for dtype in (torch.float32, torch.bfloat16):
        cpu_support._decoder_step(dtype)()
