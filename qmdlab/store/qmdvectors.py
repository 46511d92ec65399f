"""Reuse the vectors of a qmd index (``collection import-qmd``): a chunk that qmd embedded with the
model file qmdlab embeds with, cut the same way and embedded from the same text, gets qmd's vector
instead of being embedded again; everything else is left for ``qmdlab embed``.

qmd's database (``~/.cache/qmd/index.sqlite``, ``$INDEX_PATH``, or a project's
``.qmd/index.sqlite``: :func:`qmdlab.store.qmdimport.qmd_index_path`) is opened read-only and
its layout checked first (:meth:`QmdIndex.open`); anything else is refused with one line
(:class:`QmdLayoutError`). What is read (qmd 2.8.3, ``src/store.ts``):

- ``content(hash, doc)``: a file's text; ``hash`` is the sha256 of its UTF-8 (qmd's
  ``hashContent``), the bytes of the file for a UTF-8 file — qmdlab's content hash;
- ``documents(path, title, hash, active)``: each file's title (qmd's ``extractTitle``, the title
  qmd's embedder put before the chunk);
- ``content_vectors(hash, seq, pos, model, embed_fingerprint, total_chunks)``: one row per
  embedded chunk; ``pos`` is where the chunk starts in ``doc``, in UTF-16 code units (JavaScript
  string offsets); ``model`` the embedder reference qmd used (its default
  ``hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf``, ``$QMD_EMBED_MODEL`` or
  ``models.embed``); ``embed_fingerprint`` qmd's ``getEmbeddingFingerprint(model)``
  (:func:`qmd_fingerprint` computes it the same way);
- ``vectors_vec``: ``vec0(hash_seq TEXT PRIMARY KEY, embedding float[DIM] distance_metric=cosine)``,
  one vector per chunk under the key ``{hash}_{seq}``.

Python's ``sqlite3`` loads no extension, so ``vectors_vec`` is read through the shadow tables of
sqlite-vec 0.1.x (qmd 2.8.3 pins 0.1.9; the layout is the same from 0.1.0 to 0.1.9):

- ``vectors_vec_rowids(rowid, id TEXT UNIQUE NOT NULL, chunk_id, chunk_offset)``: the key's row
  and the storage chunk and slot holding its vector;
- ``vectors_vec_chunks(chunk_id, size, validity, rowids)``: a storage chunk of ``size`` slots;
  ``validity`` is a bitmap of ``size / 8`` bytes (slot ``i`` is bit ``i % 8`` of byte ``i // 8``),
  ``rowids`` ``size`` int64 (the row in each slot);
- ``vectors_vec_vector_chunks00(rowid, vectors)``: the chunk's vectors, ``size × DIM`` float32,
  slot ``i`` at byte ``i × DIM × 4``; addressed by the internal ``_rowid_`` = ``chunk_id``, as
  sqlite-vec's own blob reads do (its ``rowid`` column is not an alias of it);
- ``vectors_vec_info(key, value)`` (from 0.1.6): ``CREATE_VERSION``, which must be ``v0.1.x``.

Numbers are little-endian, as sqlite-vec writes them on every platform qmd ships for. A vector is
read only when its slot is marked valid and names its row; another table definition (partition,
metadata or auxiliary columns, another element type, another distance), a missing shadow table or
column, another sqlite-vec version, or a blob of the wrong size is refused.

A qmdlab chunk gets qmd's vector only when all of these hold (:func:`reuse_qmd_vectors`):

1. *same model file*: qmd's ``model`` and qmdlab's embedder name one GGUF file (the caller's
   ``same_model``: :func:`qmdlab.models.registry.same_model_file`), and qmd's row carries the
   fingerprint qmd computes for that model (so its templates and chunk sizes are those read here);
2. *same content*: qmd's content hash is qmdlab's, qmd's text hashes to it and equals qmdlab's;
3. *same chunk*: qmd stores where a chunk starts, not where it ends, so a chunk's text is known when
   it runs to the end of the document: qmd's last chunk of the content (``seq = total_chunks - 1``;
   the whole note when qmd cut it into one). qmdlab's chunk must start at the same place and run to
   the end too. Notes with front matter (qmdlab's chunks leave it out, qmd's hold it) and notes qmd
   cut into several chunks (at about 2,700 characters: 900 tokens × 3; qmdlab cuts at 3,600) do
   not match;
4. *same input*: what qmd embedded (``title: TITLE | text: CHUNK`` for EmbeddingGemma,
   :func:`qmd_format_doc`, with qmd's title of the file) equals what qmdlab's embedder would embed
   (its template with qmdlab's title), for every active file holding the content on either side;
5. qmdlab's embedder reads the whole input (its ``max_tokens``; qmd's chunks are at most 900 tokens,
   a local model file without a known context reads 512);
6. the vector is finite and not all zero.

Then the first ``check`` matched chunks are embedded by qmdlab itself: when any disagrees with
qmd's vector (cosine below :data:`MIN_COSINE`), nothing is reused. Without qmdlab's model file on
this machine the check is skipped, and said.

Only the chunks of the collections given are considered (the import passes those it registered and
indexed, never one whose root waits for ``qmdlab trust``), so a qmd database can supply vectors to
the notes of the folders its own config imported and to nothing else. Vectors are stored
L2-normalised under the embedder's fingerprint, each with its chunk's key, as ``qmdlab embed``
stores its own.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qmdlab.errors import StoreError

#: qmd's chunk size and overlap in tokens (``CHUNK_SIZE_TOKENS``, ``CHUNK_OVERLAP_TOKENS``), part of its fingerprint.
QMD_CHUNK_TOKENS = 900
QMD_OVERLAP_TOKENS = 135
#: The probes of qmd's ``getEmbeddingFingerprint``.
_PROBE_QUERY = "__qmd_embedding_query_probe__"
_PROBE_TITLE = "__qmd_embedding_title_probe__"
_PROBE_DOC = "__qmd_embedding_document_probe__"
#: The least cosine between qmd's vector and qmdlab's embedding of a checked chunk. The same input
#: and model file agree to 0.9989 or more (qmd's llama.cpp and qmdlab's round differently); the
#: same model given another input (a title, a trailing newline) disagrees at 0.97 or less.
MIN_COSINE = 0.99
#: Vectors stored per transaction.
BATCH = 512

_VEC_SQL = re.compile(
    r"^\s*CREATE\s+VIRTUAL\s+TABLE\s+\"?vectors_vec\"?\s+USING\s+vec0\s*\(\s*hash_seq\s+TEXT\s+PRIMARY\s+KEY\s*,"
    r"\s*embedding\s+float\[(\d+)\]\s+distance_metric=cosine\s*\)\s*$",
    re.IGNORECASE,
)
#: Tables and the columns read of each (a table may hold more columns).
_QMD_COLUMNS = {
    "content": {"hash", "doc"},
    "documents": {"path", "title", "hash", "active"},
    "content_vectors": {"hash", "seq", "pos", "model", "embed_fingerprint", "total_chunks"},
}
_SHADOW_COLUMNS = {
    "vectors_vec_chunks": ["chunk_id", "size", "validity", "rowids"],
    "vectors_vec_rowids": ["rowid", "id", "chunk_id", "chunk_offset"],
    "vectors_vec_vector_chunks00": ["rowid", "vectors"],
}
_SHADOW_PREFIX = "vectors_vec_"


class QmdLayoutError(StoreError):
    """qmd's database is not laid out as this module reads it (one line: what differs)."""


