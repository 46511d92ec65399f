"""Moving from a search hit through a document's structure (heading-tree navigation).

A hit is a chunk or a line of a document; an agent (or a person at the CLI) then wants to
see *where* it is and to move from there instead of searching again:

- :func:`hit_context` — the hit's breadcrumb (heading path), section ``address``, its parent
  section's title and a short summary of it, and its sibling sections;
- :func:`read_chunks` — the chunks of a document (or chosen chunk ids) as short previews with
  their lines, breadcrumb and section address; ``full=True`` gives each chunk's text (capped);
- :func:`backfill` — child → parent (ranks only): the section (or whole document) that holds a chunk,
  with the chunk's lines marked, so a chunk hit can be read in its context;
- :func:`section_refs` / :func:`jump_to_ref` — the cross-references written in a section and
  following one of them to the section it names.

A cross-reference is any of (:func:`find_refs`): a markdown link ``[text](../a.md#anchor)``
(relative to the document's folder, or to the collection root when that is where the file
is; ``#anchor`` alone is the same document), a wiki link ``[[name#heading|alias]]`` (a document
whose file name is ``name``, the shortest path first), a ``qmd://collection/path#anchor`` URI,
or a bare collection-relative path ending in ``.md`` such as ``see runbooks/deploy-rollback.md``
(how the default corpus refers to other notes). Anchors are resolved against the target's
outline (:mod:`qmdlab.store.outline`): a slug path (``install/linux``), a heading's slug or
its text. Links to other schemes (``https://`` …) are listed but cannot be followed.

Text handed back is capped (:func:`cap_text`, caps on result text): past the cap it
ends with a line saying how much was left out and how to read on.

Everything reads the index's copy of a document (:meth:`qmdlab.store.Index.get`), never a
fresh file. The CLI (``qmdlab refs``, ``qmdlab jump``, ``qmdlab chunks``, breadcrumbs and
``--context`` (:func:`hit_contexts`) on ``search``/``vsearch``/``query`` results, ``--max-chars``
with ``--full``) and the MCP server (``jump_to_ref``, ``read_chunks``,
``parent``/``siblings`` on every hit) are thin front ends over these functions.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from qmdlab.errors import QmdlabError
from qmdlab.store.outline import DocumentOutline, Section, slugify
from qmdlab.store.refs import parse_ref

if TYPE_CHECKING:
    from qmdlab.store import Index

DEFAULT_MAX_CHARS = 4000
"""Cap on the text of a jump, a backfilled section or a full chunk (characters)."""
DEFAULT_PREVIEW_CHARS = 240
"""Characters of a chunk preview."""
DEFAULT_SUMMARY_CHARS = 200
"""Characters of a parent section's summary on a hit."""
DEFAULT_MAX_SIBLINGS = 6
"""Sibling sections listed on a hit (the nearest ones)."""


class Capped(NamedTuple):
    """Text cut to a cap: ``text`` (with a closing note when cut), ``truncated``, ``total_chars``."""

    text: str
    truncated: bool
    total_chars: int


