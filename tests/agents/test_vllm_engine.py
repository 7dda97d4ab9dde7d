"""``sampling.engine: vllm`` against the real vLLM: routing of requests to adapters, version
bookkeeping, sync before the next rollout, resume, behaviour log-probs and the importance
weight, refusals (LoRA rank, sleep mode, over-long prompts), shutdown, and whole training runs.

Where vLLM is installed (``make test-vllm``: PyPI's CPU build in ``.venv-vllm``) the engine
builds a recording subclass of the real ``vllm.LLM`` (every call it makes is kept in ``events``)
on a tiny random model saved to a temporary folder; where it is not, those tests skip
(``MARFT_REAL_VLLM=1`` makes that a failure). Sleep mode, which vLLM's CPU build lacks, is
tested against ``vllm_standin.py``."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import random
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import vllm_standin
from agent_helpers import DEVICE, small_config, tiny_on_device

from marft_agents.engine import vllm_engine
from marft_agents.engine.base import LoopEngine
from marft_agents.engine.vllm_engine import (VLLMEngine, engine_core_visible_devices, lora_rank_slot,
                                             resolve_sleep_level)
from marft_agents.learners.base import BaseLearner
from marft_agents.learners.samples import Sample, behaviour_weights
from marft_agents.model.policy import GenRequest
from marft_agents.settings.sampling import SamplingConfig
from marft_agents.settings.vllm import CPU_KV_CACHE_GIB
from marft_agents.run.trainer import Trainer, build_policy, prepare_trainer, train
from test_policy import perturb

AGENTS = ["reasoner_0", "actor_0"]
GREEDY = SamplingConfig(max_new_tokens=6, do_sample=False, temperature=1.0, engine="vllm")
REAL_VLLM = importlib.util.find_spec("vllm") is not None
"""Whether the real vLLM is installed here (then the engine tests run against it)."""
REQUIRE_REAL = os.environ.get("MARFT_REAL_VLLM") == "1"
"""``make test-vllm`` sets it: a missing vLLM fails the tests instead of skipping them."""
TINY = {"hidden_size": 128, "num_layers": 1}
"""The tiny model's size: 4 heads of 32 (vLLM's CPU attention takes head sizes from 32 up)."""


def _recording(llm_class: type) -> type:
    """A subclass of the real ``vllm.LLM`` that keeps its keywords and every call the engine makes
    (``events``: generate with its LoRA ids, add/remove_lora, reset_prefix_cache, sleep, wake_up,
    shutdown), and lists every instance built (``instances``), as the stand-in does."""

    class RecordingLLM(llm_class):
        instances: list = []

        def __init__(self, model: str, **kwargs):
            self.model_path, self.kwargs, self.events = model, kwargs, []
            self.environment = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
            super().__init__(model=model, **kwargs)
            engine, events = self.llm_engine, self.events

            def add_lora(request, _add=engine.add_lora):
                done = _add(request)
                events.append(("add_lora", request.lora_int_id))
                return done

            def remove_lora(lora_id, _remove=engine.remove_lora):
                events.append(("remove_lora", lora_id))
                return _remove(lora_id)

            def shutdown(*args, _shutdown=engine.engine_core.shutdown, **kwargs):
                events.append(("shutdown",))
                return _shutdown(*args, **kwargs)

            engine.add_lora, engine.remove_lora, engine.engine_core.shutdown = add_lora, remove_lora, shutdown
            RecordingLLM.instances.append(self)

        def generate(self, prompts, sampling_params=None, *args, lora_request=None, **kwargs):
            loras = lora_request if isinstance(lora_request, list) else [lora_request] * len(prompts)
            self.events.append(("generate", [lora.lora_int_id for lora in loras]))
            return super().generate(prompts, sampling_params, *args, lora_request=lora_request, **kwargs)

        def reset_prefix_cache(self, *args, **kwargs):
            self.events.append(("reset_prefix_cache",))
            return super().reset_prefix_cache(*args, **kwargs)

        def sleep(self, level: int = 1, **kwargs):
            self.events.append(("sleep", level))
            return super().sleep(level=level, **kwargs)

        def wake_up(self, tags=None):
            self.events.append(("wake_up",))
            return super().wake_up(tags)

    return RecordingLLM


@pytest.fixture
def real(monkeypatch):
    """The real vLLM with ``vllm.LLM`` replaced by its recording subclass: a namespace with
    ``LLM`` (the subclass), ``LoRARequest`` and ``real = True``."""
    if not REAL_VLLM:
        if REQUIRE_REAL:
            pytest.fail("MARFT_REAL_VLLM=1, but vLLM is not importable here")
        pytest.skip("vLLM is not installed: `make test-vllm` runs these tests against vLLM's CPU build")
    # vLLM's engine core in this process: after the first, an engine builds in a second instead of
    # the ~40 s of starting a process that imports vLLM (the shutdown test asks for the process)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    vllm = importlib.import_module("vllm")
    importlib.import_module("vllm.envs").disable_envs_cache()  # read the variables afresh (an engine caches them)
    recording = _recording(vllm.LLM)
    monkeypatch.setattr(vllm, "LLM", recording)
    return types.SimpleNamespace(LLM=recording, LoRARequest=importlib.import_module("vllm.lora.request").LoRARequest,
                                 real=True)


@pytest.fixture
def standin(monkeypatch):
    """The stand-in (``vllm_standin.py``), for sleep mode: vLLM's CPU build has none."""
    module = vllm_standin.install(monkeypatch, device_type=DEVICE.type)
    monkeypatch.setattr(VLLMEngine, "devices", ("cpu", "cuda"))  # the stand-in runs where the policy does
    module.real = False
    return module


