"""The prompt sidecar of a trained expander GGUF: ``<gguf>.prompt.json``.

``qmdlab train export`` writes it beside each file it converts: the chat-template text before and
after the user turn (``prefix``, ``suffix``), the chat ``family``, and, for a model trained under the
engine's grammar (``generic_instruct``), that ``grammar``. A trained expander is only as good as the
prompt it is fed, so every way of plugging one in reads it here: ``QMDLAB_EXPAND_MODEL=<gguf>``,
``--expand-model``, a ``models:`` entry (the registry) and the trainer's own evaluation
(:func:`qmdlab.training.export.load_expander`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from qmdlab.errors import ModelError
from qmdlab.models.templates import CHAT_FAMILIES, expand_turns


@dataclass(frozen=True)
class PromptSidecar:
    """The exact prompt a trained expander saw: ``prefix + user turn + suffix``.

    >>> s = PromptSidecar(prefix="<u>", suffix="</u><a>", family="qwen3")
    >>> s.render("git rebase", "undo")
    '<u>/no_think Expand this search query: git rebase\\nIntent: undo</u><a>'
    """

    prefix: str
    suffix: str
    family: str = "qwen3"
    grammar: Optional[str] = None

    def render(self, query: str, intent: Optional[str] = None) -> str:
        """The prompt for ``query``: the user turn of :func:`~qmdlab.models.templates.expand_turns`
        (as in training, surrounding whitespace stripped) between the template's prefix and suffix."""
        return self.prefix + user_turn(query, intent) + self.suffix

    def key(self) -> str:
        """What a fingerprint records of the prompt (the grammar is recorded on its own)."""
        return self.prefix + "|" + self.suffix


def user_turn(query: str, intent: Optional[str] = None) -> str:
    """The expander's user turn, the one text training and inference share.

    >>> user_turn(" jaguar ", intent=" the car ")
    '/no_think Expand this search query: jaguar\\nIntent: the car'
    """
    return expand_turns("qwen3", query.strip(), intent.strip() if intent else None)[1]


def sidecar_path(gguf: str | Path) -> Path:
    """``<gguf>.prompt.json``."""
    return Path(str(gguf) + ".prompt.json")


def read_sidecar(gguf: str | Path) -> Optional[PromptSidecar]:
    """The sidecar of ``gguf``; ``None`` when there is none.

    Raises
    ------
    ModelError
        The sidecar is not JSON or lacks ``prefix``/``suffix``, or names an unknown family (the
        message names the file; the fix is to re-run ``qmdlab train export``).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     g = Path(d) / "m.gguf"
    ...     none = read_sidecar(g)
    ...     _ = sidecar_path(g).write_text('{"prefix": "<p>", "suffix": "<s>", "family": "chatml"}')
    ...     none, read_sidecar(g).family
    (None, 'chatml')
    """
    side = sidecar_path(gguf)
    if not side.is_file():
        return None
    fix = f"re-run `qmdlab train export`, or delete {side} to prompt the model as an untrained one"
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
        sidecar = PromptSidecar(
            prefix=str(data["prefix"]),
            suffix=str(data["suffix"]),
            family=str(data.get("family") or "qwen3"),
            grammar=data.get("grammar") or None,
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ModelError(f"{side}: not a prompt sidecar ({type(err).__name__}: {err}); {fix}") from err
    if sidecar.family not in CHAT_FAMILIES:
        raise ModelError(f"{side}: unknown chat family {sidecar.family!r} (expected one of {CHAT_FAMILIES}); {fix}")
    return sidecar


__all__ = ["PromptSidecar", "read_sidecar", "sidecar_path", "user_turn"]
