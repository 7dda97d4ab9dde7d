"""Who does what in a team: per-agent statistics of evaluation transcripts.

    python -m baselines.transcripts untrained.jsonl trained.jsonl [swapped.jsonl ...]

Reads transcript files written by ``marft eval --transcripts PATH.jsonl`` (or a grid's
untrained / swapped runs) and prints, per file and per agent, what the agents did in their first
round, in the same columns for every file so that a trained team can be read against the
untrained one or against its swapped ablation:

* ``passes facts``: the utterance states every ``NAME = value`` fact of the agent's own
  observation (``A = 7``) within the first ``--channel`` characters (the width the next agent
  reads; 40 in Relay): did a holder pass on what only it knew?
* ``says answer``: the utterance contains the reference answer as a number (for a final
  answerer: right; for an earlier agent: it solved the problem itself);
* ``copies parent``: the utterance begins with the previous speaker's first 20 characters (a
  small model's failure: repeating its teammate instead of doing its part);
* ``chars``: the mean utterance length;
* ``verdict``: the utterance states a verdict on the previous speaker's answer (the first of the
  words CORRECT, WRONG or INCORRECT, any case, as SolveCheck reads a checker);
* ``verdict right``: of those, the verdict matches whether the previous speaker's utterance
  contains the reference answer (CORRECT when it does, WRONG / INCORRECT when it does not): a
  checker that judges, not one that always says CORRECT. ``-`` for the first speaker.

Then the team's solve rate. The facts and answers are read from the text: this fits tasks whose
facts are ``NAME = integer`` and whose answers are numbers (Arithmetic, Relay, SolveCheck); for
other tasks the columns that need them read 0.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FACT = re.compile(r"\b([A-Z])\s*=\s*(-?\d+)\b")
"""A stated fact, ``A = 7``."""
COPY_PREFIX = 20
"""Characters of the previous utterance that count as copying it."""
VERDICT = re.compile(r"\b(CORRECT|WRONG|INCORRECT)\b", re.IGNORECASE)
"""A checker's verdict word (SolveCheck's rule: the first one counts)."""


@dataclass
class AgentStats:
    """One agent's first-round behaviour over a transcript file."""

    agent: str
    turns: int
    passes_facts: float
    says_answer: float
    copies_parent: float
    mean_chars: float
    states_verdict: float | None = None
    """Share of turns with a verdict word (None: the agent speaks first, nobody to judge)."""
    verdict_right: float | None = None
    """Of the turns with a verdict, the share that matches the previous speaker's answer."""


def _number_in(text: str, answer: Any) -> bool:
    answer = str(answer).strip()
    # a whole number: not part of a longer one or a decimal ("122", "22.5"); a full stop may follow
    return bool(answer) and re.search(rf"(?<![\d.]){re.escape(answer)}(?!\.?\d)", text) is not None


def agent_stats(tasks: list[dict[str, Any]], channel: int = 40) -> list[AgentStats]:
    """Per agent, in speaking order, over every task's first round."""
    rows: dict[str, dict[str, list[float]]] = {}
    for task in tasks:
        previous = ""
        answer = task.get("answer", "")
        for turn in (t for t in task["transcript"] if t.get("round", 0) == 0):
            text, observation = turn["text"], turn.get("observation", "")
            own_facts = set(FACT.findall(observation.split("\n")[0])) if observation else set()
            stated = set(FACT.findall(text[:channel]))
            row = rows.setdefault(turn["agent"], {"facts": [], "answer": [], "copy": [], "chars": [],
                                                  "verdict": [], "right": []})
            row["facts"].append(float(bool(own_facts) and own_facts <= stated))
            row["answer"].append(float(_number_in(text, answer)))
            row["copy"].append(float(bool(previous) and text.strip().startswith(previous.strip()[:COPY_PREFIX])))
            row["chars"].append(float(len(text)))
            if previous:
                verdict = VERDICT.search(text)
                row["verdict"].append(float(verdict is not None))
                if verdict is not None:
                    says_correct = verdict.group(1).upper() == "CORRECT"
                    row["right"].append(float(says_correct == _number_in(previous, answer)))
            previous = text
    mean = lambda values: statistics.mean(values) if values else None  # noqa: E731
    return [AgentStats(agent, len(r["chars"]), statistics.mean(r["facts"]), statistics.mean(r["answer"]),
                       statistics.mean(r["copy"]), statistics.mean(r["chars"]), mean(r["verdict"]),
                       mean(r["right"])) for agent, r in rows.items()]


def load(path: Path) -> list[dict[str, Any]]:
    """A transcript file: one JSON object per problem."""
    tasks = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not tasks or "transcript" not in tasks[0]:
        raise ValueError(f"{path}: expected the JSON lines of `marft eval --transcripts` (one problem per line "
                         "with a 'transcript'), found none")
    return tasks


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}"


def table(files: list[Path], channel: int = 40) -> list[str]:
    """Markdown rows: per file and agent, the statistics in %, then the file's solve rate."""
    lines = ["| transcripts | agent | turns | passes facts % | says answer % | copies parent % | chars "
             "| verdict % | verdict right % | team solved % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for path in files:
        tasks = load(path)
        solved = 100 * statistics.mean(float(t["solved"]) for t in tasks)
        for s in agent_stats(tasks, channel):
            lines.append(f"| {Path(path).name} | {s.agent} | {s.turns} | {100 * s.passes_facts:.0f} "
                         f"| {100 * s.says_answer:.0f} | {100 * s.copies_parent:.0f} | {s.mean_chars:.0f} "
                         f"| {_percent(s.states_verdict)} | {_percent(s.verdict_right)} | {solved:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, help="transcript files (JSON lines)")
    parser.add_argument("--channel", type=int, default=40,
                        help="characters of an utterance the next agent reads (Relay's message_chars)")
    args = parser.parse_args(argv)
    try:
        print("\n".join(table(args.files, args.channel)))
    except (OSError, ValueError) as err:
        print(f"transcripts: error: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
