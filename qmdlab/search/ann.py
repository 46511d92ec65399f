"""Approximate nearest-neighbour (ANN) index for :func:`~qmdlab.search.vector.vector_search`, opt-in.

Exact search is one matrix-vector product over every chunk vector: linear in the collection
(about 30 ms of CPU at 100k chunks and 325 ms at 1M on this project's machine, see README
"Scaling up"). With ``vector_index: hnsw`` (:class:`AnnConfig`) the candidates come from a FAISS
HNSW graph instead (``IndexHNSWFlat``, inner product over the L2-normalised rows, so cosine),
chosen by measurement over hnswlib and usearch (``benchmarks/scale_bench.py --ann``).

The graph is a derived artefact of one :class:`~qmdlab.store.vectors.VectorMatrix`: its row ``i``
is the matrix row ``i``. It is saved next to the SQLite file (``<index>/ann/<fingerprint>.faiss``
plus a ``.json`` sidecar) under a **key**: a digest of the chunk ids, document names and vector
bytes of the matrix and of the graph parameters. Any write to the vectors or documents gives a
new matrix and so a new key; a saved graph whose key differs is stale and is rebuilt (never used).
Within a process the graph is reused while the index hands out the same matrix object.

FAISS is an optional dependency: ``pip install 'qmdlab[ann]'`` (:data:`INSTALL_HINT`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from qmdlab.errors import ConfigError, QmdlabError

if TYPE_CHECKING:
    import numpy as np

    from qmdlab.store.vectors import VectorMatrix

FAISS_VERSION = "1.15.1"
INSTALL_HINT = (
    f"the ANN vector index (vector_index: hnsw, --ann) needs FAISS, which is not installed; "
    f"install the ann extra: pip install 'qmdlab[ann]'  (or: pip install 'faiss-cpu=={FAISS_VERSION}')"
)
VECTOR_INDEXES = ("exact", "hnsw")
FORMAT = 1  # bump when the saved layout or the key's ingredients change


def import_faiss() -> Any:
    """The ``faiss`` module, or a :class:`QmdlabError` carrying :data:`INSTALL_HINT`."""
    try:
        import faiss
    except ImportError as err:
        raise QmdlabError(f"{INSTALL_HINT} ({err})") from None
    return faiss


@dataclass(frozen=True)
class AnnConfig:
    """HNSW graph and search parameters.

    Parameters
    ----------
    m : int
        Graph degree (links per node and layer; 2·m on the bottom layer).
    ef_construction : int
        Candidate list while inserting (build cost and graph quality).
    ef_search : int
        Candidate list while searching: recall against latency. At 100k chunks 512 was the smallest
        swept value with recall@10 >= 0.95 on vectors with MiniLM's covariance (0.976; 256 gave 0.944),
        at ~15% of exact search's time (README "Scaling up"); isotropic random vectors need more.
    overfetch : int
        Chunks fetched per requested document (documents with several chunks take several rows).

    >>> AnnConfig(ef_search=0)
    Traceback (most recent call last):
    qmdlab.errors.ConfigError: ANN option 'ef_search' must be at least 1, got 0
    """

    m: int = 16
    ef_construction: int = 100
    ef_search: int = 512
    overfetch: int = 4

    def __post_init__(self) -> None:
        for name, low in (("m", 2), ("ef_construction", 1), ("ef_search", 1), ("overfetch", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"ANN option {name!r} must be at least {low}, got {value!r}")


class AnnHandle(NamedTuple):
    """A graph ready to search: ``source`` is ``memory`` (reused in this process), ``disk``
    (loaded, key matched) or ``built`` (absent, stale or unreadable on disk: built now)."""

    index: Any
    key: str
    source: str


_LOCK = threading.Lock()
_MEMORY: dict[tuple[str, str, AnnConfig], tuple[Any, AnnHandle]] = {}


def matrix_key(vm: VectorMatrix, fingerprint: str, cfg: AnnConfig) -> str:
    """Digest of everything the graph depends on: rows (chunk ids, documents, vector bytes),
    the embedder fingerprint, the graph parameters and the FAISS version."""
    import numpy as np

    h = hashlib.blake2b(digest_size=16)
    faiss = import_faiss()
    h.update(
        json.dumps([FORMAT, faiss.__version__, fingerprint, cfg.m, cfg.ef_construction, list(vm.matrix.shape)]).encode()
    )
    h.update(np.ascontiguousarray(vm.chunk_ids, dtype=np.int64).tobytes())
    h.update("\0".join(vm.docnos).encode())
    # an ndarray is a buffer (no copy), but numpy's stubs declare __buffer__ only for Python >= 3.12
    h.update(memoryview(np.ascontiguousarray(vm.matrix, dtype=np.float32)).cast("B"))  # type: ignore[arg-type]
    return h.hexdigest()


def ann_paths(index_dir: Path, fingerprint: str) -> tuple[Path, Path]:
    """Graph file and key sidecar of ``fingerprint`` under ``<index_dir>/ann/``.

    >>> [p.name for p in ann_paths(Path("/i"), "pkg:all-minilm-l6-v2#9be0f851831c")]
    ['pkg_all-minilm-l6-v2_9be0f851831c.faiss', 'pkg_all-minilm-l6-v2_9be0f851831c.json']
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", fingerprint)
    return index_dir / "ann" / f"{slug}.faiss", index_dir / "ann" / f"{slug}.json"


