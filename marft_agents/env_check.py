"""Checks of a config run before any model is loaded: against its environment and its files.

Some settings only the env can judge: an unknown kwarg (``levle``), ``level: 99``,
``horizon: 0``, a missing profile, an ``eval.env_kwargs`` the env rejects on top of
``env.kwargs``, a single-agent algorithm on a multi-agent profile. :func:`check_env_config`
builds the configured env once (cheap next to loading a model) and turns what it rejects into a
one-line :class:`~marft_agents.config.ConfigError`.

:func:`check_before_loading` is every such check in one place (the env, the scripted seats, the
``init_adapters`` path, and where the model is to load, whether it is there; for a team of
different models, ``models:`` / ``agents:`` against the env's agents, each model's folder and
chat template, each frozen agent's fixed adapter and the team's layout): ``marft train``,
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
    of the env and an importable function), the ``agents:`` ids (agents of the env), at least one
    agent left to train for a learner that trains (not all scripted or frozen), the team's layout
    (:func:`marft_agents.team_layout.team_layout`: a critic that can read its agents' tokens, an
    engine that can hold every model), each frozen agent's fixed ``adapter`` (a peft LoRA folder),
    the ``init_adapters`` path, every local model folder's chat template, and with ``model``
    whether each of the team's models can load on this machine
    (:func:`marft_agents.model.source.check_model_source`: no network wait, no torch).
    ``marft config`` passes ``model=False``: a config names a model for the machine it runs on.
    """
    from marft_agents.evaluation.scripted import ScriptedPolicyError, load_seats
    from marft_agents.learners.registry import learner_capabilities
    from marft_agents.team_layout import team_layout

    agent_ids = check_env_config(cfg)
    check_agent_ids(cfg, agent_ids)
    try:  # a bad seat or function path: one line, before the model loads
        load_seats(dict(cfg.scripted_seats), agent_ids)
    except ScriptedPolicyError as err:
        raise ConfigError(str(err)) from None
    if learner_capabilities(cfg.algorithm).trains:
        check_someone_trains(cfg, agent_ids)
    team_layout(cfg, agent_ids)  # the team's critic and engine refusals (one line each)
    for agent, spec in cfg.agents.items():
        problem = adapter_problem(spec.adapter) if spec.adapter is not None else None
        if problem:
            raise ConfigError(f"agents.{agent}.adapter {spec.adapter!r} {problem}")
    if cfg.init_adapters is not None:
        problem = checkpoint_problem(Path(cfg.init_adapters))
        if problem:
            raise ConfigError(f"init_adapters {cfg.init_adapters!r} {problem}")
    for where, settings in _team_model_settings(cfg):
        if model:
            from marft_agents.model.source import ModelNotFoundError, check_model_source

            try:
                check_model_source(settings)
            except ModelNotFoundError as err:
                raise (err if where == "model" else ModelNotFoundError(f"{where}.name_or_path: {err}")) from None
        problem = chat_template_problem(settings.name_or_path)
        if problem:
            raise ConfigError(f"{where}.name_or_path {settings.name_or_path!r}: {problem}")
    return agent_ids


def _team_model_settings(cfg: TrainConfig) -> list[tuple[str, Any]]:
    """(config key, ``ModelConfig``) of ``model:`` and each of ``models:``, the default first."""
    return [("model", cfg.model)] + [(f"models.{name}", settings) for name, settings in cfg.models.items()]


def check_agent_ids(cfg: TrainConfig, agent_ids: list[str]) -> None:
    """Every id ``agents:`` names is an agent of the env's profile (one line naming the close one)."""
    for agent in cfg.agents:
        if agent not in agent_ids:
            close = difflib.get_close_matches(agent, agent_ids, n=1, cutoff=0.5)
            raise ConfigError(f"agents.{agent}: {agent!r} is not an agent of {cfg.env.id} with env.kwargs "
                              f"{cfg.env.kwargs}; its agents: {', '.join(agent_ids)}"
                              + (f"; did you mean {close[0]!r}?" if close else ""))


def check_someone_trains(cfg: TrainConfig, agent_ids: list[str]) -> None:
    """A learner that trains keeps at least one agent neither scripted nor frozen (one line)."""
    scripted, frozen = set(cfg.scripted_seats), set(cfg.frozen_agents)
    if not set(agent_ids) <= scripted | frozen:
        return
    if not frozen:
        raise ConfigError(f"scripted_seats plays every agent ({', '.join(agent_ids)}): nothing is left to "
                          "train; leave at least one seat to the model")
    raise ConfigError(f"every agent is frozen (agents.<id>.trainable: false: {', '.join(sorted(frozen))})"
                      + (f" or scripted (scripted_seats: {', '.join(sorted(scripted))})" if scripted else "")
                      + f": nothing is left to train with {cfg.algorithm!r}; set trainable: true on one, or "
                      "algorithm: eval_only to only evaluate")


ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
"""The weight files of a peft adapter folder (``save_pretrained``), either of which loads."""


def adapter_problem(folder: str) -> str | None:
    """Why ``folder`` is no peft LoRA adapter a frozen agent can load (None when it is one):
    it must hold a readable ``adapter_config.json`` of a LoRA adapter and its weights. Read as
    JSON, without peft or torch (``marft_agents.model.adapters.spec_of_folder`` builds from it)."""
    import json

    path = Path(folder).expanduser()
    expected = "expected a peft LoRA adapter folder, e.g. a checkpoint's models/<model>/policy_<agent>/"
    if not path.is_dir():
        return f"{'is a file' if path.exists() else 'does not exist'}; {expected}"
    try:
        data = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"has no readable adapter_config.json ({type(err).__name__}); {expected}"
    kind = str(data.get("peft_type", "LORA")).upper() if isinstance(data, dict) else "not a JSON object"
    if kind != "LORA":
        return f"holds a {kind} adapter; marft loads LoRA adapters"
    if not any((path / name).is_file() for name in ADAPTER_WEIGHTS):
        return f"has adapter_config.json but no weights ({' or '.join(ADAPTER_WEIGHTS)}); {expected}"
    return None


def chat_template_problem(name_or_path: str) -> str | None:
    """Why the local model folder ``name_or_path`` has no chat template (None when it has one,
    or is no local folder: an alias or a Hub id is judged where it loads). Every prompt is
    rendered with the model's chat template; transformers keeps it in ``chat_template.jinja``,
    ``chat_template.json`` or the ``chat_template`` entry of ``tokenizer_config.json``, read
    here as files, without transformers."""
    import json

    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        return None
    if (path / "chat_template.jinja").is_file():
        return None
    for file_name in ("chat_template.json", "tokenizer_config.json"):
        try:
            data = json.loads((path / file_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("chat_template"):
            return None
    return ("its tokenizer has no chat template (no chat_template.jinja, and no chat_template in "
            "tokenizer_config.json); marft renders every prompt with the model's chat template: use a chat/instruct "
            "model, or add a template to the folder (tokenizer.chat_template = ...; tokenizer.save_pretrained(folder))")


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