def _is_qwen_embedding(model: str) -> bool:
    """qmd's ``isQwen3EmbeddingModel``."""
    return bool(re.search(r"qwen.*embed", model, re.I) or re.search(r"embed.*qwen", model, re.I))


def qmd_format_query(query: str, model: str) -> str:
    """qmd's ``formatQueryForEmbedding``.

    >>> qmd_format_query("undo a commit", "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf")
    'task: search result | query: undo a commit'
    """
    if _is_qwen_embedding(model):
        return f"Instruct: Retrieve relevant documents for the given query\nQuery: {query}"
    return f"task: search result | query: {query}"


def qmd_format_doc(text: str, title: str, model: str) -> str:
    """qmd's ``formatDocForEmbedding``: what qmd embeds for a chunk of a file titled ``title``.

    >>> qmd_format_doc("rebase onto main", "Git", "/m/embeddinggemma-300m-q8_0.gguf"), qmd_format_doc("x", "", "e.gguf")
    ('title: Git | text: rebase onto main', 'title: none | text: x')
    >>> qmd_format_doc("x", "T", "hf:Qwen/Qwen3-Embedding-0.6B-GGUF/Qwen3-Embedding-0.6B-Q8_0.gguf")
    'T\\nx'
    """
    if _is_qwen_embedding(model):
        return f"{title}\n{text}" if title else text
    return f"title: {title or 'none'} | text: {text}"


