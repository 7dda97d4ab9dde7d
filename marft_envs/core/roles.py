"""Roles and profiles: who the agents are and what each is told.

A *profile* is an ordered list of roles loaded from YAML or JSON. Agent ids follow PettingZoo's
``<name>_<index>`` convention: the first role called ``reasoner`` becomes ``reasoner_0``, a second
one ``reasoner_1``. Profiles shipped with marft live in ``marft_envs/profiles/<name>.yaml``;
``load_profile`` also accepts a path to a user file, a dict, or a :class:`Profile`.

Named profiles also come from outside marft: ``<name>.yaml`` files in the folders of
``$MARFT_PROFILE_PATH``, and the entry-point group ``marft_envs.profiles`` of installed packages::

    [project.entry-points."marft_envs.profiles"]
    planner_solver = "mylab_envs.profiles"   # the file planner_solver.yaml in that package
    tutor = "mylab_envs.teams:TUTOR"         # a dict, a Profile or a path

An env's ``default_profile`` is any of these forms (a name, a path or a mapping).

File format::

    name: dual
    description: reasoner analyses, actor answers
    dependency: chain            # optional default D (see marft_envs.core.dependency)
    solo: false                  # optional: true = one solver prompted once per role (Profile.solo)
    roles:
      - name: reasoner
        graded: false
        system_prompt: |
          You analyse the problem ...
      - name: actor
        graded: true
        system_prompt: ...
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import yaml

PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"
PROFILE_ENTRY_POINT_GROUP = "marft_envs.profiles"
"""Entry-point group of named profiles shipped by plugin packages (name -> ``package``, holding
``<name>.yaml``, or ``module:attribute``)."""
PROFILE_PATH_VAR = "MARFT_PROFILE_PATH"
"""Environment variable: folders (``os.pathsep``-separated) searched for ``<name>.yaml`` profiles."""
PROFILE_SUFFIXES = (".yaml", ".yml", ".json")
_entry_point_profiles: dict[str, Profile] = {}  # name -> profile loaded from an installed package
_ROLE_NAME = re.compile(r"^[a-z][a-z0-9]*$")


@dataclass(frozen=True)
class Role:
    """One agent role in a profile."""

    name: str
    """Lower-case role name without digits at the start or underscores (agent id: ``<name>_<k>``)."""
    system_prompt: str
    """The system message of this agent's chat prompt."""
    graded: bool = False
    """Whether this role's output is the one graded at the end of a round. When several roles are
    graded, the last one scheduled in the round wins."""
    description: str = ""
    """Human-readable summary shown in docs and renders."""


@dataclass(frozen=True)
class Profile:
    """An ordered set of roles plus an optional default dependency."""

    name: str
    """Profile name (file stem for shipped profiles)."""
    roles: tuple[Role, ...]
    """Roles in scheduling order (the order used for ties in D_t's topological sort)."""
    description: str = ""
    """What the team does."""
    dependency: Any = None
    """Default dependency spec (see ``Dependency.from_spec``); None means ``chain``."""
    solo: bool = False
    """The agents are one solver prompted several times (e.g. ``solo_two_calls``: a draft, then
    the final answer): every agent is shown the whole problem, as the agent of a one-agent
    profile is, and the graded agent's answer is submitted as that agent's would be. Envs that
    deal information over the agents or give them roles by position (Relay, SolveCheck) treat
    such a team like one agent; the others need nothing."""
    agent_ids: tuple[str, ...] = field(init=False)
    """``<role>_<k>`` ids derived from the roles."""

    def __post_init__(self) -> None:
        if not self.roles:
            raise ValueError(f"profile {self.name!r} has no roles; give at least one role")
        counts: dict[str, int] = {}
        ids = []
        for role in self.roles:
            if not _ROLE_NAME.match(role.name):
                raise ValueError(
                    f"role name {role.name!r} in profile {self.name!r} must be lower-case letters "
                    "and digits starting with a letter (e.g. 'reasoner'); the agent id appends '_<k>'"
                )
            k = counts.get(role.name, 0)
            counts[role.name] = k + 1
            ids.append(f"{role.name}_{k}")
        object.__setattr__(self, "agent_ids", tuple(ids))

    def role_of(self, agent_id: str) -> Role:
        return self.roles[self.agent_ids.index(agent_id)]


