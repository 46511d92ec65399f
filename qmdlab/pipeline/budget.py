"""A time budget for one model call: run it on a worker thread, and stop it when the budget is spent.

The model stages (query embedding, expansion, rerank) call into llama.cpp or other model code
that Python cannot interrupt. :func:`call_with_budget` runs such a call on a worker thread and
waits at most ``budget_s`` seconds; past that it asks the call to stop (:mod:`qmdlab.cancel`: the
backends check between native steps, so the call ends within one decode, pair or batch) and
raises :class:`StageTimeout`; the pipeline goes on without the stage (fail-open, with a note in
``trace.notes``).

- The stopped call's late result is never used, and nothing partial is cached: a backend that
  sees the stop raises instead of returning.
- Until the stopped worker has returned, the model is *busy*: a further call to the same model
  (unwrapped through ``.inner``) is refused at once with :class:`StageBusy` rather than queued
  behind it or run concurrently on a llama.cpp context, which is not thread-safe (calls that
  return within their budget never mark a model busy).
- Process exit waits for stopped workers (:func:`drain`, also registered with :mod:`atexit`)
  before the interpreter frees the models, so no native code runs in a model being torn down.
  A worker that still has not returned after ``DRAIN_TIMEOUT_S`` ends the process with
  ``os._exit`` after flushing output, never by a signal.

``budget_s`` of 0 (or ``None``) calls directly, in the caller's thread, without a bound.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from qmdlab.cancel import run_stoppable

DRAIN_TIMEOUT_S = 120.0

_busy: dict[int, threading.Thread] = {}
_busy_lock = threading.Lock()
_stopped: list[threading.Thread] = []
_atexit_registered = False


class StageTimeout(Exception):
    """A model call did not return within its budget (it was asked to stop, see the module notes)."""


class StageBusy(Exception):
    """The model is still finishing an earlier call that was stopped after its budget."""


def model_key(model: Any) -> int:
    """Identity of the innermost model behind caching/memo wrappers (``.inner`` chain)."""
    seen = 0
    while getattr(model, "inner", None) is not None and seen < 10:
        model = model.inner
        seen += 1
    return id(model)


def call_with_budget(
    fn: Callable[..., Any],
    *args: Any,
    budget_s: float | None,
    model: Any = None,
    peek: Callable[..., Any] | None = None,
    **kwargs: Any,
) -> Any:
    """``fn(*args, **kwargs)``, waiting at most ``budget_s`` seconds.

    Parameters
    ----------
    fn : callable
        The model call.
    budget_s : float or None
        Seconds to wait; ``0``/``None`` calls ``fn`` directly (no thread, no bound).
    model : object, optional
        The model ``fn`` runs on: while a stopped call on it is still finishing, new calls
        raise :class:`StageBusy`.
    peek : callable, optional
        ``peek(*args, **kwargs)`` answers from a cache without calling the model, or returns
        ``None``. A cached answer is returned at once, in the caller's thread: starting a worker
        thread for it would cost more than the lookup (a repeated query makes a dozen such calls),
        and it needs no model, so it is returned even while the model is busy.

    Raises
    ------
    StageTimeout
        ``fn`` did not return in time; it has been asked to stop and ends on its own thread.
    StageBusy
        ``model`` is still finishing a stopped call.
    Exception
        Whatever ``fn`` raised, re-raised in the caller's thread.

    Examples
    --------
    >>> call_with_budget(sum, [1, 2, 3], budget_s=1.0)
    6
    >>> call_with_budget(time.sleep, 0.5, budget_s=0.01, peek=lambda seconds: "cached")
    'cached'
    >>> call_with_budget(time.sleep, 0.5, budget_s=0.01)
    Traceback (most recent call last):
    ...
    qmdlab.pipeline.budget.StageTimeout: no answer within 0.01 s (the call was stopped)
    """
    if peek is not None:
        hit = peek(*args, **kwargs)
        if hit is not None:
            return hit
    if not budget_s or budget_s <= 0:
        return fn(*args, **kwargs)
    key = model_key(model) if model is not None else None
    if key is not None:
        with _busy_lock:
            running = _busy.get(key)
            if running is not None and running.is_alive():
                raise StageBusy("the model is still busy finishing an earlier call that ran past its budget")
            _busy.pop(key, None)
    _prepare(model)
    box: dict[str, Any] = {}
    done = threading.Event()
    stop = threading.Event()

    def work() -> None:
        try:
            box["value"] = run_stoppable(stop, fn, *args, **kwargs)
        except BaseException as err:  # handed to the caller's thread
            box["error"] = err
        finally:
            done.set()
            if key is not None:
                with _busy_lock:
                    if _busy.get(key) is threading.current_thread():
                        del _busy[key]

    worker = threading.Thread(target=work, name="qmdlab-model-call", daemon=True)
    worker.start()
    if not done.wait(budget_s):
        stop.set()
        # only a *stopped* call makes the model busy: calls that return in time (also
        # concurrent ones, which the model's own lock serialises) never block each other
        with _busy_lock:
            if worker.is_alive():
                if key is not None:
                    _busy[key] = worker
                _stopped.append(worker)
                _register_drain()
        raise StageTimeout(f"no answer within {budget_s:g} s (the call was stopped)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _prepare(model: Any) -> None:
    """Run ``prepare()`` (a model load) of ``model`` and every ``.inner`` model in this thread.

    Loading is a fixed cost outside the budget, and llama-cpp-python silences a load by
    redirecting the process's stdout and stderr descriptors, which must not happen on a worker
    thread while this one prints.
    """
    seen = 0
    while model is not None and seen < 10:
        prepare = getattr(type(model), "prepare", None)
        if callable(prepare):
            model.prepare()
        model = getattr(model, "inner", None)
        seen += 1


def _register_drain() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_drain_at_exit)
        _atexit_registered = True


def drain(timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Wait for every stopped worker to return; ``True`` when none is left running.

    >>> drain(2.0)  # the sleep stopped above (a Python sleep cannot see the stop) ends within it
    True
    """
    deadline = time.monotonic() + timeout_s
    with _busy_lock:
        workers = list(_stopped)
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    with _busy_lock:
        _stopped[:] = [w for w in _stopped if w.is_alive()]
        return not _stopped


def exit_safely(code: int, timeout_s: float = DRAIN_TIMEOUT_S) -> int:
    """Drain stopped workers before the process exits with ``code``.

    A worker that is still inside native code after ``timeout_s`` would crash the interpreter's
    teardown (the model is freed under it), so the process then leaves at once with ``code``
    through ``os._exit``, output flushed, instead of ending by a signal.
    """
    if drain(timeout_s):
        return code
    print("qmdlab: a stopped model call did not return; exiting without freeing its model", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing more to say
            pass
    os._exit(code)


def _drain_at_exit() -> None:
    exit_safely(0)


def is_busy(model: Any) -> bool:
    """Whether a stopped call on ``model`` is still finishing."""
    with _busy_lock:
        t = _busy.get(model_key(model))
        return t is not None and t.is_alive()


__all__ = ["StageTimeout", "StageBusy", "call_with_budget", "model_key", "is_busy", "drain", "exit_safely"]
