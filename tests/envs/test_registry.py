"""The registry behaves: ids, PettingZoo's own ``make``, run-time and entry-point registration.

Every registered env's conformance (PettingZoo's checks and marft's) is ``test_contract.py``, run
over the ids the registry lists.
"""

import sys
import textwrap

import pytest

import marft_envs
from marft_envs.registry import BUILTIN_ENVS


def test_builtin_ids_are_registered():
    assert {env_id for env_id, _, _ in BUILTIN_ENVS} <= set(marft_envs.list_envs())


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

    code = ("import marft_envs, marft_envs.testing, sys; marft_envs.make('marft/Arithmetic-v0').reset(seed=0); "
            "marft_envs.testing.check_env('marft/Arithmetic-v0', num_cycles=4, episodes=1); "
            "print('torch' in sys.modules, 'marft_agents' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


def test_an_unknown_kwarg_gets_one_line_naming_it_the_close_match_and_the_accepted_ones(monkeypatch):
    import functools

    from marft_envs.envs.arithmetic import ArithmeticEnv

    @functools.wraps(ArithmeticEnv.__init__)  # the same signature, but constructing fails
    def never(*args, **kwargs):
        raise AssertionError("the env was constructed before its kwargs were checked")

    monkeypatch.setattr(ArithmeticEnv, "__init__", never)
    with pytest.raises(marft_envs.UnknownEnvKwargError) as caught:
        marft_envs.make("marft/Arithmetic-v0", levle=1)
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, ValueError)
    assert "'levle'" in message and "did you mean 'level'?" in message
    assert "it accepts: level, " in message and "profile" in message and "horizon" in message


def test_kwargs_of_base_classes_pass_and_a_name_like_nothing_gets_no_guess():
    env = marft_envs.make("marft/WebShop-v0", profile="shopper_verifier", max_valid_actions=8, render_mode="ansi")
    assert env.possible_agents == ["shopper_0", "verifier_0"]  # TextTaskEnv's keywords, through **kwargs
    with pytest.raises(marft_envs.UnknownEnvKwargError) as caught:
        marft_envs.make("marft/WebShop-v0", zzzqqq=1)
    assert "did you mean" not in str(caught.value) and "max_steps" in str(caught.value)


def test_every_registered_env_names_its_kwargs():
    for env_id in marft_envs.list_envs():
        accepted = marft_envs.env_parameters(env_id)
        assert accepted is not None and {"profile", "render_mode"} <= set(accepted), env_id
