"""The GPU configs (``baselines/configs/*qwen2.5*.yaml``) load and validate on the CPU for every
Qwen2.5 size they document, say what a GPU run needs (bf16, vLLM, rescored old log-probs), and
their memory-relevant settings fit an 80 GB GPU by ``benchmarks/memory_estimate.py``'s estimate,
calibrated here by its own CPU measurement at each model's width. The team configs (two Qwen2.5
sizes, ``models:``) are accepted as a team (no vLLM: one model per process) and fit by the team
estimate: each base once, the largest member's activations."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import yaml

from marft_agents.config import load_config

REPO = Path(__file__).resolve().parents[2]
GPU_CONFIGS = sorted((REPO / "baselines" / "configs").glob("*qwen2.5*.yaml"))
TEAM_CONFIGS = [p for p in GPU_CONFIGS if yaml.safe_load(p.read_text()).get("models")]
"""Configs of a team of different models (``models:``): sizes fixed by the file, no vLLM."""
CONFIGS = [p for p in GPU_CONFIGS if p not in TEAM_CONFIGS]
GPU_DOC = REPO / "docs" / "gpu.md"
_spec = importlib.util.spec_from_file_location("memory_estimate", REPO / "benchmarks" / "memory_estimate.py")
memory_estimate = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("memory_estimate", memory_estimate)  # dataclasses look their module up there
_spec.loader.exec_module(memory_estimate)
SIZES = list(memory_estimate.QWEN25)
FAST_SMALL = {"schedule.gradient_checkpointing": False}
"""The documented override of the smallest size (docs/gpu.md): no checkpointing, faster."""
PROMPT_TOKENS = 1024
"""Budget for a row's task text, system turn and feedback, next to its utterances."""


@pytest.fixture(scope="module")
def calibration():
    """The per-token saved bytes of each size, measured on this CPU (64 tokens: the figures are
    per token, the same at 256)."""
    return {model: memory_estimate.measure(memory_estimate.QWEN25[model], tokens=64) for model in SIZES}


def _variants():
    for path in CONFIGS:
        for model in SIZES:
            yield path, model, {}
        yield path, SIZES[0], FAST_SMALL


def test_there_is_a_math_duo_and_a_coding_team():
    envs = {yaml.safe_load(p.read_text())["env"]["id"] for p in CONFIGS}
    assert {"marft/MATH-v0", "marft/MBPP-v0"} <= envs, CONFIGS


@pytest.mark.parametrize("path, model, extra", list(_variants()),
                         ids=lambda v: v.stem if isinstance(v, Path) else (v.split("-")[1] if isinstance(v, str) else
                                                                            ("fast" if v else "")))
def test_gpu_config_validates_and_fits_80gb(path, model, extra, calibration):
    raw = yaml.safe_load(path.read_text())
    assert raw["model"]["device"] == "auto" and raw["model"]["dtype"] == "bfloat16"
    cfg = load_config(path, {"model.name_or_path": model, **extra})
    assert cfg.model.name_or_path == model and cfg.model.dtype == "bfloat16"
    assert cfg.sampling.engine == "vllm" and cfg.ppo.recompute_old_logprobs
    s = cfg.schedule
    assert s.max_tokens_per_micro_batch is not None and s.micro_batch_size is not None
    if model != SIZES[0]:
        assert s.gradient_checkpointing, f"{model} needs gradient checkpointing on 80 GB"
    agents = 2  # both configs are two-agent teams
    horizon = cfg.env.kwargs.get("horizon", 1)
    longest_row = horizon * agents * cfg.sampling.max_new_tokens + PROMPT_TOKENS
    assert cfg.vllm.max_model_len is not None and cfg.vllm.max_model_len >= min(longest_row, 4096)
    # a row longer than the cap goes alone: the pass is then as long as the longest row
    tokens = max(s.max_tokens_per_micro_batch, cfg.vllm.max_model_len)
    est = memory_estimate.estimate(model, calibration[model], tokens, s.gradient_checkpointing,
                                   adapters=agents + 1, r=cfg.lora.r,
                                   gpu_memory_utilization=cfg.vllm.gpu_memory_utilization,
                                   vllm_sleeps=cfg.vllm.sleep_level >= 1)
    assert memory_estimate.fits(est), est
    # vLLM's share holds its own copy of the weights plus a KV cache
    assert cfg.vllm.gpu_memory_utilization * memory_estimate.GPU_GIB > 1.5 * est.weights


def test_the_estimate_tells_a_fitting_setting_from_one_that_does_not(calibration):
    big = SIZES[-1]
    assert not memory_estimate.fits(memory_estimate.estimate(big, calibration[big], 18432, False))
    assert memory_estimate.fits(memory_estimate.estimate(big, calibration[big], 18432, True))
    assert not memory_estimate.fits(memory_estimate.estimate(big, calibration[big], 400_000, True))


