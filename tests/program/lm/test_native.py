"""llama.cpp must never take down the user's process: the engine proves in a child process that the
library runs a batch on this CPU, refuses a library with AMX kernels or foreign instructions by
name, and a diagnosis that cannot use the engine fails closed with `lm.engine_unsupported`."""

import sys

import dspy
import pytest

from program.entry import cli
from program.entry.api import diagnose
from program.lm import native
from program.lm.engine import LlamaEngine

SAPPHIRE_RAPIDS_BUILD = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
                         "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
                         "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
AVX2_BUILD = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "
AVX2_CPU = {"fpu", "sse2", "pni", "ssse3", "avx", "avx2", "f16c", "fma", "bmi2"}


def child_that(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture(autouse=True)
def _fresh_checks(monkeypatch):
    monkeypatch.setattr(native, "_checked", {})


def test_features_are_read_from_the_system_info_string():
    assert native.library_features(AVX2_BUILD) == {"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "LLAMAFILE"}
    assert native.library_features("CPU : AVX = 0 | AVX2 = 1 |") == {"AVX2"}


def test_cpu_flags_come_from_the_flags_line():
    cpuinfo = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 amx_tile amx_int8\nbugs\t: spectre\n"
    assert native.cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_tile", "amx_int8"}
    assert native.cpu_flags("processor : 0\n") is None


def test_a_library_with_amx_kernels_is_refused_on_any_cpu():
    amx_cpu = AVX2_CPU | {"avx512f", "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"}
    for flags in (amx_cpu, AVX2_CPU, None):
        problem = native.library_problem(SAPPHIRE_RAPIDS_BUILD, flags)
        assert problem and "AMX_INT8 = 1" in problem and "make install" in problem


def test_a_library_built_for_instructions_the_cpu_lacks_is_refused_by_name():
    avx512_build = AVX2_BUILD + "AVX512 = 1 | AVX512_VNNI = 1 | "
    problem = native.library_problem(avx512_build, AVX2_CPU)
    assert problem and "AVX512, AVX512_VNNI" in problem
    assert native.library_problem(AVX2_BUILD, AVX2_CPU) is None
    # Without /proc/cpuinfo only the AMX rule can be applied; the batch in the child still runs.
    assert native.library_problem(avx512_build, None) is None


def test_a_child_that_dies_of_a_fault_is_a_refusal_naming_the_signal(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "CHILD", child_that("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    with pytest.raises(native.EngineUnsupported, match="SIGSEGV") as refused:
        native.ensure_runs(str(tmp_path / "model.gguf"), 2)
    assert refused.value.rule == "lm.engine_unsupported"
    # The refusal is remembered: the child is not run again for the same model in this process.
    monkeypatch.setattr(native, "CHILD", child_that("raise SystemExit('must not run')"))
    with pytest.raises(native.EngineUnsupported, match="SIGSEGV"):
        native.ensure_runs(str(tmp_path / "model.gguf"), 2)


def test_a_child_that_reports_amx_kernels_is_refused_even_when_its_batch_ran(monkeypatch, tmp_path):
    code = f"import json; print(json.dumps({{'system_info': {SAPPHIRE_RAPIDS_BUILD!r}}})); print(json.dumps({{'evaluated_tokens': 40}}))"
    monkeypatch.setattr(native, "CHILD", child_that(code))
    with pytest.raises(native.EngineUnsupported, match="AMX"):
        native.probe(str(tmp_path / "model.gguf"), 2)


def test_a_child_that_fails_or_says_nothing_is_a_refusal_with_its_output(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "CHILD", child_that("import sys; sys.exit('llama_model_load: bad magic')"))
    with pytest.raises(native.EngineUnsupported, match="exit 1: llama_model_load: bad magic"):
        native.probe(str(tmp_path / "model.gguf"), 2)
    monkeypatch.setattr(native, "CHILD", child_that("pass"))
    with pytest.raises(native.EngineUnsupported, match="exit 0"):
        native.probe(str(tmp_path / "model.gguf"), 2)


def test_a_child_that_hangs_is_a_refusal(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "PROBE_SECONDS", 1)
    monkeypatch.setattr(native, "CHILD", child_that("import time; time.sleep(30)"))
    with pytest.raises(native.EngineUnsupported, match="did not finish"):
        native.probe(str(tmp_path / "model.gguf"), 2)


def test_a_diagnosis_on_an_engine_that_cannot_run_fails_closed_before_planning(monkeypatch, tmp_path, store):
    monkeypatch.setattr(native, "CHILD", child_that("import os, signal; os.kill(os.getpid(), signal.SIGILL)"))
    lm = dspy.LM("embedded/probe-test", engine=LlamaEngine(model_path=str(tmp_path / "model.gguf")))
    result = diagnose("Only confirm whether order-service has a HighMemoryUsage alert", lm=lm, db=store)
    assert result.verdict == "LOW_CONFID" and result.gatekeeper_result is None
    assert [e.rule for e in result.errors] == ["lm.engine_unsupported"]
    assert "SIGILL" in result.errors[0].message
    assert result.answer.startswith("The diagnosis did not run")
    record = store.get_session(result.session_id)
    assert record.status == "failed" and record.usage == {} and store.list_invocations(result.session_id) == []


def test_the_cli_exits_1_with_the_reason_when_the_engine_cannot_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(native, "CHILD", child_that("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    lm = dspy.LM("embedded/probe-test", engine=LlamaEngine(model_path=str(tmp_path / "model.gguf")))
    monkeypatch.setattr("program.entry.api.resolve_lm", lambda spec: lm)
    code = cli.main(["--db", f"sqlite:///{tmp_path / 'audit.db'}", "ask", "只确认 order-service 是否存在 HighMemoryUsage 告警"])
    captured = capsys.readouterr()
    assert code == 1
    assert "lm.engine_unsupported" in captured.err and "SIGSEGV" in captured.err and "make install" in captured.err
    assert "诊断未运行" in captured.out and "Traceback" not in captured.err


@pytest.mark.embedded
def test_the_installed_llama_cpp_has_no_amx_kernels_and_nothing_this_cpu_lacks():
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    assert "AMX_INT8 = 1" not in info
    assert native.library_problem(info, native.cpu_flags()) is None


@pytest.mark.embedded
def test_the_real_probe_passes_for_the_shipped_small_model():
    from program.lm.models import EMBEDDED_MODELS, assemble

    # More than one token in one batch: the AMX fault needed a batch larger than one.
    assert native.probe(str(assemble(EMBEDDED_MODELS["embedded-small"])), 2) > 1


# --- the probe remembered ----------------------------------------------------------------------

PASSING_CHILD = ("import json; print(json.dumps({'system_info': 'CPU : LLAMAFILE = 1 | '})); "
                 "print(json.dumps({'evaluated_tokens': 40}))")
MUST_NOT_RUN = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
SHA = "ab" * 32


def _new_process(monkeypatch):
    """What a new process knows: nothing of this one's probes."""
    monkeypatch.setattr(native, "_checked", {})


def test_a_passed_probe_is_remembered_and_the_child_does_not_run_again(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "CHILD", child_that(PASSING_CHILD))
    native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)
    (saved,) = native.probe_cache_dir().glob("*.json")
    _new_process(monkeypatch)
    monkeypatch.setattr(native, "CHILD", child_that(MUST_NOT_RUN))
    native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)
    assert saved.exists()


@pytest.mark.parametrize("changed", ["model", "threads", "library", "cpu"])
def test_the_child_runs_again_for_a_new_model_build_cpu_or_thread_count(monkeypatch, tmp_path, changed):
    monkeypatch.setattr(native, "CHILD", child_that(PASSING_CHILD))
    native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)
    _new_process(monkeypatch)
    sha, threads = ("cd" * 32 if changed == "model" else SHA), (4 if changed == "threads" else 2)
    if changed == "library":
        monkeypatch.setattr(native, "library_digest", lambda: "another build")
    if changed == "cpu":
        monkeypatch.setattr(native, "cpu_flags", lambda cpuinfo=None: {"fpu", "sse2", "avx2", "amx_int8"})
    monkeypatch.setattr(native, "CHILD", child_that(MUST_NOT_RUN))
    with pytest.raises(native.EngineUnsupported, match="SIGSEGV"):
        native.ensure_runs(str(tmp_path / "model.gguf"), threads, sha)


def test_a_failed_probe_is_never_remembered_as_a_pass(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "CHILD", child_that(MUST_NOT_RUN))
    with pytest.raises(native.EngineUnsupported, match="SIGSEGV"):
        native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)
    assert list(native.probe_cache_dir().glob("*.json")) == []
    _new_process(monkeypatch)
    monkeypatch.setattr(native, "CHILD", child_that("import sys; sys.exit('llama_model_load: bad magic')"))
    with pytest.raises(native.EngineUnsupported, match="bad magic"):
        native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)


@pytest.mark.parametrize("content", ["", "{", '{"passed": true}', "[]", '{"key": {}, "passed": true}'])
def test_a_damaged_or_foreign_record_is_no_pass(monkeypatch, tmp_path, content):
    monkeypatch.setattr(native, "CHILD", child_that(PASSING_CHILD))
    native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)
    (saved,) = native.probe_cache_dir().glob("*.json")
    saved.write_text(content)
    _new_process(monkeypatch)
    monkeypatch.setattr(native, "CHILD", child_that(MUST_NOT_RUN))
    with pytest.raises(native.EngineUnsupported, match="SIGSEGV"):
        native.ensure_runs(str(tmp_path / "model.gguf"), 2, SHA)


