"""marft-example-env: an environment package that plugs into marft by entry points only.

It ships one env (``example/VowelCount-v0``), one named profile (``planner_solver``) and one
named time-varying dependency (``plan_then_solo``); see ``pyproject.toml`` and
``marft_envs/ADDING_AN_ENV.md`` in marft.
"""
