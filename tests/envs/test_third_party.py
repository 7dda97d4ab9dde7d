"""Third-party tools drive the envs: SuperSuit's vector env, Gymnasium's single-agent ``check_env``,
and the code of docs/environments.md's "Driving the envs from other tools" section, run as written
(its TextArena-style adapter included)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import marft_envs

DOC = Path(__file__).resolve().parents[2] / "docs" / "environments.md"
SECTION = "## Driving the envs from other tools"


def _doc_blocks() -> list[str]:
    """The python blocks of the doc's section, in order."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```python\n(.*?)```", text[start:end if end != -1 else None], flags=re.DOTALL)


def _run_block(code: str) -> dict:
    if "import supersuit" in code:
        pytest.importorskip("supersuit")
    namespace: dict = {"__name__": "doc_block"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's check_env warns that the view has no spec
        exec(compile(code, f"{DOC.name}:{SECTION}", "exec"), namespace)
    return namespace


def test_the_section_has_the_blocks_this_file_relies_on():
    blocks = _doc_blocks()
    assert len(blocks) == 5, len(blocks)
    assert any("class TextArenaStyle" in b for b in blocks) and any("check_env(gym_env)" in b for b in blocks)


@pytest.mark.parametrize("index", range(5))
def test_every_block_of_the_section_runs_as_written(index, capsys):
    namespace = _run_block(_doc_blocks()[index])
    if "vec" in namespace:  # the vector env stepped both copies, each on its own task
        assert len({env.task.task_id for env in namespace["vec"].envs}) == 2
        assert all(env.history for env in namespace["vec"].envs)
    if "TextArenaStyle" in namespace:
        assert set(namespace["rewards"]) == {0, 1} and namespace["done"]


def _solve(observation: str) -> str:
    """Arithmetic's level-1 prompt is "Compute a + b." (or - / *): answer it."""
    expression = re.search(r"Compute ([-\d+*/() ]+)\.", observation).group(1)
    return f"\\boxed{{{eval(expression)}}}"  # noqa: S307 - the env's own arithmetic


def test_the_textarena_style_adapter_plays_what_the_aec_env_plays():
    adapter = _run_block(next(b for b in _doc_blocks() if "class TextArenaStyle" in b))["TextArenaStyle"]
    game = adapter(marft_envs.make("marft/Arithmetic-v0", level=1, profile="dual", horizon=3))
    agents = {0: lambda observation: "Let me add them.", 1: _solve}
    with pytest.raises(ValueError, match="has 2 players"):
        game.reset(num_players=3)
    game.reset(num_players=2, seed=4)
    done, turns = False, 0
    while not done:
        player_id, observation = game.get_observation()
        done, _ = game.step(agents[player_id](observation))
        turns += 1
    rewards, game_info = game.close()
    assert turns == 2 and rewards == {0: 1.0, 1: 1.0}  # solved in the first round
    reference = marft_envs.make("marft/Arithmetic-v0", level=1, profile="dual", horizon=3)
    reference.reset(seed=4)
    for agent in reference.agent_iter():
        obs, _, term, trunc, _ = reference.last()
        reference.step(None if term or trunc else agents[reference.possible_agents.index(agent)](obs["text"]))
    assert game_info["transcript"] == reference.transcript()


# -- SuperSuit's vector env over copies of the env ---------------------------------------------------
@pytest.mark.parametrize("env_id,kwargs,replies", [
    ("marft/Arithmetic-v0", {"level": 1, "profile": "dual"}, (["I think 3.", "\\boxed{3}"], ["7", "\\boxed{7}"])),
    ("marft/Relay-v0", {}, (["5", "\\boxed{5}"], ["12", "\\boxed{12}"])),
])
def test_supersuit_vectorises_two_copies_each_playing_its_own_episode(env_id, kwargs, replies):
    supersuit = pytest.importorskip("supersuit")
    vec = supersuit.vectorize_aec_env_v0(marft_envs.make(env_id, **kwargs), 2)
    vec.reset(seed=10)
    assert vec.envs[0] is not vec.envs[1]
    for turn in range(4):  # two rounds: the first agent, then the second, in both copies
        vec.last()
        vec.step([replies[k][turn % 2] for k in range(2)])
    # Each copy is the env reset with seed 10 + k and fed its own replies.
    for k, env in enumerate(vec.envs):
        reference = marft_envs.make(env_id, **kwargs)
        reference.reset(seed=10 + k)
        for turn in range(4):
            if not reference.agents:
                break
            _, _, term, trunc, _ = reference.last()
            reference.step(None if term or trunc else replies[k][turn % 2])
        assert env.transcript() == reference.transcript()
    assert vec.envs[0].transcript() != vec.envs[1].transcript()


# -- the Gymnasium single-agent view ----------------------------------------------------------------
@pytest.mark.parametrize("env_id,kwargs", [
    ("marft/Arithmetic-v0", {"level": 1, "profile": "solo", "render_mode": "ansi"}),
    ("marft/HumanEval-v0", {"profile": "coder", "limit": 2}),
    ("marft/WebShop-v0", {"profile": "shopper"}),
])
def test_the_single_agent_view_passes_gymnasiums_check_env(env_id, kwargs):
    from gymnasium.utils.env_checker import check_env

    gym_env = marft_envs.single_agent(env_id, **kwargs)
    assert isinstance(gym_env, marft_envs.SingleAgentEnv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no spec / render_fps: nudges, not failures
        check_env(gym_env)


def test_the_single_agent_view_returns_the_aec_envs_episode():
    gym_env = marft_envs.single_agent("marft/Arithmetic-v0", level=1, profile="solo", horizon=3)
    obs, info = gym_env.reset(seed=2)
    assert info["messages"][-1]["content"] == obs["text"]
    obs, reward, terminated, truncated, info = gym_env.step("\\boxed{-1}")
    assert (reward, terminated, truncated) == (0.0, False, False) and "Earlier attempts" in obs["text"]
    obs, reward, terminated, truncated, info = gym_env.step(_solve(obs["text"]))
    assert (reward, terminated, truncated) == (1.0, True, False) and info["last_outcome"]["solved"]
    info["last_outcome"]["solved"] = "changed by the caller"  # the caller's copy, not the env's
    assert gym_env.env.infos["actor_0"]["last_outcome"]["solved"] is True
    with pytest.raises(RuntimeError, match="episode has ended .* call reset"):
        gym_env.step("\\boxed{1}")
    gym_env.reset()
    *_, truncated, _ = [gym_env.step("\\boxed{-1}") for _ in range(3)][-1]
    assert truncated  # three wrong rounds: out of rounds


def test_a_team_is_refused_in_one_line_naming_the_one_agent_profiles():
    with pytest.raises(ValueError) as caught:
        marft_envs.single_agent("marft/Arithmetic-v0", profile="dual")
    message = str(caught.value)
    assert "\n" not in message and "2 agents (reasoner_0, actor_0)" in message
    assert "profile 'dual'" in message and "solo" in message and "coder" in message
    with pytest.raises(TypeError, match="AEC env"):
        marft_envs.SingleAgentEnv(object())
