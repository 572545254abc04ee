#!/usr/bin/env bash
# kvstitch serve vs llama.cpp's llama-server, side by side in one run: same
# GGUF, same threads, same slots; llama-server with its prompt cache on
# (--cache-reuse 256, cache_prompt). Scenarios of bench/serve/bench_serve.py;
# results in bench/results/serve-*.json, the table in serve.md, the TTFT chart
# in serve-ttft.svg (bench/serve/report.py).
#   THREADS (2) SLOTS (8) USERS (8) TURNS (6) SYS_TOKENS (1000) ANSWER (64)
#   RAG_REQUESTS (20) STREAMS (1,2,4,8) SCENARIOS ("multiturn rag scaling")
#   PEER (1): 0 = kvstitch alone (no llama-server build)
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS="${THREADS:-2}"; SLOTS="${SLOTS:-8}"; USERS="${USERS:-8}"; TURNS="${TURNS:-6}"
SYS_TOKENS="${SYS_TOKENS:-1000}"; ANSWER="${ANSWER:-64}"; RAG_REQUESTS="${RAG_REQUESTS:-20}"
STREAMS="${STREAMS:-1,2,4,8}"; SCENARIOS="${SCENARIOS:-multiturn rag scaling}"
CTX=4096
M=$(scripts/fetch-model.sh | tail -n 1)
PEER="${PEER:-1}"
WHO="kvstitch"
if [ "$PEER" = 1 ]; then LS=$(bench/serve/setup-llama-server.sh | tail -n 1); WHO="kvstitch llama-server"; fi
nice -n 10 make -j2 build/kvstitch >&2
out=bench/results
tmp=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
wait_health() {
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "bench/serve: server on port $1 did not come up" >&2; exit 1
}

P1=$(free_port)
build/kvstitch serve -m "$M" --port "$P1" --slots "$SLOTS" -t "$THREADS" --ctx "$CTX" --max-queue 256 \
    > "$tmp/kvstitch.log" 2>&1 &
pids+=($!)
P2=$(free_port)
if [ "$PEER" = 1 ]; then
    "$LS" -m "$M" --host 127.0.0.1 --port "$P2" -t "$THREADS" -np "$SLOTS" -c $((CTX * SLOTS)) --cache-reuse 256 \
        > "$tmp/llama-server.log" 2>&1 &
    pids+=($!)
    wait_health "$P2"
fi
wait_health "$P1"

{
    echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "config: threads $THREADS, slots $SLOTS, users $USERS, turns $TURNS, system ~$SYS_TOKENS tokens, answers $ANSWER tokens, rag $RAG_REQUESTS requests, streams $STREAMS"
    echo "model: $(basename "$M")"
    echo "kvstitch: $(git rev-parse --short HEAD), serve --slots $SLOTS -t $THREADS --ctx $CTX"
    if [ "$PEER" = 1 ]; then
        echo "llama-server: $("$LS" --version 2>&1 | grep -m1 -i version), -t $THREADS -np $SLOTS -c $((CTX * SLOTS)) --cache-reuse 256 (defaults otherwise: host prompt cache --cache-ram 8192 MiB, jinja template), requests with cache_prompt"
    fi
} > "$out/serve-machine.txt"
for sc in $SCENARIOS; do
    for who in $WHO; do
        if [ "$who" = kvstitch ]; then url="http://127.0.0.1:$P1"; flag=--kvstitch; else url="http://127.0.0.1:$P2"; flag=; fi
        echo "bench/serve: $sc on $who" >&2
        python3 bench/serve/bench_serve.py --url "$url" $flag --scenario "$sc" --users "$USERS" --turns "$TURNS" \
            --system-tokens "$SYS_TOKENS" --answer-tokens "$ANSWER" --rag-requests "$RAG_REQUESTS" \
            --streams "$STREAMS" --out "$out/serve-$sc-$who.json"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/serve-machine.txt"
python3 bench/serve/report.py "$out"
