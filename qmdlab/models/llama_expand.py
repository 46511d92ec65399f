"""Query expander on llama.cpp: chat prompt per family, GBNF-constrained sampling, parsed lines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT, LazyLlama, import_llama_cpp
from qmdlab.models.base import ExpandResult, make_fingerprint
from qmdlab.models.expander_sidecar import PromptSidecar, read_sidecar
from qmdlab.models.expansion import GRAMMAR, parse_expansion
from qmdlab.models.templates import chat_family, expand_prompt


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling of the expander; defaults are qmd's. ``temperature=0`` is greedy (deterministic).

    >>> SamplingConfig().temperature, SamplingConfig().top_k, SamplingConfig().top_p, SamplingConfig().max_tokens
    (0.7, 20, 0.8, 600)
    >>> DETERMINISTIC.temperature
    0.0
    """

    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    max_tokens: int = 600
    seed: Optional[int] = None  # None: llama.cpp's default seed
    repeat_penalty: float = 1.0  # llama.cpp's; 1.0 = off (qmd's). Greedy small models can loop without it.

    def key(self) -> dict:
        """The fields a fingerprint records: every field, less ``repeat_penalty`` while it is off, so
        that caches keyed before the field existed stay valid.

        >>> SamplingConfig().key() == {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "max_tokens": 600, "seed": None}
        True
        >>> SamplingConfig(repeat_penalty=1.3).key()["repeat_penalty"]
        1.3
        """
        d = asdict(self)
        if d["repeat_penalty"] == 1.0:
            del d["repeat_penalty"]
        return d


DETERMINISTIC = SamplingConfig(temperature=0.0)


def split_truncated(raw: str, finish_reason: Optional[str]) -> tuple[str, Optional[str]]:
    """Separate a last line cut off by ``max_tokens`` (it has no closing newline).

    >>> split_truncated("lex: a\\nvec: half a", "length")
    ('lex: a\\n', 'vec: half a')
    >>> split_truncated("lex: a\\n", "length"), split_truncated("lex: a", "stop")
    (('lex: a\\n', None), ('lex: a', None))
    """
    if finish_reason == "length" and raw and not raw.endswith("\n"):
        head, _, tail = raw.rpartition("\n")
        return (head + "\n" if head else ""), tail
    return raw, None


def parse_generated(text: str, finish_reason: Optional[str], max_tokens: int) -> ExpandResult:
    """The typed lines of generated ``text``; a last line cut off by ``max_tokens`` is dropped with
    that reason (every expander backend parses its output here, so lines are read identically).

    >>> parse_generated("lex: a\\nvec: half", "length", 9).dropped
    [('vec: half', 'cut off at max_tokens=9')]
    """
    raw, cut = split_truncated(text, finish_reason)
    res = parse_expansion(raw)
    if cut is not None:
        res.dropped.append((cut, f"cut off at max_tokens={max_tokens}"))
    return ExpandResult(text, res.lines, res.dropped)


