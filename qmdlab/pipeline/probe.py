"""Lexical probe and the strong-signal skip (docs/design.md, pipeline step 1).

The BM25 list of the original query doubles as the probe: if its top normalised
score is ``>= strong_signal_min`` and leads the second by ``>= strong_signal_gap``
and no intent is given, expansion is skipped (vector search of the original query
still runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class SignalDecision(NamedTuple):
    """Outcome of the strong-signal test; ``message`` goes to the trace notes."""

    skip: bool
    top: float | None
    gap: float | None
    message: str


def strong_signal(
    scores: Sequence[float], *, min_score: float, min_gap: float, intent: str | None = None
) -> SignalDecision:
    """Whether the probe is decisive enough to skip expansion.

    ``scores`` are the probe's normalised BM25 scores, best first. With one hit
    the gap is the top score itself (the second is 0).

    >>> strong_signal([0.9, 0.7], min_score=0.85, min_gap=0.15).skip
    True
    >>> strong_signal([0.9, 0.8], min_score=0.85, min_gap=0.15).skip
    False
    >>> strong_signal([0.9], min_score=0.85, min_gap=0.15, intent="x").message
    'intent given: strong-signal skip disabled'
    """
    if not scores:
        return SignalDecision(False, None, None, "probe found nothing: expanding")
    top = float(scores[0])
    second = float(scores[1]) if len(scores) > 1 else 0.0
    gap = top - second
    if intent:
        return SignalDecision(False, top, gap, "intent given: strong-signal skip disabled")
    if top >= min_score and gap >= min_gap:
        return SignalDecision(
            True,
            top,
            gap,
            f"strong signal (top {top:.3f} >= {min_score}, gap {gap:.3f} >= {min_gap}): expansion skipped",
        )
    return SignalDecision(False, top, gap, f"no strong signal (top {top:.3f}, gap {gap:.3f}): expanding")


__all__ = ["SignalDecision", "strong_signal"]
