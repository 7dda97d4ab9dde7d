"""Every relative link of the README and the guides resolves: the file exists, and a ``#anchor``
into a markdown page names one of its headings; a page named in prose (``docs/foo.md``) exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted({REPO / "README.md", *REPO.glob("docs/*.md"), REPO / "marft_envs" / "ADDING_AN_ENV.md",
                REPO / "marft_agents" / "ADDING_A_LEARNER.md"})
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PROSE_PATH = re.compile(r"(?<![\w/.-])((?:docs|marft_envs|marft_agents|leaderboards|baselines|examples)/[\w./-]*\w\.md)\b")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of ``page``: lower case, punctuation dropped, spaces as hyphens."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def _links(page: Path) -> list[tuple[int, str]]:
    out, fenced = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            out += [(number, target) for target in LINK.findall(line)]
    return out


def broken_links(page: Path) -> list[str]:
    problems = []
    for number, target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{page.relative_to(REPO)}:{number}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor.lower() not in _anchors(resolved):
            problems.append(f"{page.relative_to(REPO)}:{number}: {target} (no heading #{anchor})")
    text = page.read_text(encoding="utf-8")
    for match in PROSE_PATH.finditer(text):
        if not (REPO / match.group(1)).exists():
            number = text.count("\n", 0, match.start()) + 1
            problems.append(f"{page.relative_to(REPO)}:{number}: {match.group(1)} (named in prose, no such file)")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_missing_page_or_heading_is_reported(tmp_path):
    page = REPO / "docs" / "_planted_link_test.md"
    try:
        page.write_text("# Planted\n\nSee [gone](missing.md), [here](#planted), [no](#nowhere) and the pilot "
                        "(docs/cooperative_tasks.md).\n", encoding="utf-8")
        problems = broken_links(page)
    finally:
        page.unlink()
    assert len(problems) == 3, problems
    assert "missing.md (no such file)" in problems[0] and "#nowhere" in problems[1]
    assert "docs/cooperative_tasks.md (named in prose" in problems[2]
