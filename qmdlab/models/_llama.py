"""Shared llama.cpp plumbing: the lazy import, and a lazily-loaded, thread-safe, idle-released model.

Each role's backend (``llama_embed``, ``llama_expand``, ``llama_rerank``) owns one
:class:`LazyLlama`. Nothing touches the model file until the first call; every call holds the
handle's lock (llama.cpp contexts are not thread-safe); after ``idle_timeout`` seconds without a
call the weights are released and the next call loads them again.
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from qmdlab.cancel import CallStopped
from qmdlab.errors import ModelError

INSTALL_HINT = "pip install 'qmdlab[llama]'  (llama-cpp-python==0.3.36)"
DEFAULT_IDLE_TIMEOUT = 300.0


def import_llama_cpp():
    """Import ``llama_cpp`` or raise :class:`ModelError` with the install command."""
    # llama.cpp's OpenMP workers spin-wait by default; when other work shares the cores
    # (a notebook, a test run, a second model) that made 2 threads 4x slower than 1 here.
    # PASSIVE keeps the speed on an idle machine. Set before the library loads its OpenMP runtime.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as err:
        raise ModelError(f"llama-cpp-python is not installed; run `{INSTALL_HINT}`") from err
    _keep_output_on_load(llama_cpp)
    load_backends(llama_cpp)
    return llama_cpp


class _OutputLeftAlone:
    """Stands in for llama-cpp-python's ``suppress_stdout_stderr``, which points the process's
    stdout and stderr descriptors at ``/dev/null`` while a model loads: process-wide, so whatever
    another thread printed meanwhile was lost, and no model could load beside other work. llama.cpp
    speaks through its log callback, which llama-cpp-python already filters by verbosity."""

    def __init__(self, disable: bool = True):
        del disable

    def __enter__(self) -> _OutputLeftAlone:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


LLAMA_LOG: collections.deque[str] = collections.deque(maxlen=20)
"""llama.cpp's last log lines (warnings and errors), kept for the message of a load that fails and
never printed: a model's harmless complaints (say, a token type it corrects) are not the user's."""


def _record_llama_log(level: int, text: bytes, user_data: Any) -> None:
    del user_data
    if level in (2, 3):  # GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR
        line = text.decode("utf-8", "replace").strip()
        if line:
            LLAMA_LOG.append(line)


_log_callback: Any = None


def _keep_output_on_load(llama_cpp: Any) -> None:
    global _log_callback
    internals = getattr(llama_cpp, "_internals", None)  # absent from a stand-in module
    if internals is not None:
        internals.suppress_stdout_stderr = _OutputLeftAlone
    if _log_callback is None and hasattr(llama_cpp, "llama_log_set"):
        _log_callback = llama_cpp.llama_log_callback(_record_llama_log)  # kept: llama.cpp holds only the pointer
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


_LOAD_LOCK = threading.Lock()
_backends_loaded: list[str] = []
_backends_lock = threading.Lock()


def backend_libraries(llama_cpp: Any) -> tuple[Path, list[Path]]:
    """The package's library folder and the CPU variants in it (``libggml-cpu-<variant>.so``; none
    in a build without run-time dispatch, whose one ``libggml-cpu`` is linked in, nor in a module
    that is no package on disk, such as a test's stand-in)."""
    package_file = getattr(llama_cpp, "__file__", None)
    if package_file is None:
        return Path(), []
    lib = Path(package_file).resolve().parent / "lib"
    return lib, sorted(p for p in lib.glob("*ggml-cpu-*") if p.suffix in (".so", ".dylib", ".dll"))


