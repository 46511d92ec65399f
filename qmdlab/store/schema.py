"""The index's SQLite schema.

- ``content(hash, body)``: content-addressed file text (sha256 of the raw bytes).
- ``documents``: one row per (collection, path); ``active = 0`` once the file vanished.
  ``metadata`` is the front matter as JSON; ``tags`` (JSON list) and ``date`` (ISO) are
  denormalised from it for filtering (``date`` falls back to the file's mtime day).
- ``documents_fts``: FTS5 (``porter unicode61``) over filepath (= docno), title, body and
  expansions of *active* documents, kept in sync by triggers. Title, body and expansions pass
  through ``qmdlab_fts_text`` (CJK characters spaced apart, see :mod:`qmdlab.terms`); the
  function is registered on every connection :class:`~qmdlab.store.Index` opens.
  ``expansions`` holds the kept generated queries (``doc_queries.kept = 1``) of the document's
  chunks for the index's active generator (``meta.doc2query_generator``), one per line, in
  chunk order; empty without one. An index made before the column existed has three columns:
  readers keep working (:func:`fts_columns`; search code never names the fourth column there)
  and its next write rebuilds the table with four (:func:`migrate_fts`).
- ``doc_queries``: queries generated for a chunk (doc2query, ``qmdlab expand-docs``), keyed by
  content hash, chunk seq, generator fingerprint and sample number ``n``: the ``raw`` generated
  text, the parsed ``query`` (``NULL``: not a usable query), ``kept`` (the round-trip filter:
  1 kept, 0 dropped, ``NULL`` not filtered yet) and ``source_rank`` (the best BM25 rank of a
  document holding the chunk for that query, ``NULL`` beyond the filter's depth).
  Keyed by content, like ``chunks``: a moved file keeps its expansions; a changed one has none
  until ``expand-docs`` runs again. See :mod:`qmdlab.store.doc_expansions`.
- ``chunks``: keyed by content hash, so a moved or duplicated file is never re-chunked or
  re-embedded; ``text = substr(body, char_start + 1, char_end - char_start)``.
- ``chunks.id`` is never reused: new chunks get ids above every id ever given
  (:func:`next_chunk_id`), so a vector left behind by a deleted chunk can never be read as the
  vector of a later one.
- ``vectors``: one float32 blob per (chunk, embedder fingerprint), with ``chunk_key`` — the
  :data:`CHUNK_KEY` of the chunk it was computed from (``NULL`` for vectors stored before the
  column existed); a vector whose key is not its chunk's is treated as missing.
- ``llm_cache``: see :mod:`qmdlab.store.cache`.
"""

from __future__ import annotations

SCHEMA_VERSION = 1
FTS_FUNCTION = "qmdlab_fts_text"

# Covers the stat-only check of ``update`` (path, mtime, size of a collection's active files, in
# path order) without a table lookup per row; added to older indexes by their next ``update``.
STAT_INDEX = "CREATE INDEX IF NOT EXISTS documents_stat ON documents(collection, path, mtime, size) WHERE active = 1"

# One digest per collection of its active files' sorted (path, mtime, size)
# (:func:`qmdlab.store.scan.stat_digest`), written by the ``update`` that left them so: an
# unchanged ``update`` compares it with the walk's instead of reading every row. Any write to a
# collection's documents rows, by any code path, deletes its digest (the triggers), so a digest
# present is always that of the rows; a missing one sends ``update`` back to the row-by-row
# comparison. Added to older indexes by their next ``update``.
STAT_DIGEST = (
    "CREATE TABLE IF NOT EXISTS stat_digest (collection TEXT PRIMARY KEY, digest TEXT NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS documents_stat_digest_ai AFTER INSERT ON documents BEGIN "
    "DELETE FROM stat_digest WHERE collection = new.collection; END",
    "CREATE TRIGGER IF NOT EXISTS documents_stat_digest_au AFTER UPDATE ON documents BEGIN "
    "DELETE FROM stat_digest WHERE collection IN (old.collection, new.collection); END",
    "CREATE TRIGGER IF NOT EXISTS documents_stat_digest_ad AFTER DELETE ON documents BEGIN "
    "DELETE FROM stat_digest WHERE collection = old.collection; END",
)
_STAT_DIGEST_SQL = ";\n".join(STAT_DIGEST)