class LlamaExpander:
    """Grammar-constrained query expansion with any instruct GGUF.

    Parameters
    ----------
    resolve, model_id : see :class:`~qmdlab.models.llama_embed.LlamaEmbedder`
    family : {"qwen3", "chatml", "gemma"}, optional
        Prompt family; default from ``model_id`` (:func:`~qmdlab.models.templates.chat_family`).
    sampling : SamplingConfig
        qmd's sampling by default; :data:`DETERMINISTIC` for greedy decoding.
    grammar : str
        GBNF; default :data:`~qmdlab.models.expansion.GRAMMAR`.
    sidecar : PromptSidecar, optional
        A trained expander's exact prompt (:mod:`~qmdlab.models.expander_sidecar`); it replaces the
        family's prompt and is part of the fingerprint.
    weights : str, optional
        An identity of the weights file, recorded in the fingerprint so that another model written
        to the same path is not served this one's cached expansions.
    """

    def __init__(
        self,
        resolve: Callable[[], Path],
        model_id: str,
        *,
        family: Optional[str] = None,
        sampling: SamplingConfig = SamplingConfig(),
        grammar: str = GRAMMAR,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT,
        sidecar: Optional[PromptSidecar] = None,
        weights: Optional[str] = None,
    ):
        self.model_id = model_id
        self.family = family or chat_family(model_id)
        self.sampling = sampling
        self.grammar_text = grammar
        self.sidecar = sidecar
        self._grammar = None
        self.llama = LazyLlama(resolve, n_threads=n_threads, idle_timeout=idle_timeout, n_ctx=n_ctx)
        # the optional parts only when given: the fingerprints (and LLM caches) of packaged models stay put
        extra = {k: v for k, v in (("prompt", sidecar and sidecar.key()), ("weights", weights)) if v}
        self.fingerprint = make_fingerprint(
            model_id, role="expand", family=self.family, sampling=sampling.key(), grammar=grammar, **extra
        )

    @classmethod
    def from_trained(
        cls,
        path: str | Path,
        *,
        sampling: Optional[SamplingConfig] = None,
        weights: Optional[str] = None,
        resolve: Optional[Callable[[], Path]] = None,
        **llama_options,
    ) -> LlamaExpander:
        """A trained expander GGUF, prompted and decoded as it was trained: from its
        ``.prompt.json`` sidecar when there is one (its family, prompt and grammar), else as the qwen3
        family (what ``qmdlab train`` trains without a sidecar); greedy unless ``sampling`` says
        otherwise, as ``qmdlab train evaluate`` scores it. ``resolve`` checks and returns the file when
        it is first loaded (the registry's, with its errors); default the path itself."""
        p = Path(path).expanduser()
        sidecar = read_sidecar(p)  # beside the name given, a link included
        return cls(
            resolve or (lambda: p),
            str(p),  # as given: a results file written with it names no machine's folders
            family=sidecar.family if sidecar else "qwen3",
            sampling=sampling or DETERMINISTIC,
            grammar=(sidecar.grammar if sidecar else None) or GRAMMAR,
            sidecar=sidecar,
            weights=weights,
            **llama_options,
        )

    def prompt(self, query: str, intent: Optional[str] = None) -> str:
        if self.sidecar is not None:
            return self.sidecar.render(query, intent)
        return expand_prompt(self.family, query, intent)

    def expand(self, query: str, *, intent: Optional[str] = None) -> ExpandResult:
        llama_cpp = import_llama_cpp()
        s = self.sampling
        with self.llama.use() as llm:
            if self._grammar is None:
                self._grammar = llama_cpp.LlamaGrammar.from_string(self.grammar_text, verbose=False)
            tokens = llm.tokenize(self.prompt(query, intent).encode("utf-8"), add_bos=True, special=True)
            kwargs = dict(
                max_tokens=s.max_tokens,
                temperature=s.temperature,
                top_k=s.top_k,
                top_p=s.top_p,
                min_p=0.0,
                repeat_penalty=s.repeat_penalty,
                grammar=self._grammar,
            )
            if s.seed is not None:
                kwargs["seed"] = s.seed
            stop_list = getattr(llama_cpp, "StoppingCriteriaList", None)
            if stop_list is not None:  # a budgeted call that ran out stops after the token being generated
                kwargs["stopping_criteria"] = stop_list([lambda _ids, _logits: cancel.stop_requested()])
            try:  # llama-cpp-python reuses the KV cache of a shared prompt prefix by itself
                cancel.check()
                out = llm.create_completion(tokens, **kwargs)
            except (RuntimeError, ValueError) as err:
                raise ModelError(f"query expansion with {self.model_id} failed: {err}") from err
            cancel.check()  # a stopped generation is partial: never returned, never cached
        choice = out["choices"][0]
        return parse_generated(choice["text"], choice.get("finish_reason"), s.max_tokens)

    def prepare(self) -> None:
        """Load the weights in the calling thread (see :meth:`LazyLlama.ensure_loaded`)."""
        self.llama.ensure_loaded()

    def release(self) -> None:
        self.llama.release()