def test_parameter_counts_match_the_model_cards():
    for shape in memory_estimate.QWEN25.values():
        assert shape.params() == pytest.approx(shape.card_params, rel=0.01)


def test_the_gpu_recipe_documents_every_size_override():
    text = GPU_DOC.read_text()
    for path in GPU_CONFIGS:
        assert str(path.relative_to(REPO)) in text
    for model in SIZES:
        assert f"model.name_or_path={model}" in text
    for key, value in FAST_SMALL.items():
        assert f"{key}={str(value).lower()}" in text


# -- teams of different models ------------------------------------------------------------------
def _agents(cfg) -> list[str]:
    from marft_envs.core.roles import load_profile

    return list(load_profile(cfg.env.kwargs["profile"]).agent_ids)


def test_there_is_a_team_of_two_qwen_sizes():
    assert TEAM_CONFIGS, GPU_CONFIGS
    for path in TEAM_CONFIGS:
        members = memory_estimate.members_of_config(load_config(path))
        assert len({m.model for m in members}) == 2, members


@pytest.mark.parametrize("path", TEAM_CONFIGS, ids=lambda p: p.stem)
def test_team_config_is_a_team_and_fits_80gb(path, calibration):
    from marft_agents.config_schema import ConfigError
    from marft_agents.model.team import ONE_MODEL_ENGINES
    from marft_agents.run.trainer import team_layout

    raw = yaml.safe_load(path.read_text())
    for section in [raw["model"], *raw["models"].values()]:
        assert section["device"] == "auto" and section["dtype"] == "bfloat16"
    cfg = load_config(path)
    agents = _agents(cfg)
    assert cfg.uses_several_models(agents)
    layout = team_layout(cfg, agents)  # the team's refusals: a one-model engine, critic.model beside own-token values
    assert layout.several and set(layout.critic_of) == set(agents)
    assert cfg.sampling.engine not in ONE_MODEL_ENGINES and cfg.ppo.recompute_old_logprobs
    with pytest.raises(ConfigError, match="one base model per process"):
        team_layout(load_config(path, {"sampling.engine": "vllm"}), agents)
    s = cfg.schedule
    assert s.max_tokens_per_micro_batch is not None and s.micro_batch_size is not None
    horizon = cfg.env.kwargs.get("horizon", 1)
    longest_row = horizon * len(agents) * cfg.sampling.max_new_tokens + PROMPT_TOKENS
    tokens = max(s.max_tokens_per_micro_batch, longest_row)
    rows = min(cfg.sampling.max_batch_size, cfg.env.num_envs)
    members = memory_estimate.members_of_config(cfg)
    est = memory_estimate.team_estimate(members, calibration, tokens, s.gradient_checkpointing, rows, longest_row,
                                        cfg.sampling.max_new_tokens)
    assert memory_estimate.fits(est), est
    big = max(members, key=lambda m: memory_estimate.QWEN25[m.model].params())
    if big.model != SIZES[0]:
        assert s.gradient_checkpointing, f"{big.model} needs gradient checkpointing on 80 GB"


def test_the_team_of_a_config_is_each_model_with_its_agents_and_the_critic():
    path = TEAM_CONFIGS[0]
    raw = yaml.safe_load(path.read_text())
    Member = memory_estimate.Member
    small, big = raw["model"]["name_or_path"], raw["models"]["solver"]["name_or_path"]
    assert memory_estimate.members_of_config(load_config(path)) == [
        Member(small, (8, 8), (), critic=True), Member(big, (8,), (), critic=False)]
    # the critic on the solver's model, the planner's own rank, the solver frozen with a fixed adapter
    data = {**raw, "critic": {"model": "solver"},
            "agents": {"reasoner_0": {"lora": {"r": 16}}, "actor_0": {"model": "solver", "trainable": False,
                                                                      "adapter": str(path.parent)}}}
    assert memory_estimate.members_of_config(load_config(data)) == [
        Member(small, (16,), (), critic=False), Member(big, (8,), (8,), critic=True)]
    # token-level values (MARFT-T): each model carries the critic of its own agents
    assert memory_estimate.members_of_config(load_config(path, {"algorithm": "mappo_token"})) == [
        Member(small, (8, 8), (), critic=True), Member(big, (8, 8), (), critic=True)]