def _search_dirs() -> list[Path]:
    """Folders named by ``$MARFT_PROFILE_PATH`` (``os.pathsep``-separated), in order."""
    return [Path(p) for p in os.environ.get(PROFILE_PATH_VAR, "").split(os.pathsep) if p]


def _plugin_profiles() -> dict[str, EntryPoint]:
    """Profiles advertised in the ``marft_envs.profiles`` entry-point group (first one wins)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=PROFILE_ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def available_profiles() -> list[str]:
    """Names ``load_profile`` accepts: shipped, on ``$MARFT_PROFILE_PATH`` and from plugins."""
    names = {p.stem for p in PROFILE_DIR.glob("*.yaml")}
    for folder in _search_dirs():
        names.update(p.stem for suffix in PROFILE_SUFFIXES for p in folder.glob(f"*{suffix}"))
    names.update(_plugin_profiles())
    return sorted(names)


def profile_source(name: str) -> str:
    """Where the named profile comes from: ``"shipped"``, a file path, or ``"entry point <value>"``."""
    if (PROFILE_DIR / f"{name}.yaml").exists():
        return "shipped"
    for folder in _search_dirs():
        for suffix in PROFILE_SUFFIXES:
            if (folder / f"{name}{suffix}").is_file():
                return str(folder / f"{name}{suffix}")
    ep = _plugin_profiles().get(name)
    if ep is not None:
        dist = getattr(ep, "dist", None)
        return f"entry point {ep.value}" + (f" ({dist.name} {dist.version})" if dist else "")
    raise FileNotFoundError(_not_found_message(name))


def _not_found_message(spec: Any) -> str:
    names = available_profiles()
    close = difflib.get_close_matches(str(spec), names, n=1)
    return (
        f"profile {str(spec)!r} is neither an existing .yaml/.yml/.json file nor a known profile name"
        + (f"; did you mean {close[0]!r}?" if close else "")
        + f" (known: {', '.join(names)}); shipped profiles live in marft_envs/profiles, "
        f"others come from ${PROFILE_PATH_VAR} folders or the {PROFILE_ENTRY_POINT_GROUP!r} entry points"
    )


def _read_file(path: Path, default_name: str) -> Profile:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    return profile_from_dict(data, default_name=default_name)


def _read_resource(resource: Any, default_name: str) -> Profile:
    """Read a profile file given as a path or an ``importlib.resources`` Traversable."""
    with resources.as_file(resource) as path:
        return _read_file(Path(path), default_name=default_name)


def _load_entry_point(ep: EntryPoint) -> Profile:
    """Load a ``marft_envs.profiles`` entry point.

    ``package`` (no attribute): the file ``<name>.yaml`` (or ``.yml`` / ``.json``) inside that
    package, e.g. ``planner_solver = "mylab_envs.profiles"``. ``module:attribute``: a mapping, a
    :class:`Profile`, or a path / ``importlib.resources`` file holding one.
    """
    where = f"profile entry point {ep.name!r} = {ep.value!r}"
    if not ep.attr:
        folder = resources.files(ep.module)
        for suffix in PROFILE_SUFFIXES:
            if folder.joinpath(f"{ep.name}{suffix}").is_file():
                return _read_resource(folder.joinpath(f"{ep.name}{suffix}"), default_name=ep.name)
        raise FileNotFoundError(f"{where}: package {ep.module!r} holds no {ep.name}.yaml/.yml/.json "
                                "(is it included as package data?)")
    value = ep.load()
    if isinstance(value, Profile):
        return value
    if isinstance(value, Mapping):
        return profile_from_dict(value, default_name=ep.name)
    if isinstance(value, (str, Path)) or (hasattr(value, "is_file") and hasattr(value, "read_text")):
        if not (Path(value).is_file() if isinstance(value, (str, Path)) else value.is_file()):
            raise FileNotFoundError(f"{where} names {str(value)!r}, which is not a file")
        return _read_resource(Path(value) if isinstance(value, str) else value, default_name=ep.name)
    raise TypeError(f"{where} names a {type(value).__name__}; expected a mapping, a Profile or a file path")


def profile_from_dict(data: Mapping[str, Any], default_name: str = "custom") -> Profile:
    """Build a :class:`Profile` from parsed YAML/JSON, with errors that say what is wrong."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a profile must be a mapping with a 'roles' list, got {type(data).__name__}")
    keys = [f.name for f in fields(Profile) if f.init]
    unknown = set(data) - set(keys)
    if unknown:
        raise ValueError(f"unknown profile keys {sorted(unknown)}; valid keys: {', '.join(keys)}")
    if not isinstance(data.get("solo", False), bool):
        raise ValueError(f"profile key 'solo' must be true or false, got {data['solo']!r}")
    raw_roles = data.get("roles")
    if not isinstance(raw_roles, list) or not raw_roles:
        raise ValueError("a profile needs a non-empty 'roles' list of {name, system_prompt, graded}")
    roles = []
    for i, raw in enumerate(raw_roles):
        if not isinstance(raw, Mapping) or "name" not in raw or "system_prompt" not in raw:
            raise ValueError(f"role #{i} must be a mapping with at least 'name' and 'system_prompt'")
        extra = set(raw) - {"name", "system_prompt", "graded", "description"}
        if extra:
            raise ValueError(
                f"role #{i} ({raw['name']!r}) has unknown keys {sorted(extra)}; "
                "valid keys: name, system_prompt, graded, description"
            )
        roles.append(
            Role(
                name=str(raw["name"]),
                system_prompt=str(raw["system_prompt"]).strip(),
                graded=bool(raw.get("graded", False)),
                description=str(raw.get("description", "")),
            )
        )
    if not any(r.graded for r in roles):
        roles[-1] = Role(roles[-1].name, roles[-1].system_prompt, True, roles[-1].description)
    return Profile(
        name=str(data.get("name", default_name)),
        roles=tuple(roles),
        description=str(data.get("description", "")),
        dependency=data.get("dependency"),
        solo=data.get("solo", False),
    )


