"""TREC-style suites: topics + qrels + documents.

A TREC suite directory holds

- topics: ``topics*`` in TREC SGML (``<top> <num> Number: 401 <title> … </top>``; the query
  is the ``<title>`` text) or a tab-separated ``topics*.tsv`` (``qid<TAB>query``);
- qrels: ``qrels*`` (``qid 0 docno grade``);
- documents: either ``corpus/`` (markdown files indexed in place; docno = path relative to
  it) or TREC SGML files ``*.trec`` / ``docs*`` (``<DOC><DOCNO>id</DOCNO> … </DOC>``; an
  optional ``<TITLE>`` becomes the title, the rest of the text the body).
"""

from __future__ import annotations

import re
from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, docs_frame, find_one, numbered_lines, queries_frame, read_trec_qrels

_TAG = re.compile(r"<(/?)(top|num|title|desc|narr)>", re.I)


def read_topics(path: Path) -> list[dict]:
    """Read TREC topics (SGML, or ``qid<TAB>query`` when the file has no ``<top>``)."""
    lines = list(numbered_lines(path))
    rows: list[dict] = []
    if not any("<top>" in line.lower() for _, line in lines):
        for n, line in lines:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
                raise DataFormatError(path, n, "expected 'qid<TAB>query'", "separate the id and the query with one tab")
            rows.append({"qid": parts[0].strip(), "query": parts[1].strip()})
        return rows
    current: dict | None = None
    tag: str | None = None
    for n, line in lines:
        pos = 0
        for m in _TAG.finditer(line):
            if current is not None and tag is not None:
                current.setdefault(tag, []).append(line[pos : m.start()])
            closing, name = m.group(1), m.group(2).lower()
            if name == "top":
                if closing:
                    if current is None:
                        raise DataFormatError(path, n, "'</top>' without '<top>'", "balance the tags")
                    rows.append(_finish_topic(current, path, n))
                    current, tag = None, None
                else:
                    if current is not None:
                        raise DataFormatError(
                            path, n, "'<top>' inside an open topic", "close the previous topic with '</top>'"
                        )
                    current, tag = {"_line": n}, None
            elif current is None:
                raise DataFormatError(path, n, f"'<{name}>' outside '<top>'", "wrap each topic in <top> … </top>")
            else:
                tag = None if closing else name
            pos = m.end()
        if current is not None and tag is not None:
            current.setdefault(tag, []).append(line[pos:])
    if current is not None:
        raise DataFormatError(path, current["_line"], "topic not closed", "add '</top>'")
    return rows


def _finish_topic(topic: dict, path: Path, line: int) -> dict:
    num = " ".join(" ".join(topic.get("num", [])).split())
    num = re.sub(r"^number:\s*", "", num, flags=re.I).strip()
    title = " ".join(" ".join(topic.get("title", [])).split())
    title = re.sub(r"^topic:\s*", "", title, flags=re.I).strip()
    if not num:
        raise DataFormatError(path, topic["_line"], "topic without a <num>", "add '<num> Number: <id>'")
    if not title:
        raise DataFormatError(path, topic["_line"], f"topic {num} has no <title> text", "add a <title>")
    return {"qid": num, "query": title}


_DOC = re.compile(r"<DOC>(.*?)</DOC>", re.S | re.I)
_DOCNO = re.compile(r"<DOCNO>\s*(.*?)\s*</DOCNO>", re.S | re.I)
_TITLE = re.compile(r"<(?:TITLE|HEAD|HL)>\s*(.*?)\s*</(?:TITLE|HEAD|HL)>", re.S | re.I)
_ANYTAG = re.compile(r"</?[A-Za-z][^>]*>")


def read_trec_docs(path: Path) -> list[tuple[str, str, str]]:
    """Read ``<DOC>`` records from a TREC SGML file into ``(docno, title, text)``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in _DOC.finditer(text):
        body = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        no = _DOCNO.search(body)
        if not no or not no.group(1):
            raise DataFormatError(path, line, "<DOC> without a <DOCNO>", "add <DOCNO>id</DOCNO>")
        title_m = _TITLE.search(body)
        title = " ".join(_ANYTAG.sub(" ", title_m.group(1)).split()) if title_m else ""
        rest = _DOCNO.sub(" ", body)
        if title_m:
            rest = rest.replace(title_m.group(0), " ", 1)
        out.append((no.group(1), title, " ".join(_ANYTAG.sub(" ", rest).split())))
    if not out:
        raise DataFormatError(path, None, "no <DOC> records found", "write <DOC><DOCNO>id</DOCNO>…</DOC>")
    return out


def load_trec(directory: str | Path) -> SuiteData:
    """Load a TREC-style suite directory (see the module notes for the layout)."""
    directory = Path(directory)
    topics = find_one(directory, ("topics*",), "topics", "trec")
    qrels = find_one(directory, ("qrels*",), "qrels", "trec")
    queries = queries_frame(read_topics(topics))
    qrels_df = read_trec_qrels(qrels)
    corpus = directory / "corpus"
    if corpus.is_dir():
        return SuiteData(queries=queries, qrels=qrels_df, corpus_dir=corpus)
    doc_files = sorted(p for p in list(directory.glob("*.trec")) + list(directory.glob("docs*")) if p.is_file())
    if not doc_files:
        raise DataFormatError(
            directory,
            None,
            "no documents: neither corpus/ nor *.trec / docs* files",
            "add the documents as corpus/*.md or TREC SGML <DOC> files",
        )
    rows = []
    for p in dict.fromkeys(doc_files):
        rows.extend(read_trec_docs(p))
    return SuiteData(queries=queries, qrels=qrels_df, docs=docs_frame(rows))
