#!/usr/bin/env bash
# Regenerates tests/data/golden/ from the numpy reference forward pass
# (tests/ref/ref_forward.py, float64) for SmolLM2 and the tiny random model.
# Needs the venv (scripts/setup-venv.sh) and the model (scripts/fetch-model.sh);
# takes about a minute. The output is committed; rerun only when the prompts,
# the format or the reference change.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(scripts/setup-venv.sh | tail -n 1)
model=${KVSTITCH_MODEL:-$(scripts/fetch-model.sh | tail -n 1)}
shared=${KVSTITCH_SHARED:-$(readlink -f ../shared)}
"$py" tests/ref/gen_golden.py --smollm "$model" \
    --tiny "$shared/models/llama-2-tiny-random.gguf" \
    --shared "$shared" --out tests/data/golden
