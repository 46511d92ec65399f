"""Evaluation suites: a labelled collection (documents + queries + qrels) and where it lives.

A suite is named either by a registered name or by a directory plus a format:

- ``default`` — the embedded corpus in the repository's ``data/`` (qmdlab layout);
- ``cisi``, ``cacm``, ``med`` (SMART) and ``scifact`` (BEIR, with its official train/test split) —
  public test collections read from ``$QMDLAB_<NAME>_DIR`` or ``../shared/data/<name>`` next to
  the repository; not shipped (see :meth:`Suite.check` and :data:`COLLECTIONS`);
- any directory: ``qmdlab eval path/to/dir --format smart|trec|beir|jsonl|qmdlab``;
- a qmd bench fixture file: ``qmdlab eval fixture.json --format qmd-bench`` over the markdown
  folder ``--corpus DIR`` or the qmdlab collection the fixture names (indexed in place;
  :mod:`qmdlab.eval.loaders.qmdbench`).

Identifiers. Inside qmdlab a document is ``<collection>/<path>``. A suite whose documents are
markdown files already (the default corpus) is indexed in place, collection = suite name, so
the docno is ``default/howto/git-rebase.md`` and its collection id ``howto/git-rebase.md``. A
suite whose documents come inline (SMART, BEIR, JSONL, TREC SGML) is written out as one
``<docid>.md`` per document (docid percent-encoded when it is not file-name safe) into
``$QMDLAB_HOME/eval/<suite>/corpus`` — never into the user's data directory — so the docno
``cisi/17.md`` maps back to the collection id ``17``. :meth:`Suite.docid` and
:meth:`Suite.docno` are the two directions; run files always carry the collection's ids.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote, unquote

import polars as pl

from qmdlab.errors import QmdlabError
from qmdlab.paths import home, resolve_index_dir

from .loaders import FORMATS, OfficialSplit, SuiteData, detect_format, load

REPO = Path(__file__).resolve().parents[2]


class SuiteUnavailable(QmdlabError):
    """A registered suite whose data is not on this machine (the message says why and how to fix it)."""


class Collection(NamedTuple):
    """A public test collection that qmdlab reads from where the user keeps it."""

    format: str
    files: str  # what its folder holds, for the error when it is missing

    def env(self, name: str) -> str:
        """The variable naming its folder.

        >>> COLLECTIONS["scifact"].env("scifact")
        'QMDLAB_SCIFACT_DIR'
        """
        return f"QMDLAB_{name.upper()}_DIR"


COLLECTIONS: dict[str, Collection] = {
    "cisi": Collection("smart", "CISI.ALL/.QRY/.REL"),
    "cacm": Collection("smart", "CACM.ALL/.QRY/.REL"),
    "med": Collection("smart", "MED.ALL/.QRY/.REL"),
    "scifact": Collection("beir", "corpus.jsonl, queries.jsonl, qrels/train.tsv and qrels/test.tsv"),
}


def collection_dir(name: str) -> Path:
    """``$QMDLAB_<NAME>_DIR``, else ``../shared/data/<name>`` relative to the repository."""
    return Path(os.environ.get(COLLECTIONS[name].env(name)) or REPO.parent / "shared" / "data" / name)


def cisi_dir() -> Path:
    """``$QMDLAB_CISI_DIR``, else ``../shared/data/cisi`` relative to the repository."""
    return collection_dir("cisi")


def _safe_name(name: str) -> str:
    """A collection-name-safe version of ``name``.

    >>> _safe_name("my suite/v2")
    'my-suite-v2'
    """
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "suite"


def file_stem(docid: str) -> str:
    """The file name stem of a docid: percent-encoded when not file-name safe, never hidden.

    >>> file_stem("17"), file_stem("a/b c"), file_stem(".x")
    ('17', 'a%2Fb%20c', '%2Ex')
    >>> unquote(file_stem("a/b c"))
    'a/b c'
    """
    stem = quote(docid, safe="")
    return "%2E" + stem[1:] if stem.startswith(".") else stem


@dataclass
class Suite:
    """A labelled collection and how to index it.

    Attributes
    ----------
    name : str
        Suite name; also the collection name in the suite's index.
    path : Path
        The suite directory.
    format : str
        One of :data:`qmdlab.eval.loaders.FORMATS`.
    config : Path or None
        An optional pipeline config shipped with the suite (``suite.yaml`` in its directory).
    corpus, mask, ignore : Path or None, str, tuple of str
        ``qmd-bench`` only (``path`` is then the fixture file): the markdown folder indexed and
        the collection's globs.
    grades : str
        How the judgments' codes are read (``smart`` only: :data:`qmdlab.eval.loaders.smart.GRADES`):
        ``gain`` (as coded) or ``rank`` (1 = most relevant; gain = max_code + 1 − code).
    """

    name: str
    path: Path
    format: str
    config: Path | None = None
    corpus: Path | None = None
    mask: str = "**/*.md"
    ignore: tuple[str, ...] = ()
    grades: str = "gain"
    _data: SuiteData | None = field(default=None, repr=False, compare=False)

    @property
    def collection(self) -> str:
        return _safe_name(self.name)

    def check(self) -> None:
        """Raise :class:`SuiteUnavailable` when the suite's data is absent."""
        if self.format == QMD_BENCH:
            if not self.path.is_file():
                raise SuiteUnavailable(f"suite {self.name!r}: fixture {self.path} not found")
            if self.corpus is None or not Path(self.corpus).is_dir():
                raise SuiteUnavailable(
                    f"suite {self.name!r}: corpus folder {self.corpus} not found; pass "
                    "--corpus DIR (the folder the fixture's expected_files are relative to)"
                )
            return
        if not self.path.is_dir():
            known = COLLECTIONS.get(self.name)
            hint = f" (set {known.env(self.name)} to the directory holding {known.files})" if known else ""
            raise SuiteUnavailable(f"suite {self.name!r}: {self.path} not found{hint}")

    def data(self) -> SuiteData:
        """The loaded queries/qrels/documents (read once)."""
        if self._data is None:
            self.check()
            opts = dict(corpus=self.corpus, mask=self.mask, ignore=self.ignore) if self.format == QMD_BENCH else {}
            if self.format == "smart":
                opts["grades"] = self.grades
            self._data = load(self.path, self.format, **opts)
        return self._data

    @property
    def split(self) -> OfficialSplit | None:
        """The collection's official train/test split of its judged queries, or ``None``."""
        return self.data().split

    def report_qids(self) -> tuple[str, ...] | None:
        """The queries every reported figure is on: the official ``test`` side, or ``None`` (all)."""
        split = self.split
        return split.test if split is not None else None

    def grades_note(self) -> str:
        """How this suite's grades were read, for the first line of an evaluation's output.

        >>> Suite("t", Path("."), "smart", grades="rank").grades_note()
        'grades: rank (gain = max_code + 1 - code; codes < 1 not relevant)'
        """
        if self.grades == "rank":
            return "grades: rank (gain = max_code + 1 - code; codes < 1 not relevant)"
        return "grades: gain (as coded)"

    def workdir(self) -> Path:
        """``$QMDLAB_HOME/eval/<suite>``: the suite's index, written corpus, caches and results."""
        return home() / "eval" / self.collection

    def corpus_dir(self) -> Path:
        """The directory indexed: the suite's own markdown, or the written-out corpus."""
        data = self.data()
        return data.corpus_dir if data.corpus_dir is not None else self.workdir() / "corpus"

    @property
    def inline_docs(self) -> bool:
        return self.data().docs is not None

    def docno(self, docid: str) -> str:
        """Collection id → qmdlab docno."""
        return f"{self.collection}/{file_stem(docid)}.md" if self.inline_docs else f"{self.collection}/{docid}"

    def docid(self, docno: str) -> str:
        """qmdlab docno → collection id (inverse of :meth:`docno`)."""
        rel = docno.split("/", 1)[1] if "/" in docno else docno
        if self.inline_docs:
            return unquote(rel[:-3] if rel.endswith(".md") else rel)
        return rel

    def qrels_docnos(self) -> pl.DataFrame:
        """The qrels with qmdlab docnos: ``qid, docno, grade``."""
        q = self.data().qrels
        return q.with_columns(pl.col("docid").map_elements(self.docno, return_dtype=pl.Utf8).alias("docno")).select(
            "qid", "docno", "grade"
        )

    def write_corpus(self) -> Path:
        """Write inline documents as ``<docid>.md`` files (idempotent: unchanged files are not rewritten)."""
        data = self.data()
        if data.docs is None:
            return self.corpus_dir()
        out = self.corpus_dir()
        out.mkdir(parents=True, exist_ok=True)
        wanted = set()
        for docid, title, text in data.docs.iter_rows():
            name = f"{file_stem(docid)}.md"
            wanted.add(name)
            body = (f"# {title.strip()}\n\n" if title and title.strip() else "") + (text or "").strip() + "\n"
            path = out / name
            if not path.exists() or path.read_text(encoding="utf-8") != body:
                path.write_text(body, encoding="utf-8")
        for stale in out.glob("*.md"):
            if stale.name not in wanted:
                stale.unlink()
        return out

    def fingerprint(self) -> str:
        """A short hash of the suite's queries and documents (part of cache keys)."""
        data = self.data()
        h = hashlib.sha256()
        h.update(data.queries.write_csv().encode())
        if data.docs is not None:
            h.update(data.docs.write_csv().encode())
        else:
            if self.format == QMD_BENCH:  # the user's folder: only the files the collection holds
                from .loaders.qmdbench import corpus_files

                files = [self.corpus_dir() / rel for rel in corpus_files(self.corpus_dir(), self.mask, self.ignore)]
                h.update(data.qrels.sort("qid", "docid").write_csv().encode())
            else:
                files = sorted(self.corpus_dir().rglob("*.md"))
            for p in files:
                h.update(str(p.relative_to(self.corpus_dir())).encode())
                h.update(p.read_bytes())
        return h.hexdigest()[:12]