@pytest.fixture(params=["real", "standin"])
def backend(request):
    """Each backend in turn (a test that holds on both: sleeping where vLLM can, not where not)."""
    return request.getfixturevalue(request.param)


def _config(tmp_path, **overrides):
    """A vLLM training config whose base model is saved to ``tmp_path/base`` (vLLM loads it from
    there), and that model: the run's policy is built on it."""
    model, tok = tiny_on_device(seed=0, **TINY)
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    cfg = small_config(tmp_path, **{"sampling.engine": "vllm", "ppo.recompute_old_logprobs": True,
                                    "vllm.model_path": str(folder), "vllm.enforce_eager": True,
                                    "vllm.max_model_len": 512, **overrides})
    return cfg, (model, tok)


def _policy(tmp_path, seed=1, **overrides):
    cfg, (model, tok) = _config(tmp_path, **overrides)
    policy = build_policy(cfg, model, tok, AGENTS)
    perturb(policy, seed, scale=0.3)
    return policy


def _requests(policy):
    prompts = [policy.chat_prompt_ids("Think.", f"Say {i}" + "!" * i) for i in range(3)]
    prefix = policy.shared_prefix_len("Think.", prompts[0])
    return [GenRequest(agent, p, prefix) for p in prompts for agent in AGENTS]


def _loop(policy, requests, sampling=GREEDY):
    """The same requests decoded by the in-process loop on the policy's current weights."""
    return LoopEngine(policy).generate(requests, dataclasses.replace(sampling, engine="legacy"))


def _llm(policy):
    return policy.engine.llm


def _close(a, b, tol=1e-4) -> bool:
    """Whether two generations lists have the same tokens and log-probs within ``tol``."""
    return all(x.response_ids == y.response_ids and len(x.logprobs) == len(y.logprobs)
               and all(abs(p - q) <= tol for p, q in zip(x.logprobs, y.logprobs)) for x, y in zip(a, b))


def test_a_missing_vllm_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setattr(VLLMEngine, "devices", ("cpu", "cuda"))
    policy = _policy(tmp_path)
    with pytest.raises(ImportError, match=r"pip install 'marft\[vllm\]'"):
        policy.generate(_requests(policy), GREEDY)


