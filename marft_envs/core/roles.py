"""Roles and profiles: who the agents are and what each is told.

A *profile* is an ordered list of roles loaded from YAML or JSON. Agent ids follow PettingZoo's
``<name>_<index>`` convention: the first role called ``reasoner`` becomes ``reasoner_0``, a second
one ``reasoner_1``. Profiles shipped with marft live in ``marft_envs/profiles/<name>.yaml``;
``load_profile`` also accepts a path to a user file, a dict, or a :class:`Profile`.

File format::

    name: dual
    description: reasoner analyses, actor answers
    dependency: chain            # optional default D (see marft_envs.core.dependency)
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

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"
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


def available_profiles() -> list[str]:
    """Names of the profiles shipped in ``marft_envs/profiles``."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def profile_from_dict(data: Mapping[str, Any], default_name: str = "custom") -> Profile:
    """Build a :class:`Profile` from parsed YAML/JSON, with errors that say what is wrong."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a profile must be a mapping with a 'roles' list, got {type(data).__name__}")
    unknown = set(data) - {"name", "description", "dependency", "roles"}
    if unknown:
        raise ValueError(
            f"unknown profile keys {sorted(unknown)}; valid keys: name, description, dependency, roles"
        )
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
    )


def load_profile(spec: str | Path | Mapping[str, Any] | Profile) -> Profile:
    """Load a profile by shipped name (``"dual"``), file path (``.yaml``/``.yml``/``.json``), or dict."""
    if isinstance(spec, Profile):
        return spec
    if isinstance(spec, Mapping):
        return profile_from_dict(spec)
    if not isinstance(spec, (str, Path)):
        raise TypeError(
            f"profile must be a shipped name, a path, a dict or a Profile, got {type(spec).__name__}"
        )
    path = Path(spec)
    if not path.suffix and (PROFILE_DIR / f"{spec}.yaml").exists():
        path = PROFILE_DIR / f"{spec}.yaml"
    if not path.exists():
        raise FileNotFoundError(
            f"profile {str(spec)!r} is neither a shipped profile ({', '.join(available_profiles())}) "
            "nor an existing .yaml/.json file"
        )
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    return profile_from_dict(data, default_name=path.stem)
