"""marft_envs: multi-agent text environments (PettingZoo AEC) with Flex-POMDP dependency hooks.

Quick use::

    import marft_envs
    env = marft_envs.make("marft/Arithmetic-v0", level=1, profile="dual")
    env.reset(seed=0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else "\\boxed{42}")

This package never imports torch or marft_agents: an environment user needs neither.
"""

from marft_envs.core.dependency import DEPENDENCY_ENTRY_POINT_GROUP, Dependency, RoundGraph, RoundRecord
from marft_envs.core.parallel import DependencyParallelEnv, aec_to_parallel
from marft_envs.core.roles import (PROFILE_ENTRY_POINT_GROUP, PROFILE_PATH_VAR, Profile, Role, available_profiles,
                                   load_profile)
from marft_envs.core.single_agent import SingleAgentEnv, single_agent
from marft_envs.core.task import RoundOutcome, Task, TaskSource
from marft_envs.core.template import ObservationTemplate
from marft_envs.core.text_env import TextTaskEnv
from marft_envs.envs.answer_env import FinalAnswerEnv
from marft_envs.registry import (ENTRY_POINT_GROUP, EnvSource, UnknownEnvKwargError, describe_env, env_class,
                                env_parameters, env_source, list_envs, make, register)
from marft_envs.tasks.paths import data_root

__version__ = "0.1.0"

__all__ = [
    "Dependency", "RoundGraph", "RoundRecord", "Profile", "Role", "available_profiles",
    "load_profile", "RoundOutcome", "Task", "TaskSource", "ObservationTemplate", "TextTaskEnv",
    "FinalAnswerEnv", "ENTRY_POINT_GROUP", "PROFILE_ENTRY_POINT_GROUP", "PROFILE_PATH_VAR",
    "DEPENDENCY_ENTRY_POINT_GROUP", "EnvSource", "describe_env", "env_class", "env_source", "list_envs", "make",
    "register", "data_root", "__version__", "DependencyParallelEnv", "aec_to_parallel", "SingleAgentEnv",
    "single_agent", "UnknownEnvKwargError", "env_parameters",
]
