"""Native-code safety for the in-process llama.cpp engine.

llama.cpp runs inside the user's process, so a fault in its kernels would take the process down
with it: ggml's AMX kernels do exactly that on CPUs that advertise AMX (llama.cpp issue #20824), and
a library built for another CPU dies of SIGILL. Before a model runs its first batch here, a child
process loads the same library and model and runs one small batch. Whatever kills the child is
then an `lm.engine_unsupported` error for the diagnosis, never a crash of the user's process. The
child also reports the library's compile-time features, so that a library with AMX kernels, or
one built for instructions this CPU lacks, is refused by name even where it would happen to run.

A probe that passed is remembered on disk (`DIAGNOSIS_PROBE_CACHE`), keyed by everything that
decides it: the sha256 of the llama.cpp build (its shared libraries and Python bindings), the
model's sha256, this CPU's flags and the thread count. The child runs again whenever one of them
is new: on a new machine, a new build or a new model. A refusal is never written, so a probe that
failed runs again in the next process.

`python -m program.lm.native MODEL_PATH THREADS` is that child.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from contracts.settings import value_or_default

RULE = "lm.engine_unsupported"
REBUILD = ("rebuild it for this machine with `rm -rf .venv && make install` (scripts/llama-wheel.sh builds "
           "llama.cpp without AMX, for this CPU)")
PROBE_SECONDS = 300
PROBE_TEXT = "Grounded diagnosis probe: order-service HighMemoryUsage firing, current=91%, duration=15m. " * 2
# ggml's compile-time CPU features (llama_print_system_info) and the /proc/cpuinfo flag each needs.
CPU_FLAG = {
    "SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
    "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
    "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
}
# The child to run; a test may point it at a process that dies on purpose.
CHILD = [sys.executable, "-m", "program.lm.native"]
PROBE_CACHE = "DIAGNOSIS_PROBE_CACHE"


class EngineUnsupported(RuntimeError):
    """The installed llama.cpp cannot run on this machine; the message says why and how to rebuild."""

    rule = RULE


def library_features(info: str) -> set[str]:
    """The features a `llama_print_system_info()` string reports as present."""
    found = set()
    for item in info.replace("\n", "|").split("|"):
        name, _, value = item.rpartition(":")[2].partition("=")
        if value.strip() == "1":
            found.add(name.strip())
    return found


def cpu_flags(cpuinfo: str | None = None) -> set[str] | None:
    """This CPU's flags from /proc/cpuinfo; None where the system has no such file."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return None


def cpu_signature(flags: set[str] | None = None) -> str:
    """This machine's architecture and CPU flags as one digest: what a native build's behaviour can
    depend on besides the build itself."""
    flags = cpu_flags() if flags is None else flags
    text = f"{platform.machine()}:{' '.join(sorted(flags or ()))}"
    return hashlib.sha256(text.encode()).hexdigest()


def library_dir() -> Path | None:
    """The directory llama-cpp-python loads its shared libraries from (it honours LLAMA_CPP_LIB_PATH),
    found without importing it; None when it is not installed."""
    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        return Path(os.environ["LLAMA_CPP_LIB_PATH"])
    spec = importlib.util.find_spec("llama_cpp")
    return Path(spec.origin).parent / "lib" if spec and spec.origin else None


@lru_cache(maxsize=1)
def library_digest() -> str:
    """The sha256 of the llama.cpp build this process runs: the package version, its shared
    libraries and its Python bindings (the ctypes signatures), by name and content."""
    digest = hashlib.sha256()
    try:
        digest.update(importlib.metadata.version("llama-cpp-python").encode())
    except importlib.metadata.PackageNotFoundError:
        digest.update(b"not installed")
    lib = library_dir()
    files = sorted(lib.iterdir()) if lib and lib.is_dir() else []
    files += sorted(lib.parent.glob("*.py")) if lib and not os.environ.get("LLAMA_CPP_LIB_PATH") else []
    for path in files:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def library_problem(info: str, flags: set[str] | None) -> str | None:
    """Why a library with these features must not run on a CPU with these flags, or None."""
    features = library_features(info)
    if "AMX_INT8" in features:
        return ("the installed llama.cpp has AMX kernels (AMX_INT8 = 1), which crash on CPUs that advertise AMX "
                f"(llama.cpp issue #20824); {REBUILD}")
    if flags is None:
        return None
    missing = sorted(f for f in features if f in CPU_FLAG and CPU_FLAG[f] not in flags)
    if missing:
        return (f"the installed llama.cpp was built for {', '.join(missing)}, which this CPU does not have, so it "
                f"would die of an illegal instruction; {REBUILD}")
    return None


