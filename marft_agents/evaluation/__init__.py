"""Evaluation: a policy on a fixed problem set (``problem_set``), scripted policies (``scripted``)
and the run records (``records``) that ``marft score`` (:mod:`marft_agents.score`) writes."""
