"""One command that checks marft on a GPU machine: PASS / FAIL / SKIP per check, then a JSON summary.

Checks (``--only`` picks some, by name):

1. ``cuda_tests``: ``pytest tests/agents/test_cuda.py`` in a subprocess (the CUDA path on a tiny
   random model: engines, draws, log-probs, train/checkpoint/resume, bfloat16);
2. ``update``: the model (``--model``, a folder or Hub id; ``--random-init`` a Qwen2.5 size with
   random weights; default a tiny random Qwen2; the last two saved to a temporary folder, offline) loads through the trainer and runs one MARFT-A update (dual agents
   on ``marft/Arithmetic-v0``) with each sampling engine that runs on this device: losses finite,
   every adapter moved;
3. ``throughput``: decode tokens/s of each engine of marft's, and of bare vLLM (``vllm.LLM`` with
   the policy's 2 LoRA adapters, in a child process so that its memory is its own; its figures
   come back in a file, since vLLM logs to the child's stdout) on the same prompts with the same
   number of new tokens; PASS when marft's vLLM engine is within :data:`THROUGHPUT_TARGET` of
   bare vLLM. It runs wherever vLLM does: a GPU with vLLM, or vLLM's CPU build on a CPU
   (``.venv-vllm``). On a GPU without vLLM, marft's other engines are still timed and the check
   says SKIP (there is nothing to hold them against);
4. ``logprobs``: vLLM's sampled-token log-probs against the learner's pass over the same tokens
   (max and mean |diff|), wherever vLLM runs; without it SKIP (the tests' vLLM stand-in is the
   transformers model itself: agreement with it is no check of vLLM);
5. ``memory``: peak GPU memory (``torch.cuda.max_memory_allocated``) and time (the passes run
   again, warm) of the training passes of one MARFT-A update at MATH lengths (:data:`MATH_ROW_TOKENS`-token rows, 8 rows per adapter:
   both agents' policy passes and the critic's), without and with gradient checkpointing, per
   token, next to ``benchmarks/memory_estimate.py``'s estimate when the model is a Qwen2.5 size;
6. ``nccl``: a 2-process data-parallel update through ``torchrun`` (NCCL) when 2 GPUs are present;
7. ``team``: the team of :data:`TEAM_CONFIG` (its ``models:``, ``agents:``, ``critic``, LoRA and
   loop engine) on ``marft/Arithmetic-v0`` for one MARFT-A update through the trainer: ``model:``
   is the check's model, each further model a tiny random Llama with the llama3 tokenizer (another
   architecture and tokenizer; with ``--random-init`` the Qwen2.5 size that config names for it,
   random weights); PASS when a ``TeamPolicy`` of one member per model was built, losses are finite
   and every adapter moved; the peak GPU memory of the update is reported on CUDA.

``--random-init qwen2.5-3b`` (or ``-1.5b``, ``-7b``) builds a model of that size's exact shape
(:data:`memory_estimate.QWEN25`) with random weights and the tiny byte-level tokenizer, on a
machine that cannot download the real one: memory and speed are the real size's, while
rewards, log-prob agreement and text are meaningless.

A check that cannot run here (no CUDA, one GPU, no vLLM for this device) says SKIP and why; nothing
is downloaded unless ``--model`` names a Hub id. ``--quick`` shortens every check (fewer and
shorter rows, fewer tokens) to run in a minute or two; the full run stays under 10 minutes on
one GPU for models up to 7B. Exit status 1 if a check FAILs, else 0.

Usage::

    python benchmarks/gpu_check.py --quick                                   # any machine
    python benchmarks/gpu_check.py --model Qwen/Qwen2.5-1.5B-Instruct --out gpu_check.json
    python benchmarks/gpu_check.py --only update,memory --model /models/Qwen2.5-7B-Instruct
    python benchmarks/gpu_check.py --only memory,throughput --random-init qwen2.5-3b   # offline
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

THROUGHPUT_TARGET = 1.5
"""Bare vLLM may decode at most this many times faster than marft's vLLM engine."""
LOGPROB_MEAN_TOL = 0.05
"""Largest mean |vLLM - learner| sampled-token log-prob in bfloat16 that passes: both sides run
the same weights in different kernels; a wrong adapter, chat template or temperature moves the
mean by far more (tenths and up)."""
LOGPROB_MAX_TOL = 2.0
"""Largest single |difference| that passes (a rare token in bf16 can differ by ~1)."""
MATH_ROW_TOKENS = 2300
"""Tokens of a MATH row in the memory check (system + problem, the reasoner's and the actor's)."""
RESPONSE_TOKENS = 1024
"""Of which the scored response (the rest is the prompt)."""
ROWS_PER_ADAPTER = 8
"""Rows per adapter in the memory check (one micro-batch each)."""
TEAM_CONFIG = REPO / "baselines" / "configs" / "marft_a_math_qwen2.5_team.yaml"
"""The GPU team config whose team the ``team`` check builds."""
STATUSES = ("PASS", "FAIL", "SKIP")
TIMING_METRICS = ("time/rollout_s", "time/update_s", "time/rollout_tokens_per_s", "rollout/tokens")
"""The trainer's metrics the ``update`` check reports per engine (sampling and learner time)."""


