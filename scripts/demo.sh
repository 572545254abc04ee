#!/usr/bin/env bash
# The newcomer's first run: fetch the model (cached after the first time) and
# generate a greedy chat answer with the CLI. `make demo` builds first.
#   BUILD    build directory holding kvstitch (default build)
#   PROMPT   the user message (default below)
#   N        tokens to generate at most (default 128: the default prompt's
#            answer, ~30 tokens, ends on its own: stop_reason eos)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
PROMPT="${PROMPT:-Explain in one sentence why the sky is blue.}"
N="${N:-128}"
if [ ! -x "$BUILD/kvstitch" ]; then
    echo "demo: $BUILD/kvstitch is missing; run 'make demo' (or 'make') first" >&2
    exit 1
fi
model=$(scripts/fetch-model.sh | tail -n 1)
echo "demo: model $model" >&2
echo "demo: kvstitch generate --chat -p \"$PROMPT\" -n $N" >&2
"$BUILD/kvstitch" generate -m "$model" --chat -p "$PROMPT" -n "$N"
