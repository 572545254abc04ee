#!/usr/bin/env bash
# Creates (once) a Python venv outside the work tree with the packages the
# test-data generators and the reference forward pass need, and prints the
# path of its python on the last line.
set -euo pipefail
venv="${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/venv"
stamp="$venv/.kvstitch-packages"
want="numpy gguf tokenizers cffi pytest openai requests websocket-client"  # cffi: python/; openai requests websocket-client: tests/serve (websocket-client drives headless Chromium)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want >&2
    echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
