"""The task-predictability study (``benchmarks/task_predictability.py``): its reliability and
out-of-fold maths against hand-computed values and synthetic problems whose truth is known, one
end-to-end run on a tiny model, and its section of the results page (``leaderboards/studies.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import task_predictability as tp  # noqa: E402

from leaderboards.build import results_page  # noqa: E402
from leaderboards.studies import PREDICTABILITY_TITLE, predictability_section  # noqa: E402

LINK = r"\[([^\]]*)\]\(([^)]+)\)"


def test_split_half_and_binomial_reliability_against_hand_computed_values():
    # halves' means: first (0, .5, 1, 1), last (0, .5, .5, 1): r = .5 / sqrt(.6875 * .5) = 0.852803,
    # Spearman-Brown 2r / (1 + r) = 0.920554; p = (0, .5, .75, 1): 1 - mean(p(1-p)/3) / var(p) = 0.8
    solved = np.array([[0, 0, 0, 0], [1, 0, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=float)
    half = tp.split_half(solved)
    assert half["r"] == pytest.approx(0.852803, abs=1e-6)
    assert half["rho"] == pytest.approx(0.920554, abs=1e-6)
    assert tp.binomial_reliability(solved) == pytest.approx(0.8)
    assert tp.spearman_brown(0.5, 3.0) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="even number of samples"):
        tp.split_half(solved[:, :3])


def test_out_of_fold_r2_of_class_means_against_a_hand_computed_value():
    # fold 0 = rows 0, 2 predicted from rows 1, 3 (a: 2, b: 5) and the reverse (a: 1, b: 3):
    # residuals -1, -2, 1, 2 -> 1 - 10 / 8.75 = -1/7
    y = np.array([1.0, 2.0, 3.0, 5.0])
    r2 = tp.out_of_fold_r2(y, tp.ClassMeans(["a", "a", "b", "b"]), np.array([0, 1, 0, 1]))
    assert r2 == pytest.approx(-1 / 7)
    x = np.arange(12.0)
    assert tp.out_of_fold_r2(2 * x + 1, tp.linear(x), tp.fold_ids(12, 3, 0)) == pytest.approx(1.0)


def test_folds_deal_every_row_once_and_a_ridge_matches_least_squares_at_strength_0():
    folds = tp.fold_ids(23, 5, seed=7)
    assert sorted(np.bincount(folds)) == [4, 4, 5, 5, 5] and np.array_equal(folds, tp.fold_ids(23, 5, seed=7))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    design = np.c_[np.ones(30), x]
    expected = design[:5] @ np.linalg.lstsq(design, y, rcond=None)[0]
    assert tp.ridge_fit_predict(x, y, x[:5], 0.0) == pytest.approx(expected)
    assert np.ptp(tp.ridge_fit_predict(x, y, x[:5], 1e9)) < 1e-6  # all shrunk to the mean


def _two_classes(n: int, k: int = 16, seed: int = 0) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Problems whose success probability is 0.9 (easy) or 0.2 (hard), ``k`` Bernoulli samples
    each: ``solved [n, k]``, the classes, the true probabilities."""
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.5
    p = np.where(hard, 0.2, 0.9)
    return (rng.random((n, k)) < p[:, None]).astype(float), [tp.CLASSES[int(h)] for h in hard], p


def test_reliability_finds_the_true_score_share_and_the_class_reaches_it():
    # true score variance .25 * .7^2 = .1225, noise of a mean of 16: (.09 + .16) / 2 / 16 = .0078125:
    # reliability .1225 / .1303125 = 0.940; the class is all there is, so R^2 / rho ~ 1
    solved, classes, _ = _two_classes(1000)
    rng = np.random.default_rng(1)
    study = tp.figures(solved, classes, {"size_class": tp.ClassMeans(classes),
                                         "noise": tp.Ridge(rng.normal(size=(1000, 20)))}, folds=10, fold_seed=0)
    assert study["rho"] == pytest.approx(0.940, abs=0.02)
    assert study["rho_binomial"] == pytest.approx(0.940, abs=0.02)
    assert 0 < study["rho_se"] < 0.02
    assert study["predictors"]["size_class"]["share_of_rho"] == pytest.approx(1.0, abs=0.05)
    assert study["predictors"]["noise"]["r2_oof"] < 0.01
    assert study["classes"]["easy"]["mean_success"] == pytest.approx(0.9, abs=0.02)


def test_noise_features_predict_nothing_out_of_fold_and_the_class_survives_them():
    """Few problems, many features (as the critic's 576 on 200 problems): a ridge on noise scores
    <= 0 out of fold, where in-sample it would fit a good part of the noise."""
    solved, classes, _ = _two_classes(200, seed=2)
    y, folds = solved.mean(1), tp.fold_ids(200, 10, 0)
    noise = np.random.default_rng(3).normal(size=(200, 50))
    assert tp.out_of_fold_r2(y, tp.Ridge(noise), folds) <= 0.02
    by_class = tp.out_of_fold_r2(y, tp.ClassMeans(classes), folds)
    both = tp.out_of_fold_r2(y, tp.Ridge(noise, offset=tp.ClassMeans(classes)), folds)
    assert by_class > 0.5 and both == pytest.approx(by_class, abs=0.03)
    readable = np.c_[np.array([c == "hard" for c in classes], dtype=float), noise]  # the class among noise
    assert tp.out_of_fold_r2(y, tp.Ridge(readable), folds) > 0.9 * by_class


