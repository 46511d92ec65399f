"""CJK text for FTS5 — moved to :mod:`qmdlab.terms` (the one definition of a term); kept as a
re-export for existing imports."""
from __future__ import annotations

from qmdlab.terms import CJK_CLASS, CJK_RUN, bigrams, has_cjk, space_cjk

__all__ = ["CJK_CLASS", "CJK_RUN", "bigrams", "has_cjk", "space_cjk"]
