#!/usr/bin/env bash
# Installs llama-cpp-python (which builds llama.cpp from its source package)
# into its own venv outside the work tree, for the peer benchmark
# (bench/compare-llamacpp.sh). Only benchmarks use it; tests never do.
# Prints the path of the venv's python on its last line. Idempotent: a venv
# whose stamp matches the wanted version and build flags is kept as it is.
#
# The build is native (-march=native via GGML_NATIVE), CPU only, no BLAS, so
# llama.cpp gets the same instruction set we compile for. Threads are not a
# build setting: the benchmark passes the same n_threads we give our engine.
# Building takes several minutes on 2 cores; it runs under `nice` so it does
# not starve others sharing the machine.
#   KVSTITCH_CACHE         cache root (default ~/.cache/kvstitch)
#   LLAMACPP_VERSION       llama-cpp-python version (default below)
#   LLAMACPP_JOBS          parallel compile jobs (default: nproc)
set -euo pipefail

version="${LLAMACPP_VERSION:-0.3.36}"
venv="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/venv-llamacpp"
stamp="$venv/.kvstitch-llamacpp"
cmake_args="-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF"
# -fno-dse for C++: GCC 12's RTL dead-store elimination drops the stores
# that fill ggml's AMX tile config before ldtilecfg (only palette_id
# survives), so on AMX CPUs (this one) llama.cpp's Q4_1/Q4_0/Q8_0 prefill
# dies of SIGILL at the first tileloadd. With the flag the AMX path works.
# (Clang keeps the stores but does not define the __AMX_INT8__ macro ggml
# tests, so a clang build silently has no AMX.)
cmake_args+=" -DCMAKE_CXX_FLAGS=-fno-dse"
want="llama-cpp-python==$version numpy $cmake_args"

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] \
   && "$venv/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    echo "$venv/bin/python"
    exit 0
fi

echo "setup-llamacpp: building llama-cpp-python==$version (several minutes)" >&2
python3 -m venv "$venv" >&2
rm -f "$stamp"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
# A build with other flags may be there: pip would keep it as "satisfied".
"$venv/bin/python" -m pip uninstall --quiet --yes llama-cpp-python >&2 2>/dev/null || true
# --no-binary forces the source build so the native flags apply even if a
# wheel for this platform exists; --no-cache-dir keeps a wheel built with
# other flags from being reused.
CMAKE_ARGS="$cmake_args" \
CMAKE_BUILD_PARALLEL_LEVEL="${LLAMACPP_JOBS:-$(nproc)}" \
nice -n 19 "$venv/bin/python" -m pip install --disable-pip-version-check \
    --no-cache-dir --no-binary llama-cpp-python \
    "llama-cpp-python==$version" numpy >&2
"$venv/bin/python" -c 'import llama_cpp' >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
