"""The trace: every stage's intermediate scores as polars DataFrames (docs/design.md, trace).

Run-like tables use PyTerrier-style ``qid, docno, <score>, <rank>`` columns so a
ranx run is one line away (:meth:`Trace.to_ranx_run`). Every table has a fixed
schema (:data:`SCHEMAS`), also when empty, so traces of many queries concatenate.

A table may be handed to :class:`Trace` as :class:`Columns` (plain Python lists, one per
column, as the stages of one query build them) instead of a frame: the frame is then built
on first read and kept. A caller that reads one table of a query's trace pays for that
table only; each polars frame costs tens of microseconds to build however few its rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from qmdlab.errors import QmdlabError, import_extra

SCHEMAS: dict[str, dict[str, type[pl.DataType]]] = {
    "queries": {"qid": pl.String, "text": pl.String, "intent": pl.String},
    "expansions": {
        "qid": pl.String,
        "type": pl.String,
        "text": pl.String,
        "kept": pl.Boolean,
        "reason_dropped": pl.String,
        "origin": pl.String,
    },
    "lists": {
        "qid": pl.String,
        "list_id": pl.Int64,
        "source": pl.String,
        "query_type": pl.String,
        "subquery": pl.String,
        "docno": pl.String,
        "chunk_id": pl.Int64,
        "rank": pl.Int64,
        "backend_score": pl.Float64,
        "score": pl.Float64,
        "weight": pl.Float64,
    },
    "fused": {
        "qid": pl.String,
        "docno": pl.String,
        "rrf_base": pl.Float64,
        "best_rank": pl.Int64,
        "bonus": pl.Float64,
        "fused_score": pl.Float64,
        "fused_rank": pl.Int64,
        "n_lists": pl.Int64,
    },
    "rerank": {
        "qid": pl.String,
        "docno": pl.String,
        "chunk_id": pl.Int64,
        "chunk_hash": pl.String,
        "rerank_score": pl.Float64,
        "cached": pl.Boolean,
    },
    "final": {
        "qid": pl.String,
        "docno": pl.String,
        "fused_rank": pl.Int64,
        "position_score": pl.Float64,
        "blend_weight": pl.Float64,
        "rerank_score": pl.Float64,
        "final_score": pl.Float64,
        "final_rank": pl.Int64,
    },
    "results": {
        "qid": pl.String,
        "docno": pl.String,
        "docid": pl.String,
        "title": pl.String,
        "final_rank": pl.Int64,
        "final_score": pl.Float64,
        "line": pl.Int64,
        "context": pl.String,
        "snippet": pl.String,
    },
    "timings": {"qid": pl.String, "stage": pl.String, "ms": pl.Float64},
    "notes": {"qid": pl.String, "stage": pl.String, "message": pl.String},
}
"""Column names and dtypes of every trace table (docs/design.md, trace plus ``results``, the
finished rows with title and snippet, ``queries``, the query text and intent of
each qid, and a ``qid`` on timings/notes)."""

TABLES = tuple(SCHEMAS)


class Columns(dict):
    """A trace table as plain Python lists, ``{column: values}`` in :data:`SCHEMAS` order.

    :class:`Trace` builds the polars frame from it on first read. The lists are not copied:
    whoever hands them over stops changing them.

    >>> c = Columns.empty("timings")
    >>> list(c), height(c)
    (['qid', 'stage', 'ms'], 0)
    """

    __slots__ = ()

    @classmethod
    def empty(cls, table: str) -> Columns:
        """No rows, the columns of ``table``."""
        return cls({c: [] for c in SCHEMAS[table]})

    def frame(self, table: str) -> pl.DataFrame:
        """The polars frame of ``table`` (its schema) holding these columns."""
        return pl.DataFrame(self, schema=SCHEMAS[table])


def height(table: pl.DataFrame | Columns) -> int:
    """Rows of a frame or of :class:`Columns`."""
    if isinstance(table, pl.DataFrame):
        return table.height
    return len(next(iter(table.values()))) if table else 0


def column(table: pl.DataFrame | Columns, name: str) -> list:
    """One column of a frame or of :class:`Columns` as a list (not to be changed)."""
    if isinstance(table, pl.DataFrame):
        return table.get_column(name).to_list()
    return table[name]


def as_frame(name: str, table: pl.DataFrame | Columns) -> pl.DataFrame:
    """``table`` (a frame or :class:`Columns` of the trace table ``name``) as a frame."""
    return table if isinstance(table, pl.DataFrame) else table.frame(name)


BUILT: dict[str, int] = dict.fromkeys(SCHEMAS, 0)
"""How many trace frames were built from :class:`Columns`, per table (a diagnostic: what a
front end that reads a few tables really paid for)."""


class _Table:
    """A :class:`Trace` field: the frame of one table, built from :class:`Columns` on first read.

    As a dataclass field's default it makes the field optional (``None``: an empty table)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.key = f"_table_{name}"

    def __get__(self, obj: object, objtype: type | None = None) -> pl.DataFrame:
        if obj is None:
            return None  # type: ignore[return-value]  # the dataclass default: an empty table
        held = obj.__dict__[self.key]
        if isinstance(held, pl.DataFrame):
            return held
        df = empty(self.name) if held is None else held.frame(self.name)
        obj.__dict__[self.key] = df
        if held is not None:
            BUILT[self.name] += 1
        return df

    def __set__(self, obj: object, value: pl.DataFrame | Columns | None) -> None:
        if isinstance(value, Columns):
            if list(value) != list(SCHEMAS[self.name]):
                raise ValueError(f"{self.name} columns {list(value)} are not {list(SCHEMAS[self.name])}")
        elif value is not None:
            value = conform(self.name, value)
        obj.__dict__[self.key] = value


