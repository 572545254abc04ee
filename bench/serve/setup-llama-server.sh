#!/usr/bin/env bash
# Builds llama.cpp's llama-server (the peer of bench/serve) from the sources
# that the llama-cpp-python source package carries (vendor/llama.cpp), outside
# the work tree, with the flags scripts/setup-llamacpp.sh uses (native, CPU
# only, no BLAS, -fno-dse for GCC 12 + AMX). Prints the binary's path on its
# last line. Idempotent. Several minutes on 2 cores, under nice.
#   KVSTITCH_CACHE     cache root (default ~/.cache/kvstitch)
#   LLAMACPP_VERSION   llama-cpp-python version (default 0.3.36)
set -euo pipefail
version="${LLAMACPP_VERSION:-0.3.36}"
cache="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}"
src_root="$cache/llamacpp-src"
src="$src_root/llama_cpp_python-$version/vendor/llama.cpp"
build="$cache/llama-server-$version"
bin="$build/bin/llama-server"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
if [ ! -f "$src/CMakeLists.txt" ]; then
    mkdir -p "$src_root"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$src_root" "llama-cpp-python==$version" >&2
    tar -xzf "$src_root/llama_cpp_python-$version.tar.gz" -C "$src_root"
fi
echo "setup-llama-server: building llama-server from $src (several minutes)" >&2
nice -n 19 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DCMAKE_CXX_FLAGS=-fno-dse >&2
nice -n 19 cmake --build "$build" --target llama-server -j "${LLAMACPP_JOBS:-2}" >&2
echo "$bin"
