"""Doc → query generators for document expansion at index time (``qmdlab expand-docs``).

A generator continues :func:`qmdlab.models.doc2query.prompt` with sampled queries. Three
implementations of :class:`DocQueryGenerator`:

- :class:`LlamaDocQueryGenerator` — a GGUF (``pkg:NAME``, ``hf:…``, or a path) through llama.cpp,
  loaded as lazily and portably as the other llama.cpp roles (:class:`~qmdlab.models._llama.LazyLlama`);
- :class:`HFDocQueryGenerator` — a Hugging Face causal LM directory through transformers (what
  ``qmdlab train doc2query`` writes: the LoRA merged into the base);
- :class:`TableDocQueryGenerator` — a deterministic fake for tests (a function of the passage).

``generate`` returns the *raw* continuations; the caller reads the query out of each with
:func:`~qmdlab.models.doc2query.parse_query`, so a continuation that is not a usable query is
still stored (and counted) as what the model said. The ``fingerprint`` names the model and every
setting that changes what it generates (the prompt format, temperature, top-k/top-p, the token
cap), not the seed: samples with another seed are more samples of the same generator.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable

from qmdlab.errors import ModelError
from qmdlab.models import doc2query
from qmdlab.models.base import make_fingerprint

#: Tokens a generated query may take (a query is one short line; :data:`~qmdlab.models.doc2query.MAX_WORDS` words).
MAX_QUERY_TOKENS = 32
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_K = 10  # docTTTTTquery's top-k sampling
DEFAULT_TOP_P = 0.95


@runtime_checkable
class DocQueryGenerator(Protocol):
    """Samples queries a passage answers."""

    model_id: str
    fingerprint: str

    def generate(self, prompts: list[str], n: int) -> list[list[str]]:
        """``n`` raw continuations of each prompt (:func:`qmdlab.models.doc2query.prompt`), in order."""
        ...


def _format_parts() -> dict[str, Any]:
    """The prompt format's constants (a change of format is another generator)."""
    return {
        "prefix": doc2query.PASSAGE_PREFIX,
        "cue": doc2query.QUERY_CUE,
        "max_chars": doc2query.MAX_PASSAGE_CHARS,
        "stop": doc2query.STOP,
    }


