"""Cooperative stop requests for model calls that run on a worker thread.

llama.cpp and torch calls cannot be interrupted from Python. A budgeted call
(:func:`qmdlab.pipeline.budget.call_with_budget`) therefore runs on a worker thread that carries a
*stop event*; when the budget is spent the event is set, and the model backends check it between
native steps (one llama.cpp decode, one rerank pair, one embedding batch, one generated token)
and leave with :class:`CallStopped`. A stopped call thus ends within one step instead of running
on in native code while the process exits and frees the model under it.

Code that runs outside such a worker (a direct call, a test) sees no stop event and is never
stopped.

>>> stop_requested()
False
>>> import threading
>>> ev = threading.Event(); ev.set()
>>> run_stoppable(ev, check)
Traceback (most recent call last):
...
qmdlab.cancel.CallStopped: the model call was stopped (its time budget ran out)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from qmdlab.errors import ModelError

_local = threading.local()


class CallStopped(ModelError):
    """A model call left early because its stop event was set."""


def stop_requested() -> bool:
    """Whether the current thread's model call has been asked to stop."""
    event = getattr(_local, "event", None)
    return event is not None and event.is_set()


def check() -> None:
    """Raise :class:`CallStopped` when the current thread's call has been asked to stop."""
    if stop_requested():
        raise CallStopped("the model call was stopped (its time budget ran out)")


def wait(seconds: float) -> None:
    """Pause ``seconds`` (a retry's backoff), leaving with :class:`CallStopped` as soon as the
    current thread's call is asked to stop.

    >>> wait(0.0)
    """
    event = getattr(_local, "event", None)
    if event is None:
        threading.Event().wait(seconds)
    elif event.wait(seconds):
        check()


def run_stoppable(event: threading.Event, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with ``event`` as this thread's stop event."""
    previous = getattr(_local, "event", None)
    _local.event = event
    try:
        return fn(*args, **kwargs)
    finally:
        _local.event = previous


__all__ = ["CallStopped", "stop_requested", "check", "wait", "run_stoppable"]
