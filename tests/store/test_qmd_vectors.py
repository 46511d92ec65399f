"""qmd's vectors reused by ``collection import-qmd`` (qmdlab.store.qmdvectors), on hand-built qmd
databases: qmd's tables and sqlite-vec 0.1's shadow tables written as qmd 2.8.3 and sqlite-vec 0.1.9
write them (no qmd, no model). Which chunk gets a vector, and the refusal of a layout not read."""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from qmdlab.models.registry import same_model_file
from qmdlab.models.templates import EMBEDDING_TEMPLATES
from qmdlab.store import Index
from qmdlab.store.qmdvectors import (
    BAD_VECTOR,
    CUT_DIFFERENTLY,
    LONGER,
    NO_VECTOR,
    OTHER_INPUT,
    QmdIndex,
    QmdLayoutError,
    qmd_fingerprint,
    reuse_qmd_vectors,
)

MODEL = "/models/embeddinggemma-300m-q8_0.gguf"  # what qmd recorded (QMD_EMBED_MODEL)
DIM = 8
SLOTS = 8  # sqlite-vec's chunk_size (1024 by default; any multiple of 8)
VEC_SQL = f"CREATE VIRTUAL TABLE vectors_vec USING vec0(hash_seq TEXT PRIMARY KEY, embedding float[{DIM}] distance_metric=cosine)"