def load_profile(spec: str | Path | Mapping[str, Any] | Profile) -> Profile:
    """Load a profile from a :class:`Profile`, a mapping, a file path or a name.

    A name is looked up in this order: shipped profiles (``marft_envs/profiles``), folders on
    ``$MARFT_PROFILE_PATH``, then the ``marft_envs.profiles`` entry points of installed packages.
    """
    if isinstance(spec, Profile):
        return spec
    if isinstance(spec, Mapping):
        return profile_from_dict(spec)
    if not isinstance(spec, (str, Path)):
        raise TypeError(
            f"profile must be a name, a path, a mapping or a Profile, got {type(spec).__name__}"
        )
    path, name = Path(spec), str(spec)
    if not path.suffix and (PROFILE_DIR / f"{name}.yaml").is_file():
        return _read_file(PROFILE_DIR / f"{name}.yaml", default_name=name)
    if path.is_file():
        return _read_file(path, default_name=path.stem)
    for folder in _search_dirs():
        for suffix in PROFILE_SUFFIXES:
            if (folder / f"{name}{suffix}").is_file():
                return _read_file(folder / f"{name}{suffix}", default_name=name)
    if name in _entry_point_profiles:
        return _entry_point_profiles[name]
    ep = _plugin_profiles().get(name)
    if ep is not None:
        # Cached: every env instance loads its profile, and scanning the installed packages'
        # metadata is slow enough to add up over many eval envs.
        _entry_point_profiles[name] = _load_entry_point(ep)
        return _entry_point_profiles[name]
    raise FileNotFoundError(_not_found_message(spec))