def build_graph(matrix: np.ndarray, cfg: AnnConfig) -> Any:
    """An HNSW graph (inner product) over the rows of ``matrix``; labels are row numbers."""
    import numpy as np

    faiss = import_faiss()
    graph = faiss.IndexHNSWFlat(int(matrix.shape[1]), cfg.m, faiss.METRIC_INNER_PRODUCT)
    graph.hnsw.efConstruction = cfg.ef_construction
    graph.add(np.ascontiguousarray(matrix, dtype=np.float32))
    return graph


def _load(graph_path: Path, meta_path: Path, key: str, n: int) -> Any | None:
    """The saved graph when its sidecar carries ``key`` and it holds ``n`` rows; else ``None``."""
    faiss = import_faiss()
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("key") != key:
            return None
        graph = faiss.read_index(str(graph_path))
    except (OSError, ValueError, RuntimeError):  # absent, half-written or corrupt: rebuild
        return None
    return graph if graph.ntotal == n else None


def _save(graph: Any, graph_path: Path, meta_path: Path, key: str, n: int, cfg: AnnConfig) -> None:
    """Write graph then sidecar, each atomically (a reader never pairs a new key with an old graph:
    the sidecar is replaced last, and the key is checked against the matrix anyway)."""
    faiss = import_faiss()
    try:
        graph_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = graph_path.with_name(f"{graph_path.name}.tmp{os.getpid()}")
        faiss.write_index(graph, str(tmp))
        meta_tmp = meta_path.with_name(f"{meta_path.name}.tmp{os.getpid()}")
        meta_tmp.write_text(
            json.dumps(
                {"key": key, "rows": n, "m": cfg.m, "ef_construction": cfg.ef_construction, "faiss": faiss.__version__}
            ),
            encoding="utf-8",
        )
        meta_path.unlink(missing_ok=True)
        os.replace(tmp, graph_path)
        os.replace(meta_tmp, meta_path)
    except OSError:  # a read-only index folder: the graph lives in memory for this process only
        pass


def ann_graph(index_dir: Path | None, fingerprint: str, vm: VectorMatrix, cfg: AnnConfig) -> AnnHandle:
    """The HNSW graph of ``vm``: from memory, from disk when its key matches, or built (and saved).

    Parameters
    ----------
    index_dir : Path or None
        The index folder (``None``: memory only, nothing saved).
    fingerprint : str
    vm : VectorMatrix
        The matrix as :meth:`qmdlab.store.Index.vector_matrix` returns it.
    cfg : AnnConfig

    Raises
    ------
    QmdlabError
        FAISS is not installed (the message holds the exact ``pip install``).
    """
    import_faiss()
    slot = (str(index_dir), fingerprint, cfg)
    with _LOCK:
        hit = _MEMORY.get(slot)
        if hit is not None and hit[0] is vm:
            return hit[1]._replace(source="memory")
        key = matrix_key(vm, fingerprint, cfg)
        n = int(vm.matrix.shape[0])
        graph, source = None, "built"
        if hit is not None and hit[1].key == key:
            graph, source = hit[1].index, "memory"
        elif index_dir is not None:
            graph_path, meta_path = ann_paths(Path(index_dir), fingerprint)
            graph = _load(graph_path, meta_path, key, n)
            source = "disk"
        if graph is None:
            graph, source = build_graph(vm.matrix, cfg), "built"
            if index_dir is not None:
                _save(graph, *ann_paths(Path(index_dir), fingerprint), key, n, cfg)
        handle = AnnHandle(graph, key, source)
        _MEMORY[slot] = (vm, handle)
        return handle


def ann_rows(handle: AnnHandle, q: np.ndarray, k: int, cfg: AnnConfig) -> np.ndarray:
    """Matrix rows of (about) the ``k`` nearest chunk vectors to the unit vector ``q``."""
    import numpy as np

    faiss = import_faiss()
    params = faiss.SearchParametersHNSW()
    params.efSearch = max(cfg.ef_search, k)
    _, labels = handle.index.search(np.ascontiguousarray(q, dtype=np.float32).reshape(1, -1), k, params=params)
    rows = labels[0]
    return rows[rows >= 0]


def clear_memory() -> None:
    """Forget the graphs held in this process (tests; a long-lived process after closing indexes)."""
    with _LOCK:
        _MEMORY.clear()
