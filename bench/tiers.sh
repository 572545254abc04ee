#!/usr/bin/env bash
# bench/tiers on the real model, its output kept with the machine it ran on:
# TTFT of a 95%-overlap ~4K-token prompt served from RAM, the cache
# directory, Redis and a Redis Cluster (3 masters + 3 replicas) vs cold;
# value codec ratios and speeds; Redis GET/SET MB/s; the read budget
# figures (redis_conn.h). The program starts its own redis-server processes
# on free loopback ports and stops them (also if it dies: they die with it).
#   usage: bench/tiers.sh [tiers options: --reps N --threads N --tokens N]
#   BUILD  build dir (default build); the output goes to
#          bench/results/tiers-<UTC date>.txt and to stdout.
# The machine may be shared: the load average is printed before and after;
# compare figures within one run only.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD="${BUILD:-build}"
for tool in redis-server redis-cli; do
    command -v "$tool" >/dev/null || { echo "tiers.sh: $tool not found (apt-get install redis-server)" >&2; exit 1; }
done
[ -x "$BUILD/bench/tiers" ] || make -j2 "BUILD=$BUILD" "$BUILD/bench/tiers" >/dev/null || exit 1
model=$(scripts/fetch-model.sh | tail -n 1) || { echo "tiers.sh: model fetch failed" >&2; exit 1; }
export KVSTITCH_MODEL="$model" KVSTITCH_SHARED="${KVSTITCH_SHARED:-$(readlink -f ../shared)}"
out="bench/results/tiers-$(date -u +%Y%m%d-%H%M).txt"
{
    echo "bench/tiers $(git describe --always --dirty 2>/dev/null), $(date -u '+%F %H:%M UTC')"
    echo "cpu: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores;" \
         "$(redis-server --version | cut -d' ' -f1-3)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$BUILD/bench/tiers" "$@"
    rc=$?
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit $rc
} 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
echo "tiers.sh: wrote $out"
exit "$rc"
