"""Run work in a child process and turn a death by signal into one clear message.

Native code (llama.cpp above all) can kill the Python process outright: an illegal instruction
(``SIGILL``) from a llama.cpp build made for another CPU, a segfault, the out-of-memory killer.
Run in-process, such a death ends a long job with no message at all. Run in a child, the parent
survives and can say what died, of which signal, what that usually means and how to fix it.

Two entry points:

- :func:`run_child` runs a command (``argv``); its output goes to the terminal or is captured.
- :func:`call_in_child` calls ``"package.module:function"`` with JSON-able arguments in a fresh
  interpreter and returns its JSON-able result.

Both raise :class:`ChildDied` (a :class:`~qmdlab.errors.QmdlabError`, so the CLI prints it as one
``error:`` block and exits 1) when the child is killed by a signal; :func:`call_in_child` raises
:class:`ChildFailed` when the function raised. The child enables :mod:`faulthandler`, so a native
crash also leaves the Python stack of the crashing call on its stderr, and sets its core-file
limit to zero (a crash costs no core dump).

Examples
--------
>>> import signal
>>> print(death_message("the demo's LLM tier", -signal.SIGKILL).splitlines()[0])
error: the demo's LLM tier died from signal SIGKILL (killed).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

from qmdlab.errors import QmdlabError

#: What a death by each signal usually means here.
CAUSES = {
    "SIGILL": (
        "this usually means the llama.cpp build (libggml-cpu) uses CPU instructions this machine "
        "does not allow: a build tuned for another CPU (-march=native elsewhere), or AVX-512/AMX "
        "code on a machine that advertises those features but does not grant them to the process."
    ),
    "SIGSEGV": "native code (llama.cpp, torch or another C extension) crashed on a bad memory access.",
    "SIGBUS": "native code hit a bus error: often a model file truncated or changed while memory-mapped.",
    "SIGABRT": "native code aborted (a failed assertion in llama.cpp/ggml, or an uncaught C++ exception).",
    "SIGFPE": "native code hit an arithmetic fault (integer division by zero).",
    "SIGKILL": (
        "the process was killed: usually by the kernel's out-of-memory killer (see `dmesg`), "
        "else by a timeout or another process."
    ),
    "SIGTERM": "the process was asked to stop from outside.",
    "SIGINT": "the process was interrupted (Ctrl-C).",
}
#: The fix printed after a death by signal when the caller gives none.
DEFAULT_HINT = (
    "run `qmdlab doctor` (in the repo: `.venv/bin/qmdlab doctor`): it checks the llama.cpp\n"
    "  build and each model on this machine and prints the rebuild command for this CPU."
)
_DESCRIPTIONS = {
    "SIGILL": "illegal instruction",
    "SIGSEGV": "segmentation fault",
    "SIGBUS": "bus error",
    "SIGABRT": "aborted",
    "SIGFPE": "floating-point exception",
    "SIGKILL": "killed",
    "SIGTERM": "terminated",
    "SIGINT": "interrupted",
}
_RESULT_ENV = "QMDLAB_CHILD_IO"


class ChildResult(NamedTuple):
    """How a child process ended.

    Attributes
    ----------
    returncode : int
        As :mod:`subprocess` reports it: negative ``-N`` for a death by signal ``N``.
    signal : str or None
        The signal's name (``"SIGILL"``) when the child died by a signal, else ``None``.
    stdout, stderr : str
        Captured output (empty when not captured).
    seconds : float
        Wall time of the child.
    """

    returncode: int
    signal: Optional[str]
    stdout: str
    stderr: str
    seconds: float


class ChildDied(QmdlabError):
    """A child process was killed by a signal; ``str(err)`` is the full user-facing message."""

    def __init__(self, message: str, *, what: str, signal_name: str, returncode: int):
        super().__init__(message)
        self.what, self.signal_name, self.returncode = what, signal_name, returncode


class ChildFailed(QmdlabError):
    """The function run by :func:`call_in_child` raised, or the child exited without a result."""

    def __init__(self, message: str, *, kind: str = "", returncode: int = 1):
        super().__init__(message)
        self.kind, self.returncode = kind, returncode


def signal_name(returncode: int) -> Optional[str]:
    """The signal that ended a child, from its return code (``-N``, or ``128+N`` from a shell).

    >>> signal_name(-4), signal_name(132), signal_name(0), signal_name(1), signal_name(-999)
    ('SIGILL', 'SIGILL', None, None, 'signal 999')
    """
    if returncode < 0:
        num = -returncode
    elif 128 < returncode < 128 + 65:
        num = returncode - 128
    else:
        return None
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def death_message(what: str, returncode: int, *, hint: Optional[str] = None, output_tail: str = "") -> str:
    """The message for a child ``what`` that ended with ``returncode`` by a signal.

    Parameters
    ----------
    what : str
        What the child was doing, e.g. ``"the expand model pkg:qwen… (smoke check)"``.
    returncode : int
        ``-N`` (or a shell's ``128+N``).
    hint : str, optional
        The fix (may span lines); default :data:`DEFAULT_HINT`.
    output_tail : str
        The last lines of the child's stderr, shown when captured (faulthandler's stack).

    >>> m = death_message("the expand model pkg:q", -4, hint="make rebuild-llama")
    >>> print(m)  # doctest: +NORMALIZE_WHITESPACE
    error: the expand model pkg:q died from signal SIGILL (illegal instruction).
    cause: this usually means the llama.cpp build (libggml-cpu) uses CPU instructions this machine
      does not allow: a build tuned for another CPU (-march=native elsewhere), or AVX-512/AMX code on
      a machine that advertises those features but does not grant them to the process.
    fix: make rebuild-llama
    """
    import textwrap

    name = signal_name(returncode) or f"exit status {returncode}"
    desc = _DESCRIPTIONS.get(name)
    head = f"error: {what} died from signal {name}" + (f" ({desc})." if desc else ".")
    if returncode > 0:
        head += f" (exit status {returncode}: a shell reports a death by {name} this way)"
    cause = CAUSES.get(name, "the process was ended by a signal.")
    lines = [head, textwrap.fill(cause, 100, initial_indent="cause: ", subsequent_indent="  ")]
    fix = (hint or DEFAULT_HINT).splitlines()
    lines.append("fix: " + fix[0])
    lines.extend(fix[1:])
    tail = [ln for ln in output_tail.strip().splitlines() if ln.strip()][-12:]
    if tail:
        lines.append("last output of the child process:")
        lines.extend("  | " + ln for ln in tail)
    return "\n".join(lines)


def run_child(
    argv: Sequence[str],
    *,
    what: str,
    hint: Optional[str] = None,
    capture: bool = False,
    timeout: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[os.PathLike] = None,
    check_signal: bool = True,
) -> ChildResult:
    """Run ``argv`` in a child process; raise :class:`ChildDied` if a signal kills it.

    Parameters
    ----------
    argv : sequence of str
        The command.
    what : str
        What the child does, for the message (``"the demo's LLM tier"``).
    hint : str, optional
        The fix printed after a death by signal; default :data:`DEFAULT_HINT`.
    capture : bool
        Capture stdout/stderr (else they go to this process's terminal, streaming).
    timeout : float, optional
        Seconds before the child is killed (:class:`ChildDied` with ``SIGKILL`` then).
    env : mapping, optional
        Extra environment variables for the child (added to this process's environment).
    check_signal : bool
        ``False`` returns the :class:`ChildResult` of a death by signal instead of raising.

    Returns
    -------
    ChildResult
        Also for a nonzero exit status that is not a signal: the caller decides what it means.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            list(argv), capture_output=capture, text=True, timeout=timeout, env=full_env, cwd=cwd, errors="replace"
        )
        rc, out, err = proc.returncode, proc.stdout or "", proc.stderr or ""
    except subprocess.TimeoutExpired as exc:  # subprocess.run killed it (SIGKILL)
        rc = -int(signal.SIGKILL)
        out = _text(exc.stdout)
        err = _text(exc.stderr) + f"\n(qmdlab: killed after the {timeout:g} s timeout)"
    res = ChildResult(rc, signal_name(rc) if rc < 0 else None, out, err, time.perf_counter() - t0)
    if res.signal and check_signal:
        raise ChildDied(
            death_message(what, rc, hint=hint, output_tail=err if capture else ""),
            what=what,
            signal_name=res.signal,
            returncode=rc,
        )
    return res


def _text(data: Any) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def call_in_child(
    target: str,
    *args: Any,
    what: str,
    hint: Optional[str] = None,
    timeout: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
    capture: bool = True,
    **kwargs: Any,
) -> Any:
    """Call ``target(*args, **kwargs)`` in a fresh Python process and return its result.

    Parameters
    ----------
    target : str
        ``"package.module:function"``; the function must be importable in a fresh interpreter.
    *args, **kwargs
        JSON-serialisable arguments.
    what, hint, timeout, env, capture
        As for :func:`run_child`.

    Returns
    -------
    object
        The function's JSON-serialisable return value.

    Raises
    ------
    ChildDied
        The child was killed by a signal.
    ChildFailed
        The function raised (message: the exception's text; a :class:`QmdlabError` keeps its own
        message), or the child exited without writing a result.
    """
    with tempfile.TemporaryDirectory(prefix="qmdlab-child-") as tmp:
        io_in, io_out = Path(tmp) / "call.json", Path(tmp) / "result.json"
        io_in.write_text(json.dumps({"target": target, "args": list(args), "kwargs": kwargs}), encoding="utf-8")
        res = run_child(
            [sys.executable, "-m", "qmdlab.subproc"],
            what=what,
            hint=hint,
            capture=capture,
            timeout=timeout,
            env={**(env or {}), _RESULT_ENV: f"{io_in}{os.pathsep}{io_out}"},
        )
        if io_out.is_file():
            data = json.loads(io_out.read_text(encoding="utf-8"))
            if "error" in data:
                raise ChildFailed(data["error"], kind=data.get("kind", ""), returncode=res.returncode)
            return data["value"]
    tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-12:])
    raise ChildFailed(
        f"{what} exited with status {res.returncode} and no result" + (f"; its last output:\n{tail}" if tail else ""),
        returncode=res.returncode,
    )