def _sampling(temperature: float, top_k: int, top_p: float) -> dict[str, Any]:
    if not (temperature >= 0):
        raise ModelError(f"--temperature {temperature!r}: must be >= 0 (0 = greedy)")
    return {
        "temperature": float(temperature),
        "top_k": int(top_k),
        "top_p": float(top_p),
        "max_tokens": MAX_QUERY_TOKENS,
    }


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (a model file changed in place is another generator)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dir_digest(path: Path) -> str:
    """sha256 over the names and bytes of a model directory's weight, config and tokenizer files."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".model", ".txt", ".jinja"):
            h.update(f.name.encode())
            h.update(file_digest(f).encode())
    return h.hexdigest()


class TableDocQueryGenerator:
    """A deterministic fake: ``fn(passage, i)`` is the ``i``-th continuation of a passage.

    >>> g = TableDocQueryGenerator(lambda p, i: f" {p.split()[i % 2]} notes")
    >>> g.generate([doc2query.prompt("alpha beta")], 3)
    [[' alpha notes', ' beta notes', ' alpha notes']]
    """

    def __init__(self, fn: Callable[[str, int], str], model_id: str = "fake:doc2query"):
        self.fn = fn
        self.model_id = model_id
        self.fingerprint = make_fingerprint(model_id, role="doc2query", **_format_parts())
        self.calls = 0

    def generate(self, prompts: list[str], n: int) -> list[list[str]]:
        self.calls += 1
        out = []
        for p in prompts:
            passage = p[len(doc2query.PASSAGE_PREFIX) : len(p) - len(doc2query.QUERY_CUE)]
            out.append([self.fn(passage, i) for i in range(n)])
        return out


class LlamaDocQueryGenerator:
    """Sampled continuations of a GGUF model through llama.cpp (one completion per sample; sample
    ``i`` of every prompt uses seed ``seed + i``, so a run is reproducible)."""

    def __init__(
        self,
        ref: str,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        top_k: int = DEFAULT_TOP_K,
        top_p: float = DEFAULT_TOP_P,
        seed: int = 0,
        n_ctx: int = 1024,
        n_threads: Optional[int] = None,
    ):
        from qmdlab.models._llama import LazyLlama
        from qmdlab.models.registry import resolve_path

        self.model_id = ref
        self.sampling = _sampling(temperature, top_k, top_p)
        self.seed = int(seed)
        path = resolve_path(ref)  # a missing model fails here, before any work
        self._path = path
        self.llama = LazyLlama(lambda: path, n_threads=n_threads, idle_timeout=None, n_ctx=n_ctx)
        self.fingerprint = make_fingerprint(
            ref, role="doc2query", file=file_digest(path), sampling=self.sampling, **_format_parts()
        )

    def generate(self, prompts: list[str], n: int) -> list[list[str]]:
        s = self.sampling
        out: list[list[str]] = []
        with self.llama.use() as llm:
            for p in prompts:
                tokens = llm.tokenize(p.encode("utf-8"), add_bos=True, special=False)
                got = []
                for i in range(n):
                    try:
                        res = llm.create_completion(
                            tokens,
                            max_tokens=s["max_tokens"],
                            temperature=s["temperature"],
                            top_k=s["top_k"],
                            top_p=s["top_p"],
                            min_p=0.0,
                            repeat_penalty=1.0,
                            stop=list(doc2query.STOP),
                            seed=self.seed + i,
                        )
                    except (RuntimeError, ValueError) as err:
                        raise ModelError(f"query generation with {self.model_id} failed: {err}") from err
                    got.append(res["choices"][0]["text"])
                out.append(got)
        return out

    def release(self) -> None:
        self.llama.release()


class HFDocQueryGenerator:
    """Sampled continuations of a transformers causal LM directory (torch on the CPU, or the GPU
    when one is visible); prompts are batched with left padding."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        top_k: int = DEFAULT_TOP_K,
        top_p: float = DEFAULT_TOP_P,
        seed: int = 0,
        batch_size: int = 8,
    ):
        self.path = Path(path).expanduser().resolve()
        if not (self.path / "config.json").is_file():
            raise ModelError(
                f"--generator {path}: not a Hugging Face model directory (no config.json); give a GGUF "
                "(pkg:NAME, hf:ORG/REPO/FILE.gguf, a .gguf path) or the folder `qmdlab train doc2query` wrote"
            )
        self.model_id = str(self.path)
        self.sampling = _sampling(temperature, top_k, top_p)
        self.seed = int(seed)
        self.batch_size = max(1, int(batch_size))
        self.fingerprint = make_fingerprint(
            self.model_id, role="doc2query", files=dir_digest(self.path), sampling=self.sampling, **_format_parts()
        )
        self._model: Any = None
        self._tok: Any = None
        self._lock = threading.Lock()

    def _load(self) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as err:
            raise ModelError(
                f"an HF generator needs torch and transformers: pip install 'qmdlab[train]' ({err})"
            ) from err
        try:
            tok = AutoTokenizer.from_pretrained(str(self.path))
            model = AutoModelForCausalLM.from_pretrained(str(self.path))
        except (OSError, ValueError) as err:
            raise ModelError(f"transformers could not load {self.path}: {err}") from err
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model.eval()
        if torch.cuda.is_available():
            model = model.to("cuda")  # type: ignore[arg-type]
        self._tok, self._model = tok, model

    def generate(self, prompts: list[str], n: int) -> list[list[str]]:
        import torch

        with self._lock:
            if self._model is None:
                self._load()
            tok, model = self._tok, self._model
            s = self.sampling
            newline = tok.encode("\n", add_special_tokens=False)
            eos = [t for t in (tok.eos_token_id, *(newline[-1:] if newline else [])) if t is not None]
            out: list[list[str]] = []
            for a in range(0, len(prompts), self.batch_size):
                batch = prompts[a : a + self.batch_size]
                enc = tok(batch, return_tensors="pt", padding=True).to(model.device)
                torch.manual_seed(self.seed + a)
                sample = s["temperature"] > 0
                kwargs: dict[str, Any] = dict(
                    max_new_tokens=s["max_tokens"],
                    num_return_sequences=n,
                    do_sample=sample,
                    eos_token_id=eos,
                    pad_token_id=tok.pad_token_id,
                )
                if sample:
                    kwargs.update(temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"])
                with torch.no_grad():
                    gen = model.generate(**enc, **kwargs)
                texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
                out.extend(texts[i * n : (i + 1) * n] for i in range(len(batch)))
            return out

    def release(self) -> None:
        with self._lock:
            self._model = self._tok = None


def load_generator(
    ref: str,
    *,
    temperature: float = DEFAULT_TEMPERATURE,
    seed: int = 0,
    n_threads: Optional[int] = None,
) -> DocQueryGenerator:
    """The generator of ``--generator REF``: a directory is an HF model, anything else a GGUF
    reference (``pkg:NAME``, ``hf:ORG/REPO/FILE.gguf``, a ``.gguf`` path)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return HFDocQueryGenerator(path, temperature=temperature, seed=seed)
    if ref.startswith(("fake:", "qlm:", "cross-encoder:")):
        raise ModelError(
            f"--generator {ref!r}: give a causal language model — a GGUF (pkg:NAME, hf:ORG/REPO/FILE.gguf, "
            "a .gguf path) or a Hugging Face model folder"
        )
    return LlamaDocQueryGenerator(ref, temperature=temperature, seed=seed, n_threads=n_threads)


def parse_all(raws: Sequence[str]) -> list[str | None]:
    """:func:`~qmdlab.models.doc2query.parse_query` of each continuation."""
    return [doc2query.parse_query(r) for r in raws]


__all__ = [
    "DocQueryGenerator",
    "TableDocQueryGenerator",
    "LlamaDocQueryGenerator",
    "HFDocQueryGenerator",
    "load_generator",
    "parse_all",
    "MAX_QUERY_TOKENS",
]