def test_the_engine_loads_the_base_weights_from_where_the_policy_read_them(tmp_path, standin, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(standin.LLM, "instances", [])
    cfg, (_model, tok) = _config(tmp_path, **{"vllm.model_path": None})
    read = AutoModelForCausalLM.from_pretrained(tmp_path / "base").to(DEVICE)  # as load_model_and_tokenizer does
    engine = build_policy(cfg, read, tok, AGENTS).engine_for("vllm")
    assert engine.llm.model_path == str(tmp_path / "base") and standin.LLM.instances == [engine.llm]


def test_a_model_built_in_memory_needs_vllm_model_path(tmp_path, standin):
    cfg, (model, tok) = _config(tmp_path, **{"vllm.model_path": None})
    policy = build_policy(cfg, model, tok, AGENTS)  # a model from no folder: nothing for vLLM to load
    with pytest.raises(RuntimeError, match=r"built in memory; save it .* set vllm.model_path"):
        policy.engine_for("vllm")


def test_the_engine_is_built_once_with_settings_for_its_platform(tmp_path, real):
    policy = _policy(tmp_path)
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    engine = policy.engine_for("vllm")
    # building it left the global RNGs alone (an in-process vLLM seeds them with its own seed)
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    policy.generate(_requests(policy), GREEDY)
    policy.generate(_requests(policy), GREEDY)
    (llm,) = real.LLM.instances  # one engine per process, reused
    kwargs = llm.kwargs
    assert llm is engine.llm and llm.model_path == str(tmp_path / "base")
    assert kwargs["enable_lora"] and kwargs["max_loras"] == len(policy.policy_adapters) == 2
    assert kwargs["max_lora_rank"] == lora_rank_slot(8) == 8 and kwargs["dtype"] == "float32"
    assert kwargs["generation_config"] == "vllm" and kwargs["logprobs_mode"] == "processed_logprobs"
    # by platform: vLLM's CPU build has no sleep mode, and its KV cache is RAM, sized by marft
    on_cpu = DEVICE.type == "cpu"
    assert engine.sleep_level == (0 if on_cpu else 1) and kwargs["enable_sleep_mode"] == (not on_cpu)
    if on_cpu:
        assert kwargs["kv_cache_memory_bytes"] == int(CPU_KV_CACHE_GIB * 2**30)
    assert engine.max_model_len == 512
    params = engine._params(dataclasses.replace(GREEDY, do_sample=True, temperature=0.7), [3], seed=5)
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (0.7, 1.0, 0, 0.0)
    assert (params.repetition_penalty, params.presence_penalty, params.frequency_penalty) == (1.0, 0.0, 0.0)
    assert params.stop_token_ids == [3] and params.ignore_eos and params.logprobs == 0 and params.seed == 5


def test_each_request_is_generated_with_its_own_agents_adapter(tmp_path, real):
    policy = _policy(tmp_path)
    requests = _requests(policy)
    ours, loop = policy.generate(requests, GREEDY), _loop(policy, requests)
    assert [g.response_ids for g in ours] == [g.response_ids for g in loop]
    assert [g.agent_id for g in ours] == [r.agent_id for r in requests]
    # the agents differ (perturbed adapters), so a request routed to the wrong adapter would show
    assert any(ours[k].response_ids != ours[k + 1].response_ids for k in range(0, len(ours), 2))
    for ours_g, loop_g in zip(ours, loop):
        assert ours_g.logprobs == pytest.approx(loop_g.logprobs, abs=1e-4)
        assert ours_g.prefix_len == loop_g.prefix_len > 0 and ours_g.text == loop_g.text
    engine = policy.engine
    served = _llm(policy).events[-1]
    assert served == ("generate", [engine.loras[policy.adapter_for(r.agent_id)].lora_int_id for r in requests])


def test_behaviour_logprobs_agree_with_the_learners_pass(tmp_path, real):
    policy = _policy(tmp_path)
    requests = _requests(policy)
    sampling = dataclasses.replace(GREEDY, do_sample=True, temperature=0.7)
    gens = policy.generate(requests, sampling, torch.Generator().manual_seed(0))
    again = policy.generate(requests, sampling, torch.Generator().manual_seed(0))
    assert [g.response_ids for g in gens] == [g.response_ids for g in again]  # seeded: reproducible
    other = policy.generate(requests, sampling, torch.Generator().manual_seed(1))
    assert [g.response_ids for g in other] != [g.response_ids for g in gens]  # the seed drives the draw
    for agent in AGENTS:
        mine = [g for g in gens if g.agent_id == agent]
        stats = policy.token_logprobs(policy.adapter_for(agent), [g.prompt_ids for g in mine],
                                      [g.response_ids for g in mine], 0.7, prefix_lens=[g.prefix_len for g in mine])
        for row, g in enumerate(mine):
            assert g.logprobs == pytest.approx(stats.logprobs[row, :len(g.response_ids)].tolist(), abs=1e-4)


def test_sync_exports_a_new_version_and_removes_the_old_one(tmp_path, real):
    policy = _policy(tmp_path)
    requests = _requests(policy)
    policy.generate(requests, GREEDY)
    engine, llm = policy.engine, _llm(policy)
    root = Path(policy.engine_settings.output_dir) / "vllm_adapters"
    assert engine.version == 0 and sorted(p.name for p in (root / "v0").iterdir() if p.is_dir()) == sorted(policy.policy_adapters)
    old = {a: r.lora_int_id for a, r in engine.loras.items()}
    assert llm.llm_engine.list_loras() == set(old.values())
    llm.events.clear()
    policy.sync_engine(1)
    new = {a: r.lora_int_id for a, r in engine.loras.items()}
    assert engine.version == 1 and min(new.values()) > max(old.values())
    assert llm.llm_engine.list_loras() == set(new.values())
    assert not (root / "v0").exists() and (root / "v1").is_dir()
    # old ids removed before the new ones are added, then the prefix cache reset
    assert llm.events == ([("remove_lora", i) for i in old.values()] + [("add_lora", i) for i in new.values()]
                          + [("reset_prefix_cache",)])
    policy.sync_engine(1)  # a version at or below the served one (a restore) takes the next number
    assert engine.version == 2
    policy.close_engine()
    assert not root.exists()  # nothing left in the run's folder


def test_outputs_follow_the_weights_after_sync_and_a_skipped_sync_is_stale(tmp_path, real):
    policy = _policy(tmp_path)
    requests = _requests(policy)
    before = policy.generate(requests, GREEDY)
    perturb(policy, 7, scale=0.5)  # "an update"
    stale = policy.generate(requests, GREEDY)
    fresh = _loop(policy, requests)
    assert _close(stale, before, tol=1e-6)  # no sync: the old adapters
    assert not _close(stale, fresh)
    policy.sync_engine(1)
    assert _close(policy.generate(requests, GREEDY), fresh)


def test_the_engine_sleeps_during_updates_where_it_can_and_is_synced_before_the_next_rollout(tmp_path, backend):
    cfg, model_and_tokenizer = _config(tmp_path, **{"schedule.num_updates": 3, "eval.interval": 1})
    trainer = Trainer(cfg, model_and_tokenizer)
    asleep_during_update = []
    update = trainer.learner.update

    def spied(rollout, index):
        asleep_during_update.append(trainer.policy.engine.asleep)
        return update(rollout, index)

    trainer.learner.update = spied
    for done, _metrics in enumerate(trainer.run(), start=1):
        engine = trainer.policy.engine
        assert engine.version == done and not engine.asleep
        # the engine serves the policy's new weights: greedy answers and log-probs of the loop
        requests = _requests(trainer.policy)
        assert _close(trainer.policy.generate(requests, GREEDY), _loop(trainer.policy, requests))
    sleeps = trainer.policy.engine.sleep_level > 0
    assert sleeps == (not backend.real or DEVICE.type == "cuda")  # vLLM's CPU build has no sleep mode
    assert asleep_during_update == [sleeps] * 3
    kinds = [event[0] for event in _llm(trainer.policy).events]
    # every sleep is followed by a wake-up, then the export (add_lora ... reset), before any generation
    for k, kind in enumerate(kinds):
        if kind == "sleep":
            after = kinds[k + 1:]
            assert after[0] == "wake_up" and "add_lora" in after
            assert "generate" not in after[:after.index("reset_prefix_cache")]
    assert kinds.count("sleep") == kinds.count("wake_up") == (3 if sleeps else 0)
    assert kinds.count("reset_prefix_cache") == 4  # the first export, then one per update
    trainer.close()
    assert trainer.policy._engine is None


def test_the_cached_blocks_are_released_before_vllm_wakes_up(tmp_path, standin, monkeypatch):
    policy = _policy(tmp_path)
    policy.generate(_requests(policy), GREEDY)
    llm = _llm(policy)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: llm.events.append(("empty_cache",)))
    llm.events.clear()
    with policy.engine.suspend():
        assert policy.engine.asleep
    assert llm.events == [("sleep", 1), ("empty_cache",), ("wake_up",)]


