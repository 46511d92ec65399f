"""The reranker's probability: P(yes) from next-token logits, one formula, one function."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def p_yes(logits: np.ndarray, yes_ids: Sequence[int], no_ids: Sequence[int]) -> float:
    """P(yes) = softmax over the two logit groups at the answer position.

    .. math:: P(\\text{yes}) = \\frac{\\sum_{i \\in Y} e^{z_i}}{\\sum_{i \\in Y} e^{z_i} + \\sum_{j \\in N} e^{z_j}}

    With one token per group this is exactly Qwen3-Reranker's
    ``softmax([z_no, z_yes])[1]``; groups let a generic model's ``yes``/``Yes``/`` yes`` variants
    all count. Every other vocabulary entry is ignored (the softmax is renormalised over the two
    groups), and the result is a single softmax, never a sigmoid of an already-normalised score.
    Computed with log-sum-exp, so huge logits do not overflow.

    >>> round(p_yes(np.array([2.0, 0.0, 9.0]), [0], [1]), 12)   # e^2 / (e^2 + e^0)
    0.880797077978
    >>> p_yes(np.log(np.array([1.0, 3.0, 4.0])), [0, 1], [2])    # (1 + 3) / (1 + 3 + 4)
    0.5
    >>> p_yes(np.array([1000.0, 0.0]), [0], [1])
    1.0
    """
    z = np.asarray(logits, dtype=np.float64)
    if not len(yes_ids) or not len(no_ids):
        raise ValueError("p_yes needs at least one 'yes' and one 'no' token id")
    y, n = z[list(yes_ids)], z[list(no_ids)]
    m = max(y.max(), n.max())
    sy, sn = np.exp(y - m).sum(), np.exp(n - m).sum()
    return float(sy / (sy + sn))
