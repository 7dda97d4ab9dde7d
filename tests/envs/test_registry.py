"""Every registered env passes PettingZoo's own checks unmodified; the registry behaves."""

import json
import sys
import textwrap

import pytest
from pettingzoo.test import api_test, parallel_api_test, seed_test
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

import marft_envs
from conftest import shared_data_dir

EXPECTED = {"marft/Arithmetic-v0", "marft/MATH-v0", "marft/GSM8K-v0", "marft/HumanEval-v0",
            "marft/MBPP-v0", "marft/StdioCode-v0", "marft/WebShop-v0"}


def _kwargs(env_id, tmp_path_factory):
    """Arguments that make each env constructible here (data envs need the shared data)."""
    data = shared_data_dir()
    if env_id in ("marft/MATH-v0", "marft/GSM8K-v0", "marft/MBPP-v0"):
        if data is None:
            pytest.skip(f"{env_id} needs ../shared/data (or MARFT_DATA); not found")
        return {"data_dir": str(data)}
    if env_id == "marft/StdioCode-v0":
        path = tmp_path_factory.mktemp("stdio") / "problems.jsonl"
        path.write_text(json.dumps({"task_id": "echo", "prompt": "Print the input.",
                                    "tests": [{"input": "3\n", "output": "3\n"}]}) + "\n")
        return {"path": str(path)}
    return {}


def test_builtin_ids_are_registered():
    assert EXPECTED <= set(marft_envs.list_envs())


@pytest.mark.parametrize("env_id", sorted(EXPECTED))
def test_registered_env_passes_pettingzoo_checks(env_id, tmp_path_factory):
    kwargs = _kwargs(env_id, tmp_path_factory)
    api_test(marft_envs.make(env_id, **kwargs), num_cycles=12)
    seed_test(lambda: marft_envs.make(env_id, **kwargs), num_cycles=8)
    parallel_api_test(turn_based_aec_to_parallel(marft_envs.make(env_id, **kwargs)), num_cycles=8)


def test_make_unknown_id_lists_registered_envs():
    with pytest.raises(ValueError, match="marft/Arithmetic-v0"):
        marft_envs.make("marft/Nope-v0")


def test_pettingzoo_make_sees_marft_envs():
    import pettingzoo

    env = pettingzoo.make("aec", "marft/Arithmetic-v0", level=2)
    env.reset(seed=0)
    assert env.possible_agents == ["reasoner_0", "actor_0"]


def test_runtime_registration_of_a_user_env():
    marft_envs.register("testlab/Toy-v0", "toy:ToyEnv", kwargs={"n": 5})
    env = marft_envs.make("testlab/Toy-v0", profile="solo")
    env.reset(seed=0)
    assert "testlab/Toy-v0" in marft_envs.list_envs() and len(env.tasks) == 5


def test_entry_point_plugins_are_discovered(tmp_path, monkeypatch):
    dist = tmp_path / "mylab_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mylab-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent("""
        [marft_envs.envs]
        mylab/Toy-v0 = toy:ToyEnv
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mylab/Toy-v0" in marft_envs.list_envs()
    marft_envs.make("mylab/Toy-v0").reset(seed=1)


def test_importing_marft_envs_needs_no_torch():
    import subprocess

    code = "import marft_envs, sys; marft_envs.make('marft/Arithmetic-v0').reset(seed=0); print('torch' in sys.modules, 'marft_agents' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"
