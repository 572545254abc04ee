# Sourced by the rag_eval scripts: from the repository root, builds
# $BUILD/bench/rag_eval (BUILD default build), fetches the model and exports
# KVSTITCH_MODEL and KVSTITCH_SHARED (default ../shared).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD="${BUILD:-build}"
make --no-print-directory BUILD="$BUILD" "$BUILD/bench/rag_eval" >/dev/null
model=$(scripts/fetch-model.sh | tail -n 1)
export KVSTITCH_MODEL="$model" KVSTITCH_SHARED="${KVSTITCH_SHARED:-$(readlink -f ../shared)}"
