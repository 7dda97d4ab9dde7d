"""Model loading: configs, errors, the tiny test model, the cached GGUF conversion (slow)."""

from __future__ import annotations

import logging
import time

import pytest
import torch

from marft_agents.model import loading as models
from marft_agents.model import source
from marft_agents.model.loading import load_model_and_tokenizer, model_cache_dir, resolve_device, resolve_dtype
from marft_agents.model.tiny_models import tiny_model_and_tokenizer
from marft_agents.settings.model import DEFAULT_MODEL, ModelConfig, alias_typo


def test_tiny_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, _ = tiny_model_and_tokenizer(seed=0)
    after = torch.rand(3)
    b, _ = tiny_model_and_tokenizer(seed=0)
    c, _ = tiny_model_and_tokenizer(seed=1)
    assert torch.equal(after, expected)  # building the model consumed no global randomness
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    assert not a.training


def test_tiny_tokenizer_chat_template_padding_and_roundtrip():
    _, tok = tiny_model_and_tokenizer()
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    text = "Héllo, 12 + 30 = ? ∑"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    ids = tok.apply_chat_template([{"role": "system", "content": "S"},
                                   {"role": "user", "content": "hi"}],
                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    rendered = tok.decode(ids)
    assert rendered == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n" \
                       "<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>"


def test_dtype_and_device_resolution():
    assert resolve_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("fp32")
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("not-a-device")


def test_cache_dir_follows_config_then_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path / "env"))
    assert model_cache_dir(ModelConfig()) == tmp_path / "env" / "models"
    assert model_cache_dir(ModelConfig(cache_dir=str(tmp_path / "c"))) == tmp_path / "c"
    monkeypatch.delenv("MARFT_CACHE")
    assert model_cache_dir(ModelConfig()).parts[-3:] == (".cache", "marft", "models")


