"""``python -m baselines.transcripts``: per-agent statistics of evaluation transcripts."""

import json

from baselines.transcripts import agent_stats, main


def _task(holder_text, answerer_text, solved, answer="19"):
    return {"answer": answer, "solved": solved, "problem": "The values are A = 7, B = 12. Compute A + B.",
            "transcript": [
                {"agent": "holder_0", "round": 0, "observation": "You know A = 7. Tell your teammate.", "text": holder_text},
                {"agent": "answerer_0", "round": 0, "observation": "You know B = 12. Your teammate knows A.\n\nA = 7",
                 "text": answerer_text}]}


def test_stats_read_passing_answering_and_copying_per_agent():
    tasks = [_task("A = 7", "7 + 12 = 19. \\boxed{19}", True),
             _task("My value is 7", "My value is 7 and more", False),
             _task("x" * 50 + " A = 7", "119 or 19.5", False),  # the fact comes after the 40-character channel
             _task("A = 7", "The final answer is 7 + 12 = 19.", True)]
    holder, answerer = agent_stats(tasks, channel=40)
    assert (holder.agent, holder.turns) == ("holder_0", 4)
    assert holder.passes_facts == 2 / 4 and holder.says_answer == 0.0 and holder.copies_parent == 0.0
    assert answerer.says_answer == 2 / 4  # "119" and "19.5" do not contain the answer 19 as a number
    assert answerer.copies_parent == 1 / 4


def test_main_prints_a_row_per_file_and_agent_and_refuses_other_files(tmp_path, capsys):
    good = tmp_path / "trained.jsonl"
    good.write_text("".join(json.dumps(t) + "\n" for t in [_task("A = 7", "\\boxed{19}", True)]))
    assert main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "| trained.jsonl | holder_0 | 1 | 100 | 0 | 0 | 5 | - | - | 100 |" in out
    bad = tmp_path / "other.jsonl"
    bad.write_text('{"x": 1}\n')
    assert main([str(bad)]) == 2 and "expected the JSON lines" in capsys.readouterr().out


def _solve_check(solver_text, checker_text, answer="129"):
    return {"answer": answer, "solved": False, "problem": "Compute 85 + 44.", "transcript": [
        {"agent": "solver_0", "round": 0, "observation": "Compute 85 + 44.", "text": solver_text},
        {"agent": "checker_0", "round": 0, "observation": "...", "text": checker_text},
        {"agent": "solver_0", "round": 1, "observation": "...", "text": "ignored: only the first round counts"}]}


def test_verdicts_are_read_and_judged_against_the_solvers_answer():
    tasks = [_solve_check("85 + 44 = 129", "CORRECT"),                 # right verdict
             _solve_check("85 + 44 = 16", "correct, the answer is 16"),  # wrong: the solver was wrong
             _solve_check("85 + 44 = 16", "Incorrect. \\boxed{129}"),   # right: INCORRECT is WRONG
             _solve_check("85 + 44 = 129", "The sum is 129.")]          # no verdict word
    solver, checker = agent_stats(tasks)
    assert solver.states_verdict is None and solver.verdict_right is None  # nobody spoke before it
    assert checker.states_verdict == 3 / 4 and checker.verdict_right == 2 / 3