def _default() -> Suite:
    return Suite("default", REPO / "data", "qmdlab")


def _collection(name: str) -> Callable[[], Suite]:
    return lambda: Suite(name, collection_dir(name), COLLECTIONS[name].format)


REGISTRY: dict[str, Callable[[], Suite]] = {"default": _default, **{n: _collection(n) for n in COLLECTIONS}}


QMD_BENCH = "qmd-bench"


def bench_corpus(
    fixture: Path, corpus: str | os.PathLike | None = None, index: str | os.PathLike | None = None
) -> tuple[Path, str, tuple[str, ...]]:
    """The folder, mask and ignore globs a qmd bench fixture is scored against: ``corpus`` when
    given, else the collection the fixture names in the qmdlab index ``index`` (``--index``,
    ``$QMDLAB_INDEX`` or the default; read from its ``collections.yaml``, nothing written)."""
    from qmdlab.store import config as store_config
    from qmdlab.store.index import CONFIG_NAME

    from .loaders.qmdbench import read_fixture

    if corpus is not None:
        path = Path(corpus).expanduser()
        if not path.is_dir():
            raise QmdlabError(
                f"--corpus {corpus}: not a folder; pass the folder the fixture's expected_files are relative to"
            )
        return path.resolve(), "**/*.md", ()
    name = read_fixture(fixture).collection
    if not name:
        raise QmdlabError(
            f"{fixture}: the fixture names no collection; pass --corpus DIR (the folder its "
            "expected_files are relative to)"
        )
    conf_path = resolve_index_dir(index) / CONFIG_NAME
    for c in store_config.load(conf_path).collections:
        if c.name == name:
            return Path(c.root), c.mask, tuple(c.ignore)
    raise QmdlabError(
        f"{fixture}: collection {name!r} is not in the qmdlab index ({conf_path}); pass --corpus DIR "
        f"or register it (`qmdlab collection add PATH --name {name}` or `qmdlab collection import-qmd`)"
    )