def cap_text(text: str, max_chars: int, *, more: str = "", read_on: tuple[str, int] | None = None) -> Capped:
    """Cut ``text`` to at most ``max_chars`` characters at a line end when one is near (the last
    quarter), then add a note saying how many characters were left out and ``more`` (how to
    read on). ``read_on=(docno, first_line)`` (the document and the number of ``text``'s first
    line) writes ``more`` as the ``qmdlab get`` command that resumes at the first line not shown
    in full. ``max_chars <= 0`` means no cap.

    >>> cap_text("abc", 10)
    Capped(text='abc', truncated=False, total_chars=3)
    >>> cap_text("line one\\nline two\\nline three", 10, more="get x.md:2")
    Capped(text='line one\\n… [20 more characters; get x.md:2]', truncated=True, total_chars=28)
    >>> cap_text("abcdefghij", 4).text
    'abcd\\n… [6 more characters]'
    >>> cap_text("one\\ntwo\\nthree", 8, read_on=("kb/a.md", 10)).text  # cut after line 11
    'one\\ntwo\\n… [6 more characters; read on with `qmdlab get kb/a.md:12`]'
    >>> cap_text("one\\ntwo three four", 10, read_on=("kb/a.md", 10)).text  # cut inside line 11
    'one\\ntwo th\\n… [8 more characters; read on with `qmdlab get kb/a.md:11`]'
    """
    n = len(text)
    if max_chars <= 0 or n <= max_chars:
        return Capped(text, False, n)
    cut = text.rfind("\n", 0, max_chars + 1)
    if cut < max_chars * 3 // 4:
        cut = max_chars
    kept = text[:cut].rstrip("\n")
    if read_on is not None:
        resume = read_on[1] + text.count("\n", 0, cut) + (1 if text[cut : cut + 1] == "\n" else 0)
        more = f"read on with `qmdlab get {read_on[0]}:{resume}`"
    note = f"… [{n - cut} more characters" + (f"; {more}" if more else "") + "]"
    return Capped(f"{kept}\n{note}", True, n)


# -- cross-references ------------------------------------------------------------------------
class RefMention(NamedTuple):
    """A cross-reference as written: ``kind`` (link|wiki|uri|path), link ``text``, ``target``
    (as written, anchor included) and its 1-based ``line``."""

    kind: str
    text: str
    target: str
    line: int


class CrossRef(NamedTuple):
    """A cross-reference of a section, numbered from 1 in reading order, and where it leads:
    ``docno`` and section ``address`` (``""`` = the whole document), or ``problem`` (why it
    cannot be followed)."""

    n: int
    kind: str
    text: str
    target: str
    line: int
    docno: str | None
    address: str | None
    problem: str | None


_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target><[^>\n]+>|[^)\s]+)(?:\s+\"[^\"\n]*\")?\)")
_WIKI = re.compile(r"\[\[(?P<target>[^\]|\n]+)(?:\|(?P<alias>[^\]\n]+))?\]\]")
_URI = re.compile(r"qmd://[^\s)\]>\"'`]+", re.IGNORECASE)
_PATH = re.compile(r"(?<![\w/.:#-])(?P<target>[\w.-]+(?:/[\w.-]+)*\.(?:md|markdown)(?:#[\w/-]+)?)(?![\w/])")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def find_refs(text: str, first_line: int = 1) -> list[RefMention]:
    """Cross-references written in ``text`` (outside code fences), in reading order.

    ``first_line`` is the number of ``text``'s first line in its document.

    >>> for r in find_refs("see [setup](../howto/setup.md#linux) and [[Git Notes|git]].\\n"
    ...                    "Also qmd://kb/a.md#use, runbooks/deploy-rollback.md and [web](https://x.org).\\n"
    ...                    "```\\n[not](a.md)\\n```\\n![img](p.png) [top](#intro)", first_line=10):
    ...     print(tuple(r))
    ('link', 'setup', '../howto/setup.md#linux', 10)
    ('wiki', 'git', 'Git Notes', 10)
    ('uri', 'qmd://kb/a.md#use', 'qmd://kb/a.md#use', 11)
    ('path', 'runbooks/deploy-rollback.md', 'runbooks/deploy-rollback.md', 11)
    ('link', 'web', 'https://x.org', 11)
    ('link', 'top', '#intro', 15)
    """
    out: list[RefMention] = []
    fence = False
    for no, line in enumerate(text.split("\n"), first_line):
        if _FENCE.match(line):
            fence = not fence
            continue
        if fence:
            continue
        found: list[tuple[int, int, RefMention]] = []
        for m in _LINK.finditer(line):
            target = m.group("target").strip("<>")
            found.append((m.start(), m.end(), RefMention("link", m.group("text").strip(), target, no)))
        for m in _WIKI.finditer(line):
            target = m.group("target").strip()
            found.append((m.start(), m.end(), RefMention("wiki", (m.group("alias") or target).strip(), target, no)))
        for m in _URI.finditer(line):
            target = m.group(0).rstrip(".,;:")
            found.append((m.start(), m.start() + len(target), RefMention("uri", target, target, no)))
        for m in _PATH.finditer(line):
            target = m.group("target")
            found.append((m.start("target"), m.end("target"), RefMention("path", target, target, no)))
        found.sort(key=lambda t: (t[0], -t[1]))
        end = -1
        for start, stop, ref in found:
            if start < end:  # inside a link already taken (a path inside a link target, a URI in a link)
                continue
            out.append(ref)
            end = stop
    return out