@dataclass
class Result:
    """One check's outcome."""

    name: str
    status: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What the checks share: the options, the device, the model folder, a scratch folder."""

    args: argparse.Namespace
    scratch: Path
    device: str = "cpu"
    model: str = ""
    gpus: int = 0
    vllm_error: str | None = None
    """Why vLLM cannot run here (None: it can)."""
    cache: dict[str, Any] = field(default_factory=dict)


# -- helpers -----------------------------------------------------------------------------------
def _tiny_folder(scratch: Path) -> str:
    """A tiny random Qwen2 and its tokenizer, saved as a Hugging Face folder (no download)."""
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    folder = scratch / "tiny-qwen2"
    if not folder.is_dir():
        model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden_size=64, num_layers=2, arch="qwen2")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)


def random_init_names() -> dict[str, str]:
    """``--random-init`` choices: ``qwen2.5-3b`` -> ``Qwen/Qwen2.5-3B-Instruct`` (memory_estimate's keys)."""
    import memory_estimate

    return {key.split("/")[-1].lower().removesuffix("-instruct"): key for key in memory_estimate.QWEN25}


def random_config(name: str) -> Any:
    """The ``Qwen2Config`` of the Qwen2.5 size ``name`` (a :func:`random_init_names` key), with the
    tiny tokenizer's special ids and bfloat16 weights."""
    from transformers import Qwen2Config

    import memory_estimate
    from marft_agents.model.tiny_models import tiny_tokenizer

    shape = memory_estimate.QWEN25[random_init_names()[name]]
    tokenizer = tiny_tokenizer()
    return Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                       num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                       num_key_value_heads=shape.kv_heads, tie_word_embeddings=shape.tied,
                       max_position_embeddings=32768, rms_norm_eps=1e-6, use_sliding_window=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, dtype="bfloat16")


def _random_folder(scratch: Path, name: str, device: str) -> str:
    """:func:`random_config`'s model with random bfloat16 weights and the tiny tokenizer, saved as
    a Hugging Face folder (no download).

    The weights are drawn on ``device`` (seconds on a GPU, minutes for 7B on a CPU). The tiny
    tokenizer has 259 tokens against the model's ~152k: ids it lacks decode to nothing, so text
    is short and meaningless, but every tensor has the real size's shape."""
    import torch
    from transformers import Qwen2ForCausalLM

    from marft_agents.model.tiny_models import tiny_tokenizer

    folder = scratch / f"random-{name}"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # draw in bfloat16: a 7B in float32 would need 30 GB
    try:
        with torch.random.fork_rng(devices=[]), torch.device(device):
            torch.manual_seed(0)
            model = Qwen2ForCausalLM(random_config(name))
    finally:
        torch.set_default_dtype(previous)
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    del model
    return str(folder)


def _config(ctx: Context, engine: str, name: str, **overrides: Any) -> Any:
    """A small MARFT-A config on ``ctx``'s model and device with sampling engine ``engine``."""
    from marft_agents.config import load_config

    return load_config(_config_data(ctx, engine, name), overrides=overrides)


