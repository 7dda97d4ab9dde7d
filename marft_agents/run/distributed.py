"""The former home of the data-parallel objects, now :mod:`marft_agents.runtime.distributed`
(below the learners, which use them). Kept so that a learner plug-in written against the earlier
``ADDING_A_LEARNER.md`` (``data_parallel = marft_agents.run.distributed.SINGLE_PROCESS``) still
imports; new code imports from :mod:`marft_agents.runtime.distributed`."""

from __future__ import annotations

from marft_agents.runtime.distributed import SINGLE_PROCESS, DataParallel, SingleProcess

__all__ = ["SINGLE_PROCESS", "DataParallel", "SingleProcess"]
