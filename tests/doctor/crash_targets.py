"""Functions that :func:`qmdlab.subproc.call_in_child` runs in the tests' child processes.

Not a test module: the child imports it by name (``crash_targets:…``) with this folder on
``PYTHONPATH``.
"""

from __future__ import annotations

import os
import signal


def sigill() -> None:
    """Die the way a llama.cpp build with unsupported instructions dies."""
    os.kill(os.getpid(), signal.SIGILL)


def add(a: int, b: int = 0) -> int:
    return a + b


def user_error() -> None:
    from qmdlab.errors import ModelError

    raise ModelError("model file /m/x.gguf does not exist; fix the path")