def load_backends(llama_cpp: Any) -> list[str]:
    """Load llama.cpp's backends from the package's own folder, once per process, in a build with
    run-time CPU dispatch (``GGML_BACKEND_DL``, see the Makefile): ggml scores each CPU variant
    against this CPU and loads the best it can run, and the CUDA backend of a GPU build. The folder
    is given explicitly, so nothing is ever loaded from the working directory or next to the Python
    executable (ggml's default search path). Returns the names of the backends registered."""
    if getattr(llama_cpp, "__file__", None) is None:  # a stand-in module: nothing to load, nothing kept
        return []
    with _backends_lock:
        if _backends_loaded:
            return list(_backends_loaded)
        lib, variants = backend_libraries(llama_cpp)
        if not variants:  # a single linked-in CPU backend: nothing to load
            _backends_loaded.append("cpu")
            return list(_backends_loaded)
        import ctypes

        ggml = ctypes.CDLL(str(_loaded_ggml(lib)))
        ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        import logging

        log = logging.getLogger("llama-cpp-python")  # llama-cpp-python prints ggml's log lines at its level
        level = log.level
        log.setLevel(max(level, logging.ERROR))  # no "load_backend: loaded CPU backend …" on every start
        try:
            ggml.ggml_backend_load_all_from_path(os.fsencode(lib))
        finally:
            log.setLevel(level)
        ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
        ggml.ggml_backend_reg_get.restype = ctypes.c_void_p
        ggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
        ggml.ggml_backend_reg_name.restype = ctypes.c_char_p
        ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
        count = ggml.ggml_backend_reg_count()
        if count == 0:
            raise ModelError(
                f"llama.cpp found no CPU variant in {lib} that this CPU can run (variants: "
                f"{', '.join(p.name for p in variants)}); rebuild with `make rebuild-llama`"
            )
        _backends_loaded.extend(ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)).decode() for i in range(count))
        return list(_backends_loaded)


def _loaded_ggml(lib: Path) -> Path:
    """The libggml that llama.cpp itself loaded: the backend registry lives in it, and a second copy
    of the library (the wheel ships ``libggml.so`` and ``libggml.so.0`` as two files) would register
    the backends where llama.cpp never looks."""
    import re

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    for m in re.finditer(r"(/\S*/libggml\.so[.0-9]*)$", maps, re.M):
        return Path(m.group(1))
    names = sorted(p for p in lib.iterdir() if re.fullmatch(r"(lib)?ggml\.(so\.\d+|so|dylib|dll)", p.name))
    if not names:
        raise ModelError(f"{lib}: no libggml library beside the CPU variants; reinstall llama-cpp-python")
    return max(names, key=lambda p: len(p.name))  # libggml.so.0: the soname llama.cpp links to


def loaded_cpu_variant() -> Optional[str]:
    """The CPU variant this process loaded (``haswell``, ``icelake`` …), read from the libraries
    mapped into it; ``None`` for a build without run-time dispatch (or off Linux)."""
    import re

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    m = re.search(r"ggml-cpu-([A-Za-z0-9_.]+?)\.(?:so|dylib|dll)", maps)
    return m.group(1) if m else None


