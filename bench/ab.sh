#!/usr/bin/env bash
# Two kvstitch builds, or one build under two settings, side by side for a
# shared machine whose speed moves from minute to minute: each round runs A
# and B back to back (B first on even rounds), and the figure is the median
# of the rounds' ratios B / A, which a slow minute hits on both sides alike
# (on a busy VM single runs spread 0.75-1.35x while the paired median of 8
# rounds held to a few percent). Prints every round, then a summary line.
#
#   bench/ab.sh [--rounds 8] [--test tg|pp] [--env-a "K=V ..."] [--env-b "K=V ..."]
#               A B -- BENCH-ARGS...
#
# A and B: kvstitch executables (the same one twice, with --env-a / --env-b,
# for a setting: --env-b KVS_FAR_PREFETCH=0). BENCH-ARGS go to `kvstitch
# bench --json`, e.g. -m MODEL -p 0 -n 64 --threads 1 --reps 2. --test: the
# figure compared, decode (tg, default) or prefill (pp) tokens/s.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
rounds=8 test=tg env_a="" env_b=""
bins=()
while [ $# -gt 0 ]; do
    ab_option "$@"
    if [ "$ab_shift" -gt 0 ]; then shift "$ab_shift"; continue; fi
    case "$1" in
        --test) test="$2"; shift 2;;
        --) shift; break;;
        -*) echo "ab: unknown option $1 (see --help)" >&2; exit 2;;
        *) bins+=("$1"); shift;;
    esac
done
need_numbers ab rounds
[ "$rounds" -ge 1 ] || { echo "ab: --rounds must be at least 1" >&2; exit 2; }
[ "$test" = tg ] || [ "$test" = pp ] || { echo "ab: --test is tg or pp, got '$test'" >&2; exit 2; }
[ ${#bins[@]} -eq 2 ] || { echo "ab: name two kvstitch executables, A and B, before -- (see --help)" >&2; exit 2; }
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "ab: $b is not an executable" >&2; exit 2; }; done
[ $# -gt 0 ] || { echo "ab: give the bench arguments after -- (at least -m MODEL)" >&2; exit 2; }

# one run: tokens/s of $test from `bench --json`
run() {  # run ENV BIN ARGS...
    local e="$1" b="$2"
    shift 2
    # shellcheck disable=SC2086
    env $e "$b" bench "$@" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
t = d.get(sys.argv[1])
if not t: sys.exit("ab: the bench output has no %s figure (give -n or -p above 0)" % sys.argv[1])
print(t["tok_s"])' "$test"
}

as=() bs=()
bench_args=("$@")
side() {  # side a|b ROUND: one run; after the round's second, its line
    if [ "$1" = a ]; then a=$(run "$env_a" "${bins[0]}" "${bench_args[@]}"); else b=$(run "$env_b" "${bins[1]}" "${bench_args[@]}"); fi
    local last=b
    [ $(($2 % 2)) -eq 0 ] && last=a
    if [ "$1" = "$last" ]; then
        as+=("$a") bs+=("$b")
        python3 -c 'import sys; a, b = map(float, sys.argv[2:]); print("round %s: A %.1f B %.1f (B/A %.3f)" % (sys.argv[1], a, b, b / a))' "$2" "$a" "$b"
    fi
}
ab_alternate "$rounds" side
python3 - "$test" "${as[@]}" "${bs[@]}" <<'PY'
import statistics as st, sys
test, v = sys.argv[1], list(map(float, sys.argv[2:]))
n = len(v) // 2
a, b = v[:n], v[n:]
r = [y / x for x, y in zip(a, b)]
print("A median %.1f tok/s, B median %.1f, B/A paired median %.3f (min %.3f, max %.3f), %d rounds, %s"
      % (st.median(a), st.median(b), st.median(r), min(r), max(r), n, test))
PY
