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

Entry-point envs are put on PettingZoo's registry when ``marft_envs`` is imported, by their
``module:Class`` string: nothing of the plugin is imported until the env is made, and
``pettingzoo.make("aec", "mylab/Sudoku-v0")`` works right after ``import marft_envs``. A package
installed later in a running process is found by ``marft_envs.make`` / ``list_envs`` (they scan
the entry points again). See ``marft_envs/ADDING_AN_ENV.md``.
"""

from __future__ import annotations

import importlib.metadata as metadata
import warnings
from dataclasses import dataclass
from typing import Any

import pettingzoo
from pettingzoo.env_registry.exceptions import FailedToImport, PettingZooRegistryError

ENTRY_POINT_GROUP = "marft_envs.envs"
MARFT_DISTRIBUTION = "marft"

# (env id, entry point, default kwargs). Entry points are strings so that importing marft_envs
# stays cheap: an env's module (and its dependencies) load only when that env is made.
BUILTIN_ENVS: list[tuple[str, str, dict[str, Any]]] = [
    ("marft/Arithmetic-v0", "marft_envs.envs.arithmetic:ArithmeticEnv", {}),
    ("marft/MATH-v0", "marft_envs.envs.math:MathEnv", {}),
    ("marft/GSM8K-v0", "marft_envs.envs.gsm8k:GSM8KEnv", {}),
    # -- coding envs --
    ("marft/HumanEval-v0", "marft_envs.envs.humaneval:HumanEvalEnv", {}),
    ("marft/MBPP-v0", "marft_envs.envs.mbpp:MBPPEnv", {}),
    ("marft/StdioCode-v0", "marft_envs.envs.stdio_code:StdioCodeEnv", {}),
    # -- WebShop --
    ("marft/WebShop-v0", "marft_envs.envs.webshop:WebShopEnv", {}),
    # -- cooperative tasks --
    ("marft/Relay-v0", "marft_envs.envs.relay:RelayEnv", {}),
    ("marft/SolveCheck-v0", "marft_envs.envs.solve_check:SolveCheckEnv", {}),
    ("marft/GuessNumber-v0", "marft_envs.envs.guess_number:GuessNumberEnv", {}),
]


@dataclass(frozen=True)
class EnvSource:
    """Where a registered env comes from (shown by ``marft envs --verbose``, kept in bench records)."""

    entry_point: str
    """``module:Class`` (or the repr of a callable registered at run time)."""
    distribution: str | None
    """The installed distribution (``pip`` name) that provides it; None when it is not installed
    (a module on ``sys.path`` or a callable defined in a script)."""
    version: str | None
    """That distribution's version."""
    origin: str
    """``"builtin"``, ``"entry_point"`` (group ``marft_envs.envs``) or ``"runtime"``
    (``marft_envs.register``)."""


_registered: dict[str, EnvSource] = {}
_runtime_objects: dict[str, Any] = {}  # env id -> what marft_envs.register was given


