"""Prompt and input templates, per model family. Pure string functions.

Three kinds of template live here:

- **embedding input** (:class:`EmbeddingTemplate`): how a query and a ``(title, chunk)`` pair are
  written before embedding. Part of the embedding fingerprint.
- **expander prompt** (:func:`expand_prompt`): the query-expansion prompt for a chat family.
  The ``qwen3`` family renders exactly what transformers renders for Qwen3 with
  ``enable_thinking=False`` (an empty think block opens the assistant turn), which is what the
  qmd expander was fine-tuned on.
- **reranker prompt** (:func:`rerank_prompt`): the official Qwen3-Reranker template by default,
  a generic yes/no judgement prompt for other instruct families.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# --------------------------------------------------------------------------- embedding


@dataclass(frozen=True)
class EmbeddingTemplate:
    """Format strings for embedding inputs; fields ``{query}``, ``{title}``, ``{text}``.

    ``empty_title`` replaces a missing title (embeddinggemma's convention is ``"none"``).
    ``strip``: the written document loses its leading and trailing whitespace. The ``gemma``
    template keeps it, as qmd's ``formatDocForEmbedding`` does: a note's last chunk ends with the
    file's newline, and EmbeddingGemma's vector of it without that newline is another vector
    (cosine 0.94 to 0.97 on short notes), so qmd's vectors (``collection import-qmd``) are qmdlab's
    only when the input is written as qmd writes it.

    >>> EMBEDDING_TEMPLATES["gemma"].document("Git", "rebase onto main\\n")
    'title: Git | text: rebase onto main\\n'
    >>> EMBEDDING_TEMPLATES["gemma"].document("", "x")
    'title: none | text: x'
    >>> EMBEDDING_TEMPLATES["gemma"].query("undo a commit")
    'task: search result | query: undo a commit'
    >>> EMBEDDING_TEMPLATES["plain"].document("", "body only")
    'body only'
    """

    name: str
    query_format: str
    document_format: str
    empty_title: str = ""
    strip: bool = True

    def query(self, text: str) -> str:
        return self.query_format.format(query=text)

    def document(self, title: str, text: str) -> str:
        out = self.document_format.format(title=title or self.empty_title, text=text)
        return out.strip() if self.strip else out

    def fingerprint_parts(self) -> dict[str, object]:
        """What an embedder's fingerprint records of this template (``strip`` only when off, so
        the fingerprints of the templates that strip are those they always were).

        >>> sorted(EMBEDDING_TEMPLATES["gemma"].fingerprint_parts()), sorted(EMBEDDING_TEMPLATES["plain"].fingerprint_parts())
        (['document', 'document_strip', 'empty_title', 'query'], ['document', 'empty_title', 'query'])
        """
        parts: dict[str, object] = {
            "query": self.query_format,
            "document": self.document_format,
            "empty_title": self.empty_title,
        }
        if not self.strip:
            parts["document_strip"] = False
        return parts


QWEN3_EMBED_INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"

EMBEDDING_TEMPLATES: dict[str, EmbeddingTemplate] = {
    # qmd / embeddinggemma (google's documented retrieval prompts)
    "gemma": EmbeddingTemplate(
        "gemma",
        "task: search result | query: {query}",
        "title: {title} | text: {text}",
        empty_title="none",
        strip=False,
    ),
    # nomic-embed-text's documented task prefixes
    "nomic": EmbeddingTemplate("nomic", "search_query: {query}", "search_document: {title}\n{text}"),
    # Qwen3-Embedding: instruction on the query side only
    "qwen3": EmbeddingTemplate("qwen3", "Instruct: " + QWEN3_EMBED_INSTRUCT + "\nQuery: {query}", "{title}\n{text}"),
    # sentence-transformers models trained without prompts (all-MiniLM-L6-v2)
    "plain": EmbeddingTemplate("plain", "{query}", "{title}\n{text}"),
}


def embedding_family(model_name: str) -> str:
    """Guess the embedding template family from a model name or file name.

    >>> embedding_family("hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf")
    'gemma'
    >>> embedding_family("Qwen3-Embedding-0.6B-Q8_0.gguf"), embedding_family("all-MiniLM-L6-v2.gguf")
    ('qwen3', 'plain')
    """
    n = model_name.lower()
    if "embeddinggemma" in n or "gemma" in n:
        return "gemma"
    if "nomic" in n:
        return "nomic"
    if "qwen3" in n and "embed" in n:
        return "qwen3"
    return "plain"


# --------------------------------------------------------------------------- chat families

CHAT_FAMILIES = ("qwen3", "chatml", "gemma")

EXPAND_USER = "/no_think Expand this search query: {query}"

# Generic instruct models were never trained on the lex/vec/hyde format, so they get it explained.
EXPAND_SYSTEM = (
    "You expand search queries for a hybrid search engine over markdown notes. "
    "Write 2 to 6 short lines, each `type: content`, where type is one of:\n"
    "lex: a few keywords for full-text search\n"
    "vec: a natural-language rephrasing of the query\n"
    "hyde: one short sentence that a relevant document could contain\n"
    "Keep the key terms of the query. Write nothing else.\n"
    "Example for the query `python virtualenv`:\n"
    "lex: python venv create\n"
    "vec: how to create a python virtual environment\n"
    "hyde: Run python -m venv .venv to create a virtual environment."
)


def chat_family(model_name: str, chat_template: Optional[str] = None) -> str:
    """Chat family of a model from its name, else from its GGUF chat template.

    >>> chat_family("qmd-query-expansion-1.7B-q4_k_m.gguf"), chat_family("Qwen3-1.7B-Q8_0.gguf")
    ('qwen3', 'qwen3')
    >>> chat_family("gemma-3-1b-it.gguf"), chat_family("qwen2.5-coder-0.5b.gguf")
    ('gemma', 'chatml')
    >>> chat_family("model.gguf", "{{ '<start_of_turn>' + role }}")
    'gemma'
    """
    n = model_name.lower()
    if "qwen3" in n or "qmd-query-expansion" in n:
        return "qwen3"
    if "gemma" in n:
        return "gemma"
    if chat_template and "<start_of_turn>" in chat_template:
        return "gemma"
    if chat_template and "enable_thinking" in chat_template:
        return "qwen3"
    return "chatml"


def render_chat(family: str, user: str, system: Optional[str] = None, *, assistant_prefix: str = "") -> str:
    """Render one user turn (plus optional system turn) and open the assistant turn.

    ``qwen3`` opens the assistant turn with the empty think block that transformers emits for
    ``enable_thinking=False``; ``gemma`` has no system role, so the system text leads the user turn.

    >>> render_chat("chatml", "hi", "be brief")
    '<|im_start|>system\\nbe brief<|im_end|>\\n<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    >>> render_chat("qwen3", "hi")
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    >>> render_chat("gemma", "hi", "be brief")
    '<start_of_turn>user\\nbe brief\\n\\nhi<end_of_turn>\\n<start_of_turn>model\\n'
    """
    if family == "gemma":
        body = f"{system}\n\n{user}" if system else user
        return f"<start_of_turn>user\n{body}<end_of_turn>\n<start_of_turn>model\n{assistant_prefix}"
    if family not in ("qwen3", "chatml"):
        raise ValueError(f"unknown chat family {family!r}; expected one of {CHAT_FAMILIES}")
    out = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    out += f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    if family == "qwen3":
        out += "<think>\n\n</think>\n\n"
    return out + assistant_prefix


def expand_prompt(family: str, query: str, intent: Optional[str] = None) -> str:
    """The query-expansion prompt.

    ``qwen3`` (the fine-tuned qmd expander and qmdlab's trained expanders) gets exactly the
    training prompt; other families get :data:`EXPAND_SYSTEM` explaining the line format.
    An intent, when given, is appended to the user turn as ``Intent: …``.

    >>> expand_prompt("qwen3", "git rebase")
    '<|im_start|>user\\n/no_think Expand this search query: git rebase<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    """
    system, user = expand_turns(family, query, intent)
    return render_chat(family, user, system)


def expand_turns(family: str, query: str, intent: Optional[str] = None) -> tuple[Optional[str], str]:
    """``(system, user)`` turns of the query-expansion prompt (:func:`expand_prompt` renders them;
    a chat-completions server is sent them as messages).

    >>> expand_turns("qwen3", "git rebase", "undo")
    (None, '/no_think Expand this search query: git rebase\\nIntent: undo')
    >>> expand_turns("chatml", "x")[0] == EXPAND_SYSTEM
    True
    """
    user = EXPAND_USER.format(query=query)
    if intent:
        user += f"\nIntent: {intent}"
    return (None if family == "qwen3" else EXPAND_SYSTEM), user


# --------------------------------------------------------------------------- reranker

QWEN3_RERANK_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".'
)
QWEN3_RERANK_INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"

