"""Limit llama.cpp's x86 CPU variants in an unpacked llama-cpp-python sdist, and install them with it.

``make setup`` builds llama.cpp with run-time CPU dispatch: ``GGML_BACKEND_DL=ON`` and
``GGML_CPU_ALL_VARIANTS=ON`` make one ``libggml-cpu-<variant>.so`` per instruction-set level, and
ggml loads the best one this CPU runs (its own CPUID scoring) when qmdlab calls
``ggml_backend_load_all_from_path`` on the package's own folder (``qmdlab.models._llama``). Two
changes to the sdist make that a wheel qmdlab can use:

1. ``vendor/llama.cpp/ggml/src/CMakeLists.txt`` builds every x86 variant; the ones not asked for are
   commented out. The Makefile asks for the AVX2 floor and the AVX-512 and AVX-VNNI levels above it,
   and never for a variant with AMX: a machine of ours advertises AMX and traps its instructions,
   and ggml's scoring would pick that variant there. Each variant costs about a minute of build.
2. llama-cpp-python's ``CMakeLists.txt`` installs ``ggml-cpu`` but not ``ggml-cpu-<variant>``
   targets; an install line is added for each variant kept.

A file that does not look as expected is an error naming it (a newer sdist must be checked again),
never a silently unpatched build. Run twice on the same folder, it changes nothing more.

    python scripts/llama_cpu_variants.py SDIST_DIR haswell icelake ...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

GGML_CMAKE = Path("vendor/llama.cpp/ggml/src/CMakeLists.txt")
PY_CMAKE = Path("CMakeLists.txt")
MARK = "# qmdlab: variant not built"
INSTALL_MARK = "# qmdlab: install the CPU variants"
_VARIANT = re.compile(r"^(\s*)ggml_add_cpu_backend_variant\((\w+)([^)]*)\)\s*$")


def limit_variants(text: str, keep: set[str]) -> tuple[str, list[str]]:
    """The x86 block of ggml's CMakeLists with only ``keep``'s variants; ``(text, variants kept)``.

    >>> src = 'if (GGML_SYSTEM_ARCH STREQUAL "x86")\\n    ggml_add_cpu_backend_variant(x64)\\n    ggml_add_cpu_backend_variant(haswell  AVX2)\\nelseif(GGML_SYSTEM_ARCH STREQUAL "ARM")\\n    ggml_add_cpu_backend_variant(armv8.0_1)\\nendif()'
    >>> out, kept = limit_variants(src, {"haswell"})
    >>> kept, out.splitlines()[1].strip().startswith("# qmdlab"), "armv8.0_1)" in out.splitlines()[4]
    (['haswell'], True, True)
    """
    lines = text.split("\n")
    block = next((i for i, ln in enumerate(lines) if re.match(r"\s*if\s*\(GGML_CPU_ALL_VARIANTS\)", ln)), -1)
    start = next((i for i, ln in enumerate(lines) if i > block and 'GGML_SYSTEM_ARCH STREQUAL "x86"' in ln), None)
    if start is None:
        raise SystemExit(f'{GGML_CMAKE}: no x86 variant block (if (GGML_SYSTEM_ARCH STREQUAL "x86"))')
    kept: list[str] = []
    depth = 0  # nested if () … endif () inside the x86 block (e.g. if (NOT MSVC))
    for i in range(start + 1, len(lines)):
        if re.match(r"\s*if\s*\(", lines[i]):
            depth += 1
        elif re.match(r"\s*endif\s*\(", lines[i]):
            if depth == 0:
                break
            depth -= 1
        elif re.match(r"\s*elseif\s*\(", lines[i]) and depth == 0:
            break
        m = _VARIANT.match(lines[i])
        if m is None:
            continue
        if m.group(2) in keep:
            kept.append(m.group(2))
        else:
            lines[i] = f"{m.group(1)}{MARK}: {lines[i].strip()}"
    return "\n".join(lines), kept


def install_variants(text: str, variants: list[str]) -> str:
    """llama-cpp-python's CMakeLists with an install line for each ``ggml-cpu-<variant>`` target."""
    if INSTALL_MARK in text:
        text = text[: text.index(INSTALL_MARK)].rstrip(" ") + text[text.index("# qmdlab: end") + len("# qmdlab: end") :]
    anchor = "    llama_cpp_python_install_target(ggml-cpu)\n"
    if anchor not in text:
        raise SystemExit(f"{PY_CMAKE}: no 'llama_cpp_python_install_target(ggml-cpu)' line to add the variants after")
    block = "".join(f"    llama_cpp_python_install_target(ggml-cpu-{v})\n" for v in variants)
    return text.replace(anchor, anchor + f"    {INSTALL_MARK}\n{block}    # qmdlab: end\n", 1)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root, keep = Path(argv[0]), set(argv[1:])
    ggml = root / GGML_CMAKE
    text, kept = limit_variants(ggml.read_text(encoding="utf-8").replace(MARK + ": ", ""), keep)
    missing = sorted(keep - set(kept))
    if missing:
        raise SystemExit(f"{ggml}: no x86 variant named {', '.join(missing)}")
    ggml.write_text(text, encoding="utf-8")
    py = root / PY_CMAKE
    py.write_text(install_variants(py.read_text(encoding="utf-8"), kept), encoding="utf-8")
    print(f"llama.cpp CPU variants: {' '.join(kept)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