def test_a_restore_syncs_the_restored_weights(tmp_path, real):
    cfg, model_and_tokenizer = _config(tmp_path, **{"schedule.num_updates": 1})
    train(cfg, model_and_tokenizer=model_and_tokenizer, eval_before=False, tensorboard=False, plot=False)

    cfg2, fresh_model = _config(tmp_path / "again")
    cfg2 = dataclasses.replace(cfg2, output_dir=cfg.output_dir,
                               schedule=dataclasses.replace(cfg2.schedule, num_updates=2))
    trainer = Trainer(cfg2, fresh_model)  # the base weights: untrained adapters
    requests = _requests(trainer.policy)
    untrained = trainer.policy.generate(requests, GREEDY)  # engine built, version 0 exported
    assert trainer.restore()
    engine = trainer.policy.engine
    assert engine.version == 1 and trainer.policy.weights_version == 1
    restored = trainer.policy.generate(requests, GREEDY)
    assert _close(restored, _loop(trainer.policy, requests)) and not _close(restored, untrained)
    trainer.close()
    # an engine built after the restore exports the restored version first
    resumed = prepare_trainer(cfg2, resume=True, model_and_tokenizer=_config(tmp_path / "third")[1])
    assert resumed.policy._engine is None and resumed.policy.weights_version == 1
    resumed.policy.generate(requests, GREEDY)
    assert resumed.policy.engine.version == 1
    resumed.close()