def installed_marft_version() -> str | None:
    """The version of the installed ``marft`` distribution (None when run from an uninstalled checkout)."""
    try:
        return metadata.version(MARFT_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _distribution_of(entry_point: Any) -> tuple[str | None, str | None]:
    """The installed distribution whose top-level module holds ``entry_point`` (``module:attr``)."""
    module = entry_point if isinstance(entry_point, str) else getattr(entry_point, "__module__", None)
    if not module:
        return None, None
    top = module.split(":", 1)[0].split(".", 1)[0]
    names = metadata.packages_distributions().get(top, [])
    if not names:
        return None, None
    try:
        return names[0], metadata.version(names[0])
    except metadata.PackageNotFoundError:
        return names[0], None


def _put(env_id: str, entry_point: Any, kwargs: dict[str, Any] | None, source: EnvSource) -> None:
    pettingzoo.register("aec", env_id, entry_point=entry_point, kwargs=kwargs or {})
    _registered[env_id] = source


def register(env_id: str, entry_point: Any, kwargs: dict[str, Any] | None = None) -> None:
    """Register an AEC env under ``env_id`` (``namespace/Name-vN``) on PettingZoo's registry.

    ``entry_point`` is a ``"module:Class"`` string (imported when the env is made) or a callable
    returning the env; ``kwargs`` are default keyword arguments.
    """
    text = entry_point if isinstance(entry_point, str) else repr(entry_point)
    # The distribution is looked up lazily (env_source) because packages_distributions() scans
    # every installed package.
    _put(env_id, entry_point, kwargs, EnvSource(text, None, None, "runtime"))
    _runtime_objects[env_id] = entry_point


def _register_builtins() -> None:
    version = installed_marft_version()
    for env_id, entry_point, kwargs in BUILTIN_ENVS:
        if env_id not in _registered:
            _put(env_id, entry_point, kwargs, EnvSource(entry_point, MARFT_DISTRIBUTION, version, "builtin"))


def load_plugins() -> list[str]:
    """Register every env advertised in the ``marft_envs.envs`` entry-point group not yet known.

    Cheap (it reads the installed packages' metadata, imports nothing); called at import and
    again by :func:`list_envs` and by :func:`make` for an unknown id. Returns the ids it added.
    """
    added = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _registered:
            continue
        dist = getattr(ep, "dist", None)
        source = EnvSource(ep.value, dist.name if dist else None, dist.version if dist else None, "entry_point")
        try:
            _put(ep.name, ep.value, None, source)
        except PettingZooRegistryError as err:
            warnings.warn(f"ignoring env plugin {ep.name!r} from {ep.value!r}: {err}", stacklevel=2)
            continue
        added.append(ep.name)
    return added


def list_envs() -> list[str]:
    """Ids of all registered marft envs (built-ins, plugins and run-time registrations), sorted."""
    load_plugins()
    return sorted(_registered)


def env_source(env_id: str) -> EnvSource:
    """Where ``env_id`` comes from: its entry point and the distribution (name, version) providing it."""
    if env_id not in _registered:
        load_plugins()
    if env_id not in _registered:
        raise ValueError(f"unknown environment id {env_id!r}; registered marft envs: {', '.join(list_envs())}")
    source = _registered[env_id]
    if source.origin == "runtime" and source.distribution is None:
        name, version = _distribution_of(_runtime_objects.get(env_id, source.entry_point))
        source = EnvSource(source.entry_point, name, version, source.origin)
    return source


def env_class(env_id: str) -> Any:
    """The class (or factory) ``env_id`` is made with, imported now; nothing is constructed."""
    from pettingzoo.env_registry.spec import _load_env_creator

    env_source(env_id)  # a clear error for an unknown id
    return _load_env_creator(pettingzoo.spec("aec", env_id).entry_point)


def describe_env(env_id: str) -> dict[str, Any]:
    """What ``marft envs --verbose`` shows: the default profile, its agents and where the env comes from.

    Imports the env's module (to read ``default_profile``) but constructs nothing, so envs whose
    data is absent are described too; a failure is reported under ``"error"`` instead of raised.
    """
    from marft_envs.core.roles import load_profile

    source = env_source(env_id)
    info: dict[str, Any] = {"id": env_id, "entry_point": source.entry_point, "origin": source.origin,
                            "distribution": source.distribution, "version": source.version,
                            "default_profile": None, "agents": None, "error": None}
    try:
        profile_spec = getattr(env_class(env_id), "default_profile", None)
        if profile_spec is not None:
            profile = load_profile(profile_spec)
            info["default_profile"], info["agents"] = profile.name, list(profile.agent_ids)
    except Exception as err:  # noqa: BLE001 - one broken plugin must not hide the others
        info["error"] = f"{type(err).__name__}: {err}"
    return info


def env_parameters(env_id: str) -> list[str] | None:
    """The keyword arguments ``env_id``'s class accepts, following ``**kwargs`` up its base classes
    (``WebShopEnv(**kwargs)`` -> ``TextTaskEnv``'s); None when they cannot be known (a factory or
    a class chain that ends in an open ``**kwargs``). Imports the env's module, constructs nothing."""
    import inspect

    entry = env_class(env_id)
    names: list[str] = []
    for klass in (entry.__mro__ if isinstance(entry, type) else [entry]):
        if isinstance(klass, type) and "__init__" not in vars(klass):
            continue
        try:
            params = list(inspect.signature(klass.__init__ if isinstance(klass, type) else klass).parameters.values())
        except (TypeError, ValueError):  # a builtin or C callable: no signature to read
            return None
        names += [p.name for p in params if p.name != "self" and p.name not in names
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names
    return None


class UnknownEnvKwargError(ValueError):
    """``marft_envs.make`` got a keyword argument the env does not take (``levle`` for ``level``)."""


def check_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """Raise :class:`UnknownEnvKwargError` (one line: the unknown name, the close match, every
    accepted name) when ``env_id`` does not take one of ``kwargs``; before anything is built."""
    import difflib

    if not kwargs:
        return
    try:
        accepted = env_parameters(env_id)
    except Exception:  # noqa: BLE001 - a module that fails to import: make() reports it (FailedToImport)
        return
    unknown = [k for k in kwargs if accepted is not None and k not in accepted]
    if unknown:
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownEnvKwargError(f"{env_id} takes no keyword argument {unknown[0]!r}{hint}; "
                                   f"it accepts: {', '.join(accepted)}")


def make(env_id: str, **kwargs: Any) -> pettingzoo.AECEnv:
    """Create a registered env; unknown ids get an error listing the registered ones, unknown
    keyword arguments one naming the close match and the accepted ones (:func:`check_kwargs`)."""
    if env_id not in _registered:
        load_plugins()  # a plugin installed after marft_envs was imported
    if env_id in _registered:
        check_kwargs(env_id, kwargs)
    try:
        return pettingzoo.make("aec", env_id, **kwargs)
    except FailedToImport:
        raise  # a registered env whose module fails to import: PettingZoo's message says which
    except PettingZooRegistryError as err:
        raise ValueError(
            f"unknown environment id {env_id!r}; registered marft envs: {', '.join(list_envs())}"
        ) from err


_register_builtins()
load_plugins()
