"""The held-out leak check: a held-out query never reaches a training or tuning step.

Every trainer calls :func:`check_no_heldout` on exactly what it is about to fit on (GRPO prompts,
doc2query targets, embedder and reranker pairs, reranker lists) and on the split file it read, so
that a held-out query reaching training is an error, not a silently inflated number. A query leaks
by its id, or by its text (case and spacing ignored): a generated query, a heading or a completion
that happens to equal a held-out query's text is as much a leak as the query itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from qmdlab.errors import QmdlabError


class LeakError(QmdlabError):
    """A held-out query reached a training or tuning step."""


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def check_no_heldout(
    train: Iterable[str | Mapping[str, Any]],
    heldout: Iterable[str],
    queries: Mapping[str, str] | None = None,
    *,
    where: str,
    text: str | None = None,
    suite: str = "",
) -> None:
    """Raise :class:`LeakError` when a held-out query is in ``train``.

    ``train`` holds query ids, or rows: a row's ``"qid"`` (when it has one) must not be a held-out id,
    and with ``text`` the row's ``text`` field must not be the text of a held-out query (``queries``
    maps ids to texts; case and spacing ignored). ``where`` names the training data in the message,
    ``suite`` prefixes the ids it names (``suite:qid``).

    >>> check_no_heldout(["cisi:1"], ["cisi:2"], where="GRPO prompts")
    >>> try:
    ...     check_no_heldout(["cisi:1", "cisi:2"], ["cisi:2"], where="GRPO prompts")
    ... except LeakError as err:
    ...     print(err)
    held-out queries reached GRPO prompts: ['cisi:2']
    >>> rows = [{"qid": "1", "anchor": " C  d"}]
    >>> check_no_heldout(rows, ["2"], {"1": "a b", "2": "c d"}, where="pairs", suite="t")  # by id: no leak
    >>> check_no_heldout(rows, ["2"], {"1": "a b", "2": "c d"}, where="pairs", text="anchor", suite="t")
    Traceback (most recent call last):
    ...
    qmdlab.training.leakage.LeakError: pairs: query ' C  d' is the held-out query 't:2' ('c d')
    """
    held = {str(q) for q in heldout}
    label = (lambda q: f"{suite}:{q}") if suite else str
    by_text = {_norm(queries[q]): (q, queries[q]) for q in held if q in queries} if text and queries else {}
    leaked: set[str] = set()
    for row in train:
        if isinstance(row, str):
            leaked.update({row} & held)
            continue
        value = row.get(text) if text else None
        if isinstance(value, str) and (hit := by_text.get(_norm(value))) is not None:
            raise LeakError(f"{where}: query {value!r} is the held-out query '{label(hit[0])}' ({hit[1]!r})")
        if row.get("qid") is not None and str(row["qid"]) in held:
            leaked.add(str(row["qid"]))
    if leaked:
        names = [label(q) for q in sorted(leaked)]
        raise LeakError(f"held-out queries reached {where}: {names[:10]}{' …' if len(names) > 10 else ''}")
