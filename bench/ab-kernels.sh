#!/usr/bin/env bash
# Two builds' kernels (or one build under two settings) side by side, call by
# call: bench_kernels of A and of B run back to back (B first on even
# rounds), and for every figure they print (a matmul shape at m rows, an
# attention's prefill or decode) the report gives each side's fastest time
# over the rounds and the median of the rounds' ratios B / A. On a shared
# host a kernel's time moves by up to 1.5x between runs a minute apart (the
# state of the host, not the code: session 45 saw 35 and 52 us for one
# binary's call); the minimum over rounds is what each build does when the
# host lets it, and the paired median says whether the two agree.
# bench/ab.sh does the same for a whole model's tokens/s.
#
#   bench/ab-kernels.sh [--rounds 6] [--match REGEX] [--env-a "K=V ..."] [--env-b "K=V ..."]
#                       A B -- BENCH-KERNELS-ARGS...
#
# A and B: bench_kernels executables, or build directories holding
# bench/bench_kernels (make BUILD=/tmp/old /tmp/old/bench/bench_kernels
# builds one from another tree state). --match keeps the figures whose name
# matches the (extended) regex, e.g. 'm=8'. BENCH-KERNELS-ARGS go to both,
# e.g. --q8_0 --isa amx --threads 1 --no-attn.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
rounds=6 match="" env_a="" env_b=""
sides=()
while [ $# -gt 0 ]; do
    ab_option "$@"
    if [ "$ab_shift" -gt 0 ]; then shift "$ab_shift"; continue; fi
    case "$1" in
        --match) match="$2"; shift 2;;
        --) shift; break;;
        -*) echo "ab-kernels: unknown option $1 (see --help)" >&2; exit 2;;
        *) sides+=("$1"); shift;;
    esac
done
need_numbers ab-kernels rounds
[ "$rounds" -ge 1 ] || { echo "ab-kernels: --rounds must be at least 1" >&2; exit 2; }
[ ${#sides[@]} -eq 2 ] || { echo "ab-kernels: name two bench_kernels (or build directories), A and B (see --help)" >&2; exit 2; }
bins=()
for s in "${sides[@]}"; do
    b="$s"
    [ -d "$s" ] && b="$s/bench/bench_kernels"
    if [ ! -x "$b" ] || [ -d "$b" ]; then
        echo "ab-kernels: $s is neither a bench_kernels executable nor a build directory with bench/bench_kernels" >&2
        exit 2
    fi
    bins+=("$b")
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ab-kernels.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bench_args=("$@")
run() {  # run a|b ROUND: that side's bench_kernels into $tmp/SIDE.ROUND
    local e="$env_a" b="${bins[0]}"
    [ "$1" = b ] && e="$env_b" b="${bins[1]}"
    # shellcheck disable=SC2086
    if ! env $e "$b" "${bench_args[@]}" >"$tmp/$1.$2" 2>&1; then
        echo "ab-kernels: $b ${bench_args[*]} failed:" >&2
        tail -5 "$tmp/$1.$2" >&2
        exit 1
    fi
}
ab_alternate "$rounds" run

python3 - "$tmp" "$rounds" "$match" <<'PY'
import os, re, statistics as st, sys

tmp, rounds, match = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# A figure: a number and its unit (us or ms, not "us/token"); its name is the
# line's text before the first figure's label plus the label (the word just
# before the number): "amx t=1 ffn_up 576->1536 Q4_1 m=8", "... ctx=512 decode".
FIG = re.compile(r"(\S+)\s+([0-9]+(?:\.[0-9]+)?) (us|ms)(?![/\w])")

def figures(path):
    out = {}
    for line in open(path, errors="replace"):
        if not re.match(r"\s*\S+\s+t=\d+\s", line):
            continue
        found = list(FIG.finditer(line))
        if not found:
            continue
        base = " ".join(line[:found[0].start()].split())
        for m in found:
            name = base + " " + m.group(1)
            if match and not re.search(match, name):
                continue
            out[name] = float(m.group(2)) * (1000.0 if m.group(3) == "ms" else 1.0)
    return out

runs = {s: [figures(os.path.join(tmp, "%s.%d" % (s, r))) for r in range(1, rounds + 1)] for s in "ab"}
names = [n for n in runs["a"][0] if all(n in x for s in "ab" for x in runs[s])]
if not names:
    sys.exit("ab-kernels: no figure common to both sides in every round" + (" matching '%s'" % match if match else ""))
width = max(len(n) for n in names)
print("A, B: each side's fastest of %d rounds (us); B/A: of those; paired: the median (min-max) of the rounds' B/A" % rounds)
print("%-*s  %10s  %10s  %7s  %s" % (width, "figure", "A", "B", "B/A", "paired"))
for n in names:
    a = [x[n] for x in runs["a"]]
    b = [x[n] for x in runs["b"]]
    r = [y / x for x, y in zip(a, b) if x > 0]
    paired = "%.3f (%.3f-%.3f)" % (st.median(r), min(r), max(r)) if r else "-"
    print("%-*s  %10.1f  %10.1f  %7.3f  %s" % (width, n, min(a), min(b), min(b) / min(a) if min(a) > 0 else float("nan"), paired))
PY
