"""What makes each registered env id constructible on this machine (shared by the tests that run
over every id: the contract, pickling and copying)."""

from __future__ import annotations

import json

import pytest

from conftest import shared_data_dir

DATA_ENVS = ("marft/MATH-v0", "marft/GSM8K-v0", "marft/MBPP-v0")
"""Envs that read the shared data (``../shared/data`` or ``$MARFT_DATA``)."""


def constructible_kwargs(env_id: str, tmp_path_factory) -> dict:
    """The kwargs that make ``env_id`` here; skips the test (with the reason) when its data is absent."""
    if env_id in DATA_ENVS:
        data = shared_data_dir()
        if data is None:
            pytest.skip(f"{env_id} needs ../shared/data (or MARFT_DATA); not found")
        return {"data_dir": str(data)}
    if env_id == "marft/StdioCode-v0":
        path = tmp_path_factory.mktemp("stdio") / "problems.jsonl"
        path.write_text(json.dumps({"task_id": "echo", "prompt": "Print the input.",
                                    "tests": [{"input": "3\n", "output": "3\n"}]}) + "\n")
        return {"path": str(path)}
    return {}