def qmd_fingerprint(model: str) -> str:
    """qmd's ``getEmbeddingFingerprint(model)``: 6 hex characters of the sha256 of the model, its
    query and document formats and qmd's chunk sizes.

    >>> qmd_fingerprint("/root/.cache/qmdlab/models/packaged/embeddinggemma-300m-q8_0.gguf")
    'ada6aa'
    """
    significant = "\n".join(
        (
            f"model:{model}",
            f"query:{qmd_format_query(_PROBE_QUERY, model)}",
            f"doc:{qmd_format_doc(_PROBE_DOC, _PROBE_TITLE, model)}",
            f"chunk_tokens:{QMD_CHUNK_TOKENS}",
            f"chunk_overlap_tokens:{QMD_OVERLAP_TOKENS}",
        )
    )
    return hashlib.sha256(significant.encode("utf-8")).hexdigest()[:6]


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (JavaScript's ``length``).

    >>> utf16_len("abc"), utf16_len("a😀b")
    (3, 4)
    """
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


@dataclass(frozen=True)
class QmdChunk:
    """qmd's last chunk of one content: ``seq``, start ``pos`` (UTF-16), the model it was embedded with."""

    hash: str
    seq: int
    pos: int
    model: str


class QmdIndex:
    """qmd's database, read-only, its layout checked (:meth:`open`)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, dim: int, chunk_size: int | None):
        self.path, self.conn, self.dim, self.chunk_size = path, conn, dim, chunk_size
        self._blob: tuple[int, bytes, bytes, bytes, int] | None = None  # the storage chunk read last

    @classmethod
    def open(cls, path: str | Path) -> QmdIndex:
        """Open ``path`` read-only and check its layout (:class:`QmdLayoutError` otherwise)."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise QmdLayoutError(f"{path}: no such file")
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error as err:
            raise QmdLayoutError(f"{path}: cannot be opened read-only ({err})") from None
        try:
            conn.execute("BEGIN")  # one snapshot for the whole read, whatever qmd writes meanwhile
            dim, chunk_size = _check_layout(conn, path)
        except (sqlite3.Error, QmdLayoutError) as err:
            conn.close()
            if isinstance(err, QmdLayoutError):
                raise
            raise QmdLayoutError(f"{path}: cannot be read as a qmd index ({err})") from None
        return cls(path, conn, dim, chunk_size)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> QmdIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def models(self) -> list[str]:
        """The embedder references of qmd's vectors."""
        return [r[0] for r in self.conn.execute("SELECT DISTINCT model FROM content_vectors ORDER BY model")]

    def last_chunks(self, models: Iterable[str]) -> dict[str, QmdChunk]:
        """``hash → QmdChunk``: the last chunk of each content qmd embedded with one of ``models``,
        under the fingerprint qmd computes for that model (a content embedded with two of them: the
        first model given)."""
        out: dict[str, QmdChunk] = {}
        for model in models:
            rows = self.conn.execute(
                "SELECT hash, seq, pos FROM content_vectors WHERE model = ? AND embed_fingerprint = ? "
                "AND seq = total_chunks - 1",
                (model, qmd_fingerprint(model)),
            )
            for h, seq, pos in rows:
                if isinstance(h, str) and isinstance(seq, int) and isinstance(pos, int):
                    out.setdefault(h, QmdChunk(h, seq, pos, model))
        return out

    def text(self, h: str) -> str | None:
        """qmd's text of content ``h``, ``None`` unless it hashes to ``h``."""
        row = self.conn.execute("SELECT doc FROM content WHERE hash = ?", (h,)).fetchone()
        if row is None or not isinstance(row[0], str):
            return None
        try:
            ok = hashlib.sha256(row[0].encode("utf-8")).hexdigest() == h
        except UnicodeEncodeError:  # a lone surrogate: not text qmd read from a UTF-8 file
            return None
        return row[0] if ok else None

    def titles(self, h: str) -> set[str]:
        """qmd's titles of the active files holding content ``h``."""
        return {r[0] for r in self.conn.execute("SELECT title FROM documents WHERE hash = ? AND active = 1", (h,))}

    def vector(self, key: str) -> bytes | None:
        """The ``dim × float32`` bytes stored under ``key`` (``{hash}_{seq}``), ``None`` when there is
        no such row or its slot is not valid; :class:`QmdLayoutError` for a blob of the wrong size."""
        row = self.conn.execute(
            f"SELECT rowid, chunk_id, chunk_offset FROM {_SHADOW_PREFIX}rowids WHERE id = ?", (key,)
        ).fetchone()
        if row is None or not all(isinstance(v, int) for v in row):
            return None
        rowid, chunk_id, offset = row
        if self._blob is None or self._blob[0] != chunk_id:
            chunk = self.conn.execute(
                f"SELECT size, validity, rowids FROM {_SHADOW_PREFIX}chunks WHERE chunk_id = ?", (chunk_id,)
            ).fetchone()
            vecs = self.conn.execute(
                f"SELECT vectors FROM {_SHADOW_PREFIX}vector_chunks00 WHERE _rowid_ = ?", (chunk_id,)
            ).fetchone()
            if chunk is None or vecs is None:
                return None
            size, validity, rowids = chunk
            blob = vecs[0]
            if not (isinstance(size, int) and size > 0 and size % 8 == 0):
                raise QmdLayoutError(f"{self.path}: storage chunk {chunk_id} has size {size!r}, not a multiple of 8")
            for name, value, want in (
                ("validity", validity, size // 8),
                ("rowids", rowids, size * 8),
                ("vectors", blob, size * self.dim * 4),
            ):
                if not isinstance(value, bytes) or len(value) != want:
                    got = len(value) if isinstance(value, bytes) else type(value).__name__
                    raise QmdLayoutError(
                        f"{self.path}: storage chunk {chunk_id}: {name} holds {got} bytes, not {want} "
                        f"(sqlite-vec 0.1 with {self.dim}-d float vectors)"
                    )
            self._blob = (chunk_id, validity, rowids, blob, size)
        _, validity, rowids, blob, size = self._blob
        if not 0 <= offset < size or not validity[offset // 8] >> (offset % 8) & 1:
            return None
        if struct.unpack_from("<q", rowids, offset * 8)[0] != rowid:
            return None
        width = self.dim * 4
        return blob[offset * width : (offset + 1) * width]


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _check_layout(conn: sqlite3.Connection, path: Path) -> tuple[int, int | None]:
    """``(dim, storage chunk size or None)`` of qmd's database, or :class:`QmdLayoutError`."""
    tables = {r[0]: r[1] for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
    for table, wanted in _QMD_COLUMNS.items():
        if table not in tables:
            raise QmdLayoutError(f"{path}: not a qmd index (no table {table})")
        missing = wanted - set(_columns(conn, table))
        if missing:
            raise QmdLayoutError(f"{path}: qmd's table {table} has no column {', '.join(sorted(missing))}")
    sql = tables.get("vectors_vec")
    if sql is None:
        raise QmdLayoutError(f"{path}: qmd's index holds no vectors (no table vectors_vec; run `qmd embed` first)")
    m = _VEC_SQL.match(sql or "")
    if m is None:
        raise QmdLayoutError(
            f"{path}: vectors_vec is not the table read here "
            "(vec0(hash_seq TEXT PRIMARY KEY, embedding float[N] distance_metric=cosine))"
        )
    dim = int(m.group(1))
    if not 0 < dim <= 65536:
        raise QmdLayoutError(f"{path}: vectors_vec holds {dim}-d vectors")
    shadows = {t for t in tables if t.startswith(_SHADOW_PREFIX)}
    known = {*_SHADOW_COLUMNS, f"{_SHADOW_PREFIX}info"}
    if shadows - known:
        raise QmdLayoutError(
            f"{path}: vectors_vec has shadow tables sqlite-vec 0.1 does not make for it "
            f"({', '.join(sorted(shadows - known))})"
        )
    for table, cols in _SHADOW_COLUMNS.items():
        if table not in tables:
            raise QmdLayoutError(f"{path}: vectors_vec has no shadow table {table} (not sqlite-vec 0.1's layout)")
        if _columns(conn, table) != cols:
            raise QmdLayoutError(
                f"{path}: {table} has columns {', '.join(_columns(conn, table))}, not {', '.join(cols)} "
                "(not sqlite-vec 0.1's layout)"
            )
    if f"{_SHADOW_PREFIX}info" in tables:
        row = conn.execute(f"SELECT value FROM {_SHADOW_PREFIX}info WHERE key = 'CREATE_VERSION'").fetchone()
        version = row[0] if row else None
        if not (isinstance(version, str) and re.fullmatch(r"v0\.1\.\d+(-[\w.]+)?", version)):
            raise QmdLayoutError(f"{path}: vectors_vec was made by sqlite-vec {version!r}; only v0.1.x is read")
    sizes = {r[0] for r in conn.execute(f"SELECT DISTINCT size FROM {_SHADOW_PREFIX}chunks")}
    if len(sizes) > 1:
        raise QmdLayoutError(f"{path}: vectors_vec's storage chunks differ in size ({sorted(sizes)})")
    return dim, next(iter(sizes), None)


#: Why a chunk was not given qmd's vector (:attr:`VectorReuse.left`).
NO_VECTOR = "no vector of its text in qmd's index"
CUT_DIFFERENTLY = "cut differently by qmd (front matter, or a note longer than one qmd chunk)"
OTHER_INPUT = "embedded by qmd with another title or text"
LONGER = "longer than qmdlab's embedder reads (it would cut the text)"
BAD_VECTOR = "qmd's vector unreadable, not finite or all zero"


@dataclass
class VectorReuse:
    """What :func:`reuse_qmd_vectors` did."""

    database: Path
    qmd_models: list[str] = field(default_factory=list)  # the embedders of qmd's vectors
    models: list[str] = field(default_factory=list)  # those that are qmdlab's embedder's file
    considered: int = 0  # qmdlab chunks without a vector, in scope
    reused: int = 0
    pending: int = 0  # chunks in scope still without a vector afterwards
    left: dict[str, int] = field(default_factory=dict)  # reason → chunks not reused
    checked: int = 0  # chunks embedded by qmdlab to compare
    min_cosine: float | None = None
    note: str | None = None  # why nothing was reused, or why the check was skipped

    def lines(self) -> list[str]:
        """What the CLI prints."""
        out = [
            f"vectors: {self.reused} reused from qmd's index ({', '.join(self.models) or 'no matching model'}); "
            f"{self.pending} chunk(s) still need `qmdlab embed`"
        ]
        for reason, n in sorted(self.left.items(), key=lambda kv: -kv[1]):
            out.append(f"  {n} not reused: {reason}")
        if self.checked:
            out.append(
                f"  checked: {self.checked} reused chunk(s) embedded by qmdlab agree (cosine ≥ {self.min_cosine:.4f})"
            )
        if self.note:
            out.append(f"  {self.note}")
        return out


@dataclass
class _Match:
    chunk_id: int
    title: str
    text: str
    vector: Any  # numpy float32 vector, L2-normalised


def _candidates(idx: Any, fingerprint: str, collections: Sequence[str] | None) -> list[tuple[int, str, int, int]]:
    """``(chunk id, content hash, char_start, char_end)`` of the chunks of ``collections``' active
    files with no vector under ``fingerprint``."""
    where, params = idx._coll_clause(collections)
    with idx._lock:
        return idx.conn.execute(
            "SELECT k.id, k.hash, k.char_start, k.char_end FROM chunks k "
            f"WHERE EXISTS (SELECT 1 FROM documents d WHERE d.hash = k.hash AND d.active = 1{where}) "
            "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = k.id AND v.fingerprint = ?"
            f"{idx._key_match()}) ORDER BY k.id",
            [*params, fingerprint],
        ).fetchall()


def reuse_qmd_vectors(
    idx: Any,
    qmd_db: str | Path,
    embedder: Any,
    *,
    same_model: Callable[[str], bool],
    collections: Sequence[str] | None = None,
    check: int = 2,
    can_check: bool = True,
) -> VectorReuse:
    """Give the chunks of ``collections`` (default all) that have no vector from ``embedder`` the
    vectors qmd stored for them in ``qmd_db``, by the rules of the module notes.

    Parameters
    ----------
    idx : Index
        qmdlab's index (written: the vectors reused).
    qmd_db : path
        qmd's database (read only).
    embedder : Embedder
        qmdlab's embedder: its ``fingerprint``, its ``template.document(title, text)`` and, for the
        check, ``embed_documents``.
    same_model : callable
        ``same_model(qmd's model reference)``: whether it names the embedder's model file.
    check : int
        Matched chunks embedded by ``embedder`` and compared with qmd's vectors first (0: none).
    can_check : bool
        Whether the embedder's model file is on this machine (else the check is skipped and noted).

    Raises
    ------
    QmdLayoutError
        qmd's database is not laid out as read here; nothing was written.
    """
    import numpy as np

    from qmdlab.store.vectors import vector_problem

    fp = embedder.fingerprint
    todo = _candidates(idx, fp, collections)
    with QmdIndex.open(qmd_db) as qmd:
        res = VectorReuse(qmd.path, qmd_models=qmd.models(), considered=len(todo))
        res.models = [m for m in res.qmd_models if same_model(m)]
        template = getattr(embedder, "template", None)
        if not res.models or template is None:
            res.pending = len(todo)
            ours = getattr(embedder, "model_id", "?")
            res.note = (
                f"qmd embedded with {', '.join(res.qmd_models) or 'nothing yet'}; qmdlab embeds with {ours}: "
                "not the same model file, nothing reused"
            )
            return res
        last = qmd.last_chunks(res.models)
        matches: list[_Match] = []
        by_hash: dict[str, list[tuple[int, int, int]]] = {}
        for chunk_id, h, start, end in todo:
            by_hash.setdefault(h, []).append((chunk_id, start, end))

        def skip(reason: str, n: int = 1) -> None:
            res.left[reason] = res.left.get(reason, 0) + n

        limit = getattr(embedder, "max_tokens", None)
        count = getattr(embedder, "count_tokens", None) if can_check else None

        def fits(text: str) -> bool:
            """qmd embedded all of ``text``: qmdlab's embedder must read all of it too (a token is a
            byte or more, plus a begin and an end token)."""
            if not isinstance(limit, int) or len(text.encode("utf-8")) + 2 <= limit:
                return True
            return callable(count) and count(text) <= limit

        for h, chunks in by_hash.items():
            q = last.get(h)
            if q is None:
                skip(NO_VECTOR, len(chunks))
                continue
            doc = qmd.text(h)
            with idx._lock:
                row = idx.conn.execute("SELECT body FROM content WHERE hash = ?", (h,)).fetchone()
                ours_titles = {
                    r[0] for r in idx.conn.execute("SELECT title FROM documents WHERE hash = ? AND active = 1", (h,))
                }
            body = row[0] if row else None
            if doc is None or body != doc:
                skip(NO_VECTOR, len(chunks))
                continue
            qmd_titles = qmd.titles(h)
            for chunk_id, start, end in chunks:
                if end != len(body) or utf16_len(body[:start]) != q.pos:
                    skip(CUT_DIFFERENTLY)
                    continue
                text = body[start:end]
                inputs = {qmd_format_doc(text, t, q.model) for t in qmd_titles}
                ours = {template.document(t, text) for t in ours_titles}
                if len(inputs) != 1 or inputs != ours:
                    skip(OTHER_INPUT)
                    continue
                if not fits(next(iter(inputs))):
                    skip(LONGER)
                    continue
                raw = qmd.vector(f"{h}_{q.seq}")
                vec = None if raw is None else np.frombuffer(raw, dtype="<f4").astype(np.float32)
                if vec is None or vector_problem(vec[None, :], zero_ok=False) is not None:
                    skip(BAD_VECTOR)
                    continue
                matches.append(_Match(chunk_id, next(iter(ours_titles)), text, vec / np.linalg.norm(vec)))
    if matches and check > 0:
        if not can_check:
            res.note = "not checked against qmdlab's own embedding: its model file is not on this machine yet"
        else:
            sample = matches[:check]
            ours_vecs = np.asarray(embedder.embed_documents([(m.title, m.text) for m in sample]), dtype=np.float32)
            if ours_vecs.shape != (len(sample), sample[0].vector.shape[0]):
                res.pending = len(todo)
                res.note = (
                    f"qmd's vectors are {sample[0].vector.shape[0]}-d, qmdlab's embedder gives "
                    f"{ours_vecs.shape[-1]}-d ones: not the same model, nothing reused"
                )
                return res
            norms = np.linalg.norm(ours_vecs, axis=1)
            cos = [float(ours_vecs[i] @ m.vector / norms[i]) if norms[i] else 0.0 for i, m in enumerate(sample)]
            res.checked, res.min_cosine = len(sample), min(cos)
            if res.min_cosine < MIN_COSINE:
                res.pending, res.checked = len(todo), 0
                res.note = (
                    f"qmd's vectors differ from qmdlab's embedding of the same chunks (cosine {res.min_cosine:.4f} "
                    f"< {MIN_COSINE}): not the same model after all, nothing reused"
                )
                return res
    for a in range(0, len(matches), BATCH):
        part = matches[a : a + BATCH]
        res.reused += idx.store_vectors([m.chunk_id for m in part], np.stack([m.vector for m in part]), fp)
    res.pending = idx.chunks_needing_vectors(fp, list(collections) if collections is not None else None).height
    return res