def empty(table: str) -> pl.DataFrame:
    """An empty frame with the schema of ``table``.

    >>> empty("fused").columns
    ['qid', 'docno', 'rrf_base', 'best_rank', 'bonus', 'fused_score', 'fused_rank', 'n_lists']
    """
    return pl.DataFrame(schema=SCHEMAS[table])


def conform(table: str, df: pl.DataFrame | None) -> pl.DataFrame:
    """Select and cast ``df`` to the schema of ``table`` (extra columns dropped)."""
    if df is None or df.height == 0 and not df.columns:
        return empty(table)
    schema = SCHEMAS[table]
    if df.schema == schema:  # already conformed (every stage's output): no polars query per table
        return df
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise ValueError(f"{table} table lacks columns {missing}")
    return df.select([pl.col(c).cast(t) for c, t in schema.items()])


@dataclass
class Trace:
    """Every stage's output for one or many queries.

    Attributes
    ----------
    queries, expansions, lists, fused, rerank, final, results, timings, notes : polars.DataFrame
        The tables of :data:`SCHEMAS`. ``final`` is the ranked, filtered and
        limited result list; ``results`` adds title, docid and a snippet. Each may be
        given as a frame (conformed to its schema), as :class:`Columns` (the frame is
        built on first read, see :meth:`built`) or left out (empty).
    config : dict
        The :class:`~qmdlab.pipeline.config.PipelineConfig` (as a dict) that made it.

    Examples
    --------
    >>> t = Trace()
    >>> t.final.columns[:3], t.notes.height
    (['qid', 'docno', 'fused_rank'], 0)
    """

    # _Table descriptors: the value given (a frame, Columns or None) goes through _Table.__set__,
    # reads (a frame) through __get__
    queries: _Table = _Table()
    expansions: _Table = _Table()
    lists: _Table = _Table()
    fused: _Table = _Table()
    rerank: _Table = _Table()
    final: _Table = _Table()
    results: _Table = _Table()
    timings: _Table = _Table()
    notes: _Table = _Table()
    config: dict = field(default_factory=dict)

    # -- views ------------------------------------------------------------------------
    def built(self) -> list[str]:
        """The tables held as polars frames now (given as frames, or read since); the others
        are still :class:`Columns` or empty, and cost nothing until read.

        >>> t = Trace(timings=Columns({"qid": ["q"], "stage": ["probe"], "ms": [0.1]}))
        >>> t.built(), t.timings.height, t.built()
        ([], 1, ['timings'])
        """
        return [n for n in TABLES if isinstance(self.__dict__[f"_table_{n}"], pl.DataFrame)]

    def height(self, table: str) -> int:
        """Rows of ``table``, without building its frame."""
        held = self.__dict__[f"_table_{table}"]
        return 0 if held is None else height(held)

    def column(self, table: str, name: str) -> list:
        """One column of ``table`` as a list, without building its frame (not to be changed)."""
        held = self.__dict__[f"_table_{table}"]
        return [] if held is None else column(held, name)

    @property
    def qids(self) -> list[str]:
        """Query ids in first-seen order (from ``lists``, ``final`` and ``notes``)."""
        seen: dict[str, None] = {}
        for name in ("queries", "expansions", "lists", "final", "notes"):
            for q in self.column(name, "qid"):
                seen.setdefault(q, None)
        return list(seen)

    def for_qid(self, qid: str) -> Trace:
        """The trace of one query."""
        return Trace(**{n: getattr(self, n).filter(pl.col("qid") == qid) for n in TABLES}, config=self.config)

    def notes_for(self, stage: str | None = None) -> list[str]:
        """Messages of the notes table, optionally of one stage."""
        messages = self.column("notes", "message")
        if stage is None:
            return list(messages)
        return [m for s, m in zip(self.column("notes", "stage"), messages) if s == stage]

    def to_ranx_run(self, table: str = "final", name: str = "qmdlab"):
        """A ``ranx.Run`` from a run-like table (``final``, ``fused``, ``rerank``).

        The score column is ``final_score``, ``fused_score`` or ``rerank_score``.
        Queries with no rows are absent (ranx scores them 0 against qrels).
        """
        Run = import_extra("ranx", "eval").Run

        score = {"final": "final_score", "fused": "fused_score", "rerank": "rerank_score"}.get(table)
        if score is None:
            raise QmdlabError(f"to_ranx_run: table {table!r} is not run-like; use final, fused or rerank")
        df = getattr(self, table).drop_nulls(score)
        run: dict[str, dict[str, float]] = {}
        for q, d, s in df.select("qid", "docno", score).iter_rows():
            run.setdefault(q, {})[d] = float(s)
        if not run:
            raise QmdlabError(f"to_ranx_run: the {table} table is empty (no results to evaluate)")
        return Run(run, name=name)

    def result_rows(self) -> list:
        """``results`` as :class:`qmdlab.pipeline.results.ResultRow` values (for ``format_results``)."""
        from qmdlab.pipeline.results import ResultRow, snippet

        # The words each snippet was chosen with (Lab._results: the query, its intent and the typed
        # searches): the best line is found again inside the snippet — the table keeps only its first
        # line, and a snippet cut at its chunk's first line (a title below front matter) starts on it.
        words: dict[str, list[str]] = {}
        for q, text, intent in zip(*(self.column("queries", c) for c in ("qid", "text", "intent"))):
            words.setdefault(q, []).extend(x for x in (text, intent) if x)
        for q, text, origin in zip(*(self.column("expansions", c) for c in ("qid", "text", "origin"))):
            if origin == "user" and text:
                words.setdefault(q, []).append(text)

        def best(qid: str, line: int, snip: str) -> int:
            return line + snippet(snip, " ".join(words.get(qid, ())), context=0).best_line - 1 if snip else 0

        cols = ("qid", "docno", "docid", "final_score", "line", "title", "context", "snippet")
        return [  # read from the columns: a front end that prints results builds no frame
            ResultRow(
                docno,
                docid or "",
                float(score),
                int(line or 1),
                title or docno,
                context,
                snip or "",
                best_line=best(qid, int(line or 1), snip or ""),
            )
            for qid, docno, docid, score, line, title, context, snip in zip(*(self.column("results", c) for c in cols))
        ]

    # -- many queries ---------------------------------------------------------------
    @staticmethod
    def concat(traces: Iterable[Trace]) -> Trace:
        """One trace holding all rows of ``traces`` (config of the first)."""
        traces = list(traces)
        if not traces:
            return Trace()
        tables: dict[str, pl.DataFrame] = {}
        for n in TABLES:
            held = [t.__dict__[f"_table_{n}"] for t in traces]
            if all(h is None or isinstance(h, Columns) for h in held):
                # every part still in columns (traces of Lab.query): one frame from the joined lists
                cols = Columns.empty(n)
                for h in held:
                    if h is not None:
                        for c, values in h.items():
                            cols[c].extend(values)
                tables[n] = cols.frame(n)
            else:
                tables[n] = pl.concat([getattr(t, n) for t in traces], how="vertical")
        return Trace(**tables, config=traces[0].config)

    # -- persistence ----------------------------------------------------------------
    def to_parquet(self, directory: str | Path) -> Path:
        """Write one ``<table>.parquet`` per table plus ``config.json`` into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            getattr(self, name).write_parquet(d / f"{name}.parquet")
        (d / "config.json").write_text(json.dumps(self.config, indent=1), encoding="utf-8")
        return d

    @classmethod
    def from_parquet(cls, directory: str | Path) -> Trace:
        """Read a trace written by :meth:`to_parquet`."""
        d = Path(directory)
        if not (d / "lists.parquet").exists():
            raise QmdlabError(f"{d}: no saved trace here (expected lists.parquet; write one with Trace.to_parquet)")
        tables = {n: pl.read_parquet(d / f"{n}.parquet") if (d / f"{n}.parquet").exists() else None for n in TABLES}
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8")) if (d / "config.json").exists() else {}
        return cls(**tables, config=cfg)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return all(getattr(self, n).equals(getattr(other, n)) for n in TABLES)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{n}={self.height(n)}" for n in TABLES)
        return f"Trace({sizes})"


def sort_within_qid(df: pl.DataFrame, by: list[str], descending: list[bool] | None = None) -> pl.DataFrame:
    """Sort rows by ``by`` within each qid, keeping queries in first-seen order.

    >>> df = pl.DataFrame({"qid": ["b", "a", "b"], "r": [2, 1, 1]})
    >>> sort_within_qid(df, ["r"]).rows()
    [('b', 1), ('b', 2), ('a', 1)]
    """
    descending = descending or [False] * len(by)
    qid = df["qid"]
    if qid.len() < 2 or qid.n_unique() == 1:  # one query (Lab.query): a plain stable sort, one polars call
        return df.sort(by, descending=descending, maintain_order=True)
    return (
        df.with_row_index("_row")
        .with_columns(_qo=pl.col("_row").min().over("qid"))
        .sort(["_qo", *by], descending=[False, *descending], maintain_order=True)
        .drop("_row", "_qo")
    )


__all__ = [
    "Trace",
    "Columns",
    "SCHEMAS",
    "TABLES",
    "BUILT",
    "empty",
    "conform",
    "sort_within_qid",
    "height",
    "column",
    "as_frame",
]
