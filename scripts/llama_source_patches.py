"""Source changes to llama.cpp in an unpacked llama-cpp-python sdist, applied before ``make setup`` builds it.

One change, to model loading, which every ``qmdlab query`` process pays for:

- **The metadata dump stops formatting an array after its first 256 characters.** llama.cpp logs
  each GGUF key when it opens a model, and ``gguf_kv_to_str`` formats a whole array to print at most
  40 characters of it: for EmbeddingGemma's 262,144-token vocabulary that is three arrays of 262,144
  strings, floats and integers, about a quarter of the model's load time (``perf`` on a 2-core Xeon:
  ~0.14 s of 0.54 s). Every caller of ``gguf_kv_to_str`` with an array only prints a prefix of it
  (the model loader and the LoRA loader keep 40 characters; the hyperparameter table skips arrays),
  so what is logged, and everything loaded, is unchanged.

A file that does not look as expected is an error naming it (a newer sdist must be checked again),
never a silently unpatched build. Run twice on the same folder, it changes nothing more. The
Makefile's wheelhouse name carries a hash of this file, so a changed patch builds a new wheel.

    python scripts/llama_source_patches.py SDIST_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

IMPL = Path("vendor/llama.cpp/src/llama-impl.cpp")
MARK = "// qmdlab: the dump prints a prefix"
# the array loop of gguf_kv_to_str, as llama.cpp has written it since 2024
ARRAY_LOOP = "                for (int j = 0; j < arr_n; j++) {\n"
CAP = f'                    if (ss.tellp() > 256) {{ ss << "..."; break; }} {MARK}\n'


def cap_array_dump(text: str) -> str:
    """``llama-impl.cpp`` with ``gguf_kv_to_str``'s array loop stopping after 256 characters.

    >>> src = "std::string gguf_kv_to_str(x) {\\n" + ARRAY_LOOP + "                    ss << j;\\n"
    >>> once = cap_array_dump(src)
    >>> once.splitlines()[2].strip().startswith("if (ss.tellp() > 256)"), cap_array_dump(once) == once
    (True, True)
    """
    if MARK in text:
        return text
    start = text.find("std::string gguf_kv_to_str(")
    loop = text.find(ARRAY_LOOP, start) if start >= 0 else -1
    if loop < 0:
        raise SystemExit(f"{IMPL}: no array loop in gguf_kv_to_str ({ARRAY_LOOP.strip()!r}) to cap")
    at = loop + len(ARRAY_LOOP)
    return text[:at] + CAP + text[at:]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    impl = Path(argv[0]) / IMPL
    if not impl.is_file():
        raise SystemExit(f"{impl}: not found (is {argv[0]} an unpacked llama-cpp-python sdist?)")
    impl.write_text(cap_array_dump(impl.read_text(encoding="utf-8")), encoding="utf-8")
    print("llama.cpp source: metadata dump capped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
