"""The CUDA path, on the tiny random model: both decoding engines give the CPU's greedy tokens for
the same weights, the draws sample the right distribution, sampled log-probs equal the training
forward pass, a short ``train()`` run loads its model onto the GPU, checkpoints and resumes, and
bfloat16 trains an update.

Skipped where CUDA is not available (CI). On a GPU machine: ``pytest tests/agents/test_cuda.py``.
These tests pick the GPU themselves; ``MARFT_TEST_DEVICE=cuda`` (``agent_helpers``) moves the
other model tests there too.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from agent_helpers import small_config
from test_policy import AGENTS, perturb

from marft_agents.run.checkpoint import list_checkpoints, load_checkpoint
from marft_agents.engine.fast import BLOCK, draw_and_score
from marft_agents.engine.sampling import pick_tokens, scaled_logprobs
from marft_agents.model.policy import GenRequest, MultiAgentPolicy
from marft_agents.settings.sampling import ENGINES
from marft_agents.settings.sampling import SamplingConfig
from marft_agents.model.tiny_models import tiny_model_and_tokenizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

CUDA = torch.device("cuda")
ATOL_DEVICES = 1e-4
"""Largest |difference| of a float32 log-prob between the CPU and the GPU (different kernels; a
wrong token, position or prefix split moves log-probs by far more, ~0.1 and up)."""
ATOL_PATHS = 5e-5
"""Largest |difference| between a log-prob from the decoding loop and from the training forward
pass on the GPU (the CPU test allows 1e-5; the GPU runs other kernels on each path)."""
SYSTEMS = ["Think carefully.", "", "Answer in one word."]
STOP = tuple(range(3, 130))
"""Half the vocabulary ends a response: rows stop at different steps, so finished rows are pruned
from the batch and the KV cache mid-decode."""


@pytest.fixture(scope="module")
def policies() -> tuple[MultiAgentPolicy, MultiAgentPolicy]:
    """The same policy (base weights, adapters and value head) on the CPU and on the GPU."""
    cpu_model, cpu_tok = tiny_model_and_tokenizer(seed=0)
    on_cpu = MultiAgentPolicy(cpu_model, cpu_tok, AGENTS)
    perturb(on_cpu, 1)
    gpu_model, gpu_tok = tiny_model_and_tokenizer(seed=0)
    on_gpu = MultiAgentPolicy(gpu_model.to(CUDA), gpu_tok, AGENTS)
    on_gpu.load_adapter_state_dict(on_cpu.adapter_state_dict())
    assert on_gpu.device.type == CUDA.type and on_cpu.device.type == "cpu"
    assert all(p.device.type == CUDA.type for p in on_gpu.parameters())
    return on_cpu, on_gpu


def _requests(policy: MultiAgentPolicy, share: bool = True, n: int = 6) -> list[GenRequest]:
    """Prompts of different lengths under three system turns (two shared prefixes and none)."""
    out = []
    for i in range(n):
        system = SYSTEMS[i % len(SYSTEMS)]
        ids = policy.chat_prompt_ids(system, f"Say {i}" + "!" * i)
        out.append(GenRequest("actor_0", ids, policy.shared_prefix_len(system, ids) if share else 0))
    return out


@pytest.mark.parametrize("engine", ENGINES)
def test_greedy_decoding_on_cuda_gives_the_cpu_tokens(policies, engine):
    on_cpu, on_gpu = policies
    cfg = SamplingConfig(max_new_tokens=10, do_sample=False, stop_token_ids=STOP, engine=engine)
    want, got = on_cpu.generate(_requests(on_cpu), cfg), on_gpu.generate(_requests(on_gpu), cfg)
    assert [g.response_ids for g in got] == [g.response_ids for g in want]
    assert len({len(g.response_ids) for g in got}) > 1  # rows were pruned mid-decode
    assert any(g.prefix_len > 0 for g in got) and any(g.prefix_len == 0 for g in got)
    for a, b in zip(got, want):
        assert (a.finished, a.prefix_len, a.text) == (b.finished, b.prefix_len, b.text)
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs),
                                   atol=ATOL_DEVICES, rtol=0)


def test_draws_on_cuda_sample_the_distribution_and_score_with_scaled_logprobs():
    # one call with n identical rows draws n tokens at once: a frequency test in one step
    vocab, n, temperature = 2 * BLOCK + 37, 20000, 0.8
    picks = [5, 300, BLOCK + 7, BLOCK + 100, 2 * BLOCK + 30]  # three blocks, the short last one too
    logits = torch.full((1, vocab), -1e9, device=CUDA)
    logits[0, picks] = torch.tensor([0.0, -0.5, 0.7, 0.2, 1.2], device=CUDA)
    rows = logits.expand(n, vocab).contiguous()
    probs = torch.softmax(logits[0] / temperature, -1)[picks].cpu()
    gen = torch.Generator(device=CUDA).manual_seed(0)
    scratch = torch.empty(n * vocab, device=CUDA)
    blocked, logp = draw_and_score(rows.clone(), temperature, gen, scratch)  # the fast engine
    want = scaled_logprobs(rows, temperature).gather(-1, blocked[:, None]).squeeze(-1)
    torch.testing.assert_close(logp, want, atol=1e-6, rtol=0)
    legacy = pick_tokens(scaled_logprobs(rows, temperature), SamplingConfig(), gen)  # the legacy engine
    for tokens in (blocked, legacy):
        assert tokens.device.type == CUDA.type
        freq = torch.bincount(tokens, minlength=vocab).float().cpu() / n
        torch.testing.assert_close(freq[picks], probs, atol=0.015, rtol=0)
        assert set(tokens.tolist()) == set(picks)


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("engine", ENGINES)
def test_sampled_logprobs_on_cuda_equal_the_training_forward_pass(policies, engine, share):
    _, policy = policies
    requests = _requests(policy, share)
    prompts = [r.prompt_ids for r in requests]
    cfg = SamplingConfig(max_new_tokens=12, temperature=0.7, stop_token_ids=STOP, engine=engine)
    gens = policy.generate(requests, cfg, generator=torch.Generator(device=CUDA).manual_seed(3))
    again = policy.generate(requests, cfg, generator=torch.Generator(device=CUDA).manual_seed(3))
    assert [g.response_ids for g in again] == [g.response_ids for g in gens]  # the generator drives the draw
    assert len({len(g.response_ids) for g in gens}) > 1
    with torch.no_grad():
        stats = policy.token_logprobs("policy_actor_0", prompts, [g.response_ids for g in gens], 0.7,
                                      prefix_lens=[g.prefix_len for g in gens])
    assert stats.logprobs.device.type == CUDA.type
    for row, g in enumerate(gens):
        n = len(g.response_ids)
        assert g.finished == (g.response_ids[-1] in STOP) and stats.mask[row].sum() == n
        torch.testing.assert_close(stats.logprobs[row, :n].cpu(), torch.tensor(g.logprobs),
                                   atol=ATOL_PATHS, rtol=0)
    # recompute_logprobs scores with the training forward pass itself: the same numbers
    exact = policy.generate(requests, dataclasses.replace(cfg, recompute_logprobs=True),
                            generator=torch.Generator(device=CUDA).manual_seed(3))
    with torch.no_grad():
        stats = policy.token_logprobs("policy_actor_0", prompts, [g.response_ids for g in exact], 0.7,
                                      prefix_lens=[g.prefix_len for g in exact])
    for row, g in enumerate(exact):
        torch.testing.assert_close(stats.logprobs[row, :len(g.logprobs)].cpu(), torch.tensor(g.logprobs),
                                   atol=1e-6, rtol=0)


def _save_tiny_model(folder) -> str:
    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_train_on_cuda_checkpoints_and_resumes(tmp_path):
    from marft_agents.run.trainer import iter_train, train

    # The trainer loads the model itself (model.device: cuda), as `marft train` does.
    overrides = {"model.name_or_path": _save_tiny_model(tmp_path / "model"), "model.device": "cuda",
                 "schedule.num_updates": 2, "schedule.checkpoint_interval": 1, "eval.at_end": True}
    quiet = {"tensorboard": False, "plot": False}
    full = train(small_config(tmp_path / "full", **overrides), **quiet)
    policy = full.policy
    assert policy.device.type == CUDA.type
    assert all(p.device.type == CUDA.type for p in policy.parameters())  # adapters and value head too
    assert full.counters["update"] == 2 and full.final_eval is not None and full.final_eval.n == 2
    for metrics in full.history:
        assert math.isfinite(metrics["losses/policy_loss"]) and math.isfinite(metrics["losses/value_loss"])
        assert metrics["guard/skipped_steps"] == 0
    assert [p.name for p in list_checkpoints(full.output_dir)] == ["update_000001", "update_000002"]
    saved = load_checkpoint(full.last_checkpoint)
    assert "cuda" in saved["state"]["rng"]  # the CUDA generators' states, for an exact resume
    assert all(t.device.type == "cpu" for t in saved["adapters"].values())

    cut_cfg = small_config(tmp_path / "cut", **overrides)
    first = iter_train(cut_cfg)
    next(first)  # one update (checkpointed), then the "crash"
    first.close()
    resumed = train(cut_cfg, resume=True, **quiet)
    assert len(resumed.history) == 1 and resumed.policy.device.type == CUDA.type
    timeless = lambda c: {k: v for k, v in c.items() if k != "train_seconds"}  # noqa: E731
    assert timeless(resumed.counters) == timeless(full.counters)  # same episodes, same sampled tokens
    a, b = full.policy.adapter_state_dict(), resumed.policy.adapter_state_dict()
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    # bit-identical on the CPU; on the GPU allow float noise (an unseeded or lost CUDA generator
    # would sample other tokens and move the adapters by far more)
    assert worst <= 1e-5, f"resumed adapters differ from the uninterrupted run's by up to {worst}"


def test_bfloat16_trains_an_update_on_cuda(tmp_path):
    from marft_agents.run.trainer import prepare_trainer

    if not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU does not compute in bfloat16")
    cfg = small_config(tmp_path, **{"model.device": "cuda", "model.dtype": "auto", "schedule.num_updates": 1,
                                    "ppo.recompute_old_logprobs": True, "sampling.temperature": 0.7,
                                    "sampling.max_new_tokens": 6, "schedule.episodes_per_update": 4,
                                    "schedule.minibatch_size": 3})
    assert cfg.model.dtype == "bfloat16"  # "auto" on a bf16 GPU
    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=32, num_layers=1, dtype=cfg.model.dtype)
    trainer = prepare_trainer(cfg, model_and_tokenizer=(model.to(CUDA), tokenizer))
    policy = trainer.policy
    assert policy.lm.get_input_embeddings().weight.dtype == torch.bfloat16
    assert policy.device.type == CUDA.type
    before = policy.adapter_state_dict()
    metrics = next(trainer.run())
    for key in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl", "losses/entropy"):
        assert math.isfinite(metrics[key]), key
    assert metrics["guard/skipped_steps"] == 0 and metrics["ppo/policy_trained"] == 1.0
    after = policy.adapter_state_dict()
    moved = {k.split("/")[1] for k in before if not torch.equal(before[k], after[k])}
    assert {"policy_reasoner_0", "policy_actor_0", "critic"} <= moved