@pytest.mark.parametrize("algorithm, extra", [
    ("mappo_action", {}),
    ("grpo", {"learner": {"group_size": 2}}),
])
def test_training_with_the_vllm_engine_completes(tmp_path, real, algorithm, extra):
    cfg, model_and_tokenizer = _config(tmp_path, algorithm=algorithm, **extra,
                                       **{"ppo.behaviour_is_cap": 2.0, "eval.at_end": True})
    result = train(cfg, model_and_tokenizer=model_and_tokenizer, tensorboard=False, plot=False)
    assert len(result.history) == 2 and result.final_eval is not None
    assert len(real.LLM.instances) == 1  # rollouts and evaluations share the engine
    for metrics in result.history:
        # vLLM's kernels and the learner's pass score the same distribution up to float rounding
        assert 0 <= metrics["rollout/behaviour_logprob_gap"] < 1e-3
        assert metrics["ppo/behaviour_is_weight"] == pytest.approx(1.0, abs=1e-3)
        assert metrics["ppo/behaviour_is_clipfrac"] == 0.0
    assert result.policy._engine is None  # closed at the end of the run
    assert ("shutdown",) in real.LLM.instances[0].events


@pytest.mark.parametrize("engine, calls", [("vllm", 1), ("legacy", 2)])
def test_a_tick_of_several_adapters_is_one_call_when_the_engine_mixes_adapters(tmp_path, real, engine, calls):
    import marft_envs
    from agent_helpers import LETTERS_ID
    from marft_agents.episodes import Rollout
    from marft_agents.collector import RolloutCollector

    policy = _policy(tmp_path)
    envs = [marft_envs.make(LETTERS_ID) for _ in range(2)]
    collector = RolloutCollector(envs, policy, dataclasses.replace(GREEDY, engine=engine), values=None)
    rollout = Rollout()
    queue = [((1, {"task_index": 1}), 1), ((0, {"task_index": 0}), 0)]
    for slot in collector.slots:
        collector._start_next(slot, queue, rollout)
    envs[1].step("abc")  # env 1 moves on to its second agent: the tick has both agents
    turns = [(slot, *collector._advance(slot)) for slot in collector.slots]
    assert [turn[1] for turn in turns] == AGENTS
    seen, original = [], policy.generate
    policy.generate = lambda requests, sampling: seen.append([r.agent_id for r in requests]) or original(
        requests, sampling)
    collector._play_tick(turns, rollout)
    assert len(seen) == calls and sorted(a for call in seen for a in call) == sorted(AGENTS)
    assert [d.agent_id for d in rollout.decisions] == AGENTS


# -- refusals and platform settings ------------------------------------------------------------
def test_the_lora_slot_is_the_smallest_rank_vllm_offers_and_ranks_above_512_are_refused():
    assert [lora_rank_slot(r) for r in (1, 2, 8, 9, 16, 200, 300, 320, 321, 512)] == [
        1, 8, 8, 16, 16, 256, 320, 320, 512, 512]
    with pytest.raises(ValueError, match=r"lora.r is 513, but vLLM serves LoRA ranks up to 512"):
        lora_rank_slot(513)


