"""SMART collections (CISI, CACM, Medline, …): ``.ALL`` documents, ``.QRY`` queries, ``.REL`` judgments.

Records start with ``.I <id>``; fields are introduced by a line holding a dot and one
letter (``.T`` title, ``.W`` text, ``.A`` authors, ``.X`` cross references, …). Documents
use ``.T`` as title and ``.W`` as text; queries use ``.W`` (``.T`` when ``.W`` is absent).
Ids are the ``.I`` numbers with leading zeros removed, the same ids the ``.REL`` file uses.

``.REL`` variants seen in the wild, told apart per file:

- ``qid docid 0 0.000000`` (CISI, CACM): every listed pair is relevant, grade 1;
- ``qid 0 docid grade`` (Medline, TREC-style: the second column is 0 on every line);
- ``qid docid`` or ``qid docid grade`` (grades may be negative, e.g. ``-1`` = judged not
  relevant: kept as judged, and like ranx every grade below 1 counts as not relevant).

Query numbering: some collections (Cranfield's ``cranqrel`` is the well-known case) number
the queries ``1..N`` in file order in the ``.REL`` file while the ``.QRY`` ``.I`` ids skip
numbers. Read by id, such judgments land on the wrong queries without a sound.
:func:`map_rel_queries` detects it (``.REL`` query ids that are not ``.I`` ids, or a ``.REL``
numbering that is exactly ``1..N`` while the ``.I`` ids are not) and stops with an error
naming the choice: ``qrels_ids="position"`` (the k-th ``.QRY`` record is query k, mapped with
a warning) or ``qrels_ids="ids"`` (the ``.REL`` numbers are ``.I`` ids). Outside Python the
same choice is ``$QMDLAB_SMART_QRELS_IDS=position|ids``. CISI is not affected: its ``.I`` ids
are exactly 1..112 in order, so positions and ids agree.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import SuiteData, docs_frame, find_one, grade_of, numbered_lines, qrels_frame, queries_frame

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
        raise DataFormatError(
            path, line, f"record id {text!r} is not a number", "SMART records start with '.I <number>'"
        )
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
                raise DataFormatError(
                    path,
                    n,
                    f"duplicate record id {rid} (first at line {seen[rid]})",
                    "give every record its own '.I' number",
                )
            seen[rid] = n
            current, letter = {}, None
            records.append((rid, current))
        elif m and (not m.group(2).strip() or line[2:3] in (" ", "\t")):  # ".T" or ".T text", not ".Net"
            if current is None:
                raise DataFormatError(path, n, "field before the first '.I' record", "start the file with '.I <id>'")
            letter = m.group(1)
            current.setdefault(letter, [])
            if m.group(2).strip():
                current[letter].append(m.group(2).strip())
        else:
            if current is None:
                if not line.strip():
                    continue
                raise DataFormatError(path, n, "text before the first '.I' record", "start the file with '.I <id>'")
            if letter is None:
                if line.strip():
                    raise DataFormatError(
                        path,
                        n,
                        "text after '.I' without a field marker",
                        "put '.T' or '.W' on its own line before the text",
                    )
                continue
            current[letter].append(line.strip())
    return [(rid, {k: " ".join(x for x in v if x).strip() for k, v in fields.items()}) for rid, fields in records]


def read_rel(path: Path) -> list[tuple[str, str, int]]:
    """Read a SMART relevance file into ``(qid, docid, grade)`` rows (see the module notes)."""
    rows: list[tuple[int, list[str]]] = []
    for n, line in numbered_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2 or len(parts) > 4:
            raise DataFormatError(
                path, n, f"expected 2-4 fields 'qid docid [..]', got {len(parts)}", "write 'qid docid' per line"
            )
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
        grade = grade_of(grade_text, "grade", path, n, "use an integer grade")
        out.append((_norm_id(qid, path, n), _norm_id(docid, path, n), grade))
    return out


QRELS_IDS = ("auto", "ids", "position")
QRELS_IDS_ENV = "QMDLAB_SMART_QRELS_IDS"


def map_rel_queries(
    rels: list[tuple[str, str, int]], qry_ids: list[str], rel_path: Path, qrels_ids: str = "auto"
) -> list[tuple[str, str, int]]:
    """Check (and, with ``qrels_ids="position"``, remap) the query ids of ``.REL`` rows.

    Parameters
    ----------
    rels : list of (qid, docid, grade)
        As read from the ``.REL`` file.
    qry_ids : list of str
        The ``.QRY`` ``.I`` ids in file order.
    qrels_ids : {"auto", "ids", "position"}
        ``ids``: ``.REL`` query numbers are ``.I`` ids. ``position``: number k is the k-th
        ``.QRY`` record (a warning says so). ``auto``: ids when positions and ids agree for every
        judged query; otherwise stop with an error (the numbering is ambiguous).

    Examples
    --------
    >>> rels = [("1", "9", 1), ("2", "9", 1), ("3", "8", -1)]
    >>> map_rel_queries(rels, ["1", "2", "3"], Path("T.REL")) == rels  # ids = positions: nothing to choose
    True
    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     map_rel_queries(rels, ["1", "2", "4"], Path("T.REL"), "position")
    [('1', '9', 1), ('2', '9', 1), ('4', '8', -1)]
    >>> map_rel_queries(rels, ["1", "2", "4"], Path("T.REL"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    qmdlab.errors.DataFormatError: T.REL: query ids of the judgments do not match the .QRY '.I' ids: 1 judged query id(s) are not '.I' ids (3)...the .QRY file has 3 records with '.I' ids 1..4 with 1 gap(s)...
    """
    if qrels_ids not in QRELS_IDS:
        raise DataFormatError(
            rel_path,
            None,
            f"unknown qrels_ids {qrels_ids!r}",
            f"use one of {', '.join(QRELS_IDS)} (or ${QRELS_IDS_ENV})",
        )
    rel_qids = sorted({q for q, _, _ in rels}, key=int)
    known = set(qry_ids)
    by_position = {str(k + 1): qid for k, qid in enumerate(qry_ids)}
    unknown = [q for q in rel_qids if q not in known]
    if all(by_position.get(q) == q for q in rel_qids):
        return rels  # ids and positions agree on every judged query
    dense = set(rel_qids) == set(by_position) and list(by_position) != qry_ids
    how = (
        f"the .QRY file has {len(qry_ids)} records with '.I' ids {_span(qry_ids)}; the judgments use "
        f"query numbers {_span(rel_qids)}"
    )
    if qrels_ids == "auto":
        if unknown or dense:
            why = (
                f"{len(unknown)} judged query id(s) are not '.I' ids ({', '.join(unknown[:5])}"
                f"{', …' if len(unknown) > 5 else ''})"
                if unknown
                else "the judgments number the queries exactly 1..N while the '.I' ids are not 1..N in file order"
            )
            raise DataFormatError(
                rel_path,
                None,
                f"query ids of the judgments do not match the .QRY '.I' ids: {why}; {how}",
                f"choose how to read them: qrels_ids='position' (query k = the k-th .QRY record) or "
                f"qrels_ids='ids' (numbers are '.I' ids) — load_smart(..., qrels_ids=...) or "
                f"${QRELS_IDS_ENV}=position|ids",
            )
        return rels
    if qrels_ids == "ids":
        if unknown:
            raise DataFormatError(
                rel_path,
                None,
                f"{len(unknown)} judged query id(s) are not .QRY '.I' ids ({', '.join(unknown[:5])}); {how}",
                f"use qrels_ids='position' (${QRELS_IDS_ENV}=position) if the numbers are positions",
            )
        return rels
    beyond = [q for q in rel_qids if q not in by_position]
    if beyond:
        raise DataFormatError(
            rel_path,
            None,
            f"judged query number(s) {', '.join(beyond[:5])} exceed the "
            f"{len(qry_ids)} .QRY records, so they cannot be positions; {how}",
            f"use qrels_ids='ids' (${QRELS_IDS_ENV}=ids)",
        )
    moved = sum(by_position[q] != q for q in rel_qids)
    warnings.warn(
        f"{rel_path}: judgments mapped to queries by position (query k = the k-th .QRY record); "
        f"{moved} of {len(rel_qids)} judged queries get another id than their number",
        stacklevel=3,
    )
    return [(by_position[q], d, g) for q, d, g in rels]


def _span(ids: list[str]) -> str:
    nums = sorted(int(i) for i in ids)
    if not nums:
        return "(none)"
    gaps = len(set(range(nums[0], nums[-1] + 1)) - set(nums))
    return f"{nums[0]}..{nums[-1]}" + (f" with {gaps} gap(s)" if gaps else " without gaps")


GRADES = ("gain", "rank")
"""How a ``.REL`` file's relevance codes are read: ``gain`` — the code is the gain (higher = more
relevant; the default); ``rank`` — the code is a rank of relevance (1 = complete answer … the largest
code = minimum interest), read as gain ``max_code + 1 − code``; codes below 1 are judged not relevant
(gain 0). :func:`rank_gains`."""
GRADES_ENV = "QMDLAB_SMART_GRADES"


def check_grades(grades: str, where: str = "--grades") -> str:
    """``grades`` if it is one of :data:`GRADES`, else a :class:`QmdlabError` naming ``where`` and the fix."""
    if grades not in GRADES:
        from qmdlab.errors import QmdlabError

        raise QmdlabError(
            f"{where} {grades!r}: unknown grade reading; use gain (the code is the gain) or rank "
            f"(1 = most relevant: gain = max_code + 1 - code)"
        )
    return grades


def rank_gains(rels: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """Relevance codes that are ranks (1 = complete answer) turned into gains.

    ``max_code`` is the largest code of the file; a code ``c >= 1`` becomes gain ``max_code + 1 − c``,
    a code below 1 (``0``, ``-1`` = judged not relevant) becomes gain 0 (still judged).

    >>> rank_gains([("1", "a", 1), ("1", "b", 4), ("1", "c", 2), ("2", "d", -1)])
    [('1', 'a', 4), ('1', 'b', 1), ('1', 'c', 3), ('2', 'd', 0)]
    """
    codes = [g for _, _, g in rels if g >= 1]
    top = max(codes) if codes else 0
    return [(q, d, top + 1 - g if g >= 1 else 0) for q, d, g in rels]


def load_smart(directory: str | Path, *, qrels_ids: str | None = None, grades: str | None = None) -> SuiteData:
    """Load a SMART collection directory (one ``.ALL``, one ``.QRY``, one ``.REL`` file).

    ``qrels_ids`` (default ``$QMDLAB_SMART_QRELS_IDS``, else ``auto``) says how the ``.REL``
    query numbers map to ``.QRY`` records; see :func:`map_rel_queries`. ``grades`` (default
    ``$QMDLAB_SMART_GRADES``, else ``gain``) how its codes are read: :data:`GRADES`, :func:`rank_gains`.

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
    qrels_ids = qrels_ids or os.environ.get(QRELS_IDS_ENV) or "auto"
    from_env = not grades and bool(os.environ.get(GRADES_ENV))
    grades = check_grades(grades or os.environ.get(GRADES_ENV) or "gain", f"${GRADES_ENV}" if from_env else "grades")
    all_path = find_one(directory, ALL_PATTERNS, "documents (.ALL)", "smart")
    qry_path = find_one(directory, QRY_PATTERNS, "queries (.QRY)", "smart")
    rel_path = find_one(directory, REL_PATTERNS, "judgments (.REL)", "smart")
    docs = docs_frame([(rid, f.get("T", ""), f.get("W", "")) for rid, f in read_records(all_path)])
    queries = []
    records = read_records(qry_path)
    for rid, f in records:
        text = f.get("W") or f.get("T") or ""
        if text:
            queries.append({"qid": rid, "query": text})
    rels = map_rel_queries(read_rel(rel_path), [rid for rid, _ in records], rel_path, qrels_ids)
    qrels = qrels_frame(rank_gains(rels) if grades == "rank" else rels)
    return SuiteData(queries=queries_frame(queries), qrels=qrels, docs=docs)