def _split_anchor(target: str) -> tuple[str, str | None]:
    path, sep, anchor = target.partition("#")
    return path, (anchor if sep else None)


def find_section(outline: DocumentOutline, anchor: str | None) -> Section:
    """The section an anchor names: ``None``/``""`` → the document root; else a slug path or a
    heading title (:meth:`DocumentOutline.section`), else the first section whose own slug (the
    address' last part) is the anchor's slug — a GitHub-style ``#linux`` for ``install/linux``.

    >>> out = DocumentOutline.parse("# Install\\n## Linux\\napt\\n# Use\\n")
    >>> [find_section(out, a).address for a in (None, "install/linux", "Linux", "linux", "#use")]
    ['', 'install/linux', 'install/linux', 'install/linux', 'use']
    """
    if not anchor:
        return outline.sections[0]
    try:
        return outline.section(anchor)
    except QmdlabError:
        pass
    want = slugify(anchor.lstrip("#").rsplit("/", 1)[-1])
    for sec in outline.sections[1:]:
        if sec.address.rsplit("/", 1)[-1] == want:
            return sec
    return outline.section(anchor)  # raises, listing the addresses


class _Docs:
    """The active docnos of an index, looked up by path and by file name (built once per call)."""

    def __init__(self, idx: Index):
        self.docnos = list(idx.documents()["docno"].to_list())
        self.known = set(self.docnos)

    def resolve_path(self, source: str, path: str, *, relative_first: bool) -> tuple[str | None, str | None]:
        coll, _, rel = source.partition("/")
        here = posixpath.dirname(rel)
        tries: list[str] = []
        if path.startswith("/"):
            tries.append(path.lstrip("/"))
        else:
            rel_to_doc = posixpath.normpath(posixpath.join(here, path)) if here else posixpath.normpath(path)
            from_root = posixpath.normpath(path)
            tries.extend([rel_to_doc, from_root] if relative_first else [from_root, rel_to_doc])
        escaped = False
        for t in tries:
            if t == ".." or t.startswith("../"):
                escaped = True
                continue
            for cand in (t, t + ".md") if not t.endswith((".md", ".markdown")) else (t,):
                if f"{coll}/{cand}" in self.known:
                    return f"{coll}/{cand}", None
        if "/" in path and path.split("/", 1)[0] != coll:  # 'othercollection/path.md'
            cand = posixpath.normpath(path)
            if cand in self.known:
                return cand, None
        if escaped:
            return None, f"{path!r} leads outside collection {coll!r}"
        return None, f"no indexed document at {path!r} (from {source})"

    def resolve_wiki(self, source: str, name: str) -> tuple[str | None, str | None]:
        coll = source.partition("/")[0]
        key = name.strip().lower()
        key = key[:-3] if key.endswith(".md") else key
        hits = []
        for d in self.docnos:
            c, _, rel = d.partition("/")
            stem = posixpath.splitext(rel)[0].lower()
            if stem == key or posixpath.basename(stem) == key or stem.endswith("/" + key):
                hits.append((c != coll, rel.count("/"), d))
        if not hits:
            return None, f"no indexed document named {name!r}"
        return min(hits)[2], None


