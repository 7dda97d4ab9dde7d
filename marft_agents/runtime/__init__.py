"""The process runtime, below every layer that trains or samples: RNG seeding and forking
(``seeding``) and the process group of a data-parallel run (``distributed``). The sampling
engines, the learners, the collector, the evaluation and the run loop all use them; they import
nothing of marft_agents but each other."""
