"""The document → query format shared by the doc2query trainer, the generator and the QLM scorer.

A doc2query generator is a causal language model trained (or prompted) to continue

    Passage: {passage}
    A search query this passage answers:

with one query and a newline. The trainer (:mod:`qmdlab.training.doc2query`) builds its
(prompt, completion) pairs with :func:`prompt` and :func:`completion`; the index-time generator
(``qmdlab expand-docs``) samples continuations of :func:`prompt` and reads them back with
:func:`parse_query`. Keeping the three in one module is what lets a model trained here be used
for generation and for query likelihood (``qlm:``) without a mismatch between the text it was
trained on and the text it is asked to continue.

>>> prompt("Backups run nightly.")
'Passage: Backups run nightly.\\nA search query this passage answers:'
>>> completion("when do backups run")
' when do backups run\\n'
>>> parse_query(" When do backups run?\\nPassage: more")
'When do backups run?'
"""

from __future__ import annotations

PASSAGE_PREFIX = "Passage: "
QUERY_CUE = "\nA search query this passage answers:"
# Generation stops at the first newline: a query is one line.
STOP = ["\n"]
# Passages are cut to this many characters before prompting (about 130 tokens of English): a
# chunk's head says what it is about, and on a CPU every prompt token is paid once per chunk at
# generation and in every training step. Trainer and generator cut at the same length.
MAX_PASSAGE_CHARS = 600
# Queries longer than this many words are not kept: a sentence-long output is a summary, not a
# query. One word is a query (an error code, a name).
MIN_WORDS = 1
MAX_WORDS = 16


def prompt(passage: str, max_chars: int = MAX_PASSAGE_CHARS) -> str:
    """The text a generator continues with one query for ``passage`` (whitespace collapsed)."""
    text = " ".join(passage.split())[:max_chars]
    return f"{PASSAGE_PREFIX}{text}{QUERY_CUE}"


def completion(query: str) -> str:
    """The training target after :func:`prompt`: a space, the query on one line, a newline."""
    return " " + " ".join(query.split()) + "\n"


def parse_query(generated: str) -> str | None:
    """The query in a generated continuation: its first line, stripped; ``None`` when it is not
    a usable query (empty, fewer than :data:`MIN_WORDS` or more than :data:`MAX_WORDS` words).

    >>> parse_query("   ") is None, parse_query("TP-2002"), parse_query("a " * 17) is None
    (True, 'TP-2002', True)
    """
    line = generated.strip().split("\n", 1)[0].strip().strip('"').strip()
    words = line.split()
    if not (MIN_WORDS <= len(words) <= MAX_WORDS):
        return None
    return " ".join(words)
