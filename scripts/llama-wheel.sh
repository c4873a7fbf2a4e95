#!/usr/bin/env bash
# Usage: scripts/llama-wheel.sh [PYTHON]. Prints the path of a llama-cpp-python wheel built for this machine, building it first if needed.
#
# Why a wheel directory of our own: pip caches a wheel it built from an sdist under the sdist's name
# and version, not under CMAKE_ARGS, so a machine that once built a bad configuration would keep
# reinstalling it. Here the directory is keyed by everything that decides the binary: the pinned
# version, the CMake arguments, the compiler and the CPU's flags (GGML_NATIVE builds for the CPU it
# runs on). Change any of them and the key changes, so the wheel is rebuilt.
#
# Why no AMX: ggml's AMX kernels fault on CPUs that advertise AMX (a general protection fault on
# `ldtilecfg` in ggml_backend_amx_mul_mat: llama.cpp issue #20824, fix pending in PR #26954; DSPy's
# CI dropped its AMX variant for the same crash, stanfordnlp/dspy PR #10079). GGML_NATIVE compiles
# them whenever the build CPU has AMX, so the AMX ISA is switched off in the compiler: in GCC an
# explicit -mno-* wins over -march=native whatever the order, and every other native extension
# (AVX2, AVX-512, VNNI) stays. The engine refuses a library that reports AMX kernels, in a child
# process, before it runs a batch (program/lm/native.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}

pin=$(grep -oE 'llama-cpp-python==[0-9][0-9a-z.]*' pyproject.toml)
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# Tools, tests, examples and the server are not needed and cost minutes of a 2-core build.
cmake_args="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
cmake_args+=" -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF"
cmake_args+=" '-DCMAKE_C_FLAGS=$no_amx' '-DCMAKE_CXX_FLAGS=$no_amx'"

key=$({
  echo "$pin"
  "$python" -c 'import sys; print(sys.implementation.cache_tag)'
  echo "$cmake_args"
  "${CC:-cc}" --version | head -n 1
  "${CXX:-c++}" --version | head -n 1
  grep -m 1 '^flags' /proc/cpuinfo || uname -m
} | sha256sum | cut -c 1-16)
root=${DIAGNOSIS_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/grounded-diagnosis/wheels}
dir="$root/$key"

if ! compgen -G "$dir/llama_cpp_python-*.whl" >/dev/null; then
  echo "building $pin for this machine (key $key; about 10 minutes on 2 cores)" >&2
  mkdir -p "$root"
  tmp=$(mktemp -d "$root/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  printf '%s\n' "$cmake_args" >"$tmp/cmake_args"
  if ! CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
      "$python" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python -v "$pin" \
      -w "$tmp" >"$tmp/build.log" 2>&1; then
    tail -n 40 "$tmp/build.log" >&2
    echo "building $pin failed: the last 40 lines of $tmp/build.log are above" >&2
    trap - EXIT
    exit 1
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
fi
compgen -G "$dir/llama_cpp_python-*.whl" | head -n 1
