"""Extension points for outside packages: plugin env ids, named profiles, named dependencies.

A plugin is "installed" the way pip leaves it: a ``<name>.dist-info`` folder with
``entry_points.txt`` on ``sys.path`` (plus the plugin's module), so discovery goes through
``importlib.metadata`` exactly as for a real installation.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
from pettingzoo.env_registry.exceptions import FailedToImport

import marft_envs
from marft_envs import Dependency, load_profile
from marft_envs.core import dependency as dependency_module
from marft_envs.core.roles import available_profiles, profile_source


def install_plugin(root, name: str, entry_points: str, files: dict[str, str]) -> None:
    """Write a fake installed distribution ``name`` under ``root`` (put ``root`` on sys.path)."""
    dist = root / f"{name.replace('-', '_')}-1.2.3.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


@pytest.fixture(autouse=True)
def restored_registry(monkeypatch):
    """The ids a test registers (plug-ins from its temporary folder, run-time registrations of
    modules that exist only there) are gone after it, so later tests that walk every registered
    id (tests/envs/test_registry.py) see only importable ones."""
    from marft_envs import registry

    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    monkeypatch.setattr(registry, "_runtime_objects", dict(registry._runtime_objects))


@pytest.fixture
def plugin_root(tmp_path, monkeypatch):
    from marft_envs.core import roles

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(roles, "_entry_point_profiles", {})
    yield tmp_path
    for module in [m for m in sys.modules if m.startswith("mylab_")]:
        del sys.modules[module]


@pytest.fixture
def clean_dependencies(monkeypatch):
    monkeypatch.setattr(dependency_module, "_named", {})


TEAM = """
name: team
roles:
  - {name: scout, system_prompt: Look around.}
  - {name: judge, system_prompt: Decide., graded: true}
