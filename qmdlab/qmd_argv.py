"""qmd's command line accepted as qmd accepts it: global options after the verb, qmd's options ignored.

qmd parses its whole command line with one table of options and ``strict: false``
(``src/cli/qmd.ts`` ``parseCLI``): ``--index NAME`` may stand anywhere, and an option a verb does
not use — or one qmd does not know at all — is ignored. A script written for qmd
(``qmd search redis --index work --no-rerank -C 40``) must run unchanged against qmdlab, whose
verbs are click commands that would refuse it. :func:`qmd_argv` rewrites the argument list before
click parses it:

- ``--index NAME`` (or ``--index=NAME``) after the verb moves before it, unless the verb itself has
  an ``--index`` option (``qmdlab train … --index DIR``);
- an option the verb does not have is dropped with a note on stderr, and so is its value when qmd
  declares it as taking one (``-C 40``, ``--intent TEXT``); an option qmdlab does have is never
  touched, and nothing after ``--`` is.

Only the options are lenient: a verb that does not exist, a missing argument or a bad value is a
usage error (exit status 1, as qmd's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click

#: qmd 2.8.3's options that take a value (``type: "string"`` in ``parseCLI``): dropped with the
#: token after them when a verb of qmdlab has no such option.
QMD_VALUE_OPTIONS = frozenset(
    {
        "--index",
        "--context",
        "-n",
        "--min-score",
        "--format",
        "-c",
        "--collection",
        "--name",
        "--mask",
        "--glob",
        "--max-docs-per-batch",
        "--max-batch-mb",
        "--timeout",
        "-l",
        "--from",
        "--max-bytes",
        "-C",
        "--candidate-limit",
        "--intent",
        "--chunk-strategy",
        "--port",
        "--host",
    }
)


def _is_option(token: str) -> bool:
    """An option token (``-x``, ``--name``, ``--name=v``), not ``-``, ``--`` or a negative number."""
    if len(token) < 2 or not token.startswith("-") or token == "--":
        return False
    try:
        float(token)
        return False
    except ValueError:
        return True


def _options(command: click.Command, ctx: click.Context) -> dict[str, bool]:
    """``{option string: takes a value}`` of ``command``'s own options (its help option included)."""
    out: dict[str, bool] = {}
    params = list(command.params)
    help_option = command.get_help_option(ctx)
    if help_option is not None:
        params.append(help_option)
    for p in params:
        if isinstance(p, click.Option):
            takes_value = not (p.is_flag or p.count)
            for name in (*p.opts, *p.secondary_opts):
                out[name] = takes_value
    return out


def _tree_has(command: click.Command, ctx: click.Context, name: str) -> bool:
    """Whether ``command`` or any command under it has the option ``name``."""
    if name in _options(command, ctx):
        return True
    if isinstance(command, click.Group):
        return any(_tree_has(sub, ctx, name) for sub in command.commands.values())
    return False


def _known(token: str, options: dict[str, bool]) -> tuple[bool, bool]:
    """``(known, its value is the next token)`` for an option token against ``options``."""
    if token.startswith("--"):
        name, eq, _ = token.partition("=")
        if name in options:
            return True, options[name] and not eq
        return False, False
    if token in options:
        return True, options[token]
    # -n5 (a short option with its value attached), or -ab (two short flags)
    head = token[:2]
    if head in options:
        return True, False
    return False, False


def _skip_options(tokens: list[str], start: int, options: dict[str, bool]) -> int:
    """The index of the first positional token at or after ``start`` (options and their values skipped)."""
    i = start
    while i < len(tokens) and _is_option(tokens[i]):
        known, value_next = _known(tokens[i], options)
        i += 2 if known and value_next else 1
    return i


def _take_out(tokens: list[str], pick: Callable[[int], tuple[int, bool]]) -> tuple[list[str], list[str]]:
    """``tokens`` split into ``(kept, taken)``, each in order. At each index ``pick`` says how many
    tokens stand together there (an option and its value) and whether they are taken out; ``--``
    and everything after it are kept as they are."""
    kept: list[str] = []
    taken: list[str] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "--":
            kept.extend(tokens[i:])
            break
        width, take = pick(i)
        (taken if take else kept).extend(tokens[i : i + width])
        i += width
    return kept, taken


def _lenient(tokens: list[str], options: dict[str, bool], where: str, notes: list[str]) -> list[str]:
    """``tokens`` without the options that ``options`` does not have (nor the values qmd gives them)."""

    def unknown_option(i: int) -> tuple[int, bool]:
        token = tokens[i]
        if not _is_option(token):
            return 1, False
        known, value_next = _known(token, options)
        if known:
            return (2 if value_next else 1), False
        name = token.partition("=")[0]
        takes_value = name in QMD_VALUE_OPTIONS and "=" not in token and i + 1 < len(tokens)
        dropped = tokens[i : i + (2 if takes_value else 1)]
        notes.append(f"note: ignoring {' '.join(dropped)}: `{where}` has no {name} option (see `{where} --help`)")
        return len(dropped), True

    return _take_out(tokens, unknown_option)[0]


def _index_option(tokens: list[str], i: int) -> tuple[int, bool]:
    """``--index NAME`` or ``--index=NAME`` at ``i``: ``(its tokens, True)``; anything else ``(1, False)``."""
    if tokens[i] == "--index" and i + 1 < len(tokens):
        return 2, True
    return 1, tokens[i].startswith("--index=")


def qmd_argv(root: click.Group, ctx: click.Context, args: Iterable[str]) -> tuple[list[str], list[str]]:
    """``args`` (the root's arguments) rewritten as described in the module docs: ``(args, notes)``.

    A verb that does not exist is left for click to report.
    """
    tokens = list(args)
    notes: list[str] = []
    root_options = _options(root, ctx)
    at = _skip_options(tokens, 0, root_options)
    if at >= len(tokens):
        return tokens, notes
    command = root.get_command(ctx, tokens[at])
    if command is None:
        return tokens, notes
    # --index after the verb belongs to the root (qmd's global option)
    if "--index" in root_options and not _tree_has(command, ctx, "--index"):
        head, tail = tokens[: at + 1], tokens[at + 1 :]
        rest, moved = _take_out(tail, lambda i: _index_option(tail, i))
        tokens = moved + head + rest
        at += len(moved)
    path = [tokens[at]]
    # descend through groups (``collection list``): their own options stay as they are
    start = at + 1
    while isinstance(command, click.Group):
        sub_at = _skip_options(tokens, start, _options(command, ctx))
        if sub_at >= len(tokens):
            return tokens, notes
        sub = command.get_command(ctx, tokens[sub_at])
        if sub is None:
            return tokens, notes
        command, start = sub, sub_at + 1
        path.append(tokens[sub_at])
    where = " ".join([ctx.info_name or "qmdlab", *path])
    leaf = _lenient(tokens[start:], _options(command, ctx), where, notes)
    return tokens[:start] + leaf, notes


__all__ = ["QMD_VALUE_OPTIONS", "qmd_argv"]
