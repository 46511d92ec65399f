"""The installed llama.cpp libraries hold no AMX instruction, and AVX-512 (zmm) code only in the
CPU variants built for it.

This is the proof behind the portable build: a machine that advertises AMX but does not grant it
died of SIGILL at ``tileloadd`` in a ``-march=native`` build, and ggml's run-time dispatch loads an
AVX-512 variant only where the CPU advertises AVX-512.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from qmdlab import doctor

AMX = r"\b(tileloadd|tileloaddt1|tilestored|tdpb[a-z0-9]*|tdpfp16ps|tcmmimfp16ps|tcmmrlfp16ps|ldtilecfg|sttilecfg|tilerelease|tilezero)\b"
FORBIDDEN = re.compile(AMX + r"|%zmm\d+")


def _objdump() -> str:
    tool = shutil.which("objdump")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("objdump is missing on CI; install binutils (`apt-get install binutils`, see .ci/run)")
        pytest.skip("objdump is not installed (Debian package binutils); cannot disassemble libggml-cpu")
    return tool


def _libraries() -> list[Path]:
    wheel = doctor.llama_wheel()
    if wheel.package_dir is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'qmdlab[llama]')")
    libs = sorted(p for p in (wheel.package_dir / "lib").glob("libggml*.so") if p.is_file())
    assert any(p.name.startswith("libggml-cpu") for p in libs), f"no libggml-cpu*.so under {wheel.package_dir}"
    return libs


def test_forbidden_pattern_matches_amx_and_zmm():
    for line in (
        "  4a: tileloadd (%rsi,%rdx,1),%tmm0",
        "  ldtilecfg (%rax)",
        "  tdpbssd %tmm2,%tmm1,%tmm0",
        "  vmovups %zmm0,(%rax)",
        "  vpdpbusd %zmm1,%zmm2,%zmm3",
    ):
        assert FORBIDDEN.search(line), line
    for line in ("  vmovups %ymm0,(%rax)", "  vfmadd231ps %ymm1,%ymm2,%ymm3", "  call tile_sizes@plt"):
        assert not FORBIDDEN.search(line), line


#: CPU variants allowed AVX-512 (zmm) code: those built for it (the Makefile's LLAMA_CPU_VARIANTS).
AVX512_VARIANTS = ("skylakex", "icelake", "zen4")


def _allows_zmm(lib: Path) -> bool:
    m = re.search(r"ggml-cpu-(\w+)\.so", lib.name)
    return bool(m) and m.group(1) in AVX512_VARIANTS


@pytest.mark.skipif(doctor.cpu_info().machine != "x86_64", reason="AMX and zmm registers exist on x86-64 only")
def test_no_amx_anywhere_and_avx512_only_in_its_variants():
    """No library holds an AMX instruction; AVX-512 code lives only in the CPU variants built for it
    (ggml loads one of those only on a CPU that advertises AVX-512); the AVX2 floor has none."""
    tool = _objdump()
    libs = _libraries()
    for lib in libs:
        asm = subprocess.run(
            [tool, "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True, check=True
        ).stdout
        pattern = re.compile(AMX) if _allows_zmm(lib) else FORBIDDEN
        bad = [ln.strip() for ln in asm.splitlines() if pattern.search(ln)]
        assert not bad, (
            f"{lib.name} has {len(bad)} forbidden instructions, e.g. {bad[:3]}; rebuild "
            f"portably with `make rebuild-llama`"
        )
        if lib.name.startswith("libggml-cpu"):
            # positive control: the disassembly is real and the build does use AVX2 (x86-64-v3) or more
            assert len(re.findall(r"%[yz]mm\d+", asm)) > 1000, f"{lib.name}: no AVX2 code found"
        if _allows_zmm(lib):
            assert len(re.findall(r"%zmm\d+", asm)) > 100, f"{lib.name}: built for AVX-512 but holds none"
