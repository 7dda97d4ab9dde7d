"""pass@k with the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, HumanEval paper).

For one problem with ``n`` samples of which ``c`` are correct,
``pass@k = 1 - C(n - c, k) / C(n, k)``: the probability that at least one of ``k`` samples drawn
without replacement from the ``n`` is correct. It is computed as a running product
``prod_{i=n-c+1}^{n} (1 - k / i)`` so large ``n`` cannot overflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem (``n`` samples, ``c`` correct)."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"n, c, k must be ints, got {n!r}, {c!r}, {k!r}")
    if n < 1 or not 0 <= c <= n or k < 1:
        raise ValueError(f"need n >= 1, 0 <= c <= n and k >= 1; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0  # every k-subset contains a correct sample
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean_pass_at_k(results: Iterable[Sequence[bool]], k: int) -> float:
    """Mean pass@k over problems; ``results[p]`` holds the correctness of problem ``p``'s samples."""
    values = [pass_at_k(len(r), sum(bool(x) for x in r), k) for r in results]
    if not values:
        raise ValueError("no problems given")
    return sum(values) / len(values)


__all__ = ["pass_at_k", "mean_pass_at_k"]
