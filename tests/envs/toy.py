"""A tiny deterministic env for testing the core: the answer to task i is the number ``i * 7``."""

from __future__ import annotations

from marft_envs import RoundOutcome, Task, TextTaskEnv


class NumberTasks:
    def __init__(self, n: int = 50):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Task:
        return Task(task_id=f"toy/{index}", prompt=f"What is {index} * 7?", answer=str(index * 7))


class ToyEnv(TextTaskEnv):
    metadata = {"name": "toy_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(self, n: int = 50, **kwargs):
        super().__init__(NumberTasks(n), **kwargs)

    def grade_round(self, task, outputs, round_index):
        answer = self.graded_output(outputs).strip()
        correct = answer == task.answer
        return RoundOutcome(
            team_reward=1.0 if correct else 0.0,
            solved=correct,
            feedback="" if correct else f"{answer[:20]!r} is wrong.",
            agent_rewards={a: (0.1 if t else 0.0) for a, t in outputs.items()},
            info={"answer": answer},
        )
