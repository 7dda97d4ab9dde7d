"""Checks of a config run before any model is loaded: against its environment and its files.

Some settings only the env can judge: an unknown kwarg (``levle``), ``level: 99``,
``horizon: 0``, a missing profile, an ``eval.env_kwargs`` the env rejects on top of
``env.kwargs``, a single-agent algorithm on a multi-agent profile. :func:`check_env_config`
builds the configured env once (cheap next to loading a model) and turns what it rejects into a
one-line :class:`~marft_agents.config.ConfigError`.

:func:`check_before_loading` is every such check in one place (the env, the scripted seats, the
``init_adapters`` path, and where the model is to load, whether it is there): ``marft train``,
``marft eval``, ``marft config --config`` and ``trainer.train`` all call it, so a config that
``marft config`` passes does not stop at the start of a training run. :func:`resolve_checkpoint`
turns ``--checkpoint`` (``latest``, ``best``, ``none`` or a path) into a folder, or one line, before
the model loads (``marft eval`` and ``marft score``).
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from pathlib import Path

from marft_agents.cli_args import UsageError
from marft_agents.config import ConfigError, TrainConfig


def check_before_loading(cfg: TrainConfig, *, model: bool = True) -> list[str]:
    """Every check of ``cfg`` that needs no model; returns the env's agent ids.

    The env and ``eval.env_kwargs`` (:func:`check_env_config`), the scripted seats (each an agent
    of the env and an importable function, and not every seat of a learner that trains), the
    ``init_adapters`` path, and with ``model`` whether ``model.name_or_path`` can load on this
    machine (:func:`marft_agents.model.source.check_model_source`: no network wait, no torch).
    ``marft config`` passes ``model=False``: a config names a model for the machine it runs on.
    """
    from marft_agents.evaluation.scripted import ScriptedPolicyError, load_seats
    from marft_agents.learners.registry import learner_capabilities

    agent_ids = check_env_config(cfg)
    try:  # a bad seat or function path: one line, before the model loads
        load_seats(dict(cfg.scripted_seats), agent_ids)
    except ScriptedPolicyError as err:
        raise ConfigError(str(err)) from None
    if learner_capabilities(cfg.algorithm).trains and set(agent_ids) <= set(cfg.scripted_seats):
        raise ConfigError(f"scripted_seats plays every agent ({', '.join(agent_ids)}): nothing is left to "
                          "train; leave at least one seat to the model")
    if cfg.init_adapters is not None:
        problem = checkpoint_problem(Path(cfg.init_adapters))
        if problem:
            raise ConfigError(f"init_adapters {cfg.init_adapters!r} {problem}")
    if model:
        from marft_agents.model.source import check_model_source

        check_model_source(cfg.model)
    return agent_ids


def checkpoint_problem(path: Path) -> str | None:
    """Why ``path`` holds no adapters to load (None when it does): it must be a checkpoint folder
    (with ``adapters.pt``), an adapters file, or a run folder with checkpoints."""
    if (path / "adapters.pt").is_file() or path.is_file():
        return None
    if path.is_dir():
        from marft_agents.checkpoint_layout import latest_checkpoint

        if latest_checkpoint(path) is not None:
            return None
    what = "is a folder without adapters.pt or checkpoints" if path.is_dir() else "does not exist"
    return (f"{what}; expected a checkpoint folder (with adapters.pt), an adapters file or a run folder "
            "with checkpoints")


def resolve_checkpoint(output_dir: str, choice: str | None, flag: str = "--checkpoint") -> Path | None:
    """``choice`` as the adapters to load: None for ``none`` (the untrained policy), the latest
    checkpoint or ``best/`` of ``output_dir``, or a path (a run folder: its latest checkpoint);
    anything else is one :class:`UsageError` line, raised before the model loads (and before torch,
    for a path that does not exist)."""
    if choice in (None, "none"):
        return None
    problem = checkpoint_problem(Path(choice)) if choice not in ("latest", "best") else None
    if problem:  # before torch: a path that does not exist needs no checkpoint module
        raise UsageError(f"{flag} {choice!r} {problem} (or latest / best / none)")
    from marft_agents.checkpoint_layout import BEST_DIR, latest_checkpoint

    if choice == "latest":
        found = latest_checkpoint(output_dir)
        if found is None:
            raise UsageError(f"no checkpoint in {output_dir} (output_dir of the config) to evaluate; train "
                             f"first, pass {flag} PATH, or {flag} none for the untrained policy")
        return found
    if choice == "best":
        found = Path(output_dir) / BEST_DIR
        if not (found / "adapters.pt").is_file():
            raise UsageError(f"no {found}/adapters.pt: the run kept no best adapters (eval.keep_best off, or no "
                             f"evaluation ran); pass {flag} latest or a folder")
        return found
    path = Path(choice)
    if not (path / "adapters.pt").is_file() and not path.is_file():
        path = latest_checkpoint(path) or path  # a run folder: its latest checkpoint
    return path


def check_env_config(cfg: TrainConfig) -> list[str]:
    """Build the configured env once (and its evaluation variant) and return its agent ids.

    Catches what only the env can judge (an unknown kwarg such as ``levle``, ``level: 99``,
    ``horizon: 0``, a missing profile) as a :class:`ConfigError` before a model is loaded, and
    checks that a single-agent algorithm gets a one-role profile. Costs one env construction.
    """
    from marft_agents.learners.registry import learner_capabilities

    variants = [("env.kwargs", dict(cfg.env.kwargs))]
    if cfg.eval.env_kwargs:
        variants.append(("eval.env_kwargs", {**cfg.env.kwargs, **cfg.eval.env_kwargs}))
    agent_ids: list[str] = []
    for where, kwargs in variants:
        env = _make_env(cfg.env.id, kwargs, where)
        agent_ids = agent_ids or list(env.possible_agents)
        env.close()
    limit = learner_capabilities(cfg.algorithm).max_agents
    if limit is not None and len(agent_ids) > limit:
        kind = "single-agent PPO" if limit == 1 else f"a learner for at most {limit} agents"
        raise ConfigError(f"algorithm {cfg.algorithm!r} is {kind} but {cfg.env.id} with env.kwargs "
                          f"{cfg.env.kwargs} has {len(agent_ids)} agents {agent_ids}; set env.kwargs.profile "
                          "to a one-role profile (e.g. solo) or algorithm: mappo_action / mappo_token")
    return agent_ids


def _make_env(env_id: str, kwargs: dict[str, Any], where: str) -> Any:
    import marft_envs

    if env_id not in marft_envs.list_envs():
        close = difflib.get_close_matches(env_id, marft_envs.list_envs(), n=1)
        raise ConfigError(f"env.id {env_id!r} is not a registered env" + (f"; did you mean {close[0]!r}?" if close
                          else f"; registered: {', '.join(marft_envs.list_envs())}"))
    try:
        return marft_envs.make(env_id, **kwargs)
    except TypeError as err:
        if "unexpected keyword argument" not in str(err):
            raise  # a bug inside the env, not a bad kwarg
        bad = str(err).rsplit("argument", 1)[-1].strip(" '\"")
        accepted = _env_parameters(env_id)
        close = difflib.get_close_matches(bad, accepted, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"{where}: {env_id} takes no argument {bad!r}; {hint}"
                          f"it accepts: {', '.join(accepted)}") from None
    except (ValueError, KeyError, LookupError, OSError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise ConfigError(f"{where} {kwargs} rejected by {env_id}: {message}") from None


def _env_parameters(env_id: str) -> list[str]:
    """Keyword arguments the env's class accepts, following ``**kwargs`` up its base classes."""
    import pkgutil

    import pettingzoo

    entry = pettingzoo.spec("aec", env_id).entry_point
    if isinstance(entry, str):
        entry = pkgutil.resolve_name(entry)
    names: list[str] = []
    for klass in (entry.__mro__ if isinstance(entry, type) else [entry]):
        init = klass.__init__ if isinstance(klass, type) else klass
        if isinstance(klass, type) and "__init__" not in vars(klass):
            continue
        params = inspect.signature(init).parameters.values()
        names += [p.name for p in params if p.name != "self"
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names
