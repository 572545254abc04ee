#!/usr/bin/env bash
# Teacher-forced top-1 agreement of kvstitch with llama.cpp on the same ids
# (issue #14: >= 97% asked), per model: the golden prompt of
# tests/data/golden/<model>_tf.txt where there is one (then also each
# engine's agreement with the float64 reference), and held text: the first
# MuSiQue dev passages (../shared/data), tokenized by kvstitch (for gemma3
# with the float64 reference computed on the spot).
# llama.cpp comes from llama-cpp-python (scripts/setup-llamacpp.sh); tests
# never depend on it. Prints the figures (bench/results/llamacpp-agreement.md
# keeps a run's).
#   bench/llamacpp-agreement.sh [gemma3|smollm2 ...]   (default: gemma3 smollm2)
set -euo pipefail
cd "$(dirname "$0")/.."
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(gemma3 smollm2)
peer_py="${LLAMACPP_PYTHON:-${KVSTITCH_CACHE:-$HOME/.cache/kvstitch}/venv-llamacpp/bin/python}"
if ! { [ -x "$peer_py" ] && "$peer_py" -c 'import llama_cpp' 2>/dev/null; }; then
    echo "llamacpp-agreement: skipped: llama.cpp is not installed (scripts/setup-llamacpp.sh)"
    exit 0
fi
ours_py=$(scripts/setup-venv.sh | tail -n 1)
[ -f build/libkvstitch.so ] || make build/libkvstitch.so >/dev/null
export PYTHONPATH="$PWD/python" KVSTITCH_LIB="$PWD/build/libkvstitch.so" KVSTITCH_HEADER="$PWD/include/kvstitch.h"
shared="${KVSTITCH_SHARED:-../shared}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-agreement.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$ours_py" - "$shared/data/musique_dev.json" >"$tmp/held.txt" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))
print("\n\n".join(c["text"] if isinstance(c, dict) else str(c) for c in items[0]["ctxs"][:4]))
PY
for name in "${models[@]}"; do
    model=$(scripts/fetch-model.sh "$name" | tail -n 1)
    golden="tests/data/golden/${name}_tf.txt"
    cases=(held)
    if [ -f "$golden" ]; then
        grep -v '^#' "$golden" | head -n 1 >"$tmp/golden.ids"
        cases=(golden held)
    fi
    build/kvstitch tokenize -m "$model" -f "$tmp/held.txt" | tr '\n' ' ' | cut -d' ' -f1-400 >"$tmp/held.ids"
    # the float64 reference on the held ids too, where there is one for the
    # architecture (tests/ref/ref_gemma3.py: ~40 s for 400 ids)
    held_ref=""
    if [ "$name" = gemma3 ]; then
        "$ours_py" tests/ref/ref_gemma3.py "$model" golden "$tmp/held.gold" $(cat "$tmp/held.ids") >/dev/null \
            && held_ref="$tmp/held.gold"
    fi
    for c in "${cases[@]}"; do
        "$ours_py" bench/llamacpp_agreement.py ours "$model" "$tmp/$c.ids" "$tmp/$name-$c-ours.json"
        "$peer_py" bench/llamacpp_agreement.py peer "$model" "$tmp/$c.ids" "$tmp/$name-$c-peer.json"
        echo "== $name, $c ($(wc -w <"$tmp/$c.ids") ids)"
        if [ "$c" = golden ]; then
            "$ours_py" bench/llamacpp_agreement.py compare "$tmp/$name-$c-ours.json" "$tmp/$name-$c-peer.json" "$golden"
        elif [ -n "$held_ref" ]; then
            "$ours_py" bench/llamacpp_agreement.py compare "$tmp/$name-$c-ours.json" "$tmp/$name-$c-peer.json" "$held_ref"
        else
            "$ours_py" bench/llamacpp_agreement.py compare "$tmp/$name-$c-ours.json" "$tmp/$name-$c-peer.json"
        fi
    done
done