def test_a_team_holds_each_base_once_beside_the_largest_members_activations(calibration):
    small, big = SIZES[0], SIZES[-1]
    Member, GIB = memory_estimate.Member, memory_estimate.GIB
    lora = {m: memory_estimate.QWEN25[m].lora_params(8) for m in (small, big)}
    alone = {m: memory_estimate.estimate(m, calibration[m], 18432, True, adapters=0, gpu_memory_utilization=0.0,
                                         vllm_sleeps=False) for m in (small, big)}
    est = memory_estimate.team_estimate([Member(small, (8, 8), critic=True), Member(big, (8,))], calibration,
                                        18432, True, 32, 2300, 1024)
    assert est.weights == pytest.approx(alone[small].weights + alone[big].weights)
    assert est.lora_and_optimizer == pytest.approx(16 * (2 * lora[small] + lora[big]) / GIB)
    # the passes run one adapter's micro-batch at a time: the larger member's activations, not the sum
    assert est.activations == pytest.approx(alone[big].activations) and alone[small].activations > 1
    assert est.update_peak == pytest.approx(est.weights + est.lora_and_optimizer + alone[big].activations
                                            + alone[big].head_fused + memory_estimate.CUDA_CONTEXT_GIB)
    # sampling: one call's KV cache on the larger model (keys and values, bf16, every layer)
    shape = memory_estimate.QWEN25[big]
    assert shape.kv_bytes_per_token() == 2 * shape.layers * shape.kv_heads * (shape.hidden // shape.heads) * 2
    assert est.sampling_peak > est.weights + est.lora_and_optimizer + 32 * 2300 * shape.kv_bytes_per_token() / GIB
    # a frozen teammate's fixed adapter: its weights only (no gradient, no AdamW moments)
    frozen = memory_estimate.team_estimate([Member(small, (8, 8), critic=True), Member(big, (), (8,))], calibration,
                                           18432, True, 32, 2300, 1024)
    assert frozen.lora_and_optimizer == pytest.approx((16 * 2 * lora[small] + 4 * lora[big]) / GIB)
    # without checkpointing the 7B's activations do not fit beside both bases
    assert memory_estimate.fits(est)
    assert not memory_estimate.fits(memory_estimate.team_estimate(
        [Member(small, (8, 8), critic=True), Member(big, (8,))], calibration, 18432, False, 32, 2300, 1024))


def test_the_team_table_prints_each_model_and_the_team(calibration, monkeypatch, capsys):
    monkeypatch.setattr(memory_estimate, "measure", lambda shape, tokens=256: calibration[
        next(m for m, s in memory_estimate.QWEN25.items() if s == shape)])
    assert memory_estimate.main(["--config", str(TEAM_CONFIGS[0])]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("  Qwen/") and " on " in line]
    assert len(lines) == 2, out
    team = next(line for line in out.splitlines() if line.lstrip().startswith("team (sum"))
    assert team.rstrip().endswith("yes"), team
    with pytest.raises(SystemExit, match="SIZE:ADAPTERS"):
        memory_estimate.main(["--team", "1.5B:two"])


FAKE_VLLM = '''
import atexit, sys, types
from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16
    ignore_eos: bool = False
    logprobs: int | None = None
    seed: int | None = None
    detokenize: bool = True


class LLM:
    def __init__(self, model, **kwargs):
        print("INFO vLLM engine core starting", flush=True)  # vLLM logs to stdout
        atexit.register(print, "INFO [shutdown] EngineCore: exiting busy loop")  # and after the child's last word

    def generate(self, prompts, params, lora_request=None, use_tqdm=True):
        out = types.SimpleNamespace(token_ids=list(range(params.max_tokens)))
        return [types.SimpleNamespace(outputs=[out]) for _ in prompts]
'''


def test_the_bare_vllm_figures_come_back_through_a_file_not_the_last_stdout_line(tmp_path, monkeypatch):
    """vLLM prints its logs, and its engine process its shutdown lines, on the child's stdout after
    the figures: the hand-off must not depend on which line comes last."""
    fake = tmp_path / "fake"
    (fake / "vllm" / "lora").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    (fake / "vllm" / "lora" / "__init__.py").write_text("")
    (fake / "vllm" / "lora" / "request.py").write_text(
        "from dataclasses import dataclass\n\n\n@dataclass\nclass LoRARequest:\n"
        "    lora_name: str\n    lora_int_id: int\n    lora_path: str\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))
    sys.path.insert(0, str(REPO / "benchmarks"))
    import gpu_check

    job = {"model": "m", "prompts": [[1, 2], [3]], "adapters": ["/a/x", "/a/y"], "new_tokens": 5,
           "max_lora_rank": 8, "memory": {}, "max_model_len": 64, "enforce_eager": True, "dtype": "float32"}
    figures = gpu_check.run_bare_vllm(job, tmp_path, timeout=120)
    assert figures["tokens"] == 10 and figures["tokens_per_s"] > 0
