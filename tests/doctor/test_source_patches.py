"""The source change ``make setup`` makes to llama.cpp: the metadata dump formats a prefix of an array.

The patch is applied to a copy of the real function as llama.cpp writes it, compiled and run: an
array of 262,144 strings prints the same first 40 characters as before, built from 256 characters
instead of the whole array. A changed patch must build a new wheel (its hash is in the wheelhouse
name), and an sdist that no longer looks as expected is an error naming the file.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# llama.cpp's gguf_kv_to_str array loop (src/llama-impl.cpp), reduced to plain strings
SOURCE = (
    """#include <sstream>
#include <string>
#include <vector>
#include <cstdio>
std::string gguf_kv_to_str(const std::vector<std::string> & arr) {
    {
        {
            {
                int arr_n = (int) arr.size();
                std::stringstream ss;
                ss << "[";
"""
    + "                for (int j = 0; j < arr_n; j++) {\n"
    + """                    std::string val = arr[j];
                    ss << '"' << val << '"';
                    if (j < arr_n - 1) {
                        ss << ", ";
                    }
                }
                ss << "]";
                return ss.str();
            }
        }
    }
}
int main() {
    std::vector<std::string> arr;
    for (int i = 0; i < 262144; i++) arr.push_back("tok" + std::to_string(i));
    std::string v = gguf_kv_to_str(arr);
    std::printf("%zu\\n%s\\n", v.size(), v.substr(0, 37).c_str());
}
"""
)


def _patches():
    spec = importlib.util.spec_from_file_location("llama_source_patches", REPO / "scripts" / "llama_source_patches.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sdist(root: Path, text: str) -> Path:
    impl = root / _patches().IMPL
    impl.parent.mkdir(parents=True)
    impl.write_text(text, encoding="utf-8")
    return impl


def test_the_capped_dump_prints_the_same_prefix(tmp_path):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the dump with")
    mod = _patches()
    impl = _sdist(tmp_path / "sdist", SOURCE)
    assert mod.main([str(tmp_path / "sdist")]) == 0 and mod.main([str(tmp_path / "sdist")]) == 0
    patched = impl.read_text(encoding="utf-8")
    assert patched.count(mod.MARK) == 1  # run twice, patched once
    outputs = []
    for name, text in (("before", SOURCE), ("after", patched)):
        src = tmp_path / f"{name}.cpp"
        src.write_text(text, encoding="utf-8")
        subprocess.run([compiler, "-O1", "-o", str(tmp_path / name), str(src)], check=True)
        out = subprocess.run([str(tmp_path / name)], capture_output=True, text=True, check=True).stdout
        size, prefix = out.split("\n")[:2]
        outputs.append((int(size), prefix))
    (full, before), (capped, after) = outputs
    assert before == after == '["tok0", "tok1", "tok2", "tok3", "tok' and full > 2_000_000 and capped < 300, outputs


def test_an_unexpected_sdist_is_an_error_naming_the_file(tmp_path):
    impl = _sdist(tmp_path, "std::string gguf_kv_to_str(int i) { return {}; }\n")
    with pytest.raises(SystemExit, match=re.escape(str(_patches().IMPL))):
        _patches().main([str(tmp_path)])
    assert impl.read_text() == "std::string gguf_kv_to_str(int i) { return {}; }\n"  # left as it was


def test_the_makefile_applies_the_patch_and_names_the_wheel_by_it():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    build = makefile[makefile.index("llama-wheel:") :]
    assert "scripts/llama_source_patches.py" in build.split("$(PIP) wheel")[0]  # before the wheel is built
    assert re.search(r"^LLAMA_PATCHES_HASH :=.*scripts/llama_source_patches\.py", makefile, re.M)
    assert re.search(r"^LLAMA_FLAGS_HASH :=.*patches=\$\(LLAMA_PATCHES_HASH\)", makefile, re.M)
