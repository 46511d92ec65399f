"""A time budget for one model call: run it on a worker thread and stop waiting when it is spent.

The model stages (query embedding, expansion, rerank) call into llama.cpp or other model code
that Python cannot interrupt. :func:`call_with_budget` runs such a call on a daemon worker
thread and waits at most ``budget_s`` seconds; past that it raises :class:`StageTimeout` and
the pipeline goes on without the stage (fail-open, with a note in ``trace.notes``).

Caveats — the call is *abandoned*, not cancelled:

- the worker keeps running until the model returns, using CPU and memory meanwhile; its late
  result is discarded (a caching wrapper may still store it, so the next query can use it);
- while it runs, the model is *busy*: a further call to the same model (unwrapped through
  ``.inner``) is refused at once with :class:`StageBusy` rather than queued behind it or run
  concurrently on a llama.cpp context, which is not thread-safe (calls that return within
  their budget never mark a model busy: concurrent queries still share it as before);
- a call that never returns keeps its thread and leaves the model unusable in this process
  (a daemon thread does not block interpreter exit); restart the process to recover.

``budget_s`` of 0 (or ``None``) calls directly, in the caller's thread, without a bound.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

_busy: dict[int, threading.Thread] = {}
_busy_lock = threading.Lock()


class StageTimeout(Exception):
    """A model call did not return within its budget (it was abandoned, see the module notes)."""


class StageBusy(Exception):
    """The model is still running an earlier call that was abandoned after its budget."""


def model_key(model: Any) -> int:
    """Identity of the innermost model behind caching/memo wrappers (``.inner`` chain)."""
    seen = 0
    while getattr(model, "inner", None) is not None and seen < 10:
        model = model.inner
        seen += 1
    return id(model)


def call_with_budget(fn: Callable[..., Any], *args: Any, budget_s: float | None, model: Any = None,
                     peek: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, waiting at most ``budget_s`` seconds.

    Parameters
    ----------
    fn : callable
        The model call.
    budget_s : float or None
        Seconds to wait; ``0``/``None`` calls ``fn`` directly (no thread, no bound).
    model : object, optional
        The model ``fn`` runs on: while an abandoned call on it is still running, new calls
        raise :class:`StageBusy`.
    peek : callable, optional
        ``peek(*args, **kwargs)`` answers from a cache without calling the model, or returns
        ``None``. A cached answer is returned at once, in the caller's thread: starting a worker
        thread for it would cost more than the lookup (a repeated query makes a dozen such calls),
        and it needs no model, so it is returned even while the model is busy.

    Raises
    ------
    StageTimeout
        ``fn`` did not return in time; it keeps running on its (abandoned) thread.
    StageBusy
        ``model`` is still busy with an abandoned call.
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
    qmdlab.pipeline.budget.StageTimeout: no answer within 0.01 s (the call was abandoned and still runs)
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
                raise StageBusy("the model is still busy with an earlier call that ran past its budget")
            _busy.pop(key, None)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
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
        # only an *abandoned* call makes the model busy: calls that return in time (also
        # concurrent ones, which the model's own lock serialises) never block each other
        if key is not None:
            with _busy_lock:
                if worker.is_alive():
                    _busy[key] = worker
        raise StageTimeout(f"no answer within {budget_s:g} s (the call was abandoned and still runs)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def is_busy(model: Any) -> bool:
    """Whether an abandoned call on ``model`` is still running."""
    with _busy_lock:
        t = _busy.get(model_key(model))
        return t is not None and t.is_alive()


__all__ = ["StageTimeout", "StageBusy", "call_with_budget", "model_key", "is_busy"]