def _resolve(docs: _Docs, idx: Index, source: str, m: RefMention) -> tuple[str | None, str | None, str | None]:
    """``(docno, address, problem)`` of one mention."""
    target = m.target.strip()
    if m.kind == "uri":
        ref = parse_ref(target)
        docno, problem = (ref.name, None) if ref.name in docs.known else (None, f"no indexed document {ref.name!r}")
        anchor = ref.address
    elif m.kind == "wiki":
        path, anchor = _split_anchor(target)
        docno, problem = (source, None) if not path else docs.resolve_wiki(source, path)
    else:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            return None, None, f"external link ({target.split(':', 1)[0]}:), not an indexed document"
        path, anchor = _split_anchor(target)
        from urllib.parse import unquote

        path = unquote(path)
        if not path:
            docno, problem = source, None
        else:
            docno, problem = docs.resolve_path(source, path, relative_first=m.kind == "link")
    if docno is None:
        return None, None, problem
    if not anchor:
        return docno, "", None
    try:
        doc = idx.get(docno)
        sec = find_section(DocumentOutline.parse(doc.body or "", doc.title or ""), anchor)
    except QmdlabError as err:
        return docno, None, f"{docno}: {err}"
    return docno, sec.address, None


def _doc_and_section(idx: Index, ref: str, address: str | None = None):
    parsed = parse_ref(ref)
    doc = idx.get(parsed.name)
    outline = DocumentOutline.parse(doc.body or "", doc.title or "")
    addr = address if address is not None else parsed.address
    sec = outline.section(addr) if addr else outline.sections[0]
    return doc, outline, sec


def section_refs(idx: Index, ref: str, address: str | None = None) -> list[CrossRef]:
    """The cross-references in one section of a document (its subsections included), resolved.

    Parameters
    ----------
    idx : qmdlab.store.Index
    ref : str
        The document: docno, path, ``#docid`` or ``qmd://`` URI, optionally ``#address``.
    address : str, optional
        The section (overrides an address in ``ref``); none → the whole document.
    """
    doc, outline, sec = _doc_and_section(idx, ref, address)
    text = outline.section_text(sec.address)
    first = sec.line_start
    docs = _Docs(idx)
    out = []
    for n, m in enumerate(find_refs(text, first), 1):
        docno, addr, problem = _resolve(docs, idx, doc.docno, m)
        out.append(CrossRef(n, m.kind, m.text, m.target, m.line, docno, addr, problem))
    return out


class Jump(NamedTuple):
    """Where :func:`jump_to_ref` led: the reference followed and the target section's text."""

    source: str
    source_address: str
    ref: CrossRef
    docno: str
    docid: str
    title: str
    address: str
    heading_path: tuple[str, ...]
    line_start: int
    line_end: int
    text: str
    truncated: bool


def pick_ref(refs: Sequence[CrossRef], which: int | str, where: str = "this section") -> CrossRef:
    """The reference ``which`` names: its number (1-based; a digit string too), its exact target,
    its link text (case-insensitive), or the only one whose target contains it.

    >>> refs = [CrossRef(1, "path", "a/b.md", "a/b.md", 3, "kb/a/b.md", "", None),
    ...         CrossRef(2, "link", "Setup", "c.md#x", 4, "kb/c.md", "x", None)]
    >>> [pick_ref(refs, w).n for w in (2, "1", "c.md#x", "setup", "b.md")]
    [2, 1, 2, 2, 1]
    """
    if not refs:
        raise QmdlabError(f"{where} has no cross-references (links, [[wiki links]], qmd:// URIs or .md paths)")
    listing = "; ".join(f"{r.n}: {r.target}" for r in refs[:20])
    if isinstance(which, int) or (isinstance(which, str) and which.strip().isdigit()):
        k = int(which)
        if not 1 <= k <= len(refs):
            raise QmdlabError(f"reference {k} does not exist: {where} has {len(refs)} ({listing})")
        return refs[k - 1]
    key = str(which).strip()
    for test in (
        lambda r: r.target == key,
        lambda r: r.text.lower() == key.lower(),
        lambda r: key.lower() in r.target.lower(),
    ):
        found = [r for r in refs if test(r)]
        if len({(r.docno, r.address, r.target) for r in found}) == 1:
            return found[0]
        if found:
            raise QmdlabError(f"{key!r} matches {len(found)} references in {where}; give its number ({listing})")
    raise QmdlabError(f"no reference {key!r} in {where}; give a number or a target ({listing})")