"""


# -- env ids -----------------------------------------------------------------------------------------
def test_plugin_installed_after_import_is_found_by_make_and_reports_its_package(plugin_root):
    install_plugin(plugin_root, "mylab-late", """
        [marft_envs.envs]
        mylab/Late-v0 = toy:ToyEnv
        """, {})
    env = marft_envs.make("mylab/Late-v0", n=3)  # no explicit load_plugins()
    env.reset(seed=0)
    source = marft_envs.env_source("mylab/Late-v0")
    assert (source.distribution, source.version, source.origin) == ("mylab-late", "1.2.3", "entry_point")
    assert source.entry_point == "toy:ToyEnv"


def test_broken_plugin_module_is_an_import_error_not_an_unknown_id(plugin_root):
    install_plugin(plugin_root, "mylab-broken", """
        [marft_envs.envs]
        mylab/Broken-v0 = mylab_missing.module:Env
        """, {})
    with pytest.raises(FailedToImport, match="mylab_missing"):
        marft_envs.make("mylab/Broken-v0")
    assert "ModuleNotFoundError" in marft_envs.describe_env("mylab/Broken-v0")["error"]


def test_runtime_registration_has_no_distribution():
    marft_envs.register("testlab/ToySource-v0", "toy:ToyEnv")
    source = marft_envs.env_source("testlab/ToySource-v0")
    assert source.origin == "runtime" and source.distribution is None


# -- profiles ------------------------------------------------------------------------------------------
def test_profiles_from_the_search_path(tmp_path, monkeypatch):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "team.yaml").write_text(TEAM)
    monkeypatch.setenv("MARFT_PROFILE_PATH", str(folder))
    assert load_profile("team").agent_ids == ("scout_0", "judge_0")
    assert "team" in available_profiles() and profile_source("team") == str(folder / "team.yaml")


def test_profiles_from_entry_points_package_file_and_attribute(plugin_root):
    install_plugin(plugin_root, "mylab-teams", """
        [marft_envs.profiles]
        pair = mylab_teams.profiles
        tutor = mylab_teams.defs:TUTOR
        shipped_file = mylab_teams.defs:PAIR_FILE
        missing = mylab_teams.profiles
        broken = mylab_teams.defs:NUMBER
        """, {
        "mylab_teams/__init__.py": "",
        "mylab_teams/profiles/__init__.py": "",
        "mylab_teams/profiles/pair.yaml": TEAM,
        "mylab_teams/defs.py": """
            from importlib.resources import files
            TUTOR = {"roles": [{"name": "tutor", "system_prompt": "Teach."}]}
            PAIR_FILE = files("mylab_teams.profiles") / "pair.yaml"
            NUMBER = 3
            """,
    })
    assert load_profile("pair").agent_ids == ("scout_0", "judge_0")
    tutor = load_profile("tutor")
    assert tutor.name == "tutor" and tutor.agent_ids == ("tutor_0",)
    assert load_profile("shipped_file").agent_ids == ("scout_0", "judge_0")
    assert {"pair", "tutor", "shipped_file"} <= set(available_profiles())
    assert "mylab-teams 1.2.3" in profile_source("pair")
    with pytest.raises(FileNotFoundError, match="holds no missing.yaml"):
        load_profile("missing")
    with pytest.raises(TypeError, match="expected a mapping, a Profile or a file path"):
        load_profile("broken")


def test_shipped_profile_names_win_over_plugins(plugin_root):
    install_plugin(plugin_root, "mylab-shadow", """
        [marft_envs.profiles]
        solo = mylab_shadow
        """, {"mylab_shadow/__init__.py": "", "mylab_shadow/solo.yaml": TEAM})
    assert load_profile("solo").agent_ids == ("actor_0",)


def test_unknown_profile_error_names_every_source():
    with pytest.raises(FileNotFoundError, match="MARFT_PROFILE_PATH.*marft_envs.profiles"):
        load_profile("no_such_team")


def test_default_profile_may_be_a_mapping():
    from toy import ToyEnv

    class MappedToy(ToyEnv):
        default_profile = {"name": "inline", "roles": [{"name": "solver", "system_prompt": "Solve."}]}

    env = MappedToy(n=3)
    assert env.possible_agents == ["solver_0"] and env.profile.name == "inline"


# -- named dependencies --------------------------------------------------------------------------------
AGENTS = ["planner_0", "actor_0"]


def plan_first(round_index, history, plan_rounds=1):
    if round_index < plan_rounds:
        return {"active": ["planner", "actor"], "edges": [("planner", "actor")]}  # role names resolve
    return {"active": ["actor"]}


def test_registered_function_is_usable_by_name_and_with_kwargs(clean_dependencies):
    Dependency.register("plan_first", plan_first)
    dep = Dependency.from_spec("plan_first")
    assert dep.name == "plan_first" and "plan_first" in Dependency.registered()
    assert dep.plan(AGENTS, 0, []).parents("actor_0") == ("planner_0",)
    assert dep.plan(AGENTS, 1, []).active == ("actor_0",)
    two = Dependency.from_spec({"named": "plan_first", "kwargs": {"plan_rounds": 2}})
    assert two.plan(AGENTS, 1, []).active == ("planner_0", "actor_0")


def test_registered_subclass_and_instance(clean_dependencies):
    class Reversed(Dependency):
        def __init__(self, history="graded"):
            self.history = history

        def plan(self, agents, round_index, history):
            return marft_envs.core.dependency.build_round_graph(agents, [(agents[-1], agents[0])], history=self.history)

    Dependency.register("reversed", Reversed)
    assert Dependency.from_spec({"named": "reversed", "kwargs": {"history": "all"}}).plan(AGENTS, 0, []).history == "all"
    Dependency.register("solo_chain", Dependency.chain())
    with pytest.raises(ValueError, match="takes no kwargs"):
        Dependency.from_spec({"named": "solo_chain", "kwargs": {"x": 1}})


def test_registration_errors(clean_dependencies):
    with pytest.raises(ValueError, match="built-in"):
        Dependency.register("chain", plan_first)
    Dependency.register("plan_first", plan_first)
    Dependency.register("plan_first", plan_first)  # the same object again is fine
    with pytest.raises(ValueError, match="already registered"):
        Dependency.register("plan_first", lambda r, h: None)
    Dependency.register("plan_first", lambda r, h: None, replace=True)
    with pytest.raises(TypeError, match="must be a function"):
        Dependency.register("nothing", 42)
    with pytest.raises(ValueError, match="marft_envs.dependencies"):
        Dependency.from_spec("no_such_dependency")
    with pytest.raises(ValueError, match="only 'named' and 'kwargs'"):
        Dependency.from_spec({"named": "plan_first", "args": []})


def test_dependency_entry_point_is_loaded_on_first_use(plugin_root, clean_dependencies):
    install_plugin(plugin_root, "mylab-deps", """
        [marft_envs.dependencies]
        mylab_solo_after = mylab_deps:schedule
        """, {"mylab_deps.py": """
            def schedule(round_index, history):
                return {"active": ["actor"]} if round_index else None
            """})
    assert "mylab_solo_after" in Dependency.registered() and "mylab_deps" not in sys.modules
    dep = Dependency.from_spec("mylab_solo_after")
    assert dep.plan(AGENTS, 0, []).active == tuple(AGENTS) and dep.plan(AGENTS, 1, []).active == ("actor_0",)


def test_a_config_holding_a_function_is_refused_with_the_named_alternative(clean_dependencies):
    pytest.importorskip("torch")
    from marft_agents.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"env.kwargs.dependency is a function.*Dependency.register"):
        load_config({"env": {"id": "marft/Arithmetic-v0", "kwargs": {"dependency": plan_first}}})
    Dependency.register("plan_first_cfg", plan_first)
    cfg = load_config({"env": {"id": "marft/Arithmetic-v0", "kwargs": {"dependency": "plan_first_cfg"}}})
    assert cfg.env.kwargs["dependency"] == "plan_first_cfg"
