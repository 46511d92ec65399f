"""Cross-references written in a section, and following one to the section it names
(``qmdlab refs``, ``qmdlab jump``, MCP ``jump_to_ref``; the kinds of reference are in
:mod:`qmdlab.search.navigate`)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from qmdlab.errors import QmdlabError
from qmdlab.search.navigate import DEFAULT_MAX_CHARS, FENCE, cap_text
from qmdlab.store.outline import DocumentOutline, Section, slugify
from qmdlab.store.refs import parse_ref

if TYPE_CHECKING:
    from qmdlab.store import Index


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
        if FENCE.match(line):
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


__all__ = ["RefMention", "CrossRef", "find_refs", "find_section", "section_refs", "pick_ref", "Jump", "jump_to_ref"]
