#!/usr/bin/env bash
# Builds llama.cpp's llama-server (the peer of bench/serve) and the tools the
# side-by-side benchmarks use (llama-bench, llama-perplexity, llama-quantize:
# bench/gemma3-vs-llamacpp.sh, bench/compare-llamacpp.sh --llama-bench) from
# the sources that the llama-cpp-python source package carries
# (vendor/llama.cpp), outside the work tree: native, CPU only, no BLAS, no
# curl. Prints llama-server's path on its last line (the other tools are in
# the same directory). Idempotent: a build dir that has every tool is kept;
# one that lacks some (e.g. one that only built the libraries) is completed,
# reusing what it already compiled. 10-20 minutes on 2 idle cores, under nice.
#   KVSTITCH_CACHE     cache root (default ~/.cache/kvstitch)
#   LLAMACPP_VERSION   llama-cpp-python version (default 0.3.36)
#   LLAMACPP_BUILD     build dir (default $KVSTITCH_CACHE/llama-server-$LLAMACPP_VERSION)
#   LLAMACPP_JOBS      parallel compile jobs (default 2)
set -euo pipefail
version="${LLAMACPP_VERSION:-0.3.36}"
cache="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}"
src_root="$cache/llamacpp-src"
src="$src_root/llama_cpp_python-$version/vendor/llama.cpp"
build="${LLAMACPP_BUILD:-$cache/llama-server-$version}"
# One table: every tool the peer benchmarks run (the small tools first: they
# are usable while llama-server, the longest to compile, is still building).
targets=(llama-bench llama-perplexity llama-quantize llama-server)
have_all=1
for t in "${targets[@]}"; do [ -x "$build/bin/$t" ] || have_all=0; done
if [ "$have_all" = 1 ]; then echo "$build/bin/llama-server"; exit 0; fi
if [ ! -f "$src/CMakeLists.txt" ]; then
    mkdir -p "$src_root"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        -d "$src_root" "llama-cpp-python==$version" >&2
    tar -xzf "$src_root/llama_cpp_python-$version.tar.gz" -C "$src_root"
fi
# -fno-dse only where it matters: GCC 12's dead-store elimination drops the
# stores that fill ggml's AMX tile config (SIGILL at the first tileloadd; see
# scripts/setup-llamacpp.sh). Without AMX the flag changes nothing but would
# make a build dir configured without it recompile every C++ file.
cxxflags=""
grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && cxxflags="-fno-dse"
echo "setup-llama-server: building ${targets[*]} from $src in $build (10-20 minutes on 2 cores)" >&2
nice -n 19 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_BLAS=OFF \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    "-DCMAKE_CXX_FLAGS=$cxxflags" >&2
nice -n 19 cmake --build "$build" --target "${targets[@]}" -j "${LLAMACPP_JOBS:-2}" >&2
for t in "${targets[@]}"; do
    [ -x "$build/bin/$t" ] || { echo "setup-llama-server: $build/bin/$t was not built" >&2; exit 1; }
done
echo "$build/bin/llama-server"