def test_missing_local_path_gives_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model_and_tokenizer(ModelConfig(str(tmp_path / "no_such_model")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model_and_tokenizer(ModelConfig(str(tmp_path / "empty")))


def test_load_local_folder_with_dtype(tmp_path):
    model, tok = tiny_model_and_tokenizer()
    tok.padding_side = "right"  # the loader must put it back to left
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    loaded, ltok = load_model_and_tokenizer(ModelConfig(str(tmp_path / "m"), dtype="bfloat16"))
    assert loaded.dtype == torch.bfloat16 and not loaded.training
    assert ltok.padding_side == "left" and ltok.pad_token_id == tok.pad_token_id
    assert ltok.chat_template == tok.chat_template
    torch.testing.assert_close(loaded.lm_head.weight.float(),
                               model.lm_head.weight.to(torch.bfloat16).float())


def test_threads_set_when_the_model_loads_and_said_in_one_line(tmp_path, monkeypatch, caplog):
    from marft_agents.engine import cpu_support

    model, tok = tiny_model_and_tokenizer()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MARFT_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cpu_support, "_applied", None)
    monkeypatch.setattr(cpu_support, "cores_in_affinity", lambda: 2)
    monkeypatch.setattr(cpu_support, "load_average", lambda: 1.9)  # another job on both cores
    monkeypatch.setattr(cpu_support, "own_load", lambda: 0.0)
    monkeypatch.setattr(models, "cpu_bf16", lambda: models.CpuBf16(False, "no bf16 instructions on this CPU"))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # set by the caller: it stands
        with caplog.at_level(logging.INFO, logger="marft_agents.model.loading"):
            load_model_and_tokenizer(ModelConfig(str(tmp_path / "m")))
        assert torch.get_num_threads() == 1 and "1 thread (set by torch.set_num_threads)" in caplog.text
        load_model_and_tokenizer(ModelConfig(str(tmp_path / "m"), threads=2))  # model.threads wins
        assert torch.get_num_threads() == 2
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="marft_agents.model.loading"):
            load_model_and_tokenizer(ModelConfig(str(tmp_path / "m")))  # 0: chosen for the busy machine
        assert torch.get_num_threads() == 1
        lines = [r.getMessage() for r in caplog.records if r.name == "marft_agents.model.loading"]
        assert lines == ["float32 on cpu (no bf16 instructions on this CPU), 1 thread (2 cores in affinity, "
                         "load 1.9 besides marft: busy); set MARFT_THREADS or OMP_NUM_THREADS to override"]
        with pytest.raises(ValueError, match="model.threads must be >= 0"):
            load_model_and_tokenizer(ModelConfig(str(tmp_path / "m"), threads=-1))
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_default_alias_converts_once_then_reuses_the_cache(tmp_path):
    try:
        models.packaged_gguf_path(DEFAULT_MODEL)
    except FileNotFoundError as err:
        pytest.skip(str(err))
    cfg = ModelConfig(cache_dir=str(tmp_path))
    model, _ = load_model_and_tokenizer(cfg)  # dequantises the GGUF (~20 s)
    folder = tmp_path / DEFAULT_MODEL
    assert (folder / "model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dir left
    start = time.perf_counter()
    again, tok2 = load_model_and_tokenizer(cfg)
    assert time.perf_counter() - start < 10  # read from the safetensors copy
    from transformers import AutoModelForCausalLM

    gguf = models.packaged_gguf_path(DEFAULT_MODEL)
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                  dtype=torch.float32)
    direct_params = dict(direct.named_parameters())
    for name, param in again.named_parameters():  # the cached copy is the GGUF, bit for bit
        assert torch.equal(param, direct_params[name]), name
    assert tok2.padding_side == "left" and tok2.eos_token == "<|im_end|>"
    ids = tok2.apply_chat_template([{"role": "user", "content": "Compute 2 + 3."}],
                                   add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tok2.decode(ids).endswith("<|im_start|>assistant\n")
    assert model.config.hidden_size == 576 and model.config.num_hidden_layers == 30


def test_mistyped_alias_fails_at_once_offline_with_a_suggestion(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(models.ModelNotFoundError, match="did you mean the alias 'smollm2-135m-instruct'"):
        load_model_and_tokenizer(ModelConfig(name_or_path="smollm2-135m-instrct"))
    assert time.perf_counter() - started < 2.0
    assert alias_typo("SmolLM2-135M-Instrct") == "smollm2-135m-instruct"
    assert alias_typo("HuggingFaceTB/SmolLM2-135M-Instruct") is None  # a Hub id, not a typo
    assert alias_typo("gpt2") is None


def test_hub_probe_gives_up_after_its_timeout(monkeypatch):
    """No offline variable, and a name lookup that hangs: the probe answers "offline" in time."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)

    def hanging_connect(*args, **kwargs):
        time.sleep(5)
        raise OSError("no route")

    with monkeypatch.context() as patch:
        patch.setattr(source.socket, "create_connection", hanging_connect)
        started = time.perf_counter()
        assert models.hub_offline()
        assert time.perf_counter() - started < models.HUB_PROBE_TIMEOUT_S + 0.5


def test_unknown_model_fails_fast_when_the_hub_is_unreachable(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(models, "hub_offline", lambda: True)
    started = time.perf_counter()
    with pytest.raises(models.ModelNotFoundError, match="Hub is unreachable"):
        load_model_and_tokenizer(ModelConfig(name_or_path="some-lab/no-such-model"))
    assert time.perf_counter() - started < 2.0


def _cpuinfo(flags: str, key: str = "flags") -> str:
    return f"processor\t: 0\nmodel name\t: Some CPU\n{key}\t\t: {flags}\n"


class _CountingTimer:
    """Stands in for the timed bf16 probe (nothing is timed): bf16 ``speedup`` times as fast."""

    def __init__(self, speedup: float):
        self.speedup, self.calls = speedup, 0

    def __call__(self):
        self.calls += 1
        return [0.01 * self.speedup] * 3, [0.01] * 3


@pytest.fixture
def bf16_probe(monkeypatch, tmp_path):
    """The probe may run (``MARFT_DTYPE_PROBE`` unset), measures nothing yet in this process and
    stores under ``tmp_path``; the timed step is replaced by a ``_CountingTimer`` (set ``.speedup``)."""
    from marft_agents.engine import cpu_support

    monkeypatch.delenv(models.DTYPE_PROBE_VARIABLE, raising=False)
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_support, "_speedups", {})
    timer = _CountingTimer(2.0)
    monkeypatch.setattr(cpu_support, "time_bf16_step", timer)
    return timer


@pytest.mark.parametrize("flags, key, speedup, dtype, measured, why", [
    ("fpu avx512f avx512bw avx512_vnni", "flags", 2.0, "float32", False, "no bf16 instructions on this CPU"),
    ("fpu avx512f amx_bf16 amx_tile avx512_bf16", "flags", 0.5, "bfloat16", False,
     "this CPU has bf16 matrix units (amx_bf16)"),
    ("fp asimd bf16", "Features", 0.5, "bfloat16", False, "this CPU has bf16 matrix units (bf16)"),
    ("fpu avx512f avx512_bf16 avx512_vnni", "flags", 1.9, "bfloat16", True,
     "bf16 measured 1.90x faster than float32 on this CPU"),
    ("fpu avx512f avx512_bf16 avx512_vnni", "flags", 0.8, "float32", True,
     "bf16 measured 0.80x the speed of float32 on this CPU"),
    ("fpu avx2 avx_ne_convert", "flags", 1.1, "float32", True,
     "bf16 measured 1.10x faster than float32 on this CPU, below the 1.2x that bf16 must win by"),
])
def test_cpu_bf16_measures_only_where_the_flags_leave_it_open(bf16_probe, flags, key, speedup, dtype, measured, why):
    bf16_probe.speedup = speedup
    choice = models.cpu_bf16(_cpuinfo(flags, key))
    assert (choice.dtype, choice.why) == (dtype, why)
    assert bf16_probe.calls == int(measured)


def test_the_probe_can_be_switched_off_and_no_flags_mean_float32(bf16_probe, monkeypatch):
    monkeypatch.setenv(models.DTYPE_PROBE_VARIABLE, "0")
    choice = models.cpu_bf16(_cpuinfo("fpu avx512f avx512_bf16"))
    assert (choice.dtype, choice.why) == ("float32", "bf16 speed not measured: MARFT_DTYPE_PROBE=0")
    monkeypatch.delenv(models.DTYPE_PROBE_VARIABLE)
    assert models.cpu_bf16("processor : 0\n").dtype == "float32"  # no flags line: assume emulated
    monkeypatch.setattr(models, "_read_cpuinfo", lambda: None)  # no /proc/cpuinfo
    assert models.cpu_bf16() == models.CpuBf16(False, "no CPU flags to read")
    assert bf16_probe.calls == 0


@pytest.mark.parametrize("flags, dtype, measured", [
    ("fpu avx512f", "float32", False), ("fpu amx_bf16", "bfloat16", False), ("fpu avx512_bf16", "bfloat16", True)])
def test_auto_dtype_on_a_cpu_measures_on_avx512_bf16_only_and_once(bf16_probe, monkeypatch, tmp_path, flags, dtype,
                                                                   measured):
    monkeypatch.setattr(models, "_read_cpuinfo", lambda: _cpuinfo(flags))
    assert models.auto_dtype("cpu") == dtype and resolve_dtype("auto") is getattr(torch, dtype)
    assert bf16_probe.calls == int(measured)  # the second look is the process's own answer
    assert (tmp_path / models.DTYPE_PROBE_FILE).is_file() is measured  # stored for later processes


# ---------------------------------------------------------------- the converted-model cache
# The GGUF reading is faked (model_cache_helpers): the tiny model stands in for SmolLM2, the rest
# of the conversion is the real code.


def _broken_cache(cache_dir):
    """The alias's cache folder holding tokenizer files only (left by some other process)."""
    _, tok = tiny_model_and_tokenizer()
    folder = cache_dir / DEFAULT_MODEL
    tok.save_pretrained(folder)
    assert (folder / "tokenizer_config.json").is_file() and not (folder / "config.json").exists()
    return folder, sorted(p.name for p in folder.iterdir())


def test_a_cache_folder_that_fails_its_check_is_moved_aside_and_rebuilt(tmp_path, monkeypatch, caplog):
    from model_cache_helpers import fake_gguf_patches

    counter = tmp_path / "conversions"
    for name, value in fake_gguf_patches(counter).items():
        monkeypatch.setattr(models, name, value)
    cache = tmp_path / "cache"
    folder, left_over = _broken_cache(cache)
    cfg = ModelConfig(cache_dir=str(cache))
    with caplog.at_level("INFO", logger="marft_agents.model.loading"):
        model, tok = load_model_and_tokenizer(cfg)
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert model.config.hidden_size == 32 and tok.eos_token == "<|im_end|>"
    aside = [p for p in cache.iterdir() if p.name.startswith(f"{DEFAULT_MODEL}.broken-")]
    assert len(aside) == 1  # kept for inspection, not deleted...
    assert sorted(p.name for p in aside[0].iterdir()) == left_over  # ...and not trusted either
    moved = [r for r in caplog.records if "moved it aside" in r.getMessage()]
    assert len(moved) == 1 and moved[0].levelname == "WARNING" and "\n" not in moved[0].getMessage()
    assert str(folder) in moved[0].getMessage() and aside[0].name in moved[0].getMessage()
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name]  # no temporary folder left
    load_model_and_tokenizer(cfg)  # the rebuilt copy passes its check: no second conversion
    assert len(counter.read_text().splitlines()) == 1


@pytest.mark.parametrize("broken", [False, True])
def test_concurrent_loads_convert_once_under_a_lock(tmp_path, broken):
    """Two processes (two ranks, two jobs) load the alias at the same time from an empty cache,
    or from one holding a broken folder (every rank of a torchrun job would repair it)."""
    import multiprocessing

    from model_cache_helpers import load_in_child

    cache, counter = tmp_path / "cache", tmp_path / "conversions"
    if broken:
        _broken_cache(cache)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=load_in_child,
                         args=(str(cache), str(counter), str(tmp_path / f"result{i}"), barrier))
             for i in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
    assert [proc.exitcode for proc in procs] == [0, 0]
    results = {(tmp_path / f"result{i}").read_text() for i in range(2)}
    assert len(results) == 1 and results.pop().endswith(" <|im_end|>\n")  # both loaded the same model
    assert len(counter.read_text().splitlines()) == 1  # the converter ran once
    assert models._is_converted(cache / DEFAULT_MODEL)
    assert len([p for p in cache.iterdir() if ".broken-" in p.name]) == int(broken)  # moved aside once
    assert (cache / f"{DEFAULT_MODEL}.lock").is_file()