def jump_to_ref(
    idx: Index, ref: str, which: int | str, *, address: str | None = None, max_chars: int = DEFAULT_MAX_CHARS
) -> Jump:
    """Follow a cross-reference written in a section to the section it names.

    Parameters
    ----------
    idx : qmdlab.store.Index
    ref : str
        The document holding the reference (``path[#address]``, ``#docid``, ``qmd://`` URI).
    which : int or str
        Which reference (:func:`pick_ref`).
    address : str, optional
        The section to read the references of (overrides an address in ``ref``).
    max_chars : int
        Cap on the returned text (:func:`cap_text`; 0 = no cap).

    Raises
    ------
    QmdlabError
        No such reference, or it cannot be followed (external, not indexed, no such section).
    """
    doc, _, sec = _doc_and_section(idx, ref, address)
    where = f"{doc.docno}#{sec.address}" if sec.address else doc.docno
    refs = section_refs(idx, doc.docno, sec.address)
    chosen = pick_ref(refs, which, where)
    if chosen.problem is not None or chosen.docno is None:
        raise QmdlabError(f"reference {chosen.n} ({chosen.target}) in {where} cannot be followed: {chosen.problem}")
    target = idx.get(chosen.docno)
    outline = DocumentOutline.parse(target.body or "", target.title or "")
    tsec = outline.section(chosen.address) if chosen.address else outline.sections[0]
    text = outline.section_text(tsec.address)
    capped = cap_text(text, max_chars, read_on=(target.docno, tsec.line_start))
    return Jump(
        doc.docno,
        sec.address,
        chosen,
        target.docno,
        target.docid,
        target.title,
        tsec.address,
        tuple(tsec.heading_path),
        tsec.line_start,
        tsec.line_end,
        capped.text,
        capped.truncated,
    )


# -- hits in their structure -----------------------------------------------------------------
class HitContext(NamedTuple):
    """Where a hit's line sits: its section (``address``, ``heading_path``), the parent section
    (address, title, a short summary; ``None`` for a top-level hit in a document without a
    title) and the sibling sections' ``(address, title)``."""

    docno: str
    line: int
    address: str
    heading_path: tuple[str, ...]
    parent_address: str | None
    parent_title: str
    parent_summary: str
    siblings: tuple[tuple[str, str], ...]

    def breadcrumb(self) -> str:
        """``"A > B"`` (empty for a hit above the first heading)."""
        return " > ".join(self.heading_path)

    def as_dict(self) -> dict:
        return {
            "address": self.address,
            "heading_path": list(self.heading_path),
            "parent": None
            if self.parent_address is None
            else {"address": self.parent_address, "title": self.parent_title, "summary": self.parent_summary},
            "siblings": [{"address": a, "title": t} for a, t in self.siblings],
        }