def default_threads() -> int:
    """``$QMDLAB_THREADS``, else the CPU count capped at 4 (llama.cpp gains little beyond that here).

    >>> import os; os.environ["QMDLAB_THREADS"] = "3"; default_threads()
    3
    >>> del os.environ["QMDLAB_THREADS"]
    """
    env = os.environ.get("QMDLAB_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ModelError(f"QMDLAB_THREADS={env!r} is not an integer; set it to e.g. 2") from None
    return max(1, min(4, os.cpu_count() or 1))


_OFF = ("0", "off", "no", "false", "cpu")
_ALL = ("on", "all", "yes", "true", "gpu")


def gpu_setting(environ=None) -> str:
    """The GPU offload setting: ``$QMDLAB_GPU`` (``auto``, ``off``, ``all`` or a layer count), else
    ``off`` when qmd's ``$QMD_FORCE_CPU`` is set to a true value, else ``auto``.

    >>> gpu_setting({}), gpu_setting({"QMD_FORCE_CPU": "1"}), gpu_setting({"QMDLAB_GPU": "all", "QMD_FORCE_CPU": "1"})
    ('auto', 'off', 'all')
    >>> gpu_setting({"QMDLAB_GPU": "sometimes"})
    Traceback (most recent call last):
    ...
    qmdlab.errors.ModelError: QMDLAB_GPU='sometimes' is not auto, off, all or a number of layers; set it to e.g. auto
    """
    env = os.environ if environ is None else environ
    text = (env.get("QMDLAB_GPU") or "").strip().lower()
    if not text:
        force = (env.get("QMD_FORCE_CPU") or "").strip().lower()
        return "off" if force and force not in ("0", "false", "no") else "auto"
    if text == "auto":
        return "auto"
    if text in _ALL:
        return "all"
    if text in _OFF:
        return "off"
    if text.isdigit():
        return text
    raise ModelError(
        f"QMDLAB_GPU={env.get('QMDLAB_GPU')!r} is not auto, off, all or a number of layers; set it to e.g. auto"
    )


def gpu_layers(llama_cpp=None, environ=None) -> int:
    """``n_gpu_layers`` for llama.cpp: ``-1`` (every layer) when offloading, ``0`` on the CPU.

    ``auto`` offloads every layer when the installed build can offload
    (``llama_cpp.llama_supports_gpu_offload()``: a CUDA, Metal, Vulkan or ROCm build) and keeps a
    CPU-only build on the CPU; ``all`` and a count are passed as they are (a CPU build ignores them).

    >>> gpu_layers(type("Cpu", (), {"llama_supports_gpu_offload": staticmethod(lambda: False)}), {})
    0
    >>> gpu_layers(type("Gpu", (), {"llama_supports_gpu_offload": staticmethod(lambda: True)}), {})
    -1
    >>> gpu_layers(None, {"QMDLAB_GPU": "12"}), gpu_layers(None, {"QMDLAB_GPU": "off"})
    (12, 0)
    """
    setting = gpu_setting(environ)
    if setting == "off":
        return 0
    if setting == "all":
        return -1
    if setting.isdigit():
        return int(setting)
    return -1 if gpu_offload_supported(llama_cpp) else 0


def gpu_offload_supported(llama_cpp=None) -> bool:
    """Whether the llama.cpp build can offload layers to a GPU (``False`` when it cannot say)."""
    llama_cpp = llama_cpp or import_llama_cpp()
    probe = getattr(llama_cpp, "llama_supports_gpu_offload", None)
    return bool(probe()) if callable(probe) else False


@contextmanager
def scoring_pass(llm: Any, head: list[int], what: str) -> Iterator[int]:
    """Evaluate a prompt's shared ``head`` tokens from an empty context and yield their count; inside,
    llama.cpp's errors become one :class:`~qmdlab.errors.ModelError` ``{what} failed: …`` (a stopped
    call stays stopped), and the context is reset after, whatever happened."""
    try:
        llm.reset()
        llm.eval(head)
        yield llm.n_tokens
    except CallStopped:
        raise
    except (RuntimeError, ValueError) as err:
        raise ModelError(f"{what} failed: {err}") from err
    finally:
        llm.reset()


class LazyLlama:
    """A ``llama_cpp.Llama`` created on first use and released after ``idle_timeout`` idle seconds.

    Parameters
    ----------
    resolve : callable
        Returns the GGUF path (may download / assemble it); called at load time only.
    n_threads : int, optional
        Passed to llama.cpp as both ``n_threads`` and ``n_threads_batch``; default
        :func:`default_threads`.
    idle_timeout : float or None
        Seconds of inactivity before the weights are freed; ``None`` keeps them.
    **params
        Further ``llama_cpp.Llama`` keyword arguments (``n_ctx``, ``embedding``, …). Without an
        ``n_gpu_layers``, it is :func:`gpu_layers` at load time (``$QMDLAB_GPU``).
    """

    def __init__(
        self,
        resolve: Callable[[], Path],
        *,
        n_threads: Optional[int] = None,
        idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT,
        **params: Any,
    ):
        self.resolve = resolve
        self.n_threads = n_threads or default_threads()
        self.idle_timeout = idle_timeout
        self.params = params
        self._lock = threading.RLock()
        self._llm = None
        self._timer: Optional[threading.Timer] = None
        self._last_used = 0.0
        self.path: Optional[Path] = None
        self.loads = 0
        self.load_seconds: Optional[float] = None
        self.n_gpu_layers: Optional[int] = None  # what the last load asked llama.cpp to offload
        self._on_load: list[Callable[[Any], None]] = []

    @property
    def loaded(self) -> bool:
        return self._llm is not None

    def on_load(self, fn: Callable[[Any], None]) -> None:
        """Register ``fn(llm)``, run under the lock right after each (re)load."""
        self._on_load.append(fn)

    def _load(self) -> None:
        # loads take turns: two at once (two contexts of one embedder) only share the same disk
        # and cores, and one at a time gives each its own load time
        with _LOAD_LOCK:
            self._load_now()

    def _load_now(self) -> None:
        llama_cpp = import_llama_cpp()
        path = Path(self.resolve())
        params = dict(self.params)
        params.setdefault("n_gpu_layers", gpu_layers(llama_cpp))
        self.n_gpu_layers = params["n_gpu_layers"]
        t0 = time.perf_counter()
        try:
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                verbose=False,
                **params,
            )
        except (ValueError, RuntimeError, OSError) as err:
            said = f" (llama.cpp: {LLAMA_LOG[-1]})" if LLAMA_LOG else ""
            raise ModelError(
                f"llama.cpp could not load {path}: {err}{said}; delete the file and fetch it again with `qmdlab pull`"
            ) from err
        self.load_seconds = time.perf_counter() - t0
        self.path, self._llm = path, llm
        self.loads += 1
        for fn in self._on_load:
            fn(llm)

    def ensure_loaded(self) -> None:
        """Load the weights now, in the calling thread, unless they are loaded already (or wait for
        the load :meth:`load_in_background` started). Budgeted calls load here, before their worker
        starts (:func:`qmdlab.pipeline.budget.call_with_budget`), so a load is never cut off half way.
        """
        if self._llm is not None:
            return
        with self._lock:
            if self._llm is None:
                self._load()
                self._last_used = time.monotonic()
                self._arm_timer()

    def load_in_background(self) -> None:
        """Start loading the weights on a thread and return at once. llama.cpp releases the GIL while
        it reads the file and builds the vocabulary (most of a one-query process's time with a
        262k-token vocabulary), so the caller's imports and BM25 run meanwhile; the first use waits
        for the load. A failed load is left for that first use to raise, with its message.

        ``llama_cpp`` is imported here, in the caller's thread: an import holds the GIL, and one on
        the loading thread would take turns with the caller's own imports, so the load would start
        later than the caller's work allows."""
        if self._llm is not None:
            return
        try:
            import_llama_cpp()
        except Exception:  # noqa: BLE001 - the first use raises it, with the install hint
            return

        def load() -> None:
            try:
                self.ensure_loaded()
            except Exception:  # noqa: BLE001 - the caller's own ensure_loaded raises it again
                pass

        threading.Thread(target=load, name="qmdlab-load", daemon=True).start()

    @contextmanager
    def use(self) -> Iterator[Any]:
        """Hold the lock and yield the loaded model."""
        with self._lock:
            if self._llm is None:
                self._load()
            try:
                yield self._llm
            finally:
                self._last_used = time.monotonic()
                self._arm_timer()

    def _arm_timer(self) -> None:
        if self.idle_timeout is None or (self._timer is not None and self._timer.is_alive()):
            return
        self._timer = threading.Timer(self.idle_timeout, self._idle_check)
        self._timer.daemon = True
        self._timer.start()

    def _idle_check(self) -> None:
        with self._lock:
            self._timer = None
            if self._llm is None:
                return
            idle = time.monotonic() - self._last_used
            if idle >= self.idle_timeout:
                self._free()
            else:  # used since the timer was armed: wait for the remainder
                self._timer = threading.Timer(self.idle_timeout - idle, self._idle_check)
                self._timer.daemon = True
                self._timer.start()

    def _free(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            close = getattr(llm, "close", None)
            if callable(close):
                close()

    def release(self) -> None:
        """Free the weights now (the next call reloads them)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._free()