#: ``meta`` key of the index's active doc2query generator (its fingerprint): the one whose kept
#: queries fill ``documents_fts.expansions``.
ACTIVE_GENERATOR = "doc2query_generator"

DOC_QUERIES = (
    "CREATE TABLE IF NOT EXISTS doc_queries (hash TEXT NOT NULL, seq INTEGER NOT NULL, generator TEXT NOT NULL, "
    "n INTEGER NOT NULL, raw TEXT NOT NULL, query TEXT, kept INTEGER, source_rank INTEGER, "
    "PRIMARY KEY (hash, seq, generator, n))"
)

# Document expansion is spelled ``doc_expansion`` in code (``expand-docs``, :mod:`qmdlab.store.doc_expansions`);
# the on-disk names ``documents_fts.expansions`` (the doc-queries column), ``doc_queries`` and
# ``meta.doc2query_generator`` stay as they are: renaming an FTS5 column means rebuilding every index's
# ``documents_fts`` (a migration), and readers of older indexes would need both names.
FTS_COLUMNS = ("filepath", "title", "body", "expansions")
"""The columns of ``documents_fts``, in order (an index made before ``expansions`` has the first three)."""


def expansion_text(hash_sql: str) -> str:
    """The SQL value of a document's ``expansions`` column: the kept queries of the chunks of the
    content ``hash_sql`` for the active generator, one per line in (seq, n) order (``''``: none).
    Duplicates stay: a query sampled twice counts twice, as docT5query's appended queries do."""
    return (
        f"{FTS_FUNCTION}(coalesce((SELECT group_concat(x.query, char(10)) FROM (SELECT q.query FROM doc_queries q "
        f"WHERE q.hash = {hash_sql} AND q.kept = 1 AND q.query IS NOT NULL AND q.generator = "
        f"(SELECT value FROM meta WHERE key = '{ACTIVE_GENERATOR}') ORDER BY q.seq, q.n) x), ''))"
    )


# The FTS table and the triggers that keep it in sync with ``documents``. Filepath, title and body
# are written as they always were; ``expansions`` is :func:`expansion_text` of the document's hash.
FTS_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS documents_fts USING fts5("
    "filepath, title, body, expansions, tokenize = 'porter unicode61')"
)
FTS_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS documents_ai AFTER INSERT ON documents WHEN new.active = 1 BEGIN
    INSERT INTO documents_fts(rowid, filepath, title, body, expansions)
    SELECT new.id, {FTS_FUNCTION}(new.collection || '/' || new.path), {FTS_FUNCTION}(new.title),
           {FTS_FUNCTION}(c.body), {expansion_text("new.hash")}
    FROM content c WHERE c.hash = new.hash;
END""",
    """CREATE TRIGGER IF NOT EXISTS documents_ad AFTER DELETE ON documents BEGIN
    DELETE FROM documents_fts WHERE rowid = old.id;
END""",
    f"""CREATE TRIGGER IF NOT EXISTS documents_au AFTER UPDATE OF collection, path, title, hash, active ON documents BEGIN
    DELETE FROM documents_fts WHERE rowid = old.id;
    INSERT INTO documents_fts(rowid, filepath, title, body, expansions)
    SELECT new.id, {FTS_FUNCTION}(new.collection || '/' || new.path), {FTS_FUNCTION}(new.title),
           {FTS_FUNCTION}(c.body), {expansion_text("new.hash")}
    FROM content c WHERE c.hash = new.hash AND new.active = 1;
END""",
)
_FTS_SQL = ";\n".join((FTS_TABLE, *FTS_TRIGGERS))

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS content (
    hash TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    title TEXT NOT NULL,
    hash TEXT NOT NULL REFERENCES content(hash),
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    active INTEGER NOT NULL DEFAULT 1,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    tags TEXT NOT NULL DEFAULT '[]',
    date TEXT,
    UNIQUE (collection, path)
);
CREATE INDEX IF NOT EXISTS documents_hash ON documents(hash);
{STAT_INDEX};
{DOC_QUERIES};
{_FTS_SQL};
{_STAT_DIGEST_SQL};
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    hash TEXT NOT NULL,
    seq INTEGER NOT NULL,
    char_start INTEGER NOT NULL,
    char_end INTEGER NOT NULL,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    UNIQUE (hash, seq)
);
CREATE TABLE IF NOT EXISTS vectors (
    chunk_id INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    dim INTEGER NOT NULL,
    blob BLOB NOT NULL,
    chunk_key TEXT,
    PRIMARY KEY (chunk_id, fingerprint)
);
"""