def section_summary(outline: DocumentOutline, sec: Section, max_chars: int = DEFAULT_SUMMARY_CHARS) -> str:
    """A section's own lead text: its first paragraph below the heading (before any
    subsection), whitespace collapsed and capped to ``max_chars`` with ``…``; for the document
    root, the text before the first heading (front matter skipped).

    >>> out = DocumentOutline.parse("# Install\\nRun the\\ninstaller first.\\n\\nMore.\\n## Linux\\napt\\n")
    >>> section_summary(out, out.section("install")), section_summary(out, out.section("install"), 10)
    ('Run the installer first.', 'Run the i…')
    """
    lines = outline._lines
    first = sec.line_start if sec.address else 1
    last = sec.line_end
    for child in sec.children:
        last = min(last, outline.section(child).line_start - 1)
    body = lines[first - 1 + (1 if sec.address else 0) : last]
    if not sec.address and body and body[0].strip() == "---":  # front matter
        for j in range(1, len(body)):
            if body[j].strip() in ("---", "..."):
                body = body[j + 1 :]
                break
    para: list[str] = []
    fence = False
    for line in body:
        s = line.strip()
        if _FENCE.match(line):
            fence = not fence
            if para:
                break
            continue
        if fence or (not s and not para) or s.startswith("#") or re.fullmatch(r"[=-]{3,}", s):
            continue
        if not s:
            break
        para.append(s)
    text = " ".join(" ".join(para).split())
    return text if len(text) <= max_chars else text[: max(max_chars - 1, 0)].rstrip() + "…"


def context_of(
    outline: DocumentOutline,
    docno: str,
    line: int,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    max_siblings: int = DEFAULT_MAX_SIBLINGS,
) -> HitContext:
    """:class:`HitContext` of a 1-based line in a parsed document. Siblings are the sections
    next to the hit's under the same parent, at most ``max_siblings`` (the nearest ones, in
    document order).

    >>> out = DocumentOutline.parse("# Guide\\nIntro.\\n## Install\\nsteps\\n## Use\\nrun\\n", "Guide")
    >>> c = context_of(out, "kb/g.md", 4)
    >>> c.breadcrumb(), c.address, c.parent_address, c.parent_summary, c.siblings
    ('Guide > Install', 'guide/install', 'guide', 'Intro.', (('guide/use', 'Use'),))
    """
    sec = outline.section_at_line(max(int(line), 1))
    parent = outline.parent(sec.address) if sec.address else None
    if parent is None:
        p_addr, p_title, p_sum = None, "", ""
        sibs: tuple[tuple[str, str], ...] = ()
    else:
        p_addr, p_title = parent.address, parent.title
        p_sum = section_summary(outline, parent, summary_chars)
        kids = parent.children
        at = kids.index(sec.address)
        near = sorted((k for k in range(len(kids)) if k != at), key=lambda k: (abs(k - at), k))[: max(max_siblings, 0)]
        sibs = tuple((kids[k], outline.section(kids[k]).title) for k in sorted(near))
    return HitContext(docno, int(line), sec.address, tuple(sec.heading_path), p_addr, p_title, p_sum, sibs)


def hit_context(
    idx: Index,
    docno: str,
    line: int,
    summary_chars: int = DEFAULT_SUMMARY_CHARS,
    max_siblings: int = DEFAULT_MAX_SIBLINGS,
) -> HitContext:
    """:class:`HitContext` of line ``line`` of an indexed document (see :func:`context_of`)."""
    doc = idx.get(docno)
    return context_of(
        DocumentOutline.parse(doc.body or "", doc.title or ""), doc.docno, line, summary_chars, max_siblings
    )


def snippet_hit_line(line: int, snippet: str) -> int:
    """The line a result is about: a multi-line snippet opens one context line above its best
    line (:func:`qmdlab.pipeline.results.snippet`, context 1), except at the top of its range.

    >>> snippet_hit_line(7, "a\\nb\\nc"), snippet_hit_line(1, "a\\nb"), snippet_hit_line(5, "one line")
    (8, 1, 5)
    """
    return int(line) + (1 if int(line) > 1 and "\n" in (snippet or "") else 0)


def _row_outlines(idx: Index, rows: Iterable) -> list[tuple[Any, DocumentOutline | None]]:
    """``(row, outline)`` per result row; ``None`` for a document no longer indexed or a row
    without a line. Each document is parsed once."""
    cache: dict[str, DocumentOutline | None] = {}
    out = []
    for r in rows:
        if r.docno not in cache:
            try:
                doc = idx.get(r.docno)
                cache[r.docno] = DocumentOutline.parse(doc.body or "", doc.title or "")
            except QmdlabError:
                cache[r.docno] = None
        out.append((r, cache[r.docno] if r.line else None))
    return out