GENERIC_RERANK_SYSTEM = (
    'Judge whether the Document is relevant to the Query, i.e. whether it helps answer it. Answer only "yes" or "no".'
)

RERANK_FAMILIES = ("qwen3-reranker", "chatml", "gemma")


def rerank_family(model_name: str, chat_template: Optional[str] = None) -> str:
    """Reranker template family: the official Qwen3-Reranker one, else a generic chat family.

    >>> rerank_family("qwen3-reranker-0.6b-q8_0.gguf"), rerank_family("qwen2.5-coder-0.5b.gguf")
    ('qwen3-reranker', 'chatml')
    """
    n = model_name.lower()
    if "reranker" in n and "qwen3" in n:
        return "qwen3-reranker"
    fam = chat_family(model_name, chat_template)
    return "chatml" if fam == "qwen3" else fam


def rerank_prompt_parts(family: str, query: str, instruct: Optional[str] = None) -> tuple[str, str]:
    """``(prefix, suffix)`` around the document text: prompt = prefix + document + suffix.

    Everything up to the document depends only on the query, so a backend can evaluate the
    prefix once per query and reuse its KV cache for every document.

    >>> p, s = rerank_prompt_parts("qwen3-reranker", "q")
    >>> p.endswith("<Instruct>: Given a web search query, retrieve relevant passages that answer the query\\n<Query>: q\\n<Document>: ")
    True
    >>> s
    '<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    """
    if family == "qwen3-reranker":
        prefix = (
            f"<|im_start|>system\n{QWEN3_RERANK_SYSTEM}<|im_end|>\n<|im_start|>user\n"
            f"<Instruct>: {instruct or QWEN3_RERANK_INSTRUCT}\n<Query>: {query}\n<Document>: "
        )
        return prefix, "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    marker = "\x00DOC\x00"
    user = f"Query: {query}\nDocument: {marker}\nIs the Document relevant to the Query? Answer yes or no."
    full = render_chat(family, user, GENERIC_RERANK_SYSTEM)
    prefix, suffix = full.split(marker)
    return prefix, suffix


def rerank_prompt(family: str, query: str, document: str, instruct: Optional[str] = None) -> str:
    """The full reranker prompt for one pair (see :func:`rerank_prompt_parts`).

    >>> print(rerank_prompt("chatml", "git undo", "Use git revert."))  # doctest: +NORMALIZE_WHITESPACE
    <|im_start|>system
    Judge whether the Document is relevant to the Query, i.e. whether it helps answer it. Answer only "yes" or "no".<|im_end|>
    <|im_start|>user
    Query: git undo
    Document: Use git revert.
    Is the Document relevant to the Query? Answer yes or no.<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    """
    prefix, suffix = rerank_prompt_parts(family, query, instruct)
    return prefix + document + suffix
