#!/usr/bin/env bash
# Where a kvstitch run spends its time, by function: `perf record` with the
# software cpu-clock event (timer samples: it works on VMs that expose no
# hardware counters, as this workplace's do), then the share of samples per
# symbol, and optionally one function's hottest instructions.
#
#   bench/profile.sh [--annotate SYMBOL] [--top N] -- kvstitch-args...
#   e.g. bench/profile.sh -- bench -m MODEL -p 512 -n 0 --reps 3 --threads 1
#        bench/profile.sh --annotate tail_pass8 -- bench -m MODEL -p 512 -n 0
#
# Shares within one run hold while the machine's speed moves (other
# tenants): compare a function's share before and after a change, beside
# the paired tok/s runs, not instead of them. Needs perf (Debian:
# linux-perf); BUILD (default build) holds the kvstitch binary.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
annotate="" top=25
while [ $# -gt 0 ]; do
    case "$1" in
    --annotate) annotate="$2"; shift 2 ;;
    --top) top="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "profile.sh: unknown option '$1' (usage: bench/profile.sh [--annotate SYMBOL] [--top N] -- kvstitch-args...)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "profile.sh: no kvstitch arguments after --" >&2; exit 2; }
command -v perf >/dev/null || { echo "profile.sh: perf not found (Debian: apt-get install linux-perf)" >&2; exit 1; }
[ -x "$BUILD/kvstitch" ] || { echo "profile.sh: $BUILD/kvstitch not built (make)" >&2; exit 1; }
data=$(mktemp /tmp/kvstitch-profile.XXXXXX)
trap 'rm -f "$data" "$data.old"' EXIT
perf record -q -e cpu-clock -F 4999 -o "$data" "$BUILD/kvstitch" "$@"
echo "# share of cpu-clock samples by symbol ($BUILD/kvstitch $*)"
# (awk, not head: head would close the pipe early and pipefail end the script)
perf report -i "$data" --no-children --sort symbol --stdio 2>/dev/null | awk -v n="$top" '/^ +[0-9]+\.[0-9]+%/ && c++ < n'
if [ -n "$annotate" ]; then
    echo "# $annotate: hottest instructions (% of its samples; a stalled load shows on the instruction after it)"
    perf annotate -i "$data" "$annotate" --stdio 2>/dev/null | awk '/^ +[0-9]+\.[0-9]+ :/' | sort -rn | awk -v n="$top" 'NR <= n'
fi