def test_the_sleep_level_follows_the_platform_and_an_impossible_one_names_the_setting(tmp_path, real):
    assert resolve_sleep_level(None, True, "cuda") == 1 and resolve_sleep_level(None, False, "cpu") == 0
    assert resolve_sleep_level(0, True, "cuda") == 0 and resolve_sleep_level(1, True, "cuda") == 1
    with pytest.raises(ValueError, match=r"^vllm.sleep_level: 1 needs vLLM's sleep mode, .* on cpu; set vllm.sleep_level: 0"):
        resolve_sleep_level(1, False, "cpu")
    if DEVICE.type != "cpu":
        return
    policy = _policy(tmp_path, **{"vllm.sleep_level": 1})  # the real CPU build: refused before vLLM is built
    with pytest.raises(ValueError, match=r"^vllm.sleep_level: 1 needs vLLM's sleep mode"):
        policy.generate(_requests(policy), GREEDY)
    assert real.LLM.instances == []


def test_a_prompt_longer_than_max_model_len_is_refused_in_one_line_naming_the_setting(tmp_path, real):
    policy = _policy(tmp_path, **{"vllm.max_model_len": 64})
    requests = _requests(policy)
    long = GenRequest("actor_0", policy.chat_prompt_ids("Think.", "x" * 80), 0)
    assert len(long.prompt_ids) >= 64 > max(len(r.prompt_ids) for r in requests)
    with pytest.raises(ValueError, match=r"^vllm.max_model_len is 64 tokens \(prompt \+ response\), but 1 of 7 "
                                         r"prompts leave no room.* actor_0's, has \d+ tokens"):
        policy.generate([*requests, long], GREEDY)
    assert "\n" not in str(pytest.raises(ValueError, policy.generate, [long], GREEDY).value)
    # nothing reached vLLM: the engine still serves the other prompts
    assert [g.response_ids for g in policy.generate(requests, GREEDY)] == [
        g.response_ids for g in _loop(policy, requests)]


