"""Environment ids on PettingZoo's registry, plus discovery of third-party environments.

``marft_envs.make("marft/Arithmetic-v0", level=1)`` is PettingZoo's
``pettingzoo.make("aec", "marft/Arithmetic-v0", level=1)``: marft registers its envs there, so
both spellings work and other PettingZoo tooling sees them.

Third-party packages register their own envs without importing marft at install time, through the
entry-point group ``marft_envs.envs`` (name = env id, value = ``module:Class``)::

    # pyproject.toml of your package
    [project.entry-points."marft_envs.envs"]
    "mylab/Sudoku-v0" = "mylab_envs.sudoku:SudokuEnv"

or at run time with ``marft_envs.register("mylab/Sudoku-v0", "mylab_envs.sudoku:SudokuEnv")``.
See ``marft_envs/ADDING_AN_ENV.md``.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points
from typing import Any

import pettingzoo
from pettingzoo.env_registry.exceptions import PettingZooRegistryError

ENTRY_POINT_GROUP = "marft_envs.envs"

# (env id, entry point, default kwargs). Entry points are strings so that importing marft_envs
# stays cheap: an env's module (and its dependencies) load only when that env is made.
BUILTIN_ENVS: list[tuple[str, str, dict[str, Any]]] = [
    ("marft/Arithmetic-v0", "marft_envs.envs.arithmetic:ArithmeticEnv", {}),
    ("marft/MATH-v0", "marft_envs.envs.math:MathEnv", {}),
    ("marft/GSM8K-v0", "marft_envs.envs.gsm8k:GSM8KEnv", {}),
    # -- coding envs (issue 4) --
    ("marft/HumanEval-v0", "marft_envs.envs.humaneval:HumanEvalEnv", {}),
    ("marft/MBPP-v0", "marft_envs.envs.mbpp:MBPPEnv", {}),
    ("marft/StdioCode-v0", "marft_envs.envs.stdio_code:StdioCodeEnv", {}),
    # -- WebShop (issue 5) --
    ("marft/WebShop-v0", "marft_envs.envs.webshop:WebShopEnv", {}),
    # -- cooperative tasks (issue 19) --
    ("marft/Relay-v0", "marft_envs.envs.relay:RelayEnv", {}),
    ("marft/SolveCheck-v0", "marft_envs.envs.solve_check:SolveCheckEnv", {}),
]

_registered: dict[str, str] = {}
_plugins_loaded = False


def register(env_id: str, entry_point: Any, kwargs: dict[str, Any] | None = None) -> None:
    """Register an AEC env under ``env_id`` (``namespace/Name-vN``) on PettingZoo's registry."""
    pettingzoo.register("aec", env_id, entry_point=entry_point, kwargs=kwargs or {})
    _registered[env_id] = entry_point if isinstance(entry_point, str) else repr(entry_point)


def _register_builtins() -> None:
    for env_id, entry_point, kwargs in BUILTIN_ENVS:
        if env_id not in _registered:
            register(env_id, entry_point, kwargs)


def load_plugins() -> None:
    """Register every env advertised in the ``marft_envs.envs`` entry-point group (once)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _registered:
            continue
        try:
            register(ep.name, ep.value)
        except PettingZooRegistryError as err:
            warnings.warn(f"ignoring env plugin {ep.name!r} from {ep.value!r}: {err}", stacklevel=2)


def list_envs() -> list[str]:
    """Ids of all registered marft envs (built-ins and plugins), sorted."""
    load_plugins()
    return sorted(_registered)


def make(env_id: str, **kwargs: Any) -> pettingzoo.AECEnv:
    """Create a registered env; unknown ids get an error listing the registered ones."""
    load_plugins()
    try:
        return pettingzoo.make("aec", env_id, **kwargs)
    except PettingZooRegistryError as err:
        raise ValueError(
            f"unknown environment id {env_id!r}; registered marft envs: {', '.join(list_envs())}"
        ) from err


_register_builtins()