def breadcrumbs(idx: Index, rows: Iterable) -> list[str]:
    """``"A > B"`` for each result row (``docno``, ``line``, ``snippet`` attributes): the heading
    path of the line the row's snippet is about; ``""`` above the first heading or for a
    document no longer indexed. Each document is parsed once."""
    return [
        "" if outline is None else " > ".join(outline.section_at_line(snippet_hit_line(r.line, r.snippet)).heading_path)
        for r, outline in _row_outlines(idx, rows)
    ]


def hit_contexts(
    idx: Index, rows: Iterable, summary_chars: int = DEFAULT_SUMMARY_CHARS, max_siblings: int = DEFAULT_MAX_SIBLINGS
) -> list[HitContext | None]:
    """:func:`hit_context` of each result row (``docno``, ``line``, ``snippet`` attributes) at the
    line its snippet is about — what the MCP tools put on every hit (``parent``, ``siblings``);
    ``None`` for a document no longer indexed. Each document is parsed once."""
    return [
        None
        if outline is None
        else context_of(outline, r.docno, snippet_hit_line(r.line, r.snippet), summary_chars, max_siblings)
        for r, outline in _row_outlines(idx, rows)
    ]


# -- chunks ----------------------------------------------------------------------------------
class ChunkPreview(NamedTuple):
    """One chunk of a document: where it is and its text (a preview, or the capped full text)."""

    chunk_id: int
    docno: str
    seq: int
    line_start: int
    line_end: int
    chars: int
    address: str
    heading_path: tuple[str, ...]
    text: str
    truncated: bool

    def as_dict(self) -> dict:
        d = self._asdict()
        d["heading_path"] = list(self.heading_path)
        return d


def _preview(text: str, chars: int) -> tuple[str, bool]:
    flat = " ".join(text.split())
    return (flat, False) if len(flat) <= chars else (flat[: max(chars - 1, 0)].rstrip() + "…", True)