def test_size_class_reads_the_largest_operand():
    assert tp.size_class("Compute 7 + 12.") == "easy" and tp.size_class("Compute 482 + 739.") == "hard"
    assert tp.size_class("Compute 99 + 100.", hard_from=1000) == "easy"
    with pytest.raises(ValueError, match="expected a problem with numbers"):
        tp.size_class("Compute x + y.")


def test_bad_arguments_get_one_line_each(capsys):
    for argv, message in ((["--samples", "3"], "--samples must be even"),
                          (["--adapters", "/nonexistent/run"], "no such file or folder"),
                          (["--problems", "4", "--folds", "5"], "--folds must be between 2 and --problems"),
                          (["--answer-format", "boxed"], "must contain {answer}")):
        with pytest.raises(SystemExit):
            tp.parse_args(argv)
        assert message in capsys.readouterr().err


COIN_SEAT = '''
import random
import re


def coin_actor(agent, observation, info):
    """Right on every sum below 100, right half the time on the others."""
    a, b = map(int, re.search(r"Compute (\\d+) \\+ (\\d+)", observation["text"]).groups())
    return f"\\\\boxed{{{a + b + (0 if max(a, b) < 100 or random.random() < 0.5 else 1)}}}"
'''


def _tiny_adapters(folder: Path) -> Path:
    """The adapters of a tiny policy built from the study's config, value head bias 0.5."""
    import torch

    from marft_agents.config import load_config
    from marft_agents.model.tiny_models import tiny_model_and_tokenizer
    from marft_agents.run.trainer import build_policy

    cfg = load_config(REPO / "baselines/configs/grid/critic_price.yaml", {"model.dtype": "float32"})
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    with build_policy(cfg, model, tokenizer, ["reasoner_0", "actor_0"]) as policy:
        state = policy.adapter_state_dict()
    state["value_head/critic/linear.bias"] = torch.full_like(state["value_head/critic/linear.bias"], 0.5)
    folder.mkdir()
    torch.save(state, folder / "adapters.pt")
    return folder


def test_the_study_runs_end_to_end_on_a_tiny_model_and_its_table_reaches_the_results_page(tmp_path):
    (tmp_path / "coin_seat.py").write_text(textwrap.dedent(COIN_SEAT))
    adapters = _tiny_adapters(tmp_path / "adapters")
    board = tmp_path / "leaderboards"
    out = board / "studies" / "task_predictability.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "task_predictability.py"), "--tiny", "--threads", "1",
         "--problems", "12", "--samples", "4", "--folds", "3", "--adapters", str(adapters), "--out", str(out),
         "--set", "model.dtype=float32", "--set", "sampling.max_new_tokens=4",
         "--set", "scripted_seats={actor_0: 'coin_seat:coin_actor'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["study"] == "task_predictability" and record["adapters"] == str(adapters)
    assert record["n_problems"] == 12 and record["samples"] == 4 and len(record["per_problem"]) == 12
    assert set(record["predictors"]) == {key for key, _ in tp.PREDICTORS}
    assert {"load", "sample", "greedy_play", "critic_features", "gold_logprob", "statistics"} <= set(record["seconds"])
    assert record["critic"] == {"mode": "local", "agent": "reasoner_0", "hidden_size": 64}
    assert record["answer"]["agent"] == "actor_0" and record["env_kwargs"]["split"] == "test"
    assert record["command"].startswith("python benchmarks/task_predictability.py --tiny")
    for problem in record["per_problem"]:
        assert len(problem["solved"]) == 4 and problem["class"] == tp.size_class(problem["problem"])
        assert problem["critic_value"] == pytest.approx(0.5)  # the loaded head, not a fresh one
        assert problem["gold_logprob"] < 0
    assert record["classes"]["easy"]["mean_success"] == 1.0  # the coin actor never misses an easy sum
    assert "| size class |" in done.stdout and "split-half reliability rho" in done.stdout

    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    (board / "records").mkdir()
    text = results_page(board / "records", page)
    assert f"## {PREDICTABILITY_TITLE}" in text and "| ridge on critic features |" in text
    assert f"`{record['command']}`" in text
    section = "\n".join(predictability_section(board / "studies", page))
    assert re.search(r"\| size class \| \[-?\d+\.\d+\]\(\.\./leaderboards/studies/task_predictability\.json\)", section)
    for _, target in re.findall(LINK, section):
        assert (page.parent / target.split("#")[0]).exists(), target
    unlinked = re.sub(r"`[^`]*`", "", re.sub(LINK, "", section))
    assert not re.findall(r"\d+\.\d+", unlinked), "a figure of the study's section is not a link to its record"
    out.unlink()
    assert PREDICTABILITY_TITLE not in results_page(board / "records", page)  # no record, no section