def test_a_model_given_by_path_is_probed_in_every_process(monkeypatch, tmp_path):
    """Only a caller that just checked the file's sha256 may have its probe remembered."""
    monkeypatch.setattr(native, "CHILD", child_that(PASSING_CHILD))
    native.ensure_runs(str(tmp_path / "model.gguf"), 2)
    assert list(native.probe_cache_dir().glob("*.json")) == []


def test_the_build_digest_covers_the_libraries_and_bindings(monkeypatch, tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libllama.so").write_bytes(b"one build")
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(lib))
    native.library_digest.cache_clear()
    first = native.library_digest()
    (lib / "libllama.so").write_bytes(b"another build")
    native.library_digest.cache_clear()
    assert native.library_digest() != first
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH")
    native.library_digest.cache_clear()
    installed = native.library_digest()
    assert installed != first and native.library_dir().name == "lib"


@pytest.mark.embedded
def test_the_real_probe_is_remembered_for_the_shipped_small_model(monkeypatch):
    from program.lm.models import EMBEDDED_MODELS, assemble

    model = EMBEDDED_MODELS["embedded-small"]
    native.ensure_runs(str(assemble(model)), 2, model.sha256)
    _new_process(monkeypatch)
    monkeypatch.setattr(native, "CHILD", child_that(MUST_NOT_RUN))
    native.ensure_runs(str(assemble(model)), 2, model.sha256)