def _config_data(ctx: Context, engine: str, name: str) -> dict[str, Any]:
    """:func:`_config`'s settings as plain data."""
    quick = ctx.args.quick
    return {
        "algorithm": "mappo_action",
        "env": {"id": "marft/Arithmetic-v0", "kwargs": {"level": 1, "profile": "dual", "horizon": 1},
                "num_envs": 4},
        "model": {"name_or_path": ctx.model, "device": ctx.device,
                  "dtype": "bfloat16" if ctx.device == "cuda" else "float32", "threads": 1},
        "sampling": {"engine": engine, "max_new_tokens": 8 if quick else 32, "temperature": 1.0},
        "vllm": {"gpu_memory_utilization": ctx.args.gpu_memory_utilization, "max_model_len": 1024,
                 "enforce_eager": quick, "adapter_dir": str(ctx.scratch / f"adapters-{name}")},
        # an entropy bonus: a random model's rewards are all 0 (no advantage), yet every adapter must move
        "ppo": {"recompute_old_logprobs": True, "entropy_coef": 0.01},
        "schedule": {"num_updates": 1, "episodes_per_update": 4, "minibatch_size": 4, "actor_lr": 1e-3,
                     "critic_lr": 1e-3, "checkpoint_interval": 0},
        "eval": {"at_end": False, "n_problems": 2, "num_envs": 2, "interval": 0},
        "output_dir": str(ctx.scratch / f"run-{name}"),
    }


def _engines_here(ctx: Context) -> tuple[list[str], dict[str, str]]:
    """(engines that run on this device, {engine: why not} for the others)."""
    from marft_agents.engine.registry import engine_class
    from marft_agents.settings.sampling import SAMPLING_ENGINES

    runs, skipped = [], {}
    for name in SAMPLING_ENGINES:
        cls = engine_class(name)
        if ctx.device not in cls.devices:
            skipped[name] = f"runs on {'/'.join(cls.devices)} only; this machine has {ctx.device}"
        elif cls.scores_in_learner and ctx.vllm_error:
            skipped[name] = ctx.vllm_error
        else:
            runs.append(name)
    return runs, skipped


def _release() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _requests(policy: Any, n: int, words: int) -> list[Any]:
    """``n`` prompts dealt round-robin to the policy's agents, about ``words`` words each."""
    from marft_agents.engine import GenRequest

    agents = list(policy.agent_ids)
    out = []
    for i in range(n):
        text = f"Problem {i}: " + " ".join(f"{(7 * i + k) % 97}" for k in range(words)) + ". Add them up."
        ids = policy.chat_prompt_ids("You are a careful mathematician.", text)
        out.append(GenRequest(agents[i % len(agents)], ids))
    return out


def _vllm_policy(ctx: Context) -> Any:
    """A trainer's policy with the vLLM engine (built once, shared by throughput and logprobs)."""
    if "vllm_trainer" not in ctx.cache:
        from marft_agents.run.trainer import prepare_trainer

        ctx.cache["vllm_trainer"] = prepare_trainer(_config(ctx, "vllm", "vllm-shared"))
    return ctx.cache["vllm_trainer"].policy


# -- the checks ----------------------------------------------------------------------------------
def check_cuda_tests(ctx: Context) -> Result:
    """``pytest tests/agents/test_cuda.py`` in a subprocess."""
    if ctx.device != "cuda":
        return Result("cuda_tests", "SKIP", "no CUDA GPU: every test in tests/agents/test_cuda.py would skip")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/agents/test_cuda.py"]
    if ctx.args.quick:
        cmd.append("-x")
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=540)
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    details = {"returncode": done.returncode, "last_line": tail[0], "seconds": round(time.monotonic() - start, 1)}
    if done.returncode != 0:
        details["output_tail"] = (done.stdout + done.stderr)[-3000:]
    return Result("cuda_tests", "PASS" if done.returncode == 0 else "FAIL", tail[0], details)