def test_a_cache_that_cannot_be_repaired_is_one_line_naming_the_folder(tmp_path, monkeypatch):
    import errno
    import os

    from model_cache_helpers import fake_gguf_patches

    from marft_agents.cli import USER_ERRORS

    counter = tmp_path / "conversions"
    for name, value in fake_gguf_patches(counter).items():
        monkeypatch.setattr(models, name, value)
    cache = tmp_path / "cache"
    folder, left_over = _broken_cache(cache)
    real_rename, real_replace = os.rename, os.replace

    def denied(src, dst, *args, **kwargs):  # what a cache folder owned by another user gives
        if str(folder) in (os.fspath(src), os.fspath(dst)):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src))
        return real_rename(src, dst, *args, **kwargs)

    def denied_replace(src, dst, *args, **kwargs):
        if str(folder) in (os.fspath(src), os.fspath(dst)):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(src))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", denied)
    monkeypatch.setattr(os, "replace", denied_replace)
    with pytest.raises(OSError) as caught:
        load_model_and_tokenizer(ModelConfig(cache_dir=str(cache)))
    assert isinstance(caught.value, USER_ERRORS)  # `marft train` prints it as one line
    assert type(caught.value).__name__ == "ModelCacheError"
    message = str(caught.value)
    assert "\n" not in message and f"delete {folder}" in message and "Permission denied" in message
    assert sorted(p.name for p in folder.iterdir()) == left_over  # left as it was
