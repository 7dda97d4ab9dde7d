"""What this CPU's torch kernels can do, found by trying, with one fallback switch.

Fast paths that exist only on some CPUs (oneDNN's prepacked bfloat16 products need AVX-512
BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only EPYC or laptop core has neither) are chosen here by
running the operation once on a tiny input and checking it against the plain operation, not by
reading CPU flags: the flags say what the core has, not what this torch build dispatches to (an
``ONEDNN_MAX_CPU_ISA`` cap, an Arm build, a build without oneDNN). A failed probe logs one line
and the plain path runs: same arithmetic, slower.

``MARFT_PLAIN_KERNELS=1`` (or :func:`plain_kernels` in tests) turns every probed fast path off,
so a machine that has them still exercises the fallback; the suite does so in
``tests/agents/test_cpu_support.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

PLAIN_KERNELS_VARIABLE = "MARFT_PLAIN_KERNELS"
"""Environment variable: "1" makes every probe below answer "unsupported"."""

_forced_plain = False
_probed: dict[str, bool] = {}


def _plain_forced() -> bool:
    return _forced_plain or os.environ.get(PLAIN_KERNELS_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def plain_kernels() -> Iterator[None]:
    """Within the block every probe answers "unsupported" (the fallback path runs). Objects built
    before the block keep the path they chose, as in a real run."""
    global _forced_plain
    before = _forced_plain
    _forced_plain = True
    try:
        yield
    finally:
        _forced_plain = before


def _try_onednn_bf16_prepack() -> str | None:
    """None when a prepacked bf16 product runs and equals ``F.linear`` bit for bit, else why not."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return "this torch build has no oneDNN linear prepacking"
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 16, generator=gen).to(torch.bfloat16)  # [out, in]
    x = torch.randn(4, 16, generator=gen).to(torch.bfloat16)  # [rows, in]
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 4)
        y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")  # [rows, out]
    except RuntimeError as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    if not torch.equal(y, F.linear(x, weight)):
        return "its product differs from F.linear"
    return None


def onednn_bf16_prepack() -> bool:
    """Whether bfloat16 weights can be multiplied through oneDNN-prepacked copies on this CPU
    (probed once per process; see the module docstring)."""
    if _plain_forced():
        return False
    if "onednn_bf16_prepack" not in _probed:
        why_not = _try_onednn_bf16_prepack()
        if why_not is not None:
            log.warning("bf16 weight prepacking unavailable on this CPU (%s); bf16 products use F.linear", why_not)
        _probed["onednn_bf16_prepack"] = why_not is None
    return _probed["onednn_bf16_prepack"]
