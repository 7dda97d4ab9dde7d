"""Evaluation: a policy on a fixed problem set (``problem_set``), scripted policies, ``marft score``
and the run records it writes."""