def read_chunks(
    idx: Index,
    ref: str,
    chunk_ids: Sequence[int] | None = None,
    *,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
    full: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[ChunkPreview]:
    """The chunks of one document, in order: a one-line preview of each (``full=False``; text
    whitespace-collapsed, cut to ``preview_chars`` with ``…``) or each chunk's text capped to
    ``max_chars`` (``full=True``). ``chunk_ids`` keeps only those chunks (a hit's ``chunk_id``);
    an id that is not a chunk of the document is an error naming the document's ids.
    """
    doc = idx.get(parse_ref(ref).name)
    chunks = idx.chunks([doc.docno])
    outline = DocumentOutline.parse(doc.body or "", doc.title or "")
    ids = chunks["chunk_id"].to_list()
    if chunk_ids is not None:
        missing = [int(c) for c in chunk_ids if int(c) not in set(ids)]
        if missing:
            raise QmdlabError(
                f"chunk id(s) {missing} are not chunks of {doc.docno}; its chunks are {ids} "
                f"(list them with `qmdlab chunks {doc.docno}`)"
            )
        keep = {int(c) for c in chunk_ids}
    else:
        keep = set(ids)
    out = []
    for row in chunks.iter_rows(named=True):
        if row["chunk_id"] not in keep:
            continue
        text = row["text"] or ""
        if full:
            lead = len(text) - len(text.lstrip("\n"))  # line_start is the line of the first non-newline
            capped = cap_text(text, max_chars, read_on=(doc.docno, int(row["line_start"]) - text.count("\n", 0, lead)))
            shown, cut = capped.text, capped.truncated
        else:
            shown, cut = _preview(text, preview_chars)
        sec = outline.section_at_line(int(row["line_start"]))
        out.append(
            ChunkPreview(
                int(row["chunk_id"]),
                doc.docno,
                int(row["seq"]),
                int(row["line_start"]),
                int(row["line_end"]),
                len(text),
                sec.address,
                tuple(sec.heading_path),
                shown,
                cut,
            )
        )
    return out


class Backfilled(NamedTuple):
    """A chunk read in its parent: the smallest section holding all of the chunk (``level``
    ``section``) or the whole document (``document``); ``highlight`` = the chunk's lines."""

    docno: str
    chunk_id: int
    level: str
    address: str
    heading_path: tuple[str, ...]
    line_start: int
    line_end: int
    highlight: tuple[int, int]
    text: str
    truncated: bool

    def marked(self) -> str:
        """The text with line numbers, the chunk's lines marked ``*`` (a CLI rendering)."""
        lines = self.text.split("\n")
        note = lines.pop() if self.truncated else None
        width = len(str(self.line_start + len(lines) - 1))
        lo, hi = self.highlight
        out = [f"{no:>{width}}{'*' if lo <= no <= hi else ' '} {t}" for no, t in enumerate(lines, self.line_start)]
        return "\n".join(out + ([note] if note else []))


BACKFILL_LEVELS = ("section", "document")


def backfill(
    idx: Index, ref: str, chunk_id: int, *, level: str = "section", max_chars: int = DEFAULT_MAX_CHARS
) -> Backfilled:
    """Child → parent (ranks only): the section or document that holds chunk ``chunk_id`` of the
    document ``ref``, with the chunk's lines as ``highlight``.

    ``section`` is the innermost section containing both the chunk's first and last line (a chunk
    that crosses into a sibling section gets their common parent); ``document`` the whole text.
    The text is capped to ``max_chars`` from the section's start, or — when the chunk would fall
    past the cap — from a little above the chunk, so the highlighted lines are always shown.
    """
    if level not in BACKFILL_LEVELS:
        raise QmdlabError(f"level {level!r}: expected one of {', '.join(BACKFILL_LEVELS)}")
    [chunk] = read_chunks(idx, ref, [int(chunk_id)], preview_chars=0)
    doc = idx.get(chunk.docno)
    outline = DocumentOutline.parse(doc.body or "", doc.title or "")
    lines = outline._lines
    n = len(lines) - (1 if len(lines) > 1 and lines[-1] == "" else 0)
    if level == "document":
        sec = outline.sections[0]
    else:
        sec = outline.section_at_line(chunk.line_start)
        while sec.address and sec.line_end < chunk.line_end:
            sec = outline.parent(sec.address) or outline.sections[0]
    first, last = (1, n) if not sec.address else (sec.line_start, sec.line_end)
    text = "\n".join(lines[first - 1 : last])
    if max_chars > 0 and len(text) > max_chars:
        upto = len("\n".join(lines[first - 1 : chunk.line_end]))
        if upto > max_chars:  # the chunk would be cut off: start a few lines above it
            first = max(first, chunk.line_start - 2)
            text = "\n".join(lines[first - 1 : last])
    capped = cap_text(text, max_chars, read_on=(doc.docno, first))
    shown_last = first + capped.text.count("\n") - (1 if capped.truncated else 0)
    return Backfilled(
        doc.docno,
        chunk.chunk_id,
        level,
        sec.address,
        tuple(sec.heading_path),
        first,
        min(last, shown_last) if capped.truncated else last,
        (chunk.line_start, chunk.line_end),
        capped.text,
        capped.truncated,
    )


__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_PREVIEW_CHARS",
    "DEFAULT_SUMMARY_CHARS",
    "DEFAULT_MAX_SIBLINGS",
    "BACKFILL_LEVELS",
    "Capped",
    "cap_text",
    "RefMention",
    "CrossRef",
    "find_refs",
    "find_section",
    "section_refs",
    "pick_ref",
    "Jump",
    "jump_to_ref",
    "HitContext",
    "section_summary",
    "context_of",
    "hit_context",
    "hit_contexts",
    "snippet_hit_line",
    "breadcrumbs",
    "ChunkPreview",
    "read_chunks",
    "Backfilled",
    "backfill",
]
