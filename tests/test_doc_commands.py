"""``benchmarks/doc_commands.py``: every documented command, in fenced blocks of any language.

The GPU recipes sit in ``text`` blocks; their ``marft`` commands are validated with ``marft
config --config`` (the checks train runs before loading a model) instead of run, so a broken
command there fails the check like one in a ``bash`` block.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import doc_commands  # noqa: E402


def _page(tmp_path: Path, block: str, language: str = "text") -> Path:
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\n```{language}\n{block}\n```\n\nProse.\n")
    return page


def test_marft_and_make_commands_of_a_text_block_are_collected_and_validated(tmp_path):
    page = _page(tmp_path, "# on the GPU machine\n"
                           "marft train --config baselines/configs/marft_a_math_qwen2.5.yaml --set a.b=1\n"
                           "make demo\n"
                           "marft train: error: output shown in the block, not a command\n"
                           "some other text")
    commands = doc_commands.extract([page])
    assert [c.text for c in commands] == [
        "marft train --config baselines/configs/marft_a_math_qwen2.5.yaml --set a.b=1", "make demo"]
    for command in commands:
        doc_commands.plan(command, tmp_path)
    assert commands[0].validate_as == ("python -m marft_agents.cli config --config "
                                       "baselines/configs/marft_a_math_qwen2.5.yaml --set a.b=1")
    assert commands[1].validate_as.startswith("make -n demo")
    assert all(c.validate for c in commands)


def test_the_gpu_page_commands_are_checked():
    commands = doc_commands.extract([REPO / "docs" / "gpu.md"])
    # the marft commands on a Qwen2.5 config (a script that only reads one, memory_estimate.py, runs here)
    gpu = [c for c in commands if "qwen2.5" in c.text and doc_commands.MODEL_COMMAND.search(c.text)]
    assert len(gpu) >= 8  # the train / resume / eval / torchrun lines of the GPU recipe
    for command in gpu:
        doc_commands.plan(command, REPO)
        assert "marft_agents.cli config --config baselines/configs/marft_a_" in command.validate_as


@pytest.mark.parametrize("language", ["text", "", "bash"])
def test_a_broken_command_fails_the_check_in_a_block_of_any_language(tmp_path, capsys, language):
    bad = tmp_path / "bad.yaml"  # the paper config's mistake: eval.env_kwargs the env rejects
    bad.write_text(yaml.safe_dump({"env": {"id": "marft/Arithmetic-v0", "kwargs": {"level": 1}},
                                   "eval": {"env_kwargs": {"level": 99}}}))
    # a GPU config whose env needs no data (the shipped Qwen2.5 configs read MATH / MBPP, absent on a
    # bare clone): validated with `marft config`, not run, wherever the block stands
    gpu = tmp_path / "qwen2.5_arithmetic.yaml"
    gpu.write_text(yaml.safe_dump({"model": {"name_or_path": "Qwen/Qwen2.5-7B-Instruct"},
                                   "env": {"id": "marft/Arithmetic-v0", "kwargs": {"level": 1}}}))
    good = f"marft train --config {gpu} --set model.dtype=bfloat16"
    page = _page(tmp_path, f"{good}\nmarft train --config {bad}", language)
    code = doc_commands.main(["--run", "--venv", sys.prefix, "--only", "qwen2.5|bad.yaml", str(page)])
    out = capsys.readouterr().out
    assert code == 1, out
    lines = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert lines[0].startswith("PASS") and lines[1].startswith("FAIL"), out
    assert "eval.env_kwargs" in out and "unknown arithmetic level 99" in out


def test_a_skipped_command_is_validated_where_it_can_be():
    skipped = doc_commands.Command("README.md", 1, "make test")
    doc_commands.plan(skipped, REPO)
    assert skipped.skip and skipped.validate_as == "make -n test"
    never = doc_commands.Command("x.md", 1, "pip install -e .")  # nothing stands in for it: a SKIP
    doc_commands.plan(never, REPO)
    assert never.skip and not never.validate


def test_a_text_block_without_a_broken_command_passes(tmp_path, capsys):
    page = _page(tmp_path, "marft config --config baselines/configs/demo.yaml")
    assert doc_commands.main(["--run", "--venv", sys.prefix, str(page)]) == 0, capsys.readouterr().out


def test_a_whole_benchmark_is_a_long_command_and_its_dry_run_runs():
    long = doc_commands.Command("ADDING_AN_ENV.md", 1, ".venv/bin/marft benchmark example/VowelCount-v0 --jobs 2")
    doc_commands.plan(long, REPO)
    assert long.long and "benchmark suite" in long.skip
    dry = doc_commands.Command("ADDING_AN_ENV.md", 2, ".venv/bin/marft benchmark example/VowelCount-v0 --dry-run")
    doc_commands.plan(dry, REPO)
    assert not dry.skip and not dry.long
