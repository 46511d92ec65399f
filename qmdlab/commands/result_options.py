"""The result options shared by ``search``, ``vsearch`` and ``query`` (qmd's flags).

``--format FMT`` or one of its shorthands ``--json/--csv/--md/--xml/--files``; ``--all``
(every match instead of ``-n``), ``--full`` (whole documents instead of snippets),
``--max-chars N`` (with ``--full``: each document capped, saying how much was left out),
``--line-numbers`` (numbered snippet lines in every format; the ``cli`` format always numbers
them), ``--context`` (each hit's parent section summary and sibling headings; cli, md, json).
Only flag plumbing lives here; the row transforms are :func:`qmdlab.pipeline.results.full_rows`
and :func:`~qmdlab.pipeline.results.located_rows`, the hit context
:func:`qmdlab.search.hit_context.hit_contexts`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import click

from qmdlab.errors import QmdlabError

FORMATS = ("cli", "json", "csv", "md", "xml", "files")
SHORTHANDS = ("json", "csv", "md", "xml", "files")
ALL_LIMIT = 1_000_000
"""``--all``: the result limit (every match; a BM25/vector list is cut to the index size anyway)."""


@dataclass(frozen=True)
class ResultOptions:
    """The result flags of one command line, checked: the one format asked for and what shapes the rows."""

    fmt: str = "cli"
    all_results: bool = False
    full: bool = False
    max_chars: int = 0
    line_numbers: bool = False
    context: bool = False

    def limit(self, n: int) -> int:
        """``-n``, or every match with ``--all``.

        >>> ResultOptions().limit(5), ResultOptions(all_results=True).limit(5) == ALL_LIMIT
        (5, True)
        """
        return ALL_LIMIT if self.all_results else n

    def render(self, idx, rows, *, explains=None) -> str:
        """:func:`render` with these flags."""
        shape = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("fmt", "all_results")}
        return render(idx, rows, self.fmt, explains=explains, **shape)


_RESULT_PARAMS = tuple(f.name for f in dataclasses.fields(ResultOptions))


def result_options() -> Callable:
    """Decorator adding ``--format``, the shorthands, ``--all``, ``--full``, ``--max-chars``,
    ``--line-numbers`` and ``--context``, passed to the command as one checked :class:`ResultOptions`
    in its ``result`` parameter (a conflicting format or a flag the format cannot show is refused
    before the command runs).
    """

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def command(*args, **kwargs):
            shorthands = {f"as_{name}": kwargs.pop(f"as_{name}") for name in SHORTHANDS}
            values = {name: kwargs.pop(name) for name in _RESULT_PARAMS}
            values["fmt"] = pick_format(values["fmt"], **shorthands)
            opts = ResultOptions(**values)
            check_flags(opts.fmt, full=opts.full, max_chars=opts.max_chars, context=opts.context)
            return fn(*args, result=opts, **kwargs)

        wrapped: Callable = command
        wrapped = click.option(
            "--context",
            "context",
            is_flag=True,
            help="Under each hit, its parent section (title and a short summary) and the sibling "
            "section headings (cli, md and json formats).",
        )(wrapped)
        wrapped = click.option(
            "--line-numbers",
            "line_numbers",
            is_flag=True,
            help="Number the snippet lines (the cli format always does).",
        )(wrapped)
        wrapped = click.option(
            "--max-chars",
            "max_chars",
            type=click.IntRange(min=0),
            default=0,
            help="With --full: cap each document at N characters; a capped one ends with how many "
            "were left out and the `qmdlab get` that reads on [default: 0 = no cap].",
        )(wrapped)
        wrapped = click.option("--full", is_flag=True, help="Show whole documents instead of snippets.")(wrapped)
        wrapped = click.option(
            "--all", "all_results", is_flag=True, help="Return every match instead of -n (combine with --min-score)."
        )(wrapped)
        for name in reversed(SHORTHANDS):
            wrapped = click.option(f"--{name}", f"as_{name}", is_flag=True, help=f"Same as --format {name}.")(wrapped)
        return click.option(
            "--format", "fmt", type=click.Choice(FORMATS), default=None, help="Result format [default: cli]."
        )(wrapped)

    return deco


def pick_format(fmt: str | None, **flags: bool) -> str:
    """The one format asked for by ``--format`` and/or a shorthand (``as_json=True`` …).

    >>> pick_format(None), pick_format("csv"), pick_format(None, as_json=True), pick_format("md", as_md=True)
    ('cli', 'csv', 'json', 'md')
    >>> pick_format("csv", as_json=True)
    Traceback (most recent call last):
    ...
    qmdlab.errors.QmdlabError: --format csv and --json ask for different formats; give one of them
    """
    chosen = [k[3:] for k, v in flags.items() if v and k.startswith("as_")]
    if len(chosen) > 1:
        raise QmdlabError(f"{' and '.join('--' + c for c in chosen)} ask for different formats; give one of them")
    if chosen and fmt and fmt != chosen[0]:
        raise QmdlabError(f"--format {fmt} and --{chosen[0]} ask for different formats; give one of them")
    return chosen[0] if chosen else (fmt or "cli")


CONTEXT_FORMATS = ("cli", "md", "json")
"""The formats that show ``--context`` (csv, xml and files keep qmd's fields)."""


def check_flags(fmt: str, *, full: bool = False, max_chars: int = 0, context: bool = False) -> None:
    """Refuse ``--max-chars`` without ``--full`` and ``--context`` in a format that cannot show it.

    >>> check_flags("cli", full=True, max_chars=100, context=True)
    >>> check_flags("csv", context=True)
    Traceback (most recent call last):
    ...
    qmdlab.errors.QmdlabError: --context shows in the cli, md and json formats, not csv
    """
    if max_chars and not full:
        raise QmdlabError("--max-chars caps the whole documents of --full (snippets are a few lines); add --full")
    if context and fmt not in CONTEXT_FORMATS:
        raise QmdlabError(
            f"--context shows in the {', '.join(CONTEXT_FORMATS[:-1])} and {CONTEXT_FORMATS[-1]} formats, not {fmt}"
        )


def render(
    idx,
    rows,
    fmt: str,
    *,
    full: bool = False,
    line_numbers: bool = False,
    max_chars: int = 0,
    context: bool = False,
    explains=None,
) -> str:
    """Apply ``--full`` (capped by ``--max-chars``), ``--line-numbers`` and ``--context`` to result
    rows and format them in qmd's shapes (:func:`qmdlab.output.format_results`); the ``cli``,
    ``md`` and ``json`` formats carry each snippet's heading breadcrumb
    (:func:`qmdlab.search.hit_context.breadcrumbs`; not with ``--full``, which shows whole documents).
    ``--context`` is :func:`qmdlab.search.hit_context.hit_contexts` of the hits' snippet lines (with
    ``--full`` too). ``explains`` (one explain block per row, ``query --explain``) goes into json's
    rows."""
    from qmdlab.output import format_results
    from qmdlab.pipeline.results import full_rows, located_rows

    check_flags(fmt, full=full, max_chars=max_chars, context=context)
    crumbs = contexts = None
    if rows and fmt != "cli":
        rows = located_rows(idx, rows)
    if not full and fmt in ("cli", "md", "json") and rows:
        from qmdlab.search.hit_context import breadcrumbs

        crumbs = breadcrumbs(idx, rows)
    if context:
        from qmdlab.search.hit_context import hit_contexts

        contexts = hit_contexts(idx, rows)
    if full:
        kept = full_rows(idx, rows, max_chars=max_chars)
        if explains is not None and len(kept) != len(rows):
            left = {r.docno for r in kept}
            explains = [e for r, e in zip(rows, explains) if r.docno in left]
        rows = kept
    return format_results(
        rows,
        fmt,
        crumbs=crumbs,
        contexts=contexts,
        links=editor_links(idx, rows) if fmt == "cli" else None,
        full=full,
        line_numbers=line_numbers,
        explains=explains,
    )


def editor_links(idx, rows, *, tty: bool | None = None) -> list[str | None] | None:
    """One editor URI per row (its file's absolute path and line) when stdout is a terminal and an
    editor template is set (``$QMDLAB_EDITOR_URI``, ``$QMD_EDITOR_URI`` or the index's
    ``editor_uri``, :func:`qmdlab.output.editor_template`); ``None`` otherwise (plain paths).

    The index's template is used only when its config may set it: one that is project-local or
    received an import waits for ``qmdlab trust`` (a note says so on stderr,
    :func:`qmdlab.store.trust.editor_held`); a template holding a control or format character is
    never used (it is written into a terminal escape)."""
    import sys

    from qmdlab.output import editor_link, editor_template
    from qmdlab.pipeline.results import hit_line
    from qmdlab.store.config import template_problem

    if not rows or not (sys.stdout.isatty() if tty is None else tty):
        return None
    configured = idx.editor_uri() if hasattr(idx, "editor_uri") else None
    template = editor_template(configured)
    if not template or template_problem(template) is not None:
        return None
    if template == configured and editor_template(None) is None and hasattr(idx, "config_path"):
        from qmdlab.store import config as store_config
        from qmdlab.store import trust

        held = trust.editor_held(idx.dir, idx.config_path, store_config.load(idx.config_path))
        if held is not None:
            click.echo(trust.editor_note(idx.config_path, held), err=True)
            return None
    roots = {c.name: c.root for c in idx.collections()}
    out = []
    for r in rows:
        coll, _, rel = r.docno.partition("/")
        out.append(editor_link(template, str(roots[coll] / rel), hit_line(r)) if coll in roots else None)
    return out


__all__ = [
    "ResultOptions",
    "FORMATS",
    "SHORTHANDS",
    "ALL_LIMIT",
    "CONTEXT_FORMATS",
    "result_options",
    "pick_format",
    "check_flags",
    "render",
    "editor_links",
]
