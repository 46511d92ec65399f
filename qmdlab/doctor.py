"""``qmdlab doctor``: does this machine run qmdlab's models, and how fast?

What it reports (:func:`diagnose`), each part also usable on its own:

- **versions** of Python and the packages qmdlab runs on (:func:`versions`);
- **the CPU** and the instruction-set features it advertises (:func:`cpu_info`, from
  ``/proc/cpuinfo`` on Linux; other systems report the features as unknown), and whether the
  kernel grants AMX tile state to a process (:func:`amx_granted`);
- **the llama.cpp build**: the features libggml-cpu was compiled with
  (``llama_cpp.llama_print_system_info()``, read in a child process), the ``CMAKE_ARGS`` of the
  wheel it came from (``CMAKE_ARGS.txt`` in the wheelhouse that ``make setup`` fills, matched to the
  installed library by its sha256), and every compiled feature the CPU does not advertise;
- **the models** of a preset: the model cache, each file, present or not, its size and sha256;
- **checks, each in its own child process** (:func:`run_checks`): import llama.cpp, then per role
  load the model and run it for real — embed, generate, score a rerank pair — and, unless
  ``smoke``, measure chunks/s, tokens/s and pairs/s on this machine.

A child that dies by a signal becomes one message (:mod:`qmdlab.subproc`): which model, which
signal, what it usually means, and the exact rebuild command for this CPU (:func:`rebuild_commands`).
The parent process never imports ``llama_cpp`` itself, so it always lives to say so.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Optional, cast

from qmdlab.subproc import ChildDied, ChildFailed, call_in_child

LLAMA_DIST = "llama-cpp-python"
LLAMA_VERSION = "0.3.36"
#: Distributions whose versions the report lists (absent ones are reported as ``None``).
VERSION_DISTS = (
    "qmdlab",
    "llama-cpp-python",
    "numpy",
    "polars",
    "ranx",
    "torch",
    "transformers",
    "sentence-transformers",
    "peft",
    "trl",
    "lightgbm",
    "optuna",
    "marimo",
    "mcp",
)
#: ggml's feature names (``llama_print_system_info``) → the Linux ``/proc/cpuinfo`` flag that allows them.
X86_FEATURES = {
    "SSE3": "pni",
    "SSSE3": "ssse3",
    "AVX": "avx",
    "AVX_VNNI": "avx_vnni",
    "AVX2": "avx2",
    "F16C": "f16c",
    "FMA": "fma",
    "BMI2": "bmi2",
    "AVX512": "avx512f",
    "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16",
    "AMX_TILE": "amx_tile",
    "AMX_INT8": "amx_int8",
    "AMX_BF16": "amx_bf16",
}
ARM_FEATURES = {
    "NEON": "asimd",
    "ARM_FMA": "asimd",
    "FP16_VA": "asimdhp",
    "DOTPROD": "asimddp",
    "MATMUL_INT8": "i8mm",
    "SVE": "sve",
    "SME": "sme",
    "SME2": "sme2",
}
#: Where ``make setup`` keeps built llama-cpp-python wheels (see the Makefile).
WHEELHOUSE_ENV = "QMDLAB_WHEELHOUSE"

# Fixed inputs of the checks: a CISI-like abstract (~230 tokens) and a short query.
QUERY = "how do libraries classify and index scientific documents"
BENCH_TEXT = (
    "The classification of scientific literature in special libraries is examined through a survey of "
    "indexing practice. Subject headings, faceted classification schemes and coordinate indexing with "
    "uniterms are compared for retrieval effectiveness, measured by recall and precision on a test "
    "collection of reports in aeronautics. Indexers assigned on average eleven terms per document; "
    "the depth of indexing, the specificity of the vocabulary and the consistency between indexers "
    "are shown to matter more than the choice of scheme. Citation indexing is discussed as a "
    "complement to subject indexing, since references made by authors link documents that share no "
    "index terms. The cost of indexing is estimated per document and set against the cost of "
    "searching, and the paper closes with recommendations for libraries that plan to mechanise their "
    "catalogues and for the training of indexers in the use of thesauri and authority lists."
)


# --- versions, CPU ------------------------------------------------------------------------------


def versions(dists: tuple[str, ...] = VERSION_DISTS) -> dict[str, Optional[str]]:
    """Python's version and each distribution's installed version (``None`` if absent).

    >>> v = versions(("qmdlab", "no-such-dist-xyz"))
    >>> v["no-such-dist-xyz"] is None and v["python"].count(".") == 2
    True
    """
    out: dict[str, Optional[str]] = {"python": platform.python_version()}
    for d in dists:
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            out[d] = None
    return out


class CpuInfo(NamedTuple):
    """The CPU as the OS describes it.

    Attributes
    ----------
    machine : str
        ``platform.machine()`` (``x86_64``, ``aarch64``, ``arm64``…).
    model : str
        The model name, or ``""`` when unknown.
    logical_cpus : int
        Logical CPUs (``count`` in :meth:`Report.to_dict`).
    flags : frozenset of str or None
        Advertised instruction-set flags (``/proc/cpuinfo`` names), ``None`` when not readable here.
    source : str
        Where the flags came from, or why they are unknown.
    """

    machine: str
    model: str
    logical_cpus: int
    flags: Optional[frozenset]
    source: str


def parse_cpuinfo(text: str) -> tuple[str, Optional[frozenset]]:
    """``(model, flags)`` from the text of ``/proc/cpuinfo`` (x86 ``flags`` or ARM ``Features``).

    >>> model, flags = parse_cpuinfo("model name\\t: Xeon\\nflags\\t\\t: fpu avx2 amx_tile\\n\\n")
    >>> model, sorted(flags)
    ('Xeon', ['amx_tile', 'avx2', 'fpu'])
    >>> model, flags = parse_cpuinfo("Features\\t: fp asimd asimddp\\nCPU part\\t: 0xd0c\\n")
    >>> model, sorted(flags)
    ('CPU part 0xd0c', ['asimd', 'asimddp', 'fp'])
    >>> parse_cpuinfo("processor : 0\\n")
    ('', None)
    """
    model, flags = "", None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("model name", "cpu model") and not model:
            model = value.strip()
        elif key == "cpu part" and not model:
            model = f"CPU part {value.strip()}"
        elif key in ("flags", "features") and flags is None:
            flags = frozenset(value.split())
    return model, flags


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuInfo:
    """The CPU and its advertised flags; on systems without ``/proc/cpuinfo`` the flags are ``None``."""
    machine, count = platform.machine(), os.cpu_count() or 1
    try:
        model, flags = parse_cpuinfo(cpuinfo.read_text(errors="replace"))
    except OSError:
        return CpuInfo(
            machine,
            platform.processor(),
            count,
            None,
            f"{cpuinfo} is not readable on {platform.system()}: the CPU's features are unknown",
        )
    if flags is None:
        return CpuInfo(machine, model, count, None, f"{cpuinfo} lists no flags/Features line")
    return CpuInfo(machine, model, count, flags, str(cpuinfo))


def amx_granted() -> Optional[bool]:
    """Whether Linux lets this process use AMX tile data (``arch_prctl(ARCH_REQ_XCOMP_PERM)``).

    ``None`` where the question does not apply (not Linux x86-64, or the syscall is unavailable).
    A CPU can advertise ``amx_tile`` while the kernel (or hypervisor) refuses the permission; AMX
    code then dies of SIGILL — the crash this module exists to explain.
    """
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18
        return libc.syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return None


# --- the llama.cpp build --------------------------------------------------------------------------


def parse_system_info(text: str) -> dict[str, str]:
    """The CPU backend's ``NAME = value`` features from ``llama_print_system_info()``.

    >>> parse_system_info("CPU : SSE3 = 1 | AVX2 = 1 | AMX_INT8 = 1 | REPACK = 1 | ")
    {'SSE3': '1', 'AVX2': '1', 'AMX_INT8': '1', 'REPACK': '1'}
    """
    cpu = text.split("CPU :", 1)[1] if "CPU :" in text else text
    cpu = re.split(r"\b[A-Z][A-Za-z0-9_]* : ", cpu, maxsplit=1)[0]  # stop at the next backend
    return dict(re.findall(r"([A-Z][A-Z0-9_]*) = ([^|\s]+)", cpu))


def missing_features(build: dict[str, str], cpu_flags: Optional[frozenset], machine: str) -> list[str]:
    """Compiled instruction-set features of the build that the CPU does not advertise.

    >>> missing_features({"AVX2": "1", "AMX_INT8": "1", "REPACK": "1"}, frozenset({"avx2"}), "x86_64")
    ['AMX_INT8']
    >>> missing_features({"AVX2": "1"}, None, "x86_64")
    []
    """
    if cpu_flags is None:
        return []
    table = X86_FEATURES if machine in ("x86_64", "AMD64", "i686") else ARM_FEATURES
    return [f for f, v in build.items() if v not in ("0", "") and f in table and table[f] not in cpu_flags]


def wheelhouse() -> Path:
    """``$QMDLAB_WHEELHOUSE``, else ``~/.cache/qmdlab/wheelhouse`` (the Makefile's default)."""
    return Path(os.environ.get(WHEELHOUSE_ENV) or Path.home() / ".cache" / "qmdlab" / "wheelhouse").expanduser()


class LlamaWheel(NamedTuple):
    """Where the installed llama-cpp-python came from.

    Attributes
    ----------
    version : str or None
        Installed version (``None``: not installed).
    package_dir : Path or None
        The installed ``llama_cpp`` folder.
    cpu_library : Path or None
        The installed ``libggml-cpu*.so`` (or ``.dylib``/``.dll``).
    wheel : Path or None
        The wheelhouse wheel whose ``libggml-cpu`` has the installed library's sha256.
    cmake_args : str or None
        The ``CMAKE_ARGS.txt`` beside that wheel.
    """

    version: Optional[str]
    package_dir: Optional[Path]
    cpu_library: Optional[Path]
    wheel: Optional[Path]
    cmake_args: Optional[str]


def _record_hash(lines: list[str], name_re: str) -> Optional[tuple[str, str]]:
    for line in lines:
        path, _, rest = line.partition(",")
        if re.search(name_re, path):
            return path, rest.split(",")[0]
    return None


def llama_wheel(root: Optional[Path] = None) -> LlamaWheel:
    """Locate the installed llama.cpp CPU library and the wheelhouse wheel (and flags) it came from."""
    try:
        dist = md.distribution(LLAMA_DIST)
    except md.PackageNotFoundError:
        return LlamaWheel(None, None, None, None, None)
    lib_re = r"llama_cpp/lib/(lib)?ggml-cpu[^/]*\.(so|dylib|dll)$"
    record = (dist.read_text("RECORD") or "").splitlines()
    hit = _record_hash(record, lib_re)
    # An installed (path) distribution: locate_file gives a pathlib.Path, typed as a SimplePath.
    lib = Path(cast(Path, dist.locate_file(hit[0]))).resolve() if hit else None
    pkg = Path(cast(Path, dist.locate_file("llama_cpp"))).resolve()
    wheel = args = None
    if hit:
        for whl in sorted((root or wheelhouse()).glob(f"llama-cpp-python-{dist.version}-*/llama_cpp_python-*.whl")):
            try:
                with zipfile.ZipFile(whl) as z:
                    rec = next((n for n in z.namelist() if n.endswith(".dist-info/RECORD")), None)
                    other = _record_hash(z.read(rec).decode().splitlines(), lib_re) if rec else None
            except (OSError, zipfile.BadZipFile):
                continue
            if other and other[1] == hit[1]:
                wheel = whl
                txt = whl.parent / "CMAKE_ARGS.txt"
                args = txt.read_text().strip() if txt.is_file() else None
                break
    return LlamaWheel(dist.version, pkg, lib, wheel, args)


def makefile_cmake_args(repo: Optional[Path] = None) -> Optional[str]:
    """The Makefile's ``LLAMA_CMAKE_ARGS`` for this host (``make -s llama-cmake-args``), if in a checkout."""
    repo = repo or Path(__file__).resolve().parents[1]
    if not (repo / "Makefile").is_file() or not shutil.which("make"):
        return None
    try:
        proc = subprocess.run(
            ["make", "-s", "--no-print-directory", "-C", str(repo), "llama-cmake-args"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and "-DGGML" in out else None


def fit_cmake_args(args: str, cpu_flags: Optional[frozenset], machine: str) -> str:
    """``args`` with every ``-DGGML_<feature>=ON`` turned OFF that the CPU does not advertise.

    >>> fit_cmake_args("-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON", frozenset({"avx", "fma"}), "x86_64")
    '-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=ON'
    >>> fit_cmake_args("-DGGML_AVX2=ON", None, "x86_64")
    '-DGGML_AVX2=ON'
    """
    if cpu_flags is None:
        return args
    table = X86_FEATURES if machine in ("x86_64", "AMD64", "i686") else ARM_FEATURES

    def fix(m: re.Match) -> str:
        feat = m.group(1)
        return f"-DGGML_{feat}=OFF" if feat in table and table[feat] not in cpu_flags else m.group(0)

    return re.sub(r"-DGGML_([A-Z0-9_]+)=ON\b", fix, args)


class Rebuild(NamedTuple):
    """How to rebuild llama-cpp-python for this CPU: ``make`` (in the checkout) and plain ``pip``."""

    cmake_args: str
    make: str
    pip: str

    def text(self) -> str:
        """The fix, as printed after a crash."""
        return (
            "rebuild llama-cpp-python for this CPU, then check again:\n"
            f"    {self.make}\n"
            "  or, without the Makefile:\n"
            f"    {self.pip}\n"
            "    qmdlab doctor"
        )


def rebuild_commands(
    cpu: Optional[CpuInfo] = None, *, default_args: Optional[str] = None, wheel: Optional[LlamaWheel] = None
) -> Rebuild:
    """The exact rebuild commands for this machine.

    The flags are the Makefile's portable set (or the installed wheel's ``CMAKE_ARGS.txt``,
    else ``-DGGML_NATIVE=OFF``) with any feature this CPU does not advertise switched off.

    >>> cpu = CpuInfo("x86_64", "", 2, frozenset({"avx", "fma", "f16c"}), "test")
    >>> r = rebuild_commands(cpu, default_args="-DGGML_NATIVE=OFF -DGGML_AVX2=ON")
    >>> r.make
    'make rebuild-llama LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=OFF"'
    >>> rebuild_commands(cpu, default_args="-DGGML_NATIVE=OFF -DGGML_FMA=ON").make
    'make rebuild-llama'
    """
    cpu = cpu or cpu_info()
    if default_args is None:
        default_args = makefile_cmake_args()
    if default_args is None:
        wheel = wheel or llama_wheel()
        default_args = wheel.cmake_args or "-DGGML_NATIVE=OFF"
    args = fit_cmake_args(default_args, cpu.flags, cpu.machine)
    make = "make rebuild-llama" if args == default_args else f'make rebuild-llama LLAMA_CMAKE_ARGS="{args}"'
    python = shlex.quote(sys.executable)
    pip = (
        f'CMAKE_ARGS="{args}" {python} -m pip install --force-reinstall --no-deps --no-cache-dir '
        f"--no-binary {LLAMA_DIST} {LLAMA_DIST}=={LLAMA_VERSION}"
    )
    return Rebuild(args, make, pip)


# --- models ---------------------------------------------------------------------------------------


class ModelFile(NamedTuple):
    """One role's model file: reference, path, presence, size and sha256 (with where it came from)."""

    role: str
    ref: Optional[str]
    path: Optional[Path]
    ready: bool
    size: int
    sha256: Optional[str]
    sha256_ok: Optional[bool]


def model_files(preset: Optional[str] = None, *, hash_files: bool = True) -> tuple[str, list[ModelFile]]:
    """The preset's name and each role's :class:`ModelFile`.

    The sha256 is read from the ``.sha256`` stamp that assembly wrote (verified then), else
    computed when ``hash_files``; ``sha256_ok`` compares it with the packaged model's known hash.
    """
    from qmdlab.models import packaged
    from qmdlab.models.registry import ref_status, resolve_refs

    name, refs = resolve_refs(preset)
    out: list[ModelFile] = []
    seen: dict[Path, Optional[str]] = {}
    for role, ref in refs.items():
        if ref is None or not isinstance(ref, (str, os.PathLike)) or str(ref).startswith("fake:"):
            out.append(ModelFile(role, None if ref is None else str(ref), None, ref is not None, 0, None, None))
            continue
        ref = str(ref)
        try:
            st = ref_status(ref)
        except Exception:  # noqa: BLE001 - an unknown pkg: name etc. is reported, not raised
            out.append(ModelFile(role, ref, None, False, 0, None, None))
            continue
        path, digest, expected = st["path"], None, None
        if ref.startswith("pkg:"):
            expected = packaged.get(ref[4:]).sha256
        if path is not None and Path(path).is_file():
            path = Path(path)
            if path not in seen:
                stamp = path.with_name(path.name + ".sha256")
                if stamp.is_file():
                    seen[path] = stamp.read_text().strip() or None
                elif hash_files:
                    seen[path] = packaged.sha256_file(path)
                else:
                    seen[path] = None
            digest = seen[path]
        ok = None if expected is None or digest is None else digest == expected
        out.append(ModelFile(role, ref, path, bool(st["ready"]), int(st["size"]), digest, ok))
    return name, out


# --- checks in child processes -----------------------------------------------------------------


def child_library() -> dict:
    """(Child) import llama.cpp and return its system info and files."""
    from qmdlab.models._llama import (
        gpu_layers,
        gpu_offload_supported,
        gpu_setting,
        import_llama_cpp,
        load_backends,
        loaded_cpu_variant,
    )

    t0 = time.perf_counter()
    llama_cpp = import_llama_cpp()
    info = llama_cpp.llama_print_system_info()
    info = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return {
        "system_info": info.strip(),
        "backends": load_backends(llama_cpp),
        "cpu_variant": loaded_cpu_variant(),
        "seconds": time.perf_counter() - t0,
        "version": llama_cpp.__version__,
        "gpu_offload": gpu_offload_supported(llama_cpp),
        "gpu_setting": gpu_setting(),
        "gpu_layers": gpu_layers(llama_cpp),
    }


def backend_line(result: dict) -> str:
    """Which backend the local models run on, from :func:`child_library`'s result.

    >>> backend_line({"gpu_offload": False, "gpu_setting": "auto", "gpu_layers": 0})
    'CPU (this llama.cpp build cannot offload to a GPU; QMDLAB_GPU=auto)'
    >>> backend_line({"gpu_offload": True, "gpu_setting": "auto", "gpu_layers": -1})
    'GPU offload, every layer (QMDLAB_GPU=auto)'
    >>> backend_line({"gpu_offload": True, "gpu_setting": "off", "gpu_layers": 0})
    'CPU (GPU offload available, switched off: QMDLAB_GPU=off)'
    """
    setting, layers = result.get("gpu_setting"), result.get("gpu_layers")
    variant = result.get("cpu_variant")
    if not result.get("gpu_offload"):
        kernels = f"; CPU kernels: {variant}" if variant else ""
        return f"CPU (this llama.cpp build cannot offload to a GPU; QMDLAB_GPU={setting}{kernels})"
    if not layers:
        return f"CPU (GPU offload available, switched off: QMDLAB_GPU={setting})"
    return f"GPU offload, {'every layer' if layers == -1 else f'{layers} layers'} (QMDLAB_GPU={setting})"


def child_served(role: str, ref: str) -> dict:
    """(Child) call one served model once (it has no file and no load)."""
    from qmdlab.models.registry import build_model

    model = build_model(role, ref, chunking={})
    t0 = time.perf_counter()
    out: dict[str, Any] = {"role": role, "ref": ref, "smoke": True, "load_s": None}
    if role == "embed":
        out["dim"] = int(model.embed_query(QUERY).shape[0])
    elif role == "expand":
        out["text"] = model.expand(QUERY).raw[:200]
    else:
        out["p_yes"] = float(model.score(QUERY, [BENCH_TEXT[:200]])[0])
    out["first_s"] = time.perf_counter() - t0
    return out


def child_model(role: str, ref: str, smoke: bool = True, n_threads: Optional[int] = None) -> dict:
    """(Child) load one role's model and run it for real; unless ``smoke``, measure its speed.

    Returns load seconds, first-call seconds and, when measured: ``chunks_per_s`` (embed),
    ``tokens_per_s`` and ``prompt_tokens_per_s`` (expand), ``pairs_per_s`` (rerank).
    """
    from qmdlab.models._http import is_remote
    from qmdlab.models.registry import build_model

    if is_remote(ref):
        return child_served(role, ref)
    out: dict[str, Any] = {"role": role, "ref": ref, "smoke": smoke}
    if role == "embed":
        emb = build_model("embed", ref, idle_timeout=None, n_threads=n_threads, chunking={})
        t0 = time.perf_counter()
        vec = emb.embed_query(QUERY)
        out.update(load_s=emb.llama.load_seconds, first_s=time.perf_counter() - t0, dim=int(vec.shape[0]))
        if not smoke:
            docs = [(f"Report {i}", f"{i}. {BENCH_TEXT}") for i in range(8)]
            t0 = time.perf_counter()
            emb.embed_documents(docs)
            dt = time.perf_counter() - t0
            out.update(chunks=len(docs), bench_s=dt, chunks_per_s=len(docs) / dt)
    elif role == "expand":
        from qmdlab.models.llama_expand import SamplingConfig

        n = 4 if smoke else 24
        exp = build_model(
            "expand",
            ref,
            idle_timeout=None,
            n_threads=n_threads,
            sampling=SamplingConfig(temperature=0.0, max_tokens=n),
        )
        t0 = time.perf_counter()
        res = exp.expand(QUERY)
        first = time.perf_counter() - t0
        with exp.llama.use() as llm:
            gen = len(llm.tokenize(res.raw.encode("utf-8"), add_bos=False, special=True))
            prompt = len(llm.tokenize(exp.prompt(QUERY).encode("utf-8"), add_bos=True, special=True))
        load = exp.llama.load_seconds or 0.0
        out.update(load_s=load, first_s=first, generated_tokens=gen, prompt_tokens=prompt, text=res.raw[:200])
        if not smoke:
            # The same prompt again: llama-cpp-python reuses its KV cache, so this is generation alone.
            t0 = time.perf_counter()
            exp.expand(QUERY)
            dt = time.perf_counter() - t0
            prompt_s = max(first - load - dt, 1e-6)
            out.update(
                bench_s=dt,
                tokens_per_s=gen / dt if gen else 0.0,
                prompt_s=prompt_s,
                prompt_tokens_per_s=prompt / prompt_s,
            )
    elif role == "rerank":
        rr = build_model("rerank", ref, idle_timeout=None, n_threads=n_threads)
        t0 = time.perf_counter()
        p = rr.score(QUERY, [BENCH_TEXT[:200]])[0]  # short: the smoke pair is not the measurement
        out.update(load_s=rr.llama.load_seconds, first_s=time.perf_counter() - t0, p_yes=float(p))
        if not smoke:
            passages = [f"{i}. {BENCH_TEXT}" for i in range(2)]
            t0 = time.perf_counter()
            rr.score(QUERY, passages)
            dt = time.perf_counter() - t0
            with rr.llama.use() as llm:
                doc_tokens = len(llm.tokenize(passages[0].encode("utf-8"), add_bos=False, special=False))
            if rr.max_doc_tokens:
                doc_tokens = min(doc_tokens, rr.max_doc_tokens)
            out.update(pairs=len(passages), bench_s=dt, pairs_per_s=len(passages) / dt, doc_tokens=doc_tokens)
    else:
        raise ValueError(f"unknown role {role!r}")
    return out


class Check(NamedTuple):
    """One child-process check.

    Attributes
    ----------
    name : str
        ``"library"`` or a role (``embed``, ``expand``, ``rerank``).
    ref : str or None
        The model reference (``None`` for the library check).
    ok : bool
        The child ran to the end and returned a result.
    seconds : float
        Wall time of the child, interpreter start included.
    result : dict
        What the child measured (see :func:`child_model`).
    signal : str or None
        The signal that killed the child, if one did.
    error : str or None
        The message (for a death by signal: what, which signal, cause and fix).
    """

    name: str
    ref: Optional[str]
    ok: bool
    seconds: float
    result: dict
    signal: Optional[str]
    error: Optional[str]


def _run_check(
    name: str, ref: Optional[str], target: str, args: tuple, what: str, fix: Callable[[], str], timeout: float
) -> Check:
    t0 = time.perf_counter()
    try:
        res = call_in_child(target, *args, what=what, hint=None, timeout=timeout)
        return Check(name, ref, True, time.perf_counter() - t0, res, None, None)
    except ChildDied as err:
        # Rebuild the message with the llama.cpp fix (computed only when something died).
        from qmdlab.subproc import death_message

        msg = death_message(what, err.returncode, hint=fix())
        tail = str(err).split("last output of the child process:", 1)
        if len(tail) == 2:
            msg += "\nlast output of the child process:" + tail[1]
        return Check(name, ref, False, time.perf_counter() - t0, {}, err.signal_name, msg)
    except ChildFailed as err:
        return Check(name, ref, False, time.perf_counter() - t0, {}, None, f"error: {what} failed: {err}")


def run_checks(
    preset: Optional[str] = None,
    *,
    smoke: bool = True,
    timeout: float = 300.0,
    progress: Optional[Callable[[Check], None]] = None,
    fix: Optional[Callable[[], str]] = None,
    n_threads: Optional[int] = None,
) -> list[Check]:
    """Import llama.cpp, then run each distinct (role, model) of the preset, each in its own child.

    Fake and disabled roles are skipped. If the library check dies, the model checks are not run
    (they would die the same way). ``progress`` is called with each finished :class:`Check`.
    """
    from qmdlab.models.registry import resolve_refs

    fix = fix or (lambda: rebuild_commands().text())
    name, refs = resolve_refs(preset)
    real = {
        role: str(ref)
        for role, ref in refs.items()
        if isinstance(ref, (str, os.PathLike)) and not str(ref).startswith("fake:")
    }
    checks: list[Check] = []

    def done(c: Check) -> Check:
        checks.append(c)
        if progress:
            progress(c)
        return c

    if not real:
        return checks
    lib = done(
        _run_check(
            "library",
            None,
            "qmdlab.doctor:child_library",
            (),
            "importing llama.cpp (llama_cpp / libggml-cpu)",
            fix,
            timeout,
        )
    )
    if not lib.ok:
        return checks
    from qmdlab.models.registry import ref_status

    for role, ref in real.items():
        try:
            ready = bool(ref_status(ref)["ready"])
        except Exception:  # noqa: BLE001 - e.g. an unknown pkg: name; the child would fail the same way
            ready = True
        if not ready:  # never download or assemble from here: say what to run instead
            done(
                Check(
                    role,
                    ref,
                    False,
                    0.0,
                    {"missing": True},
                    None,
                    f"error: the {role} model {ref} is not present; run `qmdlab pull --preset {name}` "
                    f"(or fix QMDLAB_{role.upper()}_MODEL)",
                )
            )
            continue
        what = f"the {role} model {ref} ({'smoke check' if smoke else 'speed check'})"
        done(_run_check(role, ref, "qmdlab.doctor:child_model", (role, ref, smoke, n_threads), what, fix, timeout))
    return checks


# --- the whole report -------------------------------------------------------------------------------


class Report(NamedTuple):
    """Everything :func:`diagnose` found; :meth:`to_dict` is the ``--json`` output."""

    ok: bool
    problems: list[str]
    warnings: list[str]
    versions: dict
    cpu: CpuInfo
    amx_granted: Optional[bool]
    build: dict
    preset: str
    model_cache: Path
    models: list[ModelFile]
    checks: list[Check]
    rebuild: Rebuild

    def to_dict(self) -> dict:
        """JSON-ready form."""
        cpu = {
            "machine": self.cpu.machine,
            "model": self.cpu.model,
            "count": self.cpu.logical_cpus,
            "flags": None if self.cpu.flags is None else sorted(self.cpu.flags),
            "source": self.cpu.source,
        }
        return {
            "ok": self.ok,
            "problems": self.problems,
            "warnings": self.warnings,
            "versions": self.versions,
            "platform": {"system": platform.system(), "release": platform.release()},
            "cpu": cpu,
            "amx_granted": self.amx_granted,
            "llama_build": self.build,
            "models": {
                "preset": self.preset,
                "cache_dir": str(self.model_cache),
                "files": [{**m._asdict(), "path": None if m.path is None else str(m.path)} for m in self.models],
            },
            "checks": [c._asdict() for c in self.checks],
            "rebuild": self.rebuild._asdict(),
        }


def diagnose(
    preset: Optional[str] = None,
    *,
    smoke: bool = False,
    timeout: float = 300.0,
    progress: Optional[Callable[[Check], None]] = None,
) -> Report:
    """Versions, CPU, llama.cpp build, model files and the child-process checks (see module docs)."""
    from qmdlab.paths import model_cache_dir

    cpu, wheel = cpu_info(), llama_wheel()
    rebuild = rebuild_commands(cpu, wheel=wheel)
    checks = run_checks(preset, smoke=smoke, timeout=timeout, progress=progress, fix=rebuild.text)
    name, files = model_files(preset)
    problems = [c.error for c in checks if not c.ok and c.error]
    warnings: list[str] = []
    lib = next((c for c in checks if c.name == "library" and c.ok), None)
    features = parse_system_info(lib.result["system_info"]) if lib else {}
    missing = missing_features(features, cpu.flags, cpu.machine)
    if missing:
        problems.append(
            f"the llama.cpp build uses {', '.join(missing)}, which this CPU does not advertise; {rebuild.text()}"
        )
    amx = amx_granted() if cpu.flags and "amx_tile" in cpu.flags else None
    if any(f.startswith("AMX") for f in features) and amx is False:
        problems.append(
            "the llama.cpp build uses AMX but this process is not granted AMX tile state; " + rebuild.text()
        )
    if cpu.flags is None:
        warnings.append(f"CPU features unknown ({cpu.source}); the build's features cannot be compared")
    if wheel.version and wheel.wheel is None:
        warnings.append(
            f"the installed llama-cpp-python {wheel.version} matches no wheel in {wheelhouse()} "
            "(installed some other way?); its CMAKE_ARGS are unknown — `make rebuild-llama` "
            "installs the portable build"
        )
    for f in files:
        if f.ref and not f.ready:
            problems.append(f"{f.role} model {f.ref} is not ready; run `qmdlab pull --preset {name}`")
        if f.sha256_ok is False:
            problems.append(
                f"{f.role} model {f.path} has sha256 {f.sha256}, not the expected one; delete it "
                f"and run `qmdlab pull --preset {name}`"
            )
    build = {
        "version": wheel.version,
        "package_dir": _s(wheel.package_dir),
        "cpu_library": _s(wheel.cpu_library),
        "wheel": _s(wheel.wheel),
        "cmake_args": wheel.cmake_args,
        "system_info": lib.result["system_info"] if lib else None,
        "cpu_variant": lib.result.get("cpu_variant") if lib else None,
        "backend": backend_line(lib.result) if lib else None,
        "gpu_offload": lib.result.get("gpu_offload") if lib else None,
        "gpu_layers": lib.result.get("gpu_layers") if lib else None,
        "features": sorted(f for f, v in features.items() if v not in ("0", "")),
        "not_advertised_by_cpu": missing,
    }
    return Report(
        not problems, problems, warnings, versions(), cpu, amx, build, name, model_cache_dir(), files, checks, rebuild
    )


def _s(p: Optional[Path]) -> Optional[str]:
    return None if p is None else str(p)


# --- text output --------------------------------------------------------------------------------------


def format_check(c: Check) -> str:
    """One line per check.

    >>> format_check(Check("rerank", "pkg:q", True, 3.2, {"load_s": 0.5, "first_s": 1.0, "pairs_per_s": 1.5,
    ...                    "pairs": 3, "doc_tokens": 230}, None, None))
    'rerank   ok    pkg:q  load 0.50 s, first call 1.00 s; 1.50 pairs/s (3 pairs, 230 document tokens each)'
    """
    if not c.ok:
        why = "not present" if c.result.get("missing") else f"{c.signal or 'error'} after {c.seconds:.1f} s"
        return f"{c.name:<8} FAIL  {c.ref or ''}  {why}"
    r = c.result
    if c.name == "library":
        return f"{c.name:<8} ok    llama-cpp-python {r.get('version')} imported in {r.get('seconds', 0):.2f} s"
    line = f"{c.name:<8} ok    {c.ref}  load {r.get('load_s') or 0:.2f} s, first call {r.get('first_s', 0):.2f} s"
    if "chunks_per_s" in r:
        line += f"; {r['chunks_per_s']:.1f} chunks/s ({r['chunks']} chunks)"
    if "tokens_per_s" in r:
        line += (
            f"; {r['tokens_per_s']:.1f} tokens/s generated ({r['generated_tokens']} tokens), "
            f"prompt {r['prompt_tokens']} tokens at {r['prompt_tokens_per_s']:.0f} tokens/s"
        )
    if "pairs_per_s" in r:
        line += f"; {r['pairs_per_s']:.2f} pairs/s ({r['pairs']} pairs, {r['doc_tokens']} document tokens each)"
    return line


def format_report(rep: Report) -> str:
    """The human-readable report."""
    v = rep.versions
    lines = ["versions   " + ", ".join(f"{k} {val}" for k, val in v.items() if val is not None)]
    absent = [k for k, val in v.items() if val is None]
    if absent:
        lines.append("           not installed: " + ", ".join(absent))
    cpu = rep.cpu
    lines.append(f"cpu        {cpu.model or '?'} ({cpu.machine}, {cpu.logical_cpus} logical CPUs)")
    if cpu.flags is None:
        lines.append(f"           features unknown: {cpu.source}")
    else:
        table = X86_FEATURES if cpu.machine in ("x86_64", "AMD64", "i686") else ARM_FEATURES
        adv = [f for f, flag in table.items() if flag in cpu.flags]
        lines.append("           advertises " + (" ".join(adv) or "none of ggml's features"))
        if rep.amx_granted is not None:
            lines.append(f"           AMX tile state granted to processes: {'yes' if rep.amx_granted else 'NO'}")
    b = rep.build
    lines.append(f"llama.cpp  {b['version'] or 'not installed'}  {b['cpu_library'] or ''}")
    if b["system_info"] is not None:
        lines.append("           compiled with " + " ".join(b["features"]))
    if b.get("backend"):
        lines.append("           backend " + b["backend"])
    lines.append(f"           wheel {b['wheel'] or 'not from the wheelhouse (' + str(wheelhouse()) + ')'}")
    if b["cmake_args"]:
        lines.append(f"           CMAKE_ARGS {b['cmake_args']}")
    if b["system_info"] is not None and cpu.flags is not None:
        lines.append(
            "           every compiled feature is advertised by this CPU"
            if not b["not_advertised_by_cpu"]
            else "           NOT advertised by this CPU: " + " ".join(b["not_advertised_by_cpu"])
        )
    lines.append(f"models     preset {rep.preset}, cache {rep.model_cache}")
    for f in rep.models:
        if f.path is None:
            lines.append(f"  {f.role:<7}  {f.ref or 'none'}")
            continue
        sha = (
            ""
            if f.sha256 is None
            else f" sha256 {f.sha256[:12]}"
            + ("" if f.sha256_ok is None else (" (verified)" if f.sha256_ok else " (MISMATCH)"))
        )
        lines.append(
            f"  {f.role:<7}  {f.ref}  {'present' if f.ready else 'MISSING'}  "
            f"{f.size / 2**20:.1f} MiB{sha}\n           {f.path}"
        )
    lines.append("checks (each in its own child process)")
    lines.extend("  " + format_check(c) for c in rep.checks)
    for w in rep.warnings:
        lines.append(f"warning: {w}")
    if rep.problems:
        lines.append("")
        lines.extend(rep.problems)
    else:
        lines.append("all checks passed")
    return "\n".join(lines)


def to_json(rep: Report) -> str:
    """``--json`` output."""
    return json.dumps(rep.to_dict(), indent=2, default=str)
