"""Checks of a config against its environment, run before any model is loaded.

Some settings only the env can judge: an unknown kwarg (``levle``), ``level: 99``,
``horizon: 0``, a missing profile, a single-agent algorithm on a multi-agent profile.
:func:`check_env_config` builds the configured env once (cheap next to loading a model) and turns
what it rejects into a one-line :class:`~marft_agents.config.ConfigError`; ``marft train`` /
``marft eval`` and ``trainer.train`` call it right after loading the config.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from marft_agents.config import ConfigError, TrainConfig


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
