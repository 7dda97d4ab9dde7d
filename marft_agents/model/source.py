"""Where a model name points, found without torch and without waiting on the network.

``model.name_or_path`` is an alias of a packaged model, a local folder, or a Hugging Face Hub id
(:mod:`marft_agents.model.loading`). :func:`check_model_source` says at once, in one line, when it
cannot load here: a folder that does not exist or has no ``config.json``, a near miss of an
alias, or a Hub id that is neither in the local Hugging Face cache nor reachable (an offline
variable set, or no TCP connection to the Hub within :data:`HUB_PROBE_TIMEOUT_S`). ``marft
train`` / ``eval`` / ``score`` run it before torch is imported, so a bad name costs about a second
instead of the imports, the dtype probe and transformers' retries.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from marft_agents.settings.model import PACKAGED_GGUF, ModelConfig, alias_typo

HUB_PROBE_TIMEOUT_S = 1.0
"""How long the check "is the Hugging Face Hub reachable?" waits (name lookup plus connect)."""
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


class ModelNotFoundError(FileNotFoundError):
    """The configured model name is no alias, no local folder and no reachable Hub model."""


def looks_like_local_path(name: str) -> bool:
    return (name.startswith(("/", "./", "../", "~", "\\")) or os.path.isabs(name)
            or (len(name) > 1 and name[1] == ":"))


def offline_variable_set() -> bool:
    """Whether ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` asks for no network."""
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on") for var in OFFLINE_VARIABLES)


def hub_offline() -> bool:
    """True when the Hugging Face Hub cannot be used: an offline variable is set, or no TCP
    connection to it opens within ``HUB_PROBE_TIMEOUT_S`` (never retried)."""
    if offline_variable_set():
        return True
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme != "http" else 80)
    return not _reachable(host, port, HUB_PROBE_TIMEOUT_S)


def _reachable(host: str, port: int, timeout_s: float) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout_s`` in total.

    The attempt runs in a daemon thread because the name lookup (``getaddrinfo``) ignores socket
    timeouts: a resolver without a route can block for many seconds. A late attempt is abandoned
    (a daemon thread does not hold up the interpreter's exit).
    """
    opened = threading.Event()

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                opened.set()
        except OSError:
            pass

    worker = threading.Thread(target=connect, name="marft-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return opened.is_set()


def in_hub_cache(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json`` (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id the Hub would not accept (HFValidationError), or no huggingface_hub
        return False


def local_problem(name: str) -> str | None:
    """Why ``name`` cannot be a model without asking the Hub (None when it may be one): a folder
    that is missing or not in Hugging Face format, or a near miss of an alias."""
    if name in PACKAGED_GGUF:
        return None
    path = Path(name).expanduser()
    if path.exists():
        return None if (path / "config.json").is_file() else (
            f"{path} exists but has no config.json: expected a Hugging Face model folder (save_pretrained output)")
    if looks_like_local_path(name) or name.count("/") > 1:
        return (f"model folder {name!r} does not exist. Give an existing local folder, a Hugging Face Hub id such "
                f"as 'HuggingFaceTB/SmolLM2-135M-Instruct', or one of the aliases {sorted(PACKAGED_GGUF)}")
    close = alias_typo(name)
    if close:
        return (f"unknown model {name!r}: did you mean the alias {close!r}? (aliases: "
                f"{', '.join(sorted(PACKAGED_GGUF))}; or a local folder or Hub id)")
    return None


def check_model_source(cfg: ModelConfig) -> None:
    """Raise :class:`ModelNotFoundError` (one line) when ``cfg.name_or_path`` cannot load here; a
    Hub id is looked up in the local cache first, then the Hub is probed (at most a second)."""
    name = cfg.name_or_path
    problem = local_problem(name)
    if problem:
        raise ModelNotFoundError(problem)
    if name in PACKAGED_GGUF or Path(name).expanduser().exists() or in_hub_cache(name) or not hub_offline():
        return
    why = "HF_HUB_OFFLINE is set" if offline_variable_set() else \
        f"the Hugging Face Hub did not answer within {HUB_PROBE_TIMEOUT_S:g} s"
    raise ModelNotFoundError(
        f"model {name!r} is neither an alias ({', '.join(sorted(PACKAGED_GGUF))}), a local folder, nor in the local "
        f"Hugging Face cache, and {why}; fix the name, give a folder with the weights, or download it where the "
        "Hub is reachable")