def test_the_engine_core_sees_only_the_policys_gpu(tmp_path, standin, monkeypatch):
    cuda = torch.device
    assert engine_core_visible_devices(cuda("cpu"), {}) is None
    assert engine_core_visible_devices(cuda("cuda", 1), {}) == "1"  # torchrun's LOCAL_RANK=1: cuda:1
    assert engine_core_visible_devices(cuda("cuda", 1), {"CUDA_VISIBLE_DEVICES": "4, 5,6"}) == "5"
    with pytest.raises(RuntimeError, match="cuda:3, but CUDA_VISIBLE_DEVICES lists 2"):
        engine_core_visible_devices(cuda("cuda", 3), {"CUDA_VISIBLE_DEVICES": "0,1"})
    # the engine is built with it in the environment (its engine-core process inherits it), then restored
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(vllm_engine, "engine_core_visible_devices", lambda device, environ: "3")
    policy = _policy(tmp_path)
    policy.generate(_requests(policy), GREEDY)
    assert _llm(policy).environment == {"CUDA_VISIBLE_DEVICES": "3"}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_close_shuts_vllms_engine_core_down_without_waiting_for_garbage_collection(tmp_path, real, monkeypatch):
    import psutil

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the default: the engine core in its own process
    importlib.import_module("vllm.envs").disable_envs_cache()  # an in-process engine earlier cached the variables
    policy = _policy(tmp_path)
    policy.generate(_requests(policy), GREEDY)
    # vLLM's processes are named VLLM::EngineCore, VLLM::Worker (multiprocessing's helpers are not)
    started = [p for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM")]
    assert started, "vLLM started no engine-core process"
    llm = _llm(policy)  # still referenced here (and by the recording class): garbage collection cannot end it
    policy.close_engine()
    assert ("shutdown",) in llm.events
    _gone, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, alive


# -- the importance weight ---------------------------------------------------------------------
def _samples(old, behaviour):
    return [Sample(agent_id="a", adapter="policy_a", critic="", prompt_ids=[1], response_ids=[5] * len(o),
                   old_logprobs=torch.tensor(o), old_values=torch.zeros(()), advantages=torch.zeros(()),
                   returns=torch.zeros(()), behaviour_logprobs=torch.tensor(b)) for o, b in zip(old, behaviour)]


def test_a_sample_keeps_its_sampling_time_logprobs_as_behaviour():
    (s,) = _samples([[-1.0, -2.0]], [[-1.0, -2.0]])
    s = Sample(**{**{f.name: getattr(s, f.name) for f in dataclasses.fields(s)}, "behaviour_logprobs": None})
    sampled = s.old_logprobs
    s.old_logprobs = torch.tensor([-0.5, -0.5])  # the learner rescored them
    assert s.behaviour_logprobs is sampled


def test_the_importance_weight_is_one_on_policy_and_truncates_at_the_cap():
    old = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, 0.0, 0.0]])  # [B, T]
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    same = _samples([[-1.0, -2.0], [-1.0]], [[-1.0, -2.0], [-1.0]])
    w, gap = behaviour_weights(same, old, mask, per_token=True, cap=2.0)
    assert torch.equal(w, torch.ones(2, 3)) and torch.equal(gap, torch.zeros(2, 3))
    w, _ = behaviour_weights(same, old, mask, per_token=False, cap=2.0)
    assert torch.equal(w, torch.ones(2))
    # behaviour 1 nat below the learner on every token: ratio e per token, e^2 per 2-token decision
    low = _samples([[-1.0, -2.0], [-1.0]], [[-2.0, -3.0], [-1.5]])
    w, gap = behaviour_weights(low, old, mask, per_token=True, cap=2.0)
    assert w[0, :2].tolist() == [2.0, 2.0] and w[1, 0] == pytest.approx(torch.exp(torch.tensor(0.5)))
    assert gap[0].tolist() == [1.0, 1.0, 0.0] and gap[1].tolist() == [0.5, 0.0, 0.0]
    w, _ = behaviour_weights(low, old, mask, per_token=False, cap=100.0)
    assert w.tolist() == pytest.approx([float(torch.exp(torch.tensor(2.0))), float(torch.exp(torch.tensor(0.5)))])
    # under logprob_reduction mean, a decision's log-ratio is the mean over its tokens: e^1, e^0.5
    w, _ = behaviour_weights(low, old, mask, per_token=False, cap=100.0, mean=True)
    assert w.tolist() == pytest.approx([float(torch.exp(torch.tensor(1.0))), float(torch.exp(torch.tensor(0.5)))])
    # behaviour above the learner: weights below 1 are kept (only the top is truncated)
    high = _samples([[-1.0, -2.0], [-1.0]], [[-0.5, -2.0], [-1.0]])
    w, _ = behaviour_weights(high, old, mask, per_token=True, cap=2.0)
    assert w[0, 0] == pytest.approx(float(torch.exp(torch.tensor(-0.5))))


def test_the_learner_weighs_its_policy_units_by_the_truncated_ratio():
    learner = types.SimpleNamespace(ppo=types.SimpleNamespace(behaviour_is_cap=2.0, logprob_reduction="sum"),
                                    plan=types.SimpleNamespace(rescores_old_logprobs=True))  # the run plan's rescoring
    samples = _samples([[-1.0, -2.0], [-1.0]], [[-2.0, -3.0], [-1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    surrogate = torch.zeros(2, 2)  # token units
    norm = {"units": 3.0, "tokens": 3.0}
    weight, stats = BaseLearner._behaviour_correction(learner, samples, mask, surrogate, mask, norm)
    assert weight.tolist() == [[2.0, 2.0], [1.0, 0.0]]
    assert stats["ppo/behaviour_is_weight"] == pytest.approx(5.0 / 3.0)
    assert stats["ppo/behaviour_is_clipfrac"] == pytest.approx(2.0 / 3.0)
    assert stats["rollout/behaviour_logprob_gap"] == pytest.approx(2.0 / 3.0)
    learner.ppo.behaviour_is_cap = None  # off: the gap is reported, the weights are unchanged
    weight, stats = BaseLearner._behaviour_correction(learner, samples, mask, surrogate, mask, norm)
    assert weight is mask and set(stats) == {"rollout/behaviour_logprob_gap"}
    learner.plan.rescores_old_logprobs = False  # old = behaviour by construction: nothing to do
    assert BaseLearner._behaviour_correction(learner, samples, mask, surrogate, mask, norm) == (mask, {})
