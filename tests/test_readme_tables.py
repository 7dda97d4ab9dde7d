"""The README's env, profile and learner tables are generated from the registries and current, and
its env example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leaderboards import readme_tables
from leaderboards.readme_tables import COMMAND, TABLES, blocks_in, with_tables

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def _block(text: str, name: str) -> str:
    start = re.search(rf"<!-- tables:{name}\b", text)
    return text[start.start():text.index(f"<!-- /tables:{name} -->")]


def test_the_readme_has_every_generated_table_once():
    assert sorted(blocks_in(README.read_text(encoding="utf-8"))) == sorted(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_readme_tables_are_current(name):
    text = README.read_text(encoding="utf-8")
    expected = with_tables(text)
    assert _block(text, name) == _block(expected, name), \
        f"README.md's '{name}' table is out of date with the registry: run `{COMMAND}`"


def test_the_tables_list_everything_marft_ships():
    from marft_agents.learners.registry import BUILTIN_LEARNERS
    from marft_envs.core.roles import PROFILE_DIR
    from marft_envs.registry import BUILTIN_ENVS

    envs, profiles, learners = (TABLES[name]() for name in ("envs", "profiles", "learners"))
    assert len(envs) == 2 + len(BUILTIN_ENVS) and all(f"| `{env_id}` |" in "\n".join(envs) for env_id, _, _ in BUILTIN_ENVS)
    shipped = sorted(path.stem for path in PROFILE_DIR.glob("*.yaml"))
    assert [row.split("|")[1].strip().strip("`") for row in profiles[2:]] == shipped
    assert [row.split("|")[1].strip().strip("`") for row in learners[2:]] == list(BUILTIN_LEARNERS)
    assert all(row.count("|") == envs[0].count("|") for row in envs)  # no stray "|" in a cell


def test_blocks_are_replaced_and_bad_blocks_refused():
    tables = {name: [f"| {name} |"] for name in TABLES}
    text = "a\n<!-- tables:envs -->\nold\n<!-- /tables:envs -->\nb\n"
    new = with_tables(text, tables)
    assert "old" not in new and "| envs |" in new and new.startswith("a\n") and new.endswith("<!-- /tables:envs -->\nb\n")
    assert with_tables(new, tables) == new
    with pytest.raises(ValueError, match="unknown generated tables"):
        with_tables("<!-- tables:nope -->\n<!-- /tables:nope -->\n", tables)
    with pytest.raises(ValueError, match="no closing line"):
        with_tables("<!-- tables:envs -->\nold\n", tables)


def test_check_mode_names_the_stale_block_and_the_command(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- tables:profiles -->\nstale\n<!-- /tables:profiles -->\n", encoding="utf-8")
    assert readme_tables.main([str(readme), "--check"]) == 1
    assert "profiles" in capsys.readouterr().out and "stale" in readme.read_text()
    assert readme_tables.main([str(readme)]) == 0 and "stale" not in readme.read_text()
    assert readme_tables.main([str(readme), "--check"]) == 0


def test_the_readme_env_example_runs(tmp_path):
    """The first ```python block of the README (the PettingZoo AEC loop) runs as written."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "agent_iter" in block)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert "[round 0] reasoner_0:" in done.stdout and "grade:" in done.stdout