def get_suite(
    name_or_path: str | os.PathLike,
    fmt: str | None = None,
    *,
    corpus: str | os.PathLike | None = None,
    index: str | os.PathLike | None = None,
    grades: str | None = None,
) -> Suite:
    """A registered suite by name, a suite directory (format detected when ``fmt`` is None), or
    a qmd bench fixture file (``fmt`` ``qmd-bench``, or a ``.json`` file; ``corpus``/``index``:
    :func:`bench_corpus`). ``grades`` (``gain``/``rank``; default ``$QMDLAB_SMART_GRADES``, else
    ``gain``) is how a SMART suite's judgment codes are read (:attr:`Suite.grades`).

    >>> get_suite("default").format
    'qmdlab'
    """
    text = str(name_or_path)
    if Path(text).expanduser().is_file() and (fmt == QMD_BENCH or (fmt is None and text.endswith(".json"))):
        path = Path(text).expanduser().resolve()
        root, mask, ignore = bench_corpus(path, corpus, index)
        bench = Suite(path.stem, path, QMD_BENCH, corpus=root, mask=mask, ignore=ignore)
        _set_grades(bench, grades)
        return bench
    if fmt == QMD_BENCH:
        raise QmdlabError(f"{text}: not a file; --format qmd-bench reads a qmd bench fixture (a .json file)")
    if corpus is not None:
        raise QmdlabError(
            "--corpus is for a qmd bench fixture (--format qmd-bench); a suite directory holds its own documents"
        )
    if text in REGISTRY and fmt is None and not Path(text).is_dir():
        suite = REGISTRY[text]()
    else:
        path = Path(text).expanduser()
        if not path.is_dir():
            raise QmdlabError(
                f"unknown suite {text!r}: not a registered suite ({', '.join(REGISTRY)}) "
                "and not a directory; pass a suite name or a directory with --format"
            )
        if fmt is not None and fmt not in FORMATS:
            raise QmdlabError(f"unknown suite format {fmt!r}; choose one of {', '.join(FORMATS)}")
        suite = Suite(path.resolve().name, path.resolve(), fmt or detect_format(path))
    cfg = suite.path / "suite.yaml"
    if cfg.is_file():
        suite.config = cfg
    _set_grades(suite, grades)
    return suite


def _set_grades(suite: Suite, grades: str | None) -> None:
    """Apply ``--grades`` (or ``$QMDLAB_SMART_GRADES`` for a SMART suite) to ``suite``."""
    from .loaders.smart import GRADES_ENV, check_grades

    if grades is not None:
        check_grades(grades)
        if suite.format != "smart" and grades != "gain":
            raise QmdlabError(
                f"--grades {grades}: suite {suite.name!r} is in format {suite.format!r}; reading codes "
                "as ranks is for SMART collections (--format smart); drop --grades"
            )
        suite.grades = grades
    elif suite.format == "smart" and os.environ.get(GRADES_ENV):
        suite.grades = check_grades(os.environ[GRADES_ENV], f"${GRADES_ENV}")
