#!/usr/bin/env bash
# Issue #14's side-by-side run, in one go: kvstitch vs llama.cpp (the tools
# bench/serve/setup-llama-server.sh builds out of tree) on gemma3-270m Q4_K_M
# and SmolLM2-135M Q4_1, same GGUF, same threads:
#   - speed: prefill pp512 and decode tg64 (bench/compare-llamacpp.sh with
#     --llama-bench: `kvstitch bench` vs llama-bench, engines alternating)
#   - perplexity: `kvstitch perplexity` vs llama-perplexity on the same held
#     texts with the same window (--ctx / -c), both scoring the second half of
#     each window after a BOS, so the figures are directly comparable.
# Writes bench/results/gemma3-vs-llamacpp.md (and prints it).
#   THREADS (2) CTX (512) CHUNKS (12: windows scored per text, 0 = all)
#   REPS (3) ROUNDS (2) PP (512) TG (64)
#   MODELS ("gemma3 smollm2"): names scripts/fetch-model.sh knows
#   PPL_MODELS ("gemma3"): the models whose perplexity is compared
#   TEXTS ("gpl3"): the held texts (rows of the table below: gpl3, musique)
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${THREADS:-2}"; CTX="${CTX:-512}"; CHUNKS="${CHUNKS:-12}"; REPS="${REPS:-3}"; ROUNDS="${ROUNDS:-2}"
PP="${PP:-512}"; TG="${TG:-64}"; MODELS="${MODELS:-gemma3 smollm2}"
SHARED="${KVSTITCH_SHARED:-../shared}"
cli="${KVSTITCH_CLI:-build/kvstitch}"
[ -x "$cli" ] || { echo "gemma3-vs-llamacpp: $cli is not built (make)" >&2; exit 1; }
# LLAMACPP_BIN: a directory holding llama-bench and llama-perplexity (default: the
# build of bench/serve/setup-llama-server.sh, made if missing)
ls_bin="${LLAMACPP_BIN:-$(dirname "$(bench/serve/setup-llama-server.sh | tail -n 1)")}"
for t in llama-bench llama-perplexity; do
    [ -x "$ls_bin/$t" ] || { echo "gemma3-vs-llamacpp: $ls_bin/$t is missing" >&2; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gemma3-vs-llamacpp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The held texts, one row each: a name and the command that writes it. Both
# are on every machine this runs on and are not part of either model's GGUF.
read -r -a texts <<<"${TEXTS:-gpl3}"
PPL_MODELS="${PPL_MODELS:-gemma3}"
text_gpl3() { cat /usr/share/common-licenses/GPL-3; }
text_musique() {  # the first 16 distinct MuSiQue passages of ../shared/data, one per paragraph
    python3 - "$SHARED/data/musique_dev.json" <<'PY'
import json, sys
seen, out = set(), []
for it in json.load(open(sys.argv[1])):
    for c in it["ctxs"]:
        t = c["text"].strip()
        if t and t not in seen and len(out) < 16:
            seen.add(t); out.append(t)
print("\n\n".join(out))
PY
}
for t in "${texts[@]}"; do
    declare -F "text_$t" >/dev/null || { echo "gemma3-vs-llamacpp: unknown text '$t' (known: gpl3, musique)" >&2; exit 2; }
    "text_$t" > "$tmp/$t.txt"
done

load0=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
isa=$(grep -m1 '^flags' /proc/cpuinfo | grep -o -w 'avx2\|fma\|f16c\|avx512f\|avx512_vnni\|amx_int8' | tr '\n' ' ')
peer_version=$("$ls_bin/llama-bench" --version 2>&1 | grep -m1 -i version || true)
md="$tmp/report.md"
{
    echo "# kvstitch vs llama.cpp: gemma3-270m and SmolLM2-135M"
    echo
    echo "Written by \`bench/gemma3-vs-llamacpp.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit"
    echo "$(git rev-parse --short HEAD)$( [ -n "$(git status --porcelain | head -n 1)" ] && echo ' (+ uncommitted changes)')."
    echo "Machine: $cpu ($isa), $(nproc) cores, shared with other work; load average $load0 at the start."
    echo "Peer: llama.cpp from llama-cpp-python 0.3.36's vendor/llama.cpp ($peer_version), built"
    echo "natively, CPU only (\`bench/serve/setup-llama-server.sh\`). Threads: $THREADS for both engines."
    echo
} > "$md"

for name in $MODELS; do
    model=$(scripts/fetch-model.sh "$name" | tail -n 1)
    echo "gemma3-vs-llamacpp: $name: speed (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    {
        echo "## $(basename "$model")"
        echo
        echo "Speed (\`bench/compare-llamacpp.sh --llama-bench\`, pp$PP / tg$TG, $REPS reps, $ROUNDS rounds"
        echo "alternating the engines, medians):"
        echo
        echo '```'
        KVSTITCH_CLI="$cli" bench/compare-llamacpp.sh "$model" --llama-bench "$ls_bin/llama-bench" \
            --threads "$THREADS" --reps "$REPS" --rounds "$ROUNDS" -p "$PP" -n "$TG" --no-save \
            | sed -n '/^metric/,$p'
        echo '```'
        echo
    } >> "$md"
    case " $PPL_MODELS " in *" $name "*) ;; *) continue;; esac
    {
        echo "Perplexity (window $CTX tokens, second half of each scored, at most $CHUNKS windows per text;"
        echo "same text, same windows; \`kvstitch perplexity\` vs llama-perplexity):"
        echo
        echo "| text | windows (kvstitch / llama.cpp) | kvstitch PPL | llama.cpp PPL | difference | wall s (kvstitch / llama.cpp) |"
        echo "|---|---:|---:|---:|---:|---:|"
    } >> "$md"
    for t in "${texts[@]}"; do
        echo "gemma3-vs-llamacpp: $name: perplexity on $t (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        t0=$(date +%s.%N)
        "$cli" perplexity -m "$model" -f "$tmp/$t.txt" --ctx "$CTX" --chunks "$CHUNKS" --threads "$THREADS" --json -q \
            > "$tmp/ours.json"
        t1=$(date +%s.%N)
        "$ls_bin/llama-perplexity" -m "$model" -f "$tmp/$t.txt" -c "$CTX" -b "$CTX" --chunks "$([ "$CHUNKS" -gt 0 ] && echo "$CHUNKS" || echo -1)" -t "$THREADS" \
            > "$tmp/peer.log" 2>&1 || { echo "llama-perplexity failed:" >&2; tail -20 "$tmp/peer.log" >&2; exit 1; }
        t2=$(date +%s.%N)
        python3 - "$tmp/ours.json" "$tmp/peer.log" "$t" "$t0" "$t1" "$t2" >> "$md" <<'PY'
import json, re, sys
o = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
if not m:
    sys.exit("gemma3-vs-llamacpp: no 'Final estimate' in llama-perplexity's output")
ppl, err = float(m.group(1)), float(m.group(2))
n = re.search(r"calculating perplexity over (\d+) chunks", log)
t0, t1, t2 = (float(x) for x in sys.argv[4:7])
print("| %s | %d / %s | %.4f +/- %.4f | %.4f +/- %.4f | %+.2f%% | %.0f / %.0f |" % (
    sys.argv[3], o["windows"], n.group(1) if n else "?", o["ppl"], o["ppl_stderr"], ppl, err,
    100 * (o["ppl"] / ppl - 1), t1 - t0, t2 - t1))
PY
    done
    echo >> "$md"
done
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)." >> "$md"
mkdir -p bench/results
cp "$md" bench/results/gemma3-vs-llamacpp.md
cat "$md"
