"""User-facing errors.

Every error a person can cause (a bad flag, a missing file, a malformed line) is a
:class:`QmdlabError`. Its message names the file, line or flag *and* the fix; the
CLI prints it as one line and exits 1 (``--debug`` shows the traceback). Anything
else escaping is a bug.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType


class QmdlabError(Exception):
    """An error a user can act on; ``str(err)`` is the whole message."""


class ConfigError(QmdlabError):
    """Bad configuration: unknown collection, malformed YAML, unknown option."""


class StoreError(QmdlabError):
    """The index cannot do what was asked (missing document, corrupt DB, …)."""


class DocumentNotFoundError(StoreError):
    """No indexed document answers to a reference (it may have been renamed or removed since)."""


class ModelError(QmdlabError):
    """A model is missing, corrupt or failed to load."""


class DimensionMismatchError(StoreError):
    """Stored vectors and the current embedder disagree on dimension/fingerprint."""


class DataFormatError(QmdlabError):
    """Malformed input data; always names the file and (1-based) line.

    >>> str(DataFormatError("q.jsonl", 3, "expected a JSON object", "fix the line"))
    'q.jsonl:3: expected a JSON object (fix the line)'
    """

    def __init__(self, path: str | Path, line: int | None, problem: str, fix: str | None = None):
        self.path, self.line, self.problem, self.fix = str(path), line, problem, fix
        where = f"{self.path}:{line}" if line is not None else self.path
        msg = f"{where}: {problem}"
        if fix:
            msg += f" ({fix})"
        super().__init__(msg)


def import_extra(module: str, extra: str) -> ModuleType:
    """Import ``module``, an optional dependency; when it is missing, a :class:`QmdlabError` naming
    the extra that installs it (the core install carries no evaluation library and no model stack).

    >>> import_extra("json", "eval").__name__
    'json'
    >>> import_extra("qmdlab_no_such_module", "eval")
    Traceback (most recent call last):
    ...
    qmdlab.errors.QmdlabError: qmdlab_no_such_module is not installed: pip install 'qmdlab[eval]'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = module.split(".")[0]
        if (err.name or "").split(".")[0] != top:  # the package is there but something it needs is broken
            raise
        raise QmdlabError(f"{top} is not installed: pip install 'qmdlab[{extra}]'") from None
