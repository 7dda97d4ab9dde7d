"""Checkpoints: atomic writes, keep-last-K, RNG capture, loading."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from marft_agents.run import checkpoint as ck
def _save(tmp_path, update, keep=2):
    return ck.save_checkpoint(tmp_path, update, {"w": torch.full((2,), float(update))},
                              {"counters": {"update": update}, "x": np.arange(3)}, config={"seed": 1}, keep_last=keep)


def test_save_load_roundtrip_and_keep_last(tmp_path):
    for update in (1, 2, 3):
        _save(tmp_path, update)
    names = [p.name for p in ck.list_checkpoints(tmp_path)]
    assert names == ["update_000002", "update_000003"]
    loaded = ck.load_checkpoint(ck.latest_checkpoint(tmp_path))
    assert torch.equal(loaded["adapters"]["w"], torch.full((2,), 3.0))
    assert loaded["state"]["counters"] == {"update": 3} and loaded["config"] == {"seed": 1}
    assert torch.equal(ck.load_adapters(tmp_path)["w"], torch.full((2,), 3.0))


def test_incomplete_and_temporary_folders_are_ignored(tmp_path):
    _save(tmp_path, 1)
    root = ck.checkpoint_root(tmp_path)
    (root / ".tmp-update_000002-abc").mkdir()  # a crashed save
    (root / "update_000003").mkdir()  # no files: not complete
    assert ck.latest_checkpoint(tmp_path).name == "update_000001"
    _save(tmp_path, 4)
    assert not list(root.glob(".tmp-*"))  # cleaned on the next save


def test_resaving_same_update_replaces_it(tmp_path):
    _save(tmp_path, 5)
    ck.save_checkpoint(tmp_path, 5, {"w": torch.zeros(1)}, {"counters": {}}, keep_last=2)
    assert torch.equal(ck.load_checkpoint(ck.latest_checkpoint(tmp_path))["adapters"]["w"], torch.zeros(1))


def test_crash_during_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    _save(tmp_path, 1)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ck.os, "replace", boom)
    with pytest.raises(OSError):
        _save(tmp_path, 2)
    monkeypatch.undo()
    assert ck.latest_checkpoint(tmp_path).name == "update_000001"
    assert not list(ck.checkpoint_root(tmp_path).glob(".tmp-*"))


def test_rng_capture_restore():
    state = ck.capture_rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    ck.restore_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_load_rejects_non_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a complete marft checkpoint"):
        ck.load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        ck.load_adapters(tmp_path)


def test_best_adapters_replace_atomically_and_survive_pruning(tmp_path):
    ck.save_best_adapters(tmp_path, {"w": torch.ones(2)}, {"update": 1, "accuracy": 0.3})
    (tmp_path / ".tmp-best-crashed").mkdir()  # a crashed save of a later best
    ck.save_best_adapters(tmp_path, {"w": torch.full((2,), 4.0)}, {"update": 4, "accuracy": 0.5})
    assert torch.equal(ck.load_adapters(tmp_path / ck.BEST_DIR)["w"], torch.full((2,), 4.0))
    assert json.loads((tmp_path / ck.BEST_DIR / "meta.json").read_text()) == {"update": 4, "accuracy": 0.5}
    assert not list(tmp_path.glob(".tmp-*"))
    for update in (5, 6, 7):  # keep_last pruning only touches checkpoints/
        _save(tmp_path, update, keep=1)
    assert (tmp_path / ck.BEST_DIR / "adapters.pt").is_file()


def test_checkpoint_and_best_folders_get_ordinary_permissions(tmp_path):
    import os
    import stat

    from marft_agents.run.checkpoint import save_best_adapters, save_checkpoint

    old = os.umask(0o022)
    try:
        ckpt = save_checkpoint(tmp_path, 1, {"w": torch.zeros(2)}, {"counters": {}}, config={"a": 1})
        best = save_best_adapters(tmp_path, {"w": torch.zeros(2)}, {"update": 1})
    finally:
        os.umask(old)
    for folder in (ckpt, best):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
        for file in folder.iterdir():
            assert stat.S_IMODE(file.stat().st_mode) == 0o644, file
