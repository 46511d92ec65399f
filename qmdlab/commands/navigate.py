"""Navigation verbs: ``refs``, ``jump``, ``chunks`` — moving from a hit through a document's
structure (thin front ends over :mod:`qmdlab.search.navigate`).

A document is named as everywhere else (docno, path, ``#docid``, ``qmd://`` URI), optionally
with ``#address`` for a section (addresses as ``qmdlab get FILE --outline`` prints them).
"""

from __future__ import annotations

import click

from qmdlab.commands.common import json_option, open_index
from qmdlab.display import json_text, printable, printable_text
from qmdlab.errors import QmdlabError


def _numbered(text: str, first: int, truncated: bool) -> str:
    lines = text.split("\n")
    note = lines.pop() if truncated else None
    width = len(str(first + len(lines) - 1))
    out = [f"{no:>{width}}: {t}" for no, t in enumerate(lines, first)]
    return "\n".join(out + ([note] if note else []))


def register(group: click.Group) -> None:
    """Add ``refs``, ``jump`` and ``chunks`` to the ``qmdlab`` group."""

    @group.command("refs")
    @click.argument("ref")
    @json_option()
    @click.pass_context
    def refs(ctx, ref: str, as_json: bool) -> None:
        """List the cross-references of a document or section (FILE or FILE#address): markdown links,
        [[wiki links]], qmd:// URIs and .md paths, numbered for `qmdlab jump`, with where each leads."""
        from qmdlab.search.crossrefs import section_refs

        found = section_refs(open_index(ctx), ref)
        if as_json:
            click.echo(json_text([r._asdict() for r in found]))
            return
        if not found:
            click.echo("No cross-references.")
        for r in found:
            where = (r.docno + (f"#{r.address}" if r.address else "")) if r.docno else f"(cannot follow: {r.problem})"
            text = f" [{r.text}]" if r.text != r.target else ""
            click.echo(printable(f"{r.n:>3}. line {r.line}: {r.target}{text} -> {where}"))

    @group.command("jump")
    @click.argument("ref")
    @click.argument("which")
    @click.option("--max-chars", default=4000, show_default=True, help="Cap on the text shown (0 = no cap).")
    @click.option("--line-numbers", is_flag=True, help="Prefix each line with its number.")
    @json_option()
    @click.pass_context
    def jump(ctx, ref: str, which: str, max_chars: int, line_numbers: bool, as_json: bool) -> None:
        """Follow a cross-reference of a section: `qmdlab jump FILE#address WHICH`, WHICH being the
        reference's number in `qmdlab refs`, its target or its link text. Prints the section it leads to."""
        from qmdlab.search.crossrefs import jump_to_ref

        j = jump_to_ref(open_index(ctx), ref, which, max_chars=max_chars)
        if as_json:
            d = j._asdict()
            d["ref"] = j.ref._asdict()
            d["heading_path"] = list(j.heading_path)
            click.echo(json_text(d))
            return
        crumb = " > ".join(j.heading_path) or "(whole document)"
        src = j.source + (f"#{j.source_address}" if j.source_address else "")
        click.echo(
            printable(
                f"{src} -> {j.docno}{'#' + j.address if j.address else ''} (#{j.docid}) § {crumb} "
                f"lines {j.line_start}-{j.line_end}"
            )
        )
        click.echo("")
        click.echo(printable_text(_numbered(j.text, j.line_start, j.truncated) if line_numbers else j.text))

    @group.command("chunks")
    @click.argument("ref")
    @click.option("--id", "chunk_ids", type=int, multiple=True, help="Only this chunk (repeatable; a hit's chunk_id).")
    @click.option("--full", is_flag=True, help="Each chunk's text (capped by --max-chars) instead of a preview.")
    @click.option("--chars", "preview_chars", default=240, show_default=True, help="Characters of a preview.")
    @click.option("--max-chars", default=4000, show_default=True, help="Cap on full/parent text (0 = no cap).")
    @click.option(
        "--parent",
        type=click.Choice(["section", "document"]),
        default=None,
        help="With one --id: print the section (or document) holding the chunk, its lines marked *.",
    )
    @json_option()
    @click.pass_context
    def chunks(
        ctx,
        ref: str,
        chunk_ids: tuple[int, ...],
        full: bool,
        preview_chars: int,
        max_chars: int,
        parent: str | None,
        as_json: bool,
    ) -> None:
        """The chunks of a document as previews (id, lines, breadcrumb), or — with --id N --parent — the
        chunk read in its parent section or document (child -> parent backfill)."""
        from qmdlab.search.chunk_views import backfill, read_chunks

        idx = open_index(ctx)
        if parent is not None:
            if len(chunk_ids) != 1:
                raise QmdlabError(
                    "--parent needs exactly one --id (the chunk to read in its parent); "
                    f"list the ids with `qmdlab chunks {ref}`"
                )
            b = backfill(idx, ref, chunk_ids[0], level=parent, max_chars=max_chars)
            if as_json:
                d = b._asdict()
                d["heading_path"] = list(b.heading_path)
                click.echo(json_text(d))
                return
            crumb = " > ".join(b.heading_path) or "(whole document)"
            click.echo(
                printable(
                    f"{b.docno} chunk {b.chunk_id} (lines {b.highlight[0]}-{b.highlight[1]}, marked *) in "
                    f"§ {crumb} lines {b.line_start}-{b.line_end}"
                )
            )
            click.echo("")
            click.echo(printable_text(b.marked()))
            return
        rows = read_chunks(
            idx, ref, list(chunk_ids) or None, preview_chars=preview_chars, full=full, max_chars=max_chars
        )
        if as_json:
            click.echo(json_text([c.as_dict() for c in rows]))
            return
        for c in rows:
            crumb = " > ".join(c.heading_path)
            click.echo(
                f"chunk {c.chunk_id} (#{c.seq}) lines {c.line_start}-{c.line_end}, {c.chars} chars"
                + (f"  § {printable(crumb)}" if crumb else "")
            )
            body = printable_text(c.text).replace("\n", "\n  ") if full else printable(c.text)
            click.echo(f"  {body}")
