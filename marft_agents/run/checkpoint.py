"""Checkpoints that resume a run exactly, written atomically.

A checkpoint is a folder ``<output_dir>/checkpoints/update_<NNNNNN>/`` holding

* ``adapters.pt``: every LoRA adapter and the value head (``policy.adapter_state_dict()``), on
  its own so that evaluation can load trained adapters without the training state;
* ``state.pt``: optimizer states, counters, RNG states (python, numpy, torch CPU and CUDA, and
  the trainer's own generators) and anything else the trainer hands over;
* ``config.yaml``: the run's configuration, and ``meta.json``: counters in plain text.

Why atomic: a run killed mid-write must never leave a checkpoint that looks complete but is not.
Everything is written into a temporary sibling folder, flushed, then renamed into place with
``os.replace`` (a single rename on POSIX); a crash leaves at most a ``.tmp-*`` folder, which
``latest_checkpoint`` ignores and the next save cleans up. Only the last ``keep_last``
checkpoints are kept.

``<output_dir>/best/`` (``adapters.pt`` and ``meta.json``: update, accuracy, stderr) holds the
adapters of the best evaluation of the run, written the same atomic way by
:func:`save_best_adapters`; pruning never touches it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from marft_agents.checkpoint_layout import (BEST_DIR, CHECKPOINT_DIR, checkpoint_name, checkpoint_root,  # noqa: F401
                                           latest_checkpoint, list_checkpoints)
from marft_agents.files import make_ordinary
from marft_agents.runtime.seeding import cuda_rng_state, restore_cuda_rng_state

log = logging.getLogger(__name__)



def capture_rng_state() -> dict[str, Any]:
    """The global RNG states that sampling and shuffling depend on."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    cuda = cuda_rng_state()  # this process's GPU only (a torchrun rank's own), None without CUDA
    if cuda is not None:
        state["cuda"] = cuda
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    restore_cuda_rng_state(state.get("cuda"))  # also reads the every-GPU lists of older checkpoints


def _write_file(path: Path, writer) -> None:
    with open(path, "wb") as handle:
        writer(handle)
        handle.flush()
        os.fsync(handle.fileno())


def _write_bytes(data: bytes, handle: Any) -> None:
    handle.write(data)


def _json_writer(data: dict[str, Any]) -> Callable[[Any], Any]:
    return lambda f: f.write(json.dumps(data, indent=2, default=str).encode())


def _write_folder(target: Path, files: dict[str, Callable[[Any], Any]]) -> None:
    """Create folder ``target`` with ``{file name: writer(binary handle)}``, all or nothing.

    The files go into a ``.tmp-<name>-*`` sibling that is renamed into place once complete; a
    crash leaves only that sibling behind (the callers sweep such leftovers before saving).
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        make_ordinary(tmp)  # mkdtemp's folder is private (0700); a checkpoint is an ordinary one
        for name, writer in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)  # "models/<model>/<adapter>/..."
            _write_file(tmp / name, writer)
        _move_into_place(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _move_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished folder ``tmp`` to ``target``, replacing an older ``target``."""
    if target.exists():
        # Re-saving the same update (e.g. after a resume) or a new best: move the old one aside
        # first, because os.replace cannot replace a non-empty folder.
        old = target.parent / f".tmp-old-{target.name}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def save_checkpoint(
    output_dir: str | os.PathLike,
    update: int,
    adapters: dict[str, Any],
    state: dict[str, Any],
    config: dict[str, Any] | None = None,
    keep_last: int = 3,
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """Write checkpoint ``update`` atomically and prune all but the newest ``keep_last``.

    Args:
        adapters: ``policy.adapter_state_dict()`` (tensors are saved as they are).
        state: optimizer states, counters, RNG states ... (anything ``torch.save`` accepts).
        config: the run's configuration as a plain dict (saved as YAML for humans).
        keep_last: how many checkpoints to keep (>= 1).
        extra_files: ``{relative path: bytes}`` written too (``policy.peft_files()``: a peft
            adapter folder per model and agent, ``models/<model>/<adapter>/``).
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    root = checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):  # leftovers of a crashed save
        shutil.rmtree(stale, ignore_errors=True)
    target = root / checkpoint_name(update)
    files = {"adapters.pt": lambda f: torch.save(adapters, f), "state.pt": lambda f: torch.save(state, f)}
    if config is not None:
        text = yaml.safe_dump(config, sort_keys=False)
        files["config.yaml"] = lambda f: f.write(text.encode("utf-8"))
    for name, data in (extra_files or {}).items():
        files[name] = functools.partial(_write_bytes, data)
    files["meta.json"] = _json_writer({"update": update, "counters": state.get("counters", {})})
    _write_folder(target, files)
    for old in list_checkpoints(output_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def save_best_adapters(output_dir: str | os.PathLike, adapters: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``<output_dir>/best/`` atomically: ``adapters.pt`` plus ``meta.json`` (``meta``)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / BEST_DIR
    for stale in out.glob(f".tmp-*{BEST_DIR}*"):  # leftovers of a crashed save
        shutil.rmtree(stale, ignore_errors=True)
    _write_folder(target, {"adapters.pt": lambda f: torch.save(adapters, f), "meta.json": _json_writer(meta)})
    return target


def load_best_meta(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``meta.json`` of ``<output_dir>/best/`` (update, accuracy, stderr, ...), or None if absent."""
    meta = Path(output_dir) / BEST_DIR / "meta.json"
    return json.loads(meta.read_text()) if meta.is_file() else None


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint folder: ``{"adapters", "state", "config", "path"}``."""
    path = Path(path)
    if not (path / "state.pt").is_file() or not (path / "adapters.pt").is_file():
        raise FileNotFoundError(
            f"{path} is not a complete marft checkpoint (expected adapters.pt and state.pt inside)"
        )
    # weights_only=False: the state holds RNG tuples and numpy arrays, which the safe unpickler
    # rejects. Only load checkpoints you wrote yourself.
    adapters = torch.load(path / "adapters.pt", map_location=map_location, weights_only=False)
    state = torch.load(path / "state.pt", map_location=map_location, weights_only=False)
    return {"adapters": adapters, "state": state, "config": load_checkpoint_config(path), "path": path}


def load_checkpoint_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """Only ``config.yaml`` of a checkpoint folder (plain data), or None when it has none."""
    file = Path(path) / "config.yaml"
    return yaml.safe_load(file.read_text(encoding="utf-8")) if file.is_file() else None


def start_state(state: dict[str, Any], policy: Any) -> dict[str, Any]:
    """The part of another run's saved adapters (``load_adapters``) that ``policy`` starts from:
    all of it, except a critic's adapter and value heads when the policy has no critic (a run
    with ``advantage.baseline: group`` starting from a run that trained one). A start that does
    not fit otherwise is left for ``load_adapter_state_dict`` to refuse."""
    if policy.critic_adapters:
        return state
    kept = {k: v for k, v in state.items() if not k.startswith(("value_head/", "lora/critic"))}
    if len(kept) < len(state):
        log.info("the start holds a critic, which this run does not train: its policy adapters are used")
    return kept


def load_adapters(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Only the adapter weights of a checkpoint (for evaluation of a trained run)."""
    path = Path(path)
    if path.is_dir() and not (path / "adapters.pt").is_file():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"no checkpoint found in {path} (looked for {CHECKPOINT_DIR}/update_*)")
        path = latest
    file = path / "adapters.pt" if path.is_dir() else path
    return torch.load(file, map_location=map_location, weights_only=True)