def vec_of(text: str) -> np.ndarray:
    """A fixed, unnormalised vector per embedding input (qmd's vectors are not normalised)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    return np.random.default_rng(seed).normal(size=DIM).astype(np.float32) * 900


class Embedder:
    """qmdlab's embedder as the reuse sees it: model id, fingerprint, qmd's template, and vectors
    (those qmd stored, normalised, unless ``other``)."""

    def __init__(self, other: bool = False, max_tokens: int = 2048):
        self.model_id, self.fingerprint = MODEL, f"{MODEL}#test"
        self.template = EMBEDDING_TEMPLATES["gemma"]
        self.max_tokens, self.other, self.embedded = max_tokens, other, 0

    def embed_documents(self, docs):
        self.embedded += len(docs)
        rows = [vec_of(self.template.document(t, x) + ("!" if self.other else "")) for t, x in docs]
        return np.stack([r / np.linalg.norm(r) for r in rows])


def title_of(text: str, path: str) -> str:
    for line in text.split("\n"):
        if line.startswith(("# ", "## ")):
            return line.split(" ", 1)[1].strip()
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def make_qmd_db(path: Path, docs: list[dict], *, info: str | None = "v0.1.9", vec_sql: str = VEC_SQL) -> Path:
    """A qmd database holding ``docs``: each ``{"path", "text"}`` with optional ``"title"``,
    ``"chunks"`` (``[(seq, pos)]``, default one chunk at 0), ``"model"``, ``"fingerprint"``,
    ``"input"`` (what qmd embedded, default qmd's format of the whole text) and ``"valid"``."""
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE content (hash TEXT PRIMARY KEY, doc TEXT NOT NULL, created_at TEXT NOT NULL);
        CREATE TABLE documents (id INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL, path TEXT NOT NULL,
          title TEXT NOT NULL, hash TEXT NOT NULL, created_at TEXT NOT NULL, modified_at TEXT NOT NULL,
          active INTEGER NOT NULL DEFAULT 1, UNIQUE(collection, path));
        CREATE TABLE content_vectors (hash TEXT NOT NULL, seq INTEGER NOT NULL DEFAULT 0, pos INTEGER NOT NULL DEFAULT 0,
          model TEXT NOT NULL, embed_fingerprint TEXT NOT NULL DEFAULT '', total_chunks INTEGER NOT NULL DEFAULT 1,
          embedded_at TEXT NOT NULL, PRIMARY KEY (hash, seq));
        CREATE TABLE "vectors_vec_chunks"(chunk_id INTEGER PRIMARY KEY AUTOINCREMENT,size INTEGER NOT NULL,
          validity BLOB NOT NULL,rowids BLOB NOT NULL);
        CREATE TABLE "vectors_vec_rowids"(rowid INTEGER PRIMARY KEY AUTOINCREMENT,id TEXT UNIQUE NOT NULL,
          chunk_id INTEGER,chunk_offset INTEGER);
        CREATE TABLE "vectors_vec_vector_chunks00"(rowid PRIMARY KEY,vectors BLOB NOT NULL);
        """
    )
    if info is not None:
        con.execute('CREATE TABLE "vectors_vec_info" (key text primary key, value any)')
        con.execute("INSERT INTO vectors_vec_info VALUES ('CREATE_VERSION', ?), ('CREATE_VERSION_MAJOR', 0)", (info,))
    con.execute(
        "PRAGMA writable_schema = ON"
    )  # the vec0 table itself: its row in sqlite_master, as sqlite-vec writes it
    con.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('table', 'vectors_vec', 'vectors_vec', 0, ?)",
        (vec_sql,),
    )
    con.execute("PRAGMA writable_schema = OFF")
    slots: list[tuple[str, np.ndarray, bool]] = []
    for d in docs:
        text = d["text"]
        h = hashlib.sha256(text.encode()).hexdigest()
        title = d.get("title", title_of(text, d["path"]))
        con.execute("INSERT OR IGNORE INTO content VALUES (?, ?, 'now')", (h, text))
        con.execute(
            "INSERT INTO documents (collection, path, title, hash, created_at, modified_at) VALUES ('kb', ?, ?, ?, 'now', 'now')",
            (d["path"], title, h),
        )
        chunks = d.get("chunks", [(0, 0)])
        model = d.get("model", MODEL)
        for seq, pos in chunks:
            con.execute(
                "INSERT INTO content_vectors VALUES (?, ?, ?, ?, ?, ?, 'now')",
                (h, seq, pos, model, d.get("fingerprint", qmd_fingerprint(model)), len(chunks)),
            )
            chunk = text.encode("utf-16-le")[2 * pos :].decode("utf-16-le")
            embedded = d.get("input", f"title: {title} | text: {chunk}")
            slots.append((f"{h}_{seq}", vec_of(embedded), d.get("valid", True)))
    for first in range(0, len(slots), SLOTS):
        part = slots[first : first + SLOTS]
        validity, rowids, vectors = bytearray(SLOTS // 8), bytearray(SLOTS * 8), bytearray(SLOTS * DIM * 4)
        cur = con.execute("INSERT INTO vectors_vec_chunks (size, validity, rowids) VALUES (?, x'', x'')", (SLOTS,))
        chunk_id = cur.lastrowid
        for off, (key, vec, valid) in enumerate(part):
            rowid = con.execute(
                "INSERT INTO vectors_vec_rowids (id, chunk_id, chunk_offset) VALUES (?, ?, ?)", (key, chunk_id, off)
            ).lastrowid
            if valid:
                validity[off // 8] |= 1 << (off % 8)
            struct.pack_into("<q", rowids, off * 8, rowid)
            vectors[off * DIM * 4 : (off + 1) * DIM * 4] = vec.astype("<f4").tobytes()
        con.execute(
            "UPDATE vectors_vec_chunks SET validity = ?, rowids = ? WHERE chunk_id = ?",
            (bytes(validity), bytes(rowids), chunk_id),
        )
        con.execute(
            "INSERT INTO vectors_vec_vector_chunks00 (_rowid_, rowid, vectors) VALUES (?, ?, ?)",
            (chunk_id, chunk_id, bytes(vectors)),
        )
    con.commit()
    con.close()
    return path


NOTES = {
    "alpha.md": "# Alpha\n\nAlpha notes about heron migration.\n",  # reused
    "beta.md": "---\ntags: [x]\n---\n# Beta\n\nBeta text.\n",  # front matter: qmdlab's chunk starts after it
    "gamma.md": "# Gamma\n\nGamma, edited after qmd embedded it.\n",  # qmd holds the old text
    "delta.md": "# Delta\n\nDelta embedded by qmd with another model.\n",
    "eps.md": "# Epsilon\n\nEpsilon with a title qmd read otherwise.\n",
    "zeta.md": "# Zeta\n\nZeta whose slot sqlite-vec marked free.\n",
    "eta.md": "Eta without a heading 😀, embedded from an old fingerprint.\n",
    "theta.md": "# Theta\n\nTheta, a long note qmd cut in two.\n",
    "iota.md": "Iota has no heading: its title is its file name 😀.\n",  # reused (UTF-16 offsets)
}


def qmd_docs(notes: dict[str, str]) -> list[dict]:
    docs = [{"path": p, "text": t} for p, t in notes.items()]
    by = {d["path"]: d for d in docs}
    by["gamma.md"]["text"] = "# Gamma\n\nGamma as qmd saw it.\n"
    by["delta.md"]["model"] = "hf:someone/other-embedder.gguf"
    by["eps.md"]["title"] = "Something else"
    by["zeta.md"]["valid"] = False
    by["eta.md"]["fingerprint"] = ""  # qmd's legacy rows: embedded before fingerprints
    by["theta.md"]["chunks"] = [(0, 0), (1, 10)]  # qmd's last chunk starts at 10, qmdlab's one at 0
    return docs


@pytest.fixture
def lab(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for rel, text in NOTES.items():
        (notes / rel).write_text(text, encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("kb", notes)
    idx.update()
    yield idx
    idx.close()


def test_only_chunks_qmd_embedded_the_same_way_get_its_vectors(lab, tmp_path):
    db = make_qmd_db(tmp_path / "index.sqlite", qmd_docs(NOTES))
    emb = Embedder()
    rep = reuse_qmd_vectors(lab, db, emb, same_model=lambda ref: ref == MODEL, collections=["kb"])
    assert rep.models == [MODEL] and sorted(rep.qmd_models) == sorted([MODEL, "hf:someone/other-embedder.gguf"])
    assert rep.considered == len(NOTES) and rep.reused == 2 and rep.pending == len(NOTES) - 2
    # gamma (changed), delta (another model), eta (a legacy fingerprint); beta, theta; eps; zeta
    assert rep.left == {NO_VECTOR: 3, CUT_DIFFERENTLY: 2, OTHER_INPUT: 1, BAD_VECTOR: 1}
    assert rep.checked == 2 and rep.min_cosine == pytest.approx(1.0) and emb.embedded == 2
    # the vectors stored are qmd's, normalised, each under its own chunk
    need = lab.chunks_needing_vectors(emb.fingerprint)
    assert sorted(set(need["docno"].to_list())) == sorted(f"kb/{p}" for p in NOTES if p not in ("alpha.md", "iota.md"))
    vm = lab.vector_matrix(emb.fingerprint)
    got = dict(zip(vm.docnos, vm.matrix))
    for rel, title in (("alpha.md", "Alpha"), ("iota.md", "iota")):
        want = vec_of(f"title: {title} | text: {NOTES[rel]}")
        np.testing.assert_allclose(got[f"kb/{rel}"], want / np.linalg.norm(want), rtol=1e-5)
    assert "2 reused from qmd's index" in rep.lines()[0] and "still need `qmdlab embed`" in rep.lines()[0]
    # again: those chunks have vectors now, nothing is considered twice
    again = reuse_qmd_vectors(lab, db, emb, same_model=lambda ref: ref == MODEL, collections=["kb"])
    assert (again.considered, again.reused) == (len(NOTES) - 2, 0)


def test_reasons_per_note(lab, tmp_path):
    """Each note is left out for its own reason (one note per run)."""
    expected = {
        "alpha.md": None,
        "beta.md": CUT_DIFFERENTLY,
        "gamma.md": NO_VECTOR,
        "delta.md": "model",
        "eps.md": OTHER_INPUT,
        "zeta.md": BAD_VECTOR,
        "eta.md": NO_VECTOR,
        "theta.md": CUT_DIFFERENTLY,
        "iota.md": None,
    }
    docs = {d["path"]: d for d in qmd_docs(NOTES)}
    for rel, reason in expected.items():
        db = make_qmd_db(tmp_path / f"{rel}.sqlite", [docs[rel]])
        emb = Embedder()
        emb.fingerprint = f"{MODEL}#{rel}"  # a fresh fingerprint per run: every chunk is considered
        rep = reuse_qmd_vectors(lab, db, emb, same_model=lambda ref: ref == MODEL, collections=["kb"])
        if reason is None:
            assert rep.reused == 1 and rep.left.get(NO_VECTOR) == len(NOTES) - 1, (rel, rep)
        elif reason == "model":  # qmd embedded it with another model only: nothing of it is read
            assert rep.reused == 0 and rep.left == {} and "not the same model file" in (rep.note or ""), (rel, rep)
        else:
            assert rep.reused == 0 and rep.left.get(reason, 0) >= 1, (rel, rep)
            if reason != NO_VECTOR:
                assert rep.left == {reason: 1, NO_VECTOR: len(NOTES) - 1}, (rel, rep)


def test_not_the_same_model_file_or_a_check_that_disagrees_reuses_nothing(lab, tmp_path):
    db = make_qmd_db(tmp_path / "index.sqlite", qmd_docs(NOTES))
    rep = reuse_qmd_vectors(lab, db, Embedder(), same_model=lambda ref: False, collections=["kb"])
    assert rep.reused == 0 and rep.pending == len(NOTES) and "not the same model file" in rep.note
    other = Embedder(other=True)  # qmdlab's own embedding of the matched chunks is another vector
    rep = reuse_qmd_vectors(lab, db, other, same_model=lambda ref: ref == MODEL, collections=["kb"])
    assert rep.reused == 0 and rep.pending == len(NOTES) and "differ from qmdlab's embedding" in rep.note
    assert lab.vector_fingerprints() == {}
    # without qmdlab's model file here, nothing is embedded to compare, and that is said
    absent = Embedder(other=True)
    rep = reuse_qmd_vectors(lab, db, absent, same_model=lambda ref: ref == MODEL, collections=["kb"], can_check=False)
    assert rep.reused == 2 and absent.embedded == 0 and "not checked" in rep.note


def test_an_input_longer_than_the_embedder_reads_is_not_reused(lab, tmp_path):
    db = make_qmd_db(tmp_path / "index.sqlite", qmd_docs(NOTES))
    short = Embedder(max_tokens=40)  # "title: Alpha | text: …" is longer than 38 bytes; no tokenizer to count
    rep = reuse_qmd_vectors(lab, db, short, same_model=lambda ref: ref == MODEL, collections=["kb"])
    assert rep.reused == 0 and rep.left[LONGER] == 3  # alpha, iota, and zeta before its slot is read
    # an embedder that counts its tokens: those that fit are reused
    short.count_tokens = lambda text: 40 if "Alpha" in text else 41  # type: ignore[attr-defined]
    rep = reuse_qmd_vectors(lab, db, short, same_model=lambda ref: ref == MODEL, collections=["kb"])
    assert rep.reused == 1 and rep.left[LONGER] == 2


def test_only_the_collections_given(lab, tmp_path):
    db = make_qmd_db(tmp_path / "index.sqlite", qmd_docs(NOTES))
    lab.add_collection("other", tmp_path / "notes")
    lab.update(["other"])
    rep = reuse_qmd_vectors(lab, db, Embedder(), same_model=lambda ref: ref == MODEL, collections=["other"])
    # the same files' chunks (content-addressed) are the collection's own; none outside it are read
    assert rep.considered == len(NOTES)
    rep = reuse_qmd_vectors(lab, db, Embedder(), same_model=lambda ref: ref == MODEL, collections=[])
    assert rep.considered == 0 and rep.reused == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vec_sql": VEC_SQL.replace("distance_metric=cosine", "distance_metric=l2")}, "not the table read here"),
        ({"vec_sql": VEC_SQL.replace("float[8]", "int8[8]")}, "not the table read here"),
        ({"vec_sql": VEC_SQL.replace(")", ", path text)")}, "not the table read here"),
        ({"info": "v0.2.0"}, "sqlite-vec 'v0.2.0'; only v0.1.x is read"),
        ({"drop": "vectors_vec_rowids"}, "no shadow table vectors_vec_rowids"),
        ({"drop": "content_vectors"}, "not a qmd index (no table content_vectors)"),
        (
            {"extra": 'CREATE TABLE "vectors_vec_metadatachunks00"(rowid PRIMARY KEY, data BLOB NOT NULL)'},
            "shadow tables",
        ),
        ({"alter": "ALTER TABLE vectors_vec_vector_chunks00 ADD COLUMN more"}, "not rowid, vectors"),
        ({"blob": 12}, "vectors holds 12 bytes"),
        ({"no_vec": True}, "no table vectors_vec; run `qmd embed` first"),
    ],
)
def test_a_layout_not_read_here_is_refused_in_one_line(lab, tmp_path, change, message):
    kw = {k: change[k] for k in ("vec_sql", "info") if k in change}
    db = make_qmd_db(tmp_path / "index.sqlite", qmd_docs(NOTES), **kw)
    con = sqlite3.connect(db)
    if "drop" in change:
        con.execute(f"DROP TABLE {change['drop']}")
    if "extra" in change:
        con.execute(change["extra"])
    if "alter" in change:
        con.execute(change["alter"])
    if "blob" in change:
        con.execute("UPDATE vectors_vec_vector_chunks00 SET vectors = zeroblob(?)", (change["blob"],))
    if change.get("no_vec"):
        con.execute("PRAGMA writable_schema = ON")
        con.execute("DELETE FROM sqlite_master WHERE name = 'vectors_vec'")
        con.execute("PRAGMA writable_schema = OFF")
    con.commit()
    con.close()
    with pytest.raises(QmdLayoutError) as err:
        reuse_qmd_vectors(lab, db, Embedder(), same_model=lambda ref: ref == MODEL, collections=["kb"])
    assert message in str(err.value) and "\n" not in str(err.value)
    assert lab.vector_fingerprints() == {}  # nothing written


def test_sqlite_vec_before_its_info_table_and_a_database_that_is_not_one(lab, tmp_path):
    db = make_qmd_db(tmp_path / "old.sqlite", qmd_docs(NOTES), info=None)  # sqlite-vec 0.1.0 to 0.1.5
    with QmdIndex.open(db) as q:
        assert q.dim == DIM and q.chunk_size == SLOTS
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all, just some bytes " * 40)
    with pytest.raises(QmdLayoutError, match="cannot be read as a qmd index"):
        QmdIndex.open(junk)


def test_same_model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("QMDLAB_CACHE", str(tmp_path / "cache"))
    from qmdlab.models import packaged

    q8 = packaged.target_path(packaged.get("embeddinggemma-300m-q8_0"))
    q8.parent.mkdir(parents=True)
    q8.write_bytes(b"GGUF" + b"\0" * 60)
    q8.with_name(q8.name + ".sha256").write_text(packaged.sha256_file(q8))
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(q8.read_bytes())
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + b"\1" * 60)
    hub = "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf"
    assert same_model_file(str(q8), "pkg:embeddinggemma-300m-q8_0")  # qmd given the packaged file's path
    assert same_model_file(hub, str(q8)) and same_model_file(hub, "pkg:embeddinggemma-300m-q8_0")
    assert same_model_file(str(copy), "pkg:embeddinggemma-300m-q8_0")  # the same bytes elsewhere
    assert not same_model_file(str(other), "pkg:embeddinggemma-300m-q8_0")
    assert not same_model_file(hub, "pkg:all-minilm-l6-v2")
    assert not same_model_file("http://127.0.0.1:1/v1#embed", "http://127.0.0.1:1/v1#embed")


def test_import_qmd_reuses_the_vectors_of_qmds_database(tmp_path, cli_run, qmdlab_home, monkeypatch):
    """The command: qmd's config and database where qmd keeps them; qmdlab's embedder named as qmd
    named it (a model file not on this machine: nothing is embedded to check, and that is said)."""
    from qmdlab.store import Index

    notes = tmp_path / "notes"
    notes.mkdir()
    for rel, text in NOTES.items():
        (notes / rel).write_text(text, encoding="utf-8")
    conf = tmp_path / "config" / "qmd"
    conf.mkdir(parents=True)
    (conf / "index.yml").write_text(f"collections:\n  kb:\n    path: {notes}\n", encoding="utf-8")
    (tmp_path / "cache" / "qmd").mkdir(parents=True)
    db = make_qmd_db(tmp_path / "cache" / "qmd" / "index.sqlite", qmd_docs(NOTES))
    for var in ("INDEX_PATH", "QMD_CONFIG_DIR", "QMDLAB_PRESET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("QMDLAB_EMBED_MODEL", MODEL)
    monkeypatch.chdir(tmp_path)
    out = cli_run("collection", "import-qmd", "--no-update").output
    assert f"qmd's database {db}: vectors not read (--no-update)" in out
    out = cli_run("collection", "import-qmd").output
    assert "vectors: 2 reused from qmd's index (/models/embeddinggemma-300m-q8_0.gguf); 7 chunk(s) still need" in out
    assert f"3 not reused: {NO_VECTOR}" in out and "not checked against qmdlab's own embedding" in out
    with Index.open(cli_run.index_dir) as idx:
        assert list(idx.vector_fingerprints().values()) == [(DIM, 2)]
    assert "vectors: 0 reused" in cli_run("collection", "import-qmd").output  # nothing twice
    # a layout not read here: the import itself stands, the vectors are refused in one line
    con = sqlite3.connect(db)
    con.execute("DROP TABLE vectors_vec_rowids")
    con.commit()
    con.close()
    res = cli_run("collection", "import-qmd")
    lines = [line for line in res.output.splitlines() if line.startswith("vectors:")]
    assert lines == [
        f"vectors: qmd's database not used: {db}: vectors_vec has no shadow table vectors_vec_rowids "
        "(not sqlite-vec 0.1's layout); `qmdlab embed` computes them"
    ]
    assert cli_run("collection", "import-qmd", "--no-vectors").output.count("vectors") == 0