def _child_main() -> int:
    """Entry point of :func:`call_in_child`'s child (``python -m qmdlab.subproc``)."""
    import faulthandler
    import traceback

    faulthandler.enable(all_threads=True)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: keep the default
        pass
    spec = os.environ.get(_RESULT_ENV, "")
    if os.pathsep not in spec:
        print(f"qmdlab.subproc: run through qmdlab.subproc.call_in_child (${_RESULT_ENV} is not set)", file=sys.stderr)
        return 2
    io_in, io_out = (Path(p) for p in spec.split(os.pathsep, 1))
    call = json.loads(io_in.read_text(encoding="utf-8"))
    try:
        mod_name, _, fn_name = call["target"].partition(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        data = {"value": fn(*call["args"], **call["kwargs"])}
        rc = 0
    except QmdlabError as err:
        data, rc = {"error": str(err), "kind": type(err).__name__}, 1
    except Exception as err:  # noqa: BLE001 - reported to the parent with its traceback
        data = {"error": f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=8)}", "kind": type(err).__name__}
        rc = 1
    tmp = io_out.with_name(io_out.name + ".tmp")
    tmp.write_text(json.dumps(data, default=str), encoding="utf-8")
    tmp.replace(io_out)
    return rc


if __name__ == "__main__":
    sys.exit(_child_main())
