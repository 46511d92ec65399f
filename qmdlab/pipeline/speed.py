"""Measured model speed on this machine, and whether a model stage fits a query's deadline.

Every model call the pipeline makes for real (not answered from the LLM cache) is timed:
expansion in seconds per call, rerank in seconds per pair. :func:`observe` keeps a running mean per
model in this process; with a query deadline (``PipelineConfig.budget_s``, ``qmdlab query --budget``)
the means are also kept in ``$QMDLAB_HOME/speeds.json``, keyed by the model's fingerprint, so the
next process judges from the same figures. :func:`fits` is the judgement: a stage whose estimated
time exceeds what is left of the deadline is skipped before it starts (noted in the trace); a model
never measured yet runs, capped at what is left, and its time is measured for the next query.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

KINDS = {"expand": "s/call", "rerank": "s/pair"}
_means: dict[str, dict[str, tuple[float, int]]] = {}
_lock = threading.Lock()
_loaded: set[str] = set()


def model_name(model: Any) -> str:
    """The innermost model's fingerprint (or id) behind caching wrappers (``.inner`` chain)."""
    seen = 0
    while getattr(model, "inner", None) is not None and seen < 10:
        model = model.inner
        seen += 1
    return str(
        getattr(model, "fingerprint", None) or getattr(model, "model_id", None) or f"{type(model).__name__}@{id(model)}"
    )


def _path() -> Path:
    from qmdlab.paths import home

    return home() / "speeds.json"


def _load() -> None:
    path = _path()
    key = str(path)
    if key in _loaded:
        return
    _loaded.add(key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    for name, kinds in data.items() if isinstance(data, dict) else ():
        for kind, value in kinds.items() if isinstance(kinds, dict) else ():
            if kind in KINDS and isinstance(value, list) and len(value) == 2:
                _means.setdefault(name, {}).setdefault(kind, (float(value[0]), int(value[1])))


def _save() -> None:
    path = _path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({n: {k: list(v) for k, v in kinds.items()} for n, kinds in _means.items()}, indent=1),
            encoding="utf-8",
        )
        os.replace(tmp, path)
    except OSError:  # a read-only home: the figures stay in this process
        pass


def observe(model: Any, kind: str, seconds: float, units: int = 1, *, persist: bool = False) -> None:
    """Add a measured call: ``seconds`` for ``units`` calls (expand) or pairs (rerank)."""
    if units < 1 or seconds < 0 or kind not in KINDS:
        return
    name = model_name(model)
    with _lock:
        if persist:
            _load()
        mean, n = _means.get(name, {}).get(kind, (0.0, 0))
        per = seconds / units
        total = n + units
        _means.setdefault(name, {})[kind] = ((mean * n + per * units) / total, total)
        if persist:
            _save()


def estimate(model: Any, kind: str, *, persist: bool = False) -> float | None:
    """The running mean of ``kind`` (seconds per call or pair) for ``model``, ``None`` if never measured."""
    with _lock:
        if persist:
            _load()
        got = _means.get(model_name(model), {}).get(kind)
    return got[0] if got else None


class Fit(NamedTuple):
    """:func:`fits`' answer: ``ok``; ``estimate_s`` (None = not measured yet); ``cap_s``, the seconds
    the call may take (what is left of the deadline, at most the stage budget); ``note`` when skipped."""

    ok: bool
    estimate_s: float | None
    cap_s: float
    note: str


def fits(
    model: Any,
    kind: str,
    units: int,
    left_s: float,
    budget_s: float,
    stage_budget_s: float = 0.0,
    *,
    stage: str = "",
    persist: bool = True,
) -> Fit:
    """Whether ``units`` calls/pairs of ``model`` fit in ``left_s`` seconds of a ``budget_s`` deadline.

    >>> class M: fingerprint = "doc:m"
    >>> observe(M(), "rerank", 2.0, 4)
    >>> fits(M(), "rerank", 10, 3.0, 5.0, persist=False).note
    'rerank skipped before it started: 10 pairs at the measured 0.5 s/pair = 5.0 s > 3.0 s left of the 5 s budget (--budget)'
    >>> fits(M(), "rerank", 4, 3.0, 5.0, persist=False)[:3]
    (True, 2.0, 3.0)
    """
    cap = left_s if not stage_budget_s else min(left_s, stage_budget_s)
    per = estimate(model, kind, persist=persist)
    if per is None:
        return Fit(
            left_s > 0,
            None,
            max(cap, 0.0),
            ""
            if left_s > 0
            else f"{stage or kind} skipped before it started: the {budget_s:g} s budget is used up (--budget)",
        )
    need = per * units
    if need <= left_s:
        return Fit(True, need, cap, "")
    what = f"{units} pair{'s' if units != 1 else ''}" if kind == "rerank" else "1 call"
    return Fit(
        False,
        need,
        cap,
        f"{stage or kind} skipped before it started: {what} at the measured {per:.3g} "
        f"{KINDS[kind]} = {need:.1f} s > {max(left_s, 0.0):.1f} s left of the {budget_s:g} s "
        "budget (--budget)",
    )


def reset() -> None:
    """Forget every measurement of this process (tests)."""
    with _lock:
        _means.clear()
        _loaded.clear()


__all__ = ["KINDS", "Fit", "model_name", "observe", "estimate", "fits", "reset"]
