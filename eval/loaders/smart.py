"""SMART collections (CISI, CACM, Medline, …): ``.ALL`` documents, ``.QRY`` queries, ``.REL`` judgments.

Records start with ``.I <id>``; fields are introduced by a line holding a dot and one
letter (``.T`` title, ``.W`` text, ``.A`` authors, ``.X`` cross references, …). Documents
use ``.T`` as title and ``.W`` as text; queries use ``.W`` (``.T`` when ``.W`` is absent).
Ids are the ``.I`` numbers with leading zeros removed, the same ids the ``.REL`` file uses.

``.REL`` variants seen in the wild, told apart per file:

- ``qid docid 0 0.000000`` (CISI, CACM): every listed pair is relevant, grade 1;
- ``qid 0 docid grade`` (Medline, TREC-style: the second column is 0 on every line);
- ``qid docid`` or ``qid docid grade``.
"""
from __future__ import annotations

import re
from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, docs_frame, find_one, numbered_lines, qrels_frame, queries_frame

_FIELD = re.compile(r"^\.([A-Z])\s*(.*)$")
ALL_PATTERNS = ("*.ALL", "*.all", "*.all.*")
QRY_PATTERNS = ("*.QRY", "*.qry", "*.qry.*")
REL_PATTERNS = ("*.REL", "*.rel", "*qrel*")


def _norm_id(text: str, path: Path, line: int) -> str:
    """Strip leading zeros of a numeric SMART id.

    >>> _norm_id("007", Path("x"), 1)
    '7'
    """
    text = text.strip()
    if not text.isdigit():
        raise DataFormatError(path, line, f"record id {text!r} is not a number",
                              "SMART records start with '.I <number>'")
    return str(int(text))


def read_records(path: Path) -> list[tuple[str, dict[str, str]]]:
    """Parse a SMART file into ``[(id, {field letter: text}), …]`` in file order.

    Raises
    ------
    DataFormatError
        On text before the first ``.I``, or a duplicate id.
    """
    records: list[tuple[str, dict[str, list[str]]]] = []
    seen: dict[str, int] = {}
    current: dict[str, list[str]] | None = None
    letter: str | None = None
    for n, line in numbered_lines(path):
        m = _FIELD.match(line)
        if m and m.group(1) == "I":
            rid = _norm_id(m.group(2), path, n)
            if rid in seen:
                raise DataFormatError(path, n, f"duplicate record id {rid} (first at line {seen[rid]})",
                                      "give every record its own '.I' number")
            seen[rid] = n
            current, letter = {}, None
            records.append((rid, current))
        elif m and (not m.group(2).strip() or line[2:3] in (" ", "\t")):  # ".T" or ".T text", not ".Net"
            if current is None:
                raise DataFormatError(path, n, "field before the first '.I' record",
                                      "start the file with '.I <id>'")
            letter = m.group(1)
            current.setdefault(letter, [])
            if m.group(2).strip():
                current[letter].append(m.group(2).strip())
        else:
            if current is None:
                if not line.strip():
                    continue
                raise DataFormatError(path, n, "text before the first '.I' record",
                                      "start the file with '.I <id>'")
            if letter is None:
                if line.strip():
                    raise DataFormatError(path, n, "text after '.I' without a field marker",
                                          "put '.T' or '.W' on its own line before the text")
                continue
            current[letter].append(line.strip())
    return [(rid, {k: " ".join(x for x in v if x).strip() for k, v in fields.items()})
            for rid, fields in records]


def read_rel(path: Path) -> list[tuple[str, str, int]]:
    """Read a SMART relevance file into ``(qid, docid, grade)`` rows (see the module notes)."""
    rows: list[tuple[int, list[str]]] = []
    for n, line in numbered_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2 or len(parts) > 4:
            raise DataFormatError(path, n, f"expected 2-4 fields 'qid docid [..]', got {len(parts)}",
                                  "write 'qid docid' per line")
        rows.append((n, parts))
    if not rows:
        raise DataFormatError(path, None, "no judgments found", "add lines 'qid docid'")
    trec_style = all(len(p) == 4 and p[1] == "0" for _, p in rows)
    out = []
    for n, parts in rows:
        if trec_style:
            qid, docid, grade_text = parts[0], parts[2], parts[3]
        elif len(parts) == 4:
            qid, docid, grade_text = parts[0], parts[1], "1"
        elif len(parts) == 3:
            qid, docid, grade_text = parts
        else:
            qid, docid, grade_text = parts[0], parts[1], "1"
        try:
            grade = int(float(grade_text))
        except (ValueError, OverflowError):  # "nan" / "inf" / "1e999"
            raise DataFormatError(path, n, f"grade {grade_text!r} is not a number",
                                  "use an integer grade") from None
        out.append((_norm_id(qid, path, n), _norm_id(docid, path, n), grade))
    return out


def load_smart(directory: str | Path) -> SuiteData:
    """Load a SMART collection directory (one ``.ALL``, one ``.QRY``, one ``.REL`` file).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "T.ALL").write_text(".I 1\\n.T\\nCats\\n.W\\nAll about cats.\\n")
    >>> _ = (d / "T.QRY").write_text(".I 1\\n.W\\ncats?\\n")
    >>> _ = (d / "T.REL").write_text("1 1 0 0.000000\\n")
    >>> s = load_smart(d)
    >>> s.docs.rows(), s.queries["query"].to_list(), s.qrels.rows()
    ([('1', 'Cats', 'All about cats.')], ['cats?'], [('1', '1', 1)])
    """
    directory = Path(directory)
    all_path = find_one(directory, ALL_PATTERNS, "documents (.ALL)", "smart")
    qry_path = find_one(directory, QRY_PATTERNS, "queries (.QRY)", "smart")
    rel_path = find_one(directory, REL_PATTERNS, "judgments (.REL)", "smart")
    docs = docs_frame([(rid, f.get("T", ""), f.get("W", "")) for rid, f in read_records(all_path)])
    queries = []
    for rid, f in read_records(qry_path):
        text = f.get("W") or f.get("T") or ""
        if text:
            queries.append({"qid": rid, "query": text})
    qrels = qrels_frame(read_rel(rel_path))
    return SuiteData(queries=queries_frame(queries), qrels=qrels, docs=docs)