def signal_name(returncode: int) -> str:
    """The name of the signal a child process died of (its negative return code)."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _no_core_file() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _reported(stdout: str, key: str):
    for line in stdout.splitlines():
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        if isinstance(fields, dict) and fields.get(key) is not None:
            return fields[key]
    return None


def probe(model_path: str, n_threads: int) -> int:
    """How many tokens llama.cpp evaluated in one batch of this model in a child process; raises
    EngineUnsupported unless it ran."""
    try:
        # A child that dies of a fault is expected here; it leaves no core file behind.
        child = subprocess.run([*CHILD, model_path, str(n_threads)], capture_output=True, text=True,
                               timeout=PROBE_SECONDS, stdin=subprocess.DEVNULL,
                               preexec_fn=_no_core_file if os.name == "posix" else None)
    except subprocess.TimeoutExpired:
        raise EngineUnsupported(f"llama.cpp did not finish a one-batch probe of {model_path} in {PROBE_SECONDS} s; "
                                f"{REBUILD}") from None
    info = _reported(child.stdout, "system_info")
    if info is not None and (problem := library_problem(info, cpu_flags())):
        raise EngineUnsupported(problem)
    if child.returncode < 0:
        raise EngineUnsupported(f"llama.cpp died of {signal_name(child.returncode)} running one batch of "
                                f"{Path(model_path).name} in a child process, so it was not run in this one; {REBUILD}")
    evaluated = _reported(child.stdout, "evaluated_tokens")
    if child.returncode != 0 or not evaluated:
        tail = " ".join(child.stderr.strip().splitlines()[-3:])[-400:] or "no output"
        raise EngineUnsupported(f"llama.cpp could not run one batch of {Path(model_path).name} in a child process "
                                f"(exit {child.returncode}: {tail}); {REBUILD}")
    return evaluated


def probe_cache_dir() -> Path:
    return Path(value_or_default(PROBE_CACHE)).expanduser()


def probe_key(model_sha256: str, n_threads: int) -> dict:
    """What decides whether a probe passes: the build, the model, the CPU and the thread count."""
    return {"library": library_digest(), "model_sha256": model_sha256, "cpu": cpu_signature(), "threads": n_threads}


def _probe_file(key: dict) -> Path:
    return probe_cache_dir() / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()}.json"


def remembered_pass(key: dict) -> bool:
    """Whether a probe with exactly this key passed before. A file that cannot be read, is not JSON,
    or names another key is no pass: the probe runs again."""
    try:
        saved = json.loads(_probe_file(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and saved.get("key") == key and saved.get("passed") is True


def remember_pass(key: dict, evaluated: int) -> None:
    """Write a passed probe; only a pass is ever written. A directory that cannot be written costs
    the next process a probe, nothing more."""
    path = _probe_file(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".partial")
    except OSError:
        return
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump({"key": key, "passed": True, "evaluated_tokens": evaluated}, out)
        os.replace(temporary, path)
    except OSError:
        return
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


_checked: dict[tuple[str, int], EngineUnsupported | None] = {}
_lock = threading.Lock()


def ensure_runs(model_path: str, n_threads: int, model_sha256: str | None = None) -> None:
    """`probe`, once per model and thread count in this process, and once per build, model, CPU and
    thread count on this machine when the caller vouches for the model file's sha256 (it was just
    verified); a refusal is remembered in this process only."""
    key = (os.path.realpath(model_path), n_threads)
    with _lock:
        if key not in _checked:
            saved = probe_key(model_sha256, n_threads) if model_sha256 else None
            try:
                if saved is None or not remembered_pass(saved):
                    evaluated = probe(model_path, n_threads)
                    if saved is not None:
                        remember_pass(saved, evaluated)
                _checked[key] = None
            except EngineUnsupported as exc:
                _checked[key] = exc
        if _checked[key] is not None:
            raise _checked[key]


def _child(model_path: str, n_threads: int) -> None:
    import llama_cpp

    print(json.dumps({"system_info": llama_cpp.llama_print_system_info().decode(errors="replace")}), flush=True)
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=256, n_batch=64, n_threads=n_threads, verbose=False)
    tokens = llm.tokenize(PROBE_TEXT.encode())[:64]
    llm.eval(tokens)
    llm.close()
    print(json.dumps({"evaluated_tokens": len(tokens)}), flush=True)


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