def check_update(ctx: Context) -> Result:
    """One MARFT-A update through the trainer with each sampling engine that runs here."""
    import torch

    from marft_agents.run.trainer import prepare_trainer

    runs, skipped = _engines_here(ctx)
    per_engine: dict[str, Any] = {name: {"status": "SKIP", "reason": why} for name, why in skipped.items()}
    failed = []
    for engine in runs:
        start = time.monotonic()
        trainer = None
        try:
            trainer = prepare_trainer(_config(ctx, engine, f"update-{engine}"))
            before = {k: v.detach().clone() for k, v in trainer.policy.adapter_state_dict().items()}
            metrics = next(trainer.run())
            after = trainer.policy.adapter_state_dict()
            moved = sorted({k.split("/")[1] for k in before if not torch.equal(before[k], after[k])})
            losses = {k: float(metrics[k]) for k in ("losses/policy_loss", "losses/value_loss") if k in metrics}
            ok = (all(math.isfinite(v) for v in losses.values()) and metrics.get("guard/skipped_steps", 0) == 0
                  and len(moved) == len(trainer.policy.adapter_names))
            timing = {key.split("/")[1]: float(metrics[key]) for key in TIMING_METRICS if key in metrics}
            per_engine[engine] = {"status": "PASS" if ok else "FAIL", "losses": losses, "adapters_moved": moved,
                                  "seconds": round(time.monotonic() - start, 1), **timing}
        except Exception as err:  # a check reports its failure; the others still run
            per_engine[engine] = {"status": "FAIL", "error": f"{type(err).__name__}: {err}",
                                  "traceback": traceback.format_exc()[-2000:]}
        finally:
            if trainer is not None:
                trainer.policy.close_engine()
            del trainer
            _release()
        if per_engine[engine]["status"] == "FAIL":
            failed.append(engine)
    ran = [e for e in runs if e not in failed]
    speeds = ", ".join(f"{e} {per_engine[e]['rollout_tokens_per_s']:.0f}" for e in ran
                       if "rollout_tokens_per_s" in per_engine[e])
    summary = (f"one update on {ctx.device} with {', '.join(ran) or 'no engine'}"
               + (f" (rollout tok/s: {speeds})" if speeds else "")
               + (f"; FAILED: {', '.join(failed)}" if failed else "")
               + (f"; skipped: {', '.join(skipped)}" if skipped else ""))
    status = "FAIL" if failed else ("PASS" if ran else "SKIP")
    return Result("update", status, summary, {"engines": per_engine, "model": ctx.model})


def _tokens_per_second(policy: Any, requests: list[Any], engine: str, new_tokens: int) -> float:
    import torch

    from marft_agents.settings.sampling import SamplingConfig

    cfg = SamplingConfig(engine=engine, max_new_tokens=new_tokens, temperature=1.0, stop_token_ids=())
    policy.generate(requests[:2], cfg, generator=torch.Generator(device=policy.device).manual_seed(0))  # warm-up
    _synchronize(policy.device)
    start = time.perf_counter()
    gens = policy.generate(requests, cfg, generator=torch.Generator(device=policy.device).manual_seed(1))
    _synchronize(policy.device)
    return sum(len(g.response_ids) for g in gens) / (time.perf_counter() - start)


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_throughput(ctx: Context) -> Result:
    """Decode tokens/s of each marft engine and of bare vLLM with the same 2 adapters.

    Where vLLM runs (a GPU with vLLM, or vLLM's CPU build on a CPU) both are timed; without vLLM
    the other engines are still timed on a GPU, and the check says SKIP: the target is a ratio
    to bare vLLM."""
    if ctx.device != "cuda" and ctx.vllm_error:
        return Result("throughput", "SKIP", f"no CUDA GPU and {ctx.vllm_error}: nothing to compare")
    n, new_tokens = (16, 64) if ctx.args.quick else (64, 256)
    runs, _ = _engines_here(ctx)
    if ctx.vllm_error:
        from marft_agents.run.trainer import prepare_trainer

        trainer = prepare_trainer(_config(ctx, "fast", "throughput"))
        try:
            requests = _requests(trainer.policy, n, 20)
            speeds = {engine: _tokens_per_second(trainer.policy, requests, engine, new_tokens) for engine in runs}
        finally:
            trainer.policy.close_engine()
            del trainer
            _release()
        details = {"marft_tok_s": speeds, "prompts": n, "new_tokens": new_tokens, "bare_vllm_tok_s": None}
        return Result("throughput", "SKIP", f"{ctx.vllm_error}; no bare-vLLM comparison. marft engines: "
                      + ", ".join(f"{e} {s:.0f}" for e, s in speeds.items()) + " tok/s", details)
    policy = _vllm_policy(ctx)
    requests = _requests(policy, n, 20)
    adapters = ctx.scratch / "bare-adapters"
    for name in policy.policy_adapters:
        policy.model.save_pretrained(str(adapters), selected_adapters=[name])
    from marft_agents.engine.vllm_engine import lora_rank_slot, memory_settings

    engine = policy.engine_for("vllm")
    job = {"model": ctx.model, "prompts": [list(r.prompt_ids) for r in requests],
           "adapters": [str(adapters / policy.adapter_for(r.agent_id)) for r in requests],
           "new_tokens": new_tokens, "max_lora_rank": lora_rank_slot(max(int(c.r) for c in policy.model.peft_config.values())),
           "memory": memory_settings(engine.options, ctx.device), "max_model_len": engine.max_model_len,
           "enforce_eager": engine.options.enforce_eager, "dtype": str(policy.lm.dtype).removeprefix("torch.")}
    try:
        bare = run_bare_vllm(job, ctx.scratch)["tokens_per_s"]
    except RuntimeError as err:
        return Result("throughput", "FAIL", "bare vLLM child failed", {"error": str(err)[-3000:]})
    speeds = {engine: _tokens_per_second(policy, requests, engine, new_tokens) for engine in runs}
    ratio = bare / speeds["vllm"]
    details = {"bare_vllm_tok_s": bare, "marft_tok_s": speeds, "bare_over_marft_vllm": ratio, "prompts": n,
               "new_tokens": new_tokens, "target": THROUGHPUT_TARGET}
    text = (f"bare vLLM {bare:.0f} tok/s; " + ", ".join(f"{e} {s:.0f}" for e, s in speeds.items())
            + f" tok/s; bare/marft-vllm {ratio:.2f}x (target <= {THROUGHPUT_TARGET}x)")
    return Result("throughput", "PASS" if ratio <= THROUGHPUT_TARGET else "FAIL", text, details)


