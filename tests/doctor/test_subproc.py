"""Child processes and the message for a death by signal (:mod:`qmdlab.subproc`, doctor's fix text,
the demo's parent). Fast: each child is a bare interpreter."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from qmdlab import doctor
from qmdlab.subproc import ChildDied, ChildFailed, call_in_child, death_message, run_child, signal_name

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENV = {"PYTHONPATH": str(HERE)}
SIGILL_CODE = "import os, signal; os.kill(os.getpid(), signal.SIGILL)"


def test_sigill_child_raises_one_clear_message():
    with pytest.raises(ChildDied) as info:
        run_child([sys.executable, "-c", SIGILL_CODE], what="the expand model pkg:qwen", capture=True)
    err = info.value
    assert err.signal_name == "SIGILL" and err.returncode == -signal.SIGILL
    msg = " ".join(str(err).split())  # the cause is wrapped at 100 columns
    assert msg.startswith("error: the expand model pkg:qwen died from signal SIGILL (illegal instruction).")
    assert "llama.cpp build (libggml-cpu) uses CPU instructions this machine does not allow" in msg
    assert "qmdlab doctor" in msg  # the default fix


def test_call_in_child_sigill_keeps_faulthandler_stack_in_message():
    with pytest.raises(ChildDied) as info:
        call_in_child("crash_targets:sigill", what="the rerank model X", env=ENV)
    msg = str(info.value)
    assert "SIGILL" in msg and "last output of the child process:" in msg
    assert "crash_targets" in msg  # faulthandler's Python stack names the crashing function


def test_doctor_check_sigill(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    fix = doctor.rebuild_commands(doctor.cpu_info(), default_args="-DGGML_NATIVE=OFF -DGGML_AVX2=ON").text
    check = doctor._run_check(
        "expand",
        "pkg:qwen2.5-coder",
        "crash_targets:sigill",
        (),
        "the expand model pkg:qwen2.5-coder (smoke check)",
        fix,
        60,
    )
    assert (check.ok, check.signal) == (False, "SIGILL")
    msg = " ".join(check.error.split())
    assert "the expand model pkg:qwen2.5-coder (smoke check) died from signal SIGILL" in msg
    assert "uses CPU instructions this machine does not allow" in msg
    assert "make rebuild-llama" in msg
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF' in msg and "--no-binary llama-cpp-python" in msg
    assert msg.count("died from signal") == 1  # one message, not a stack of them


def test_call_in_child_returns_value_and_reports_errors():
    assert call_in_child("crash_targets:add", 2, b=3, what="adding", env=ENV) == 5
    with pytest.raises(ChildFailed, match=r"^model file /m/x.gguf does not exist; fix the path$"):
        call_in_child("crash_targets:user_error", what="loading", env=ENV)
    with pytest.raises(ChildFailed, match="ModuleNotFoundError"):
        call_in_child("no_such_module_xyz:f", what="importing")


def test_nonzero_exit_is_not_a_signal_and_timeout_is():
    res = run_child([sys.executable, "-c", "raise SystemExit(3)"], what="x", capture=True)
    assert (res.returncode, res.signal) == (3, None)
    with pytest.raises(ChildDied, match="SIGKILL") as info:
        run_child([sys.executable, "-c", "import time; time.sleep(30)"], what="sleeper", capture=True, timeout=1)
    assert "timeout" in str(info.value)


@pytest.mark.parametrize(
    "rc, name", [(-4, "SIGILL"), (132, "SIGILL"), (-11, "SIGSEGV"), (-9, "SIGKILL"), (0, None), (1, None), (2, None)]
)
def test_signal_name(rc, name):
    assert signal_name(rc) == name


def test_death_message_causes_differ_by_signal():
    assert "out-of-memory" in death_message("x", -9)
    assert "bad memory access" in death_message("x", -11)
    assert "exit status 132" in death_message("x", 132)


def test_demo_reports_a_tier_killed_by_sigill(monkeypatch, capsys):
    """The demo's parent turns a tier's death into the message + doctor hint + cache note, exit 1."""
    import qmdlab.subproc as sp

    spec = importlib.util.spec_from_file_location("demo_script", REPO / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    real = sp.run_child
    calls = []

    def fake(argv, **kw):  # tier 1 passes; tier 2 dies as a bad llama.cpp build would
        calls.append(argv[-1])
        code = "pass" if argv[-1] == "1" else SIGILL_CODE
        return real([sys.executable, "-c", code], **kw)

    monkeypatch.setattr(sp, "run_child", fake)
    assert demo.main(["--llm-queries", "2"]) == 1
    assert calls == ["1", "2"]
    err = capsys.readouterr().err
    assert "error: the demo's LLM tier (tier 2" in err and "died from signal SIGILL" in err
    assert "qmdlab doctor" in err and "cached on disk" in err


def test_rebuild_switches_off_what_the_cpu_lacks():
    cpu = doctor.CpuInfo("x86_64", "", 2, frozenset({"avx", "f16c", "pni", "ssse3"}), "test")
    r = doctor.rebuild_commands(cpu, default_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON")
    assert r.cmake_args == "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=OFF -DGGML_FMA=OFF"
    assert r.make == f'make rebuild-llama LLAMA_CMAKE_ARGS="{r.cmake_args}"'
    assert r.pip.startswith(f'CMAKE_ARGS="{r.cmake_args}" ')


def test_missing_features_flags_amx_on_a_cpu_without_it():
    build = doctor.parse_system_info("CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | OPENMP = 1 | ")
    cpu_flags = frozenset({"pni", "avx2", "avx512f"})
    assert doctor.missing_features(build, cpu_flags, "x86_64") == ["AMX_INT8"]
    assert doctor.missing_features(build, None, "x86_64") == []  # unknown CPU: nothing claimed


def test_cpu_info_without_proc_cpuinfo(tmp_path):
    info = doctor.cpu_info(tmp_path / "absent")
    assert info.flags is None and "unknown" in info.source


def test_makefile_is_the_one_place_for_the_flags():
    """`qmdlab doctor` reads the flags from the Makefile, and the installed wheel was built with them."""
    if not (REPO / "Makefile").is_file() or subprocess.run(["which", "make"], capture_output=True).returncode:
        pytest.skip("no Makefile/make here (not a checkout)")
    args = doctor.makefile_cmake_args(REPO)
    assert args and "-DGGML_NATIVE=OFF" in args
    if doctor.cpu_info().machine == "x86_64":  # run-time dispatch over the Makefile's CPU variants (no AMX)
        for flag in ("BACKEND_DL=ON", "CPU_ALL_VARIANTS=ON"):
            assert f"-DGGML_{flag}" in args
    wheel = doctor.llama_wheel()
    if wheel.wheel is None:
        pytest.skip(f"the installed llama-cpp-python is not from the wheelhouse {doctor.wheelhouse()}")
    assert wheel.cmake_args == args


def test_missing_model_is_reported_not_fetched(monkeypatch, tmp_path, require):
    require.extra("llama")
    missing = tmp_path / "absent.gguf"
    monkeypatch.setenv("QMDLAB_EXPAND_MODEL", str(missing))
    monkeypatch.setenv("QMDLAB_EMBED_MODEL", "none")
    monkeypatch.setenv("QMDLAB_RERANK_MODEL", "none")
    checks = doctor.run_checks("offline", smoke=True, timeout=120)
    assert [(c.name, c.ok) for c in checks] == [("library", True), ("expand", False)]
    assert checks[1].error == (
        f"error: the expand model {missing} is not present; run `qmdlab pull --preset "
        "offline` (or fix QMDLAB_EXPAND_MODEL)"
    )
    assert doctor.format_check(checks[1]).endswith("not present")