# What a vector was computed from: the chunk's content hash, position and span (a content hash
# names immutable text, so equal keys mean equal chunk text). ``k`` is the chunks table's alias.
CHUNK_KEY = "(k.hash || ':' || k.seq || ':' || k.char_start || ':' || k.char_end)"
# Added to older indexes by their next write of vectors (reads work without it).
VECTOR_KEY = "ALTER TABLE vectors ADD COLUMN chunk_key TEXT"
# The highest chunk id ever given (``meta``), so deleted ids are not handed out again.
CHUNK_ID_HIGH = "chunk_id_high"


def stored_version(conn) -> str | None:
    """The stored schema version, read without taking a write lock (``None``: no schema yet, or a
    database not in WAL mode — a new or foreign file)."""
    import sqlite3

    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            return None
        raise
    if row is None:
        return None
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return row[0] if str(mode).lower() == "wal" else None


def create(conn) -> None:
    """Switch ``conn``'s database to WAL and create every table, index and trigger (idempotent)."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


def has_stat_index(conn) -> bool:
    """Whether the database has :data:`STAT_INDEX` and :data:`STAT_DIGEST` (indexes made before
    they existed do not)."""
    names = {
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN ('documents_stat', "
            "'stat_digest', 'documents_stat_digest_ai', 'documents_stat_digest_au', "
            "'documents_stat_digest_ad')"
        )
    }
    return len(names) == 5


def has_vector_key(conn) -> bool:
    """Whether ``vectors`` has the ``chunk_key`` column (indexes made before it existed do not)."""
    return any(r[1] == "chunk_key" for r in conn.execute("PRAGMA table_info(vectors)"))


def next_chunk_id(conn, n: int) -> int:
    """The first of ``n`` fresh chunk ids, reserved (run inside a write transaction).

    Above the largest chunk id in use, the largest id any vector names and the largest id ever
    given (``meta.chunk_id_high``), so no id is handed out twice even after ``cleanup`` deleted
    the chunks holding the highest ones.
    """
    row = conn.execute(
        "SELECT max(coalesce((SELECT max(id) FROM chunks), 0), coalesce((SELECT max(chunk_id) FROM vectors), 0), "
        "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?), 0))",
        (CHUNK_ID_HIGH,),
    ).fetchone()
    first = int(row[0]) + 1
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (CHUNK_ID_HIGH, str(first + n - 1)))
    return first


def fts_columns(conn) -> int:
    """How many columns ``documents_fts`` has: 4, or 3 in an index made before ``expansions``."""
    return len(conn.execute("PRAGMA table_info(documents_fts)").fetchall())


def migrate_fts(conn) -> bool:
    """Rebuild a three-column ``documents_fts`` with the ``expansions`` column (run inside a write
    transaction); ``False`` when it has four already.

    FTS5 cannot add a column, so the table and its three triggers are dropped and made again
    (:data:`FTS_TABLE`, :data:`FTS_TRIGGERS`) and every active document's row is written anew —
    filepath, title and body exactly as the triggers write them, so every score of the old
    index stays the same while ``expansions`` is empty.
    """
    if fts_columns(conn) >= len(FTS_COLUMNS):
        return False
    conn.execute(DOC_QUERIES)
    for name in ("documents_ai", "documents_ad", "documents_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE documents_fts")
    conn.execute(FTS_TABLE)
    for sql in FTS_TRIGGERS:
        conn.execute(sql)
    conn.execute(
        "INSERT INTO documents_fts(rowid, filepath, title, body, expansions) "
        f"SELECT d.id, {FTS_FUNCTION}(d.collection || '/' || d.path), {FTS_FUNCTION}(d.title), "
        f"{FTS_FUNCTION}(c.body), {expansion_text('d.hash')} "
        "FROM documents d JOIN content c ON c.hash = d.hash WHERE d.active = 1 ORDER BY d.id"
    )
    return True