def run_bare_vllm(job: dict[str, Any], scratch: Path, timeout: float = 600) -> dict[str, Any]:
    """Run :func:`bare_vllm` on ``job`` in a child process (its memory its own) and return its
    figures. They come back through a file: vLLM logs to stdout, and its engine process logs
    shutdown lines after the child's last word, so stdout has no reliable last line."""
    job_file, result = scratch / "bare-job.json", scratch / "bare-result.json"
    result.unlink(missing_ok=True)
    job_file.write_text(json.dumps({**job, "result": str(result)}))
    done = subprocess.run([sys.executable, __file__, "--bare-vllm", str(job_file)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0 or not result.is_file():
        raise RuntimeError(f"exit {done.returncode}, no result file: {(done.stdout + done.stderr)[-3000:]}")
    return json.loads(result.read_text())


def bare_vllm(job_file: str) -> None:
    """The child of ``throughput``: plain ``vllm.LLM`` with LoRA, tokens/s of one timed call,
    written as JSON to the job's ``result`` file."""
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    job = json.loads(Path(job_file).read_text())
    llm = LLM(model=job["model"], enable_lora=True, max_loras=2, max_lora_rank=job["max_lora_rank"],
              dtype=job["dtype"], max_model_len=job["max_model_len"], enforce_eager=job["enforce_eager"], seed=0,
              skip_tokenizer_init=True, **job["memory"])
    ids = {path: k + 1 for k, path in enumerate(sorted(set(job["adapters"])))}
    loras = [LoRARequest(Path(p).name, ids[p], p) for p in job["adapters"]]
    params = SamplingParams(temperature=1.0, max_tokens=job["new_tokens"], ignore_eos=True, logprobs=0, seed=0,
                            detokenize=False)
    prompts = [{"prompt_token_ids": p} for p in job["prompts"]]
    llm.generate(prompts[:2], params, lora_request=loras[:2], use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outs = llm.generate(prompts, params, lora_request=loras, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    Path(job["result"]).write_text(json.dumps({"tokens_per_s": tokens / seconds, "tokens": tokens, "seconds": seconds}))


def check_logprobs(ctx: Context) -> Result:
    """vLLM's sampled-token log-probs against the learner's pass over the same tokens."""
    if ctx.vllm_error:
        return Result("logprobs", "SKIP", f"{ctx.vllm_error}; the tests' vLLM stand-in is the transformers model "
                      "itself, so agreement with it is not a check of vLLM")
    import torch

    from marft_agents.settings.sampling import SamplingConfig

    policy = _vllm_policy(ctx)
    requests = _requests(policy, 8 if ctx.args.quick else 32, 20)
    cfg = SamplingConfig(engine="vllm", max_new_tokens=32 if ctx.args.quick else 128, temperature=1.0)
    gens = policy.generate(requests, cfg, generator=torch.Generator(device=policy.device).manual_seed(0))
    diffs = []
    with torch.no_grad():
        for agent in policy.agent_ids:
            mine = [g for g in gens if g.agent_id == agent and g.response_ids]
            if not mine:
                continue
            stats = policy.token_logprobs(policy.adapter_for(agent), [g.prompt_ids for g in mine],
                                          [g.response_ids for g in mine], cfg.temperature,
                                          prefix_lens=[g.prefix_len for g in mine])
            for row, g in enumerate(mine):
                n = len(g.response_ids)
                ours = stats.logprobs[row, :n].float().cpu()  # [n]
                diffs.append((ours - torch.tensor(g.logprobs)).abs())
    if not diffs:
        return Result("logprobs", "FAIL", "vLLM returned no tokens")
    every = torch.cat(diffs)  # [tokens]
    worst, mean = float(every.max()), float(every.mean())
    ok = mean <= LOGPROB_MEAN_TOL and worst <= LOGPROB_MAX_TOL
    return Result("logprobs", "PASS" if ok else "FAIL",
                  f"|vLLM - learner| over {every.numel()} tokens: max {worst:.2e}, mean {mean:.2e} "
                  f"(tolerance mean {LOGPROB_MEAN_TOL}, max {LOGPROB_MAX_TOL})",
                  {"max": worst, "mean": mean, "tokens": every.numel(), "dtype": str(policy.lm.dtype)})


def _update_passes(policy: Any, rows: int, tokens: int, response: int) -> int:
    """The training passes of one MARFT-A update on synthetic rows: each policy adapter's
    log-prob pass over ``rows`` rows and the critic's value pass, each backwarded; returns the
    tokens of one pass."""
    import torch

    vocab = policy.lm.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (tokens - response,), generator=gen).tolist() for _ in range(rows)]
    responses = [torch.randint(0, vocab, (response,), generator=gen).tolist() for _ in range(rows)]
    policy.set_trainable(None, critic=True)
    for agent in policy.agent_ids:
        stats = policy.token_logprobs(policy.adapter_for(agent), prompts, responses, 1.0)
        (stats.logprobs.sum() + 0.01 * stats.entropy.sum()).backward()
    full = [p + r for p, r in zip(prompts, responses)]
    policy.state_values(full).pow(2).sum().backward()
    return rows * tokens


def check_memory(ctx: Context) -> Result:
    """Peak GPU memory of one MARFT-A update's training passes, without and with checkpointing."""
    if ctx.device != "cuda":
        return Result("memory", "SKIP", "no CUDA GPU: torch.cuda.max_memory_allocated is the measurement")
    import torch

    from marft_agents.run.trainer import prepare_trainer

    rows, tokens, response = (2, 512, 256) if ctx.args.quick else (ROWS_PER_ADAPTER, MATH_ROW_TOKENS, RESPONSE_TOKENS)
    out: dict[str, Any] = {"rows_per_adapter": rows, "row_tokens": tokens}
    for ckpt in (False, True):
        key = "checkpointing" if ckpt else "no_checkpointing"
        trainer = None
        try:
            trainer = prepare_trainer(_config(ctx, "fast", f"memory-{key}",
                                              **{"schedule.gradient_checkpointing": ckpt}))
            policy = trainer.policy
            _release()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            n = _update_passes(policy, rows, tokens, response)
            peak = torch.cuda.max_memory_allocated() - base
            # timed a second time, warm (the first pass pays for kernel selection and allocation)
            torch.cuda.synchronize()
            began = time.perf_counter()
            _update_passes(policy, rows, tokens, response)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - began
            out[key] = {"peak_gib": peak / 2**30, "bytes_per_token": peak / n, "resident_gib": base / 2**30,
                        "passes_s": seconds, "train_tokens_per_s": 3 * n / seconds}
        except torch.cuda.OutOfMemoryError as err:
            out[key] = {"error": f"out of memory: {str(err).splitlines()[0]}"}
        finally:
            if trainer is not None:
                trainer.close()
            del trainer
            _release()
    estimate = _estimate_for(ctx, rows * tokens)
    if estimate:
        out["estimate_gib"] = estimate
    measured = [k for k in ("no_checkpointing", "checkpointing") if "peak_gib" in out[k]]
    text = "; ".join(f"{k.replace('_', ' ')}: peak {out[k]['peak_gib']:.2f} GiB over the resident weights, "
                     f"{out[k]['bytes_per_token'] / 1024:.1f} KiB/token, {out[k]['passes_s']:.2f} s for the 3 passes"
                     for k in measured)
    if "error" in out["checkpointing"]:
        return Result("memory", "FAIL", f"checkpointed update did not fit: {out['checkpointing']['error']}", out)
    if "error" in out["no_checkpointing"]:
        text += "; without checkpointing: out of memory"
    return Result("memory", "PASS", text + (f"; estimate (activations, GiB): {estimate}" if estimate else ""), out)


def _estimate_for(ctx: Context, tokens: int) -> dict[str, float] | None:
    """``memory_estimate``'s activation GiB for ``ctx``'s model when it is a Qwen2.5 size."""
    from transformers import AutoConfig

    import memory_estimate

    config = AutoConfig.from_pretrained(ctx.model)
    for name, shape in memory_estimate.QWEN25.items():
        if (shape.hidden, shape.layers, shape.intermediate) == (config.hidden_size, config.num_hidden_layers,
                                                                config.intermediate_size):
            cal = memory_estimate.measure(shape, tokens=64)
            return {key: memory_estimate.estimate(name, cal, tokens, ckpt).activations
                    for key, ckpt in (("no_checkpointing", False), ("checkpointing", True))}
    return None


def check_nccl(ctx: Context) -> Result:
    """A 2-process data-parallel update through torchrun (NCCL) when 2 GPUs are present."""
    if ctx.gpus < 2:
        return Result("nccl", "SKIP", f"needs 2 CUDA GPUs, found {ctx.gpus}")
    import yaml

    from marft_agents.config import config_to_dict

    cfg = _config(ctx, "direct", "nccl")
    path = ctx.scratch / "nccl.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "marft_agents.cli", "train",
           "--config", str(path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    status = "PASS" if done.returncode == 0 else "FAIL"
    return Result("nccl", status, f"torchrun 2 processes: exit {done.returncode}",
                  {"output_tail": (done.stdout + done.stderr)[-3000:]} if status == "FAIL" else {})


def _second_folder(ctx: Context, name: str, name_or_path: str) -> str:
    """The folder of a team's further model ``name``: with ``--random-init``, the Qwen2.5 size
    ``name_or_path`` names (random weights); else a tiny random Llama with the llama3 tokenizer."""
    if ctx.args.random_init:
        import memory_estimate

        size = memory_estimate.model_key(name_or_path).split("/")[-1].lower().removesuffix("-instruct")
        return _random_folder(ctx.scratch, size, ctx.device)
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer

    folder = ctx.scratch / f"tiny-llama3-{name}"
    if not folder.is_dir():
        model, tokenizer = tiny_model_and_tokenizer(seed=1, hidden_size=64, num_layers=2, arch="llama",
                                                    tokenizer="llama3")
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return str(folder)


def check_team(ctx: Context) -> Result:
    """One MARFT-A update of :data:`TEAM_CONFIG`'s team (its layout on the check's models)."""
    import torch
    import yaml

    from marft_agents.config import load_config
    from marft_agents.model.team import TeamPolicy
    from marft_agents.run.trainer import prepare_trainer

    raw = yaml.safe_load(TEAM_CONFIG.read_text())
    dtype = "bfloat16" if ctx.device == "cuda" else "float32"
    models = {name: {**spec, "name_or_path": _second_folder(ctx, name, spec["name_or_path"]), "device": ctx.device,
                     "dtype": dtype, "threads": 1} for name, spec in raw["models"].items()}
    engine = raw["sampling"]["engine"]
    data = {**_config_data(ctx, engine, "team"), "models": models, "agents": raw["agents"], "lora": raw["lora"],
            "critic": raw.get("critic") or {}}
    trainer = None
    try:
        if ctx.device == "cuda":
            _release()
            torch.cuda.reset_peak_memory_stats()
        trainer = prepare_trainer(load_config(data))
        policy = trainer.policy
        if not isinstance(policy, TeamPolicy):
            return Result("team", "FAIL", f"the team was built as a {type(policy).__name__}, not a TeamPolicy")
        before = {k: v.detach().clone() for k, v in policy.adapter_state_dict().items()}
        metrics = next(trainer.run())
        after = policy.adapter_state_dict()
        moved = sorted({k.split("/")[1] for k in before if not torch.equal(before[k], after[k])})
        losses = {k: float(metrics[k]) for k in ("losses/policy_loss", "losses/value_loss") if k in metrics}
        ok = (all(math.isfinite(v) for v in losses.values()) and metrics.get("guard/skipped_steps", 0) == 0
              and len(moved) == len(policy.adapter_names) and len(policy.members) == 1 + len(models))
        details: dict[str, Any] = {"members": policy.describe(), "losses": losses, "adapters_moved": moved,
                                   **{key.split("/")[1]: float(metrics[key]) for key in TIMING_METRICS if key in metrics}}
        if ctx.device == "cuda":
            details["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    finally:
        if trainer is not None:
            trainer.close()
        del trainer
        _release()
    summary = (f"one update of {len(details['members'])} models ({'; '.join(details['members'])}), "
               f"adapters moved: {', '.join(moved)}"
               + (f"; peak {details['peak_gib']:.2f} GiB" if "peak_gib" in details else ""))
    return Result("team", "PASS" if ok else "FAIL", summary, details)


CHECKS: dict[str, Callable[[Context], Result]] = {
    "cuda_tests": check_cuda_tests, "update": check_update, "throughput": check_throughput,
    "logprobs": check_logprobs, "memory": check_memory, "nccl": check_nccl, "team": check_team,
}
"""Every check, by the name ``--only`` takes, in the order they run."""


def _vllm_error(device: str) -> str | None:
    """Why vLLM cannot sample on ``device`` here (None: it can)."""
    import importlib.util

    from marft_agents.engine.vllm_engine import VLLMEngine

    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (GPU: pip install -e '.[agents,vllm]'; CPU: make test-vllm's .venv-vllm)"
    if device not in VLLMEngine.devices:
        return f"the installed vLLM build runs on {'/'.join(VLLMEngine.devices)}, this check on {device}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None,
                        help="a Hugging Face folder or Hub id (default: a tiny random Qwen2, saved to a temp folder)")
    parser.add_argument("--random-init", default=None, choices=sorted(random_init_names()),
                        help="a Qwen2.5 size's shape with random weights and a tiny tokenizer (offline): "
                             "memory and speed of that size, no meaningful rewards")
    parser.add_argument("--only", default=None, help=f"comma-separated checks to run, of: {', '.join(CHECKS)}")
    parser.add_argument("--quick", action="store_true", help="shorter rows and fewer tokens in every check")
    parser.add_argument("--out", default=None, help="also write the JSON summary to this file")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="vLLM's share (default 0.3)")
    parser.add_argument("--bare-vllm", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_vllm:
        bare_vllm(args.bare_vllm)
        return 0
    names = list(CHECKS) if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"--only: unknown check(s) {unknown}; the checks are {', '.join(CHECKS)}")
    import torch

    torch.set_num_threads(1 if (os.cpu_count() or 1) <= 2 else min(8, os.cpu_count() or 1))
    scratch = Path(tempfile.mkdtemp(prefix="marft-gpu-check-"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ctx = Context(args, scratch, device=device, gpus=torch.cuda.device_count() if device == "cuda" else 0,
                  vllm_error=_vllm_error(device))
    results: list[Result] = []
    start = time.monotonic()
    try:
        if args.model and args.random_init:
            parser.error("--model and --random-init: give one")
        ctx.model = (args.model or (_random_folder(scratch, args.random_init, device) if args.random_init
                                    else _tiny_folder(scratch)))
        for name in names:
            began = time.monotonic()
            try:
                result = CHECKS[name](ctx)
            except Exception as err:
                result = Result(name, "FAIL", f"{type(err).__name__}: {err}", {"traceback": traceback.format_exc()[-3000:]})
            result.details.setdefault("seconds", round(time.monotonic() - began, 1))
            results.append(result)
            print(f"{result.status} {name}: {result.summary}", flush=True)
    finally:
        trainer = ctx.cache.pop("vllm_trainer", None)
        if trainer is not None:
            trainer.policy.close_engine()
        shutil.rmtree(scratch, ignore_errors=True)
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    summary = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "gpus": ctx.gpus,
               "model": args.model or (f"random-init {args.random_init}" if args.random_init else "tiny random qwen2"), "quick": args.quick, "torch": torch.__version__,
               "seconds": round(time.monotonic() - start, 1), "counts": counts,
               "checks": [asdict(r) for r in results]}
    text = json.dumps(summary)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
