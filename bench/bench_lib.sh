# Shell helpers of the bench/ scripts (sourced from the repository root).

# need_numbers SCRIPT VAR...: exits 2 naming the first VAR whose value is not
# a non-negative integer.
need_numbers() {
    local who="$1" v
    shift
    for v in "$@"; do
        [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "$who: $v must be a number, got '${!v}'" >&2; exit 2; }
    done
}

# amx_prefill KVSTITCH: prints 1 if that build's prefill runs on AMX tiles
# here (kvstitch --version lists amx first, KVS_AMX is not 0), else 0; the
# reports of such a CPU carry "-amx" in their names.
amx_prefill() {
    local paths
    paths=$("$1" --version | sed -n 's/^kernel paths on this CPU: //p')
    if [ "${paths%% *}" = amx ] && [ "${KVS_AMX:-1}" != 0 ]; then echo 1; else echo 0; fi
}

# best_vector_path KVSTITCH: the first kernel path that build lists here
# other than amx (avx512vnni, avx2 or scalar).
best_vector_path() {
    "$1" --version | sed -n 's/^kernel paths on this CPU: //p' | tr ' ' '\n' | grep -v -m1 '^amx$'
}

# report_slug KVSTITCH: the name part of a report of this machine, as
# "<cpu model>-<kernel path>[-amx]" in lower case (e.g. amd-epyc-avx2,
# amd-epyc-avx512vnni, intel-r-xeon-r-processor-avx512vnni-amx): CPUs of one
# model name differ in what they expose (an EPYC VM with AVX2 only, another
# with AVX-512), so the path keeps their reports apart.
report_slug() {
    local cpu isa
    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
    isa=$(best_vector_path "$1")
    [ "$(amx_prefill "$1")" = 1 ] && isa="$isa-amx"
    echo "${cpu:-cpu}-${isa:-scalar}" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//'
}

# The paired runs' scripts (ab.sh, ab-kernels.sh) share these.
# ab_option ARGS...: takes the options they share (--rounds, --env-a,
# --env-b; --help prints the calling script's header) into rounds, env_a and
# env_b, and sets ab_shift to the number of arguments taken (0: none of them).
# shellcheck disable=SC2034  # rounds, env_a, env_b, ab_shift: the caller's
ab_option() {
    ab_shift=0
    case "$1" in
        --rounds) rounds="$2"; ab_shift=2;;
        --env-a) env_a="$2"; ab_shift=2;;
        --env-b) env_b="$2"; ab_shift=2;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    esac
}

# ab_alternate ROUNDS FN: FN a R and FN b R for R = 1..ROUNDS, A first on odd
# rounds and B first on even ones, so that neither side always runs second
# (warmer caches, a host that slows down in the middle of a round).
ab_alternate() {
    local r
    for r in $(seq "$1"); do
        if [ $((r % 2)) -eq 1 ]; then "$2" a "$r"; "$2" b "$r"; else "$2" b "$r"; "$2" a "$r"; fi
    done
}
