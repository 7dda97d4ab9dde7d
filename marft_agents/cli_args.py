"""Command-line pieces shared by the modules that define ``marft`` subcommands (``cli.py`` and
``score.py``): the user-error type and the parsing of ``--set section.key=value`` overrides.

Torch-free, like ``cli.py``'s import time: ``marft envs`` and a scripted ``marft score`` run
without the ``agents`` extra.
"""

from __future__ import annotations

from typing import Any

import yaml


class UsageError(Exception):
    """A command-line mistake; the message says how to fix it."""


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set`` values (``["schedule.num_updates=5", ...]``) as ``{dotted key: value}``, each value
    parsed as YAML; a pair without ``=`` or with invalid YAML raises :class:`UsageError`."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--set expects section.key=value (e.g. schedule.num_updates=5), got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise UsageError(f"--set {pair!r}: the value is not valid YAML; quote it, e.g. "
                             f"--set '{key.strip()}=\"{value}\"'") from None
    return out
