"""llama.cpp's run-time CPU dispatch: the wheel carries one CPU library per instruction-set level,
ggml loads the best this CPU runs from the package's own folder, never from the working directory.

The expectation is computed here from ``/proc/cpuinfo`` and compared with what ggml loaded in a
fresh process (a differential test of ggml's CPUID scoring against the features the kernel reports).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qmdlab import doctor

REPO = Path(__file__).resolve().parents[2]

#: The /proc/cpuinfo flags each variant is compiled for (ggml/src/CMakeLists.txt's variant list).
VARIANT_FLAGS = {
    "haswell": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"},
    "skylakex": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f"},
    "icelake": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f", "avx512vbmi", "avx512_vnni"},
    "zen4": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16"},
    "alderlake": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni"},
}


def makefile_variants() -> list[str]:
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "-p", "-n", "llama-cmake-args"], cwd=REPO, capture_output=True, text=True
    ).stdout
    m = re.search(r"^LLAMA_CPU_VARIANTS \??= (.*)$", out, re.M)
    assert m, "LLAMA_CPU_VARIANTS is not set in the Makefile"
    return m.group(1).split()


def test_the_makefiles_variants_start_at_avx2_and_never_use_amx():
    if doctor.cpu_info().machine != "x86_64":
        pytest.skip("the CPU variants are built on x86-64 only")
    variants = makefile_variants()
    assert variants[0] == "haswell" and set(variants) <= set(VARIANT_FLAGS), variants
    assert not any("amx" in f for v in variants for f in VARIANT_FLAGS[v])
    assert "sapphirerapids" not in variants


def test_the_sdist_patch_keeps_the_variants_asked_for(tmp_path):
    spec = importlib.util.spec_from_file_location("llama_cpu_variants", REPO / "scripts" / "llama_cpu_variants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ggml = (
        "if (GGML_CPU_ALL_VARIANTS)\n"
        '    if (GGML_SYSTEM_ARCH STREQUAL "x86")\n'
        "        ggml_add_cpu_backend_variant(x64)\n"
        "        ggml_add_cpu_backend_variant(haswell  SSE42 AVX F16C FMA AVX2 BMI2)\n"
        "        if (NOT MSVC)\n"
        "            ggml_add_cpu_backend_variant(zen4  AVX512 AVX512_BF16)\n"
        "        endif()\n"
        "        if (NOT MSVC)\n"
        "            ggml_add_cpu_backend_variant(sapphirerapids AVX512 AMX_TILE AMX_INT8)\n"
        "        endif()\n"
        '    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")\n'
        "        ggml_add_cpu_backend_variant(armv8.0_1)\n"
        "    endif()\n"
        "endif()\n"
    )
    py = "x\n    llama_cpp_python_install_target(ggml-cpu)\n    llama_cpp_python_install_target(ggml-cuda)\n"
    (tmp_path / mod.GGML_CMAKE).parent.mkdir(parents=True)
    (tmp_path / mod.GGML_CMAKE).write_text(ggml)
    (tmp_path / mod.PY_CMAKE).write_text(py)
    for _ in range(2):  # a second run changes nothing more
        assert mod.main([str(tmp_path), "haswell", "zen4"]) == 0
        text = (tmp_path / mod.GGML_CMAKE).read_text()
        built = re.findall(r"^\s*ggml_add_cpu_backend_variant\(([\w.]+)", text, re.M)
        assert built == ["haswell", "zen4", "armv8.0_1"]  # the ARM block is not the x86 one
        installed = re.findall(r"install_target\((ggml-cpu-\w+)\)", (tmp_path / mod.PY_CMAKE).read_text())
        assert installed == ["ggml-cpu-haswell", "ggml-cpu-zen4"]
    with pytest.raises(SystemExit, match="no x86 variant named icelake"):
        mod.main([str(tmp_path), "icelake"])


def _installed_variants() -> list[str]:
    wheel = doctor.llama_wheel()
    if wheel.package_dir is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'qmdlab[llama]')")
    names = [re.search(r"ggml-cpu-(\w+)\.so", p.name) for p in (wheel.package_dir / "lib").glob("libggml-cpu-*.so")]
    found = [m.group(1) for m in names if m]
    if not found:
        pytest.skip("this llama.cpp build has one linked-in CPU library (no run-time dispatch): `make rebuild-llama`")
    return found


def test_the_best_variant_this_cpu_runs_is_loaded_from_the_package_only(tmp_path):
    info = doctor.cpu_info()
    if info.machine != "x86_64" or info.flags is None:
        pytest.skip("needs /proc/cpuinfo on x86-64")
    variants = _installed_variants()
    runnable = [v for v in variants if VARIANT_FLAGS[v] <= info.flags]
    expected = max(runnable, key=lambda v: len(VARIANT_FLAGS[v]))
    # a library of the same name family in the working directory must never be picked up
    best = next(p for p in (doctor.llama_wheel().package_dir / "lib").glob("libggml-cpu-*.so"))
    shutil.copy(best, tmp_path / "libggml-cpu-fromcwd.so")
    code = (
        "from qmdlab.models._llama import import_llama_cpp, loaded_cpu_variant, load_backends;"
        "import llama_cpp as l; import_llama_cpp(); print(loaded_cpu_variant(), load_backends(l))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    loaded = out.stdout.split()[0]
    assert loaded == expected, (loaded, expected, sorted(info.flags & set().union(*VARIANT_FLAGS.values())))
    assert "CPU" in out.stdout
