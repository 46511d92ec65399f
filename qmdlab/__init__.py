"""qmdlab: a workbench for local hybrid search over markdown collections.

The entry points most people need:

>>> import qmdlab                                    # doctest: +SKIP
>>> trace = qmdlab.query("how do I rebase?")         # doctest: +SKIP
>>> trace.final                                      # doctest: +SKIP

Heavy submodules import lazily so ``import qmdlab`` stays fast for the CLI.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "Index": ("qmdlab.store", "Index"),
    "PipelineConfig": ("qmdlab.pipeline.config", "PipelineConfig"),
    "Lab": ("qmdlab.pipeline.lab", "Lab"),
    "query": ("qmdlab.pipeline.lab", "query"),
    "retune": ("qmdlab.pipeline.retune", "retune"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'qmdlab' has no attribute {name!r}")


__all__ = list(_LAZY) + ["__version__"]
